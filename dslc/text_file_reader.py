"""Reading records from tab-separated text files (Caffe2's ``text_file_reader``).

``TextFileReader(init_net, filename, schema, num_passes=1, batch_size=1)`` records
into ``init_net`` the op that opens the file; each ``read(net)`` then reads the next
``batch_size`` lines, one column per field of ``schema`` (a Struct of Scalars whose
dtypes say how each column is read: str, float32, float64, int32, int64 or bool).
After ``num_passes`` passes over the file the reads are empty and ``should_stop``
is True.
"""
from __future__ import annotations

from dslc import core
from dslc.dataio import Reader
from dslc.ir.diagnostics import TraceError
from dslc.schema import Scalar, SchemaTypeError, Struct, data_type_for_dtype
from dslc.trace.tracing import user_location


class TextFileReader(Reader):
    """Reads batches of rows of a text file, one column per field of the schema."""

    def __init__(self, init_net, filename, schema, num_passes=1, batch_size=1):
        if not isinstance(schema, Struct):
            raise TraceError(f"a TextFileReader's schema must be a schema.Struct, got "
                             f"{type(schema).__name__}", user_location(),
                             "describe the columns: Struct(('name', Scalar(str)), ...)")
        for name, child in schema.get_children():
            if not isinstance(child, Scalar):
                raise TraceError(f"TextFileReader field {name!r} is a {type(child).__name__}: a text "
                                 "file's columns are Scalars", user_location(),
                                 "flatten the schema into one Scalar per column")
        try:
            field_types = [data_type_for_dtype(t) for t in schema.field_types()]
        except SchemaTypeError as e:
            raise TraceError(f"a TextFileReader column needs a dtype: {e.message}", user_location(),
                             "give every Scalar a dtype (str, np.float32, np.int64 ...)") from None
        super().__init__(schema)
        self._reader = init_net.CreateTextFileReader([], filename=filename, num_passes=num_passes,
                                                     field_types=field_types)
        self._batch_size = batch_size

    def read(self, net):
        blobs = net.TextFileReaderRead([self._reader], len(self.schema().field_names()),
                                       batch_size=self._batch_size)
        if isinstance(blobs, core.BlobReference):
            blobs = [blobs]
        blobs = list(blobs)
        should_stop = net.IsEmpty([blobs[0]], core.ScopedBlobReference(net.NextName("should_stop")))
        return should_stop, blobs


__all__ = ["TextFileReader"]
