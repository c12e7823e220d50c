"""In-memory datasets: one tensor per record field, read through shared cursors.

``Dataset(record, name=)`` stores a record column-wise (a Struct whose leaves are its
blobs, or a list of field names). ``reader()`` reads it in order with a cursor named
``<name>_cursor`` that every thread of a pipe shares; the cursor is created by the
first ``setup_ex`` (or by the ``init_net`` given to ``reader``, and then it persists
wherever that net ran, so later pipes continue where earlier ones stopped).
``random_reader()`` reads in the order of an index blob (see ``sort_and_shuffle``);
``writer()`` appends records, atomically, in arrival order.
"""
from __future__ import annotations

import numpy as np

from dslc import core, workspace
from dslc.dataio import Reader, Writer
from dslc.ir.diagnostics import TraceError
from dslc.schema import InitEmptyRecord, Struct, from_blob_list, from_column_list
from dslc.trace.tracing import user_location


def _need_blobs(ds, what):
    if not ds.field_blobs:
        raise TraceError(f"dataset {ds.name!r} has no blobs yet, so it has no {what}", user_location(),
                         "build it from a record of blobs, or call init_empty(net) first")
    if what in ("reader", "writer") and not all(isinstance(b, core.BlobReference) for b in ds.field_blobs):
        raise TraceError(f"dataset {ds.name!r} holds arrays, not blobs, so it has no {what}",
                         user_location(), "make its blobs first: Dataset(ConstRecord(net, record))")


class _DatasetReader(Reader):
    """Reads ``batch_size`` rows at a time, in order (made by ``Dataset.reader``)."""

    def __init__(self, dataset, name, batch_size=1):
        super().__init__(dataset.content())
        self.dataset = dataset
        self.name = name or f"{dataset.name}_cursor"
        self.batch_size = batch_size
        self.cursor = None

    def setup_ex(self, init_net, exit_net):
        if self.cursor is None:
            self.cursor = init_net.CreateTreeCursor([], [self.name], fields=self.dataset.fields)

    def read(self, read_net):
        if self.cursor is None:
            raise TraceError(f"the reader of dataset {self.dataset.name!r} was never set up",
                             user_location(), "read it through pipe(), or pass init_net to reader()")
        content = self.dataset.content()
        with core.NameScope(read_net.NextName(self.name)):
            fields = read_net.ReadNextBatch([self.cursor] + content.field_blobs(), content.field_names(),
                                            batch_size=self.batch_size)
            fields = [fields] if isinstance(fields, core.BlobReference) else list(fields)
            return read_net.IsEmpty([fields[0]]), fields

    def reset(self, net):
        net.ResetCursor([self.cursor], [])


class _DatasetRandomReader(Reader):
    """Reads rows in the order of an indices blob (made by ``Dataset.random_reader``).

    Call ``computeoffset(net)`` (always) and ``sort_and_shuffle(net)`` (unless indices
    were given) in a net that runs before the reads.
    """

    def __init__(self, dataset, name, indices, batch_size=1, loop_over=False):
        super().__init__(dataset.content())
        self.dataset = dataset
        self.cursor = None
        self.name = name or f"{dataset.name}_cursor"
        self.indices = indices
        self.offsets = None
        self.batch_size = batch_size
        self.loop_over = loop_over

    def setup_ex(self, init_net, exit_net):
        if self.cursor is None:
            self.cursor = init_net.CreateTreeCursor([], [self.name], fields=self.dataset.fields)

    def reset(self, net):
        net.ResetCursor([self.cursor], [])

    def computeoffset(self, net):
        self.reset(net)
        self.offsets = net.ComputeOffset([self.cursor] + self.dataset.content().field_blobs(), "offsets")

    def sort_and_shuffle(self, net, sort_by_field=None, shuffle_size=1, batch_size=1):
        content = self.dataset.content()
        index = -1
        if sort_by_field:
            if sort_by_field not in content.field_names():
                raise TraceError(f"dataset {self.dataset.name!r} has no field {sort_by_field!r}",
                                 user_location(), f"its fields: {', '.join(content.field_names())}")
            index = content.field_names().index(sort_by_field)
        self.reset(net)
        self.indices = net.SortAndShuffle([self.cursor] + content.field_blobs(), "indices",
                                          sort_by_field_idx=index, shuffle_size=shuffle_size,
                                          batch_size=batch_size)

    def read(self, read_net):
        if self.indices is None or self.offsets is None:
            raise TraceError("a random reader needs its offsets and indices before it reads",
                             user_location(), "call computeoffset(net) and sort_and_shuffle(net) "
                             "(or pass indices=) in a net that runs first")
        content = self.dataset.content()
        with core.NameScope(read_net.NextName(self.name)):
            fields = read_net.ReadRandomBatch([self.cursor, self.indices, self.offsets] + content.field_blobs(),
                                              content.field_names(), batch_size=self.batch_size,
                                              loop_over=self.loop_over)
            fields = [fields] if isinstance(fields, core.BlobReference) else list(fields)
            return read_net.IsEmpty([fields[0]]), fields


class _DatasetWriter(Writer):
    """Appends records to the dataset under a mutex (made by ``Dataset.writer``)."""

    def __init__(self, content):
        self._content = content
        self.mutex = None

    def setup_ex(self, init_net, exit_net):
        if self.mutex is None:
            self.mutex = init_net.CreateMutex([])

    def write(self, writer_net, fields):
        if self.mutex is None:
            raise TraceError("this dataset writer was never set up", user_location(),
                             "write through pipe(), or pass init_net to writer()")
        blobs = self._content.field_blobs()
        if len(fields) != len(blobs):
            raise TraceError(f"the dataset has {len(blobs)} fields, got {len(fields)} blobs to write",
                             user_location(), "write records of the dataset's schema")
        writer_net.CheckDatasetConsistency(fields, [], fields=self._content.field_names())
        writer_net.AtomicAppend([self.mutex] + blobs + list(fields), blobs)

    def commit(self, finish_net):
        """Nothing to do for an in-memory dataset."""


def Const(net, value, dtype=None, name=None):
    """A blob fed with ``value`` now, in the current workspace, and declared as ``net``'s input."""
    blob = net.AddExternalInput(net.NextName(prefix=name))
    workspace.FeedBlob(str(blob), np.array(value, dtype=dtype))
    return blob


def execution_step_with_progress(name, init_net, substeps, rows_read):
    """``substeps`` run concurrently, printing ``rows_read`` every 5 seconds."""
    report = core.Net("report_net")
    report.Print([rows_read], [])
    return core.execution_step(name, substeps, report_net=report, concurrent_substeps=True,
                               report_interval=5)


class Dataset:
    """A record stored column-wise in blobs; see the module docstring."""

    def __init__(self, fields, name=None):
        if isinstance(fields, list):
            fields = from_column_list(fields)
        if not isinstance(fields, Struct):
            raise TraceError(f"a Dataset needs a schema.Struct or a list of field names, got "
                             f"{type(fields).__name__}", user_location(),
                             "wrap the fields: Dataset(Struct(('name', values)))")
        self.schema = fields
        self.fields = fields.field_names()
        self.field_types = fields.field_types()  # an attribute, as in Caffe2
        self.name = name or "dataset"
        self.field_blobs = fields.field_blobs() if fields.has_blobs() else None

    def init_empty(self, init_net):
        """Record into ``init_net`` an empty tensor for each field (its storage from now on)."""
        self.field_blobs = InitEmptyRecord(init_net, self.schema.clone_schema()).field_blobs()

    def init_from_dataframe(self, net, dataframe):
        if len(self.fields) != len(dataframe.columns):
            raise TraceError(f"the dataframe has {len(dataframe.columns)} columns, the dataset "
                             f"{len(self.fields)} fields", user_location())
        self.field_blobs = [Const(net, dataframe[col].to_numpy(), name=f)
                            for col, f in zip(dataframe.columns, self.fields)]

    def get_blobs(self):
        return self.field_blobs

    def content(self):
        """The dataset's record: its schema with the storage blobs."""
        _need_blobs(self, "content")
        return from_blob_list(self.schema, self.field_blobs)

    def field_names(self):
        return self.fields

    def reader(self, init_net=None, cursor_name=None, batch_size=1):
        """A reader in row order; with ``init_net``, its cursor is created there, once."""
        _need_blobs(self, "reader")
        reader = _DatasetReader(self, cursor_name, batch_size)
        if init_net is not None:
            reader.setup_ex(init_net, None)
        return reader

    def random_reader(self, init_net=None, indices=None, cursor_name=None, batch_size=1, loop_over=False):
        """A reader in the order of ``indices`` (or of ``sort_and_shuffle``); ``loop_over`` repeats."""
        _need_blobs(self, "reader")
        reader = _DatasetRandomReader(self, cursor_name, indices, batch_size, loop_over)
        if init_net is not None:
            reader.setup_ex(init_net, None)
        return reader

    def trim(self, net, multiple_of):
        """Record into ``net`` the cut of the dataset to a multiple of ``multiple_of`` rows."""
        _need_blobs(self, "content")
        net.TrimDataset(self.field_blobs, self.field_blobs, fields=self.fields, multiple_of=multiple_of)

    def writer(self, init_net=None):
        """A writer appending records at the end (threads append in arrival order)."""
        _need_blobs(self, "writer")
        writer = _DatasetWriter(self.content())
        if init_net is not None:
            writer.setup_ex(init_net, None)
        return writer


__all__ = ["Dataset", "Const", "execution_step_with_progress"]
