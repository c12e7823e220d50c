"""Readers and writers: objects that record the ops moving records in and out of a pipe.

The protocol (Caffe2's ``dataio``), as ``pipeline.pipe`` drives it:

* ``reader.setup_ex(init_net, exit_net)`` records what runs once per task run;
* ``reader.read_ex(local_init, local_exit)`` returns ``(nets, should_stop, blobs)``: the
  nets run every iteration, ``should_stop`` is a bool scalar blob that turns True when
  there is no more data (checked after every net), and ``blobs`` hold the record read;
  the local nets run once per thread (instance);
* ``writer.write_ex(blobs, local_init, local_exit, status)`` returns the nets writing
  one record; a writer may set ``status`` to stop the pipe; ``writer.setup_ex`` records
  its per-task setup (by default ``commit`` into the exit net).

Reads must be safe to run on several threads at once.
"""
from __future__ import annotations

import time

import numpy as np

from dslc import core
from dslc.ir.diagnostics import TraceError
from dslc.schema import Field, Struct, from_blob_list
from dslc.trace.tracing import user_location


def _need(cond, message, hint=None):
    if not cond:
        raise TraceError(message, user_location(), hint)


class Reader:
    """Records ops that read batches of records; subclasses implement ``read`` (or ``read_ex``)."""

    def __init__(self, schema=None):
        _need(schema is None or isinstance(schema, Field),
              f"a Reader's schema must be a record (schema.Field), got {type(schema).__name__}")
        self._schema = schema

    def schema(self):
        _need(self._schema is not None, f"{type(self).__name__} has no schema",
              "give the reader a schema, or read it through read_ex, which returns plain blobs")
        return self._schema

    def _set_schema(self, schema):
        self._schema = schema

    def setup_ex(self, init_net, finish_net):
        """Record the ops run once per task run, before (``init_net``) and after it."""

    def read_ex(self, local_init_net, local_finish_net):
        net = core.Net("reader_body")
        should_stop, fields = self.read(net)
        return [net], should_stop, fields

    def read_record_ex(self, local_init_net, local_finish_net):
        nets, should_stop, fields = self.read_ex(local_init_net, local_finish_net)
        if self._schema is not None:
            fields = from_blob_list(self._schema, fields)
        return nets, should_stop, fields

    def read(self, read_net):
        """Record into ``read_net`` the read of one batch; return ``(should_stop, blobs)``."""
        raise TraceError(f"{type(self).__name__} does not implement read()", user_location(),
                         "a Reader subclass defines read(net) or read_ex(init_net, exit_net)")

    def read_record(self, read_net):
        should_stop, fields = self.read(read_net)
        if self._schema is not None:
            fields = from_blob_list(self._schema, fields)
        return should_stop, fields

    def reset(self, net):
        """Record into ``net`` the ops that rewind the reader (not every reader can)."""
        raise TraceError(f"{type(self).__name__} cannot be reset", user_location(),
                         "read it again through a new reader instead")

    def execution_step(self, reader_net_name=None, external_should_stop=None):
        """A step that reads until the data ends, and the record it reads into."""
        net = core.Net(reader_net_name or "reader")
        should_stop, fields = self.read_record(net)
        if external_should_stop is not None:
            should_stop = net.Or([external_should_stop, should_stop])
        step = core.execution_step(f"{reader_net_name}_step", net, should_stop_blob=should_stop)
        return step, fields


class Writer:
    """Records ops that write records; subclasses implement ``write`` (and maybe ``commit``)."""

    _schema = None

    def schema(self):
        return self._schema

    def write(self, writer_net, fields):
        raise TraceError(f"{type(self).__name__} does not implement write()", user_location(),
                         "a Writer subclass defines write(net, blobs)")

    def write_record(self, writer_net, fields):
        if isinstance(fields, Field):
            self._schema = fields
            fields = fields.field_blobs()
        self.write(writer_net, fields)

    def setup_ex(self, init_net, finish_net):
        self.commit(finish_net)

    def write_ex(self, fields, local_init_net, local_finish_net, stop_blob):
        net = core.Net("write_net")
        self.write(net, fields)
        return [net]

    def write_record_ex(self, fields, local_init_net, local_finish_net, stop_blob=None):
        """The nets writing ``fields`` (a record or blobs), and the stop blob they may set."""
        if isinstance(fields, Field):
            self._schema = fields
            fields = fields.field_blobs()
        if stop_blob is None:
            stop_blob = local_init_net.NextName("dequeue_status")
        return self.write_ex(fields, local_init_net, local_finish_net, stop_blob), stop_blob

    def commit(self, finish_net):
        """Record the ops that mark the end of the data (nothing, by default)."""


class ReaderBuilder:
    """Makes readers on demand (one per consumer, for distributed jobs)."""

    def schema(self):
        raise NotImplementedError

    def setup(self, **kwargs):
        raise NotImplementedError

    def new_reader(self, **kwargs):
        raise NotImplementedError


class PipedReaderBuilder(ReaderBuilder):
    """A builder whose every new reader is passed through ``piper(reader=..., **kwargs)``."""

    def __init__(self, builder, piper):
        self._builder, self._piper = builder, piper

    def schema(self):
        return self._builder.schema()

    def setup(self, **kwargs):
        return self._builder.setup(**kwargs)

    def new_reader(self, **kwargs):
        out = self._piper(reader=self._builder.new_reader(**kwargs), **kwargs)
        return out if isinstance(out, Reader) else out.reader()


class Pipe:
    """Something readers and writers meet through (a queue); counts both.

    With an ``obj_key``, each new reader or writer attaches the pipe to its init net
    under that key, so the pipe's ``setup`` runs (once) where such setup objects run.
    """

    def __init__(self, schema=None, obj_key=None):
        self._num_writers = self._num_readers = 0
        self._schema = schema
        self._obj_key = obj_key

    def schema(self):
        return self._schema

    def setup(self, global_init_net):
        pass

    def reader(self):
        raise NotImplementedError

    def writer(self):
        raise NotImplementedError

    def num_readers(self):
        return self._num_readers

    def num_writers(self):
        return self._num_writers

    def _new_writer(self, writer_schema, writer_init_net):
        if writer_schema is not None and self._schema is None:
            self._schema = writer_schema
        self._num_writers += 1
        if self._obj_key is not None:
            writer_init_net.add_attribute(self._obj_key, self)

    def _new_reader(self, reader_init_net):
        self._num_readers += 1
        if self._obj_key is not None:
            reader_init_net.add_attribute(self._obj_key, self)


def _false(net):
    return net.ConstantFill([], 1, shape=[], value=False, dtype=core.DataType.BOOL)


class CounterReader(Reader):
    """Reads 0, 1, 2, ... forever (record ``Struct(('iter', int64))``)."""

    def __init__(self):
        super().__init__(Struct(("iter", np.int64)))
        self.counter = None
        self.should_stop = None

    def setup_ex(self, global_init_net, global_finish_net):
        if self.counter is None:
            self.counter = global_init_net.CreateCounter([], init_count=0)
            self.should_stop = _false(global_init_net)

    def read_ex(self, local_init_net, local_finish_net):
        net = core.Net("limited_reader_counter")
        return [net], self.should_stop, [net.CountUp([self.counter], 1)]


class ReaderWithLimitBase(Reader):
    """A reader that may stop before ``reader`` runs out; ``data_finished()`` tells which.

    Subclasses give the limit: ``setup_limiter`` records its per-run setup and
    ``check_limiter_condition`` the bool blob that stops the reads. Each read is
    [limit check] + the inner read + a net that copies the inner reader's stop into the
    returned stop blob and ORs it into ``data_finished`` (False at every task start).
    """

    def __init__(self, reader):
        super().__init__(reader._schema)
        self.reader = reader
        self.net = core.Net("reader_with_limit")  # only to take names from
        self._data_finished = self.net.AddExternalInput(self.net.NextName("data_finished"))
        self.should_stop = None

    def setup_ex(self, global_init_net, global_finish_net):
        global_init_net.ConstantFill([], [self._data_finished], shape=[], value=False,
                                     dtype=core.DataType.BOOL)
        self.reader.setup_ex(global_init_net, global_finish_net)
        self.setup_limiter(global_init_net, global_finish_net)

    def read_ex(self, local_init_net, local_finish_net):
        check = core.Net("limited_reader_condition")
        should_stop = self.check_limiter_condition(check)
        nets, inner_stop, fields = self.reader.read_ex(local_init_net, local_finish_net)
        self._set_schema(self.reader._schema)
        post = core.Net("limited_reader_post")
        # the stop blob was checked after the limit net already, so reusing it is safe
        post.Copy(inner_stop, should_stop)
        post.Or([self._data_finished, inner_stop], [self._data_finished])
        return [check] + list(nets) + [post], should_stop, fields

    def setup_limiter(self, global_init_net, global_finish_net):
        raise NotImplementedError

    def check_limiter_condition(self, stop_condition_net):
        raise NotImplementedError

    def data_finished(self):
        """The bool blob: True iff the inner reader ran out during this task run."""
        return self._data_finished


class ReaderWithLimit(ReaderWithLimitBase):
    """Stops after ``num_iter`` reads in all (across every thread); None: no limit."""

    def __init__(self, reader, num_iter=1):
        super().__init__(reader)
        if num_iter is not None and (isinstance(num_iter, bool) or not isinstance(num_iter, (int, np.integer))
                                     or num_iter < 0):
            raise TraceError(f"a reader limit (num_iter) must be an int >= 0 or None, got {num_iter!r}",
                             user_location(), "give the number of records to read, or None for no limit")
        self.counter = None
        self.num_iter = num_iter
        if num_iter is not None:
            self.counter = self.net.AddExternalInput(self.net.NextName("counter"))

    def setup_limiter(self, global_init_net, global_finish_net):
        if self.counter is not None:
            global_init_net.CreateCounter([], [self.counter], init_count=int(self.num_iter))

    def check_limiter_condition(self, stop_condition_net):
        if self.counter is not None:
            return stop_condition_net.CountDown([self.counter], 1)
        return _false(stop_condition_net)


def CountUntil(num_iter):
    """Reads 0, 1, ... num_iter - 1."""
    return ReaderWithLimit(CounterReader(), num_iter)


class ReaderWithTimeLimit(ReaderWithLimitBase):
    """Stops once ``duration`` seconds passed since the task started (0 or None: no limit)."""

    def __init__(self, reader, duration=0):
        super().__init__(reader)
        self.timer = None
        self.duration = duration
        self.duration_ns_blob = None

    def setup_limiter(self, global_init_net, global_finish_net):
        if self.duration is not None and self.duration > 0:
            self.timer = global_init_net.TimerBegin([], counter_name="epoch_timer")
            start = global_init_net.TimerGet(self.timer)
            self.duration_ns_blob = global_init_net.ConstantFill([start], value=int(self.duration * 1e9))
            global_finish_net.TimerEnd([self.timer], [])

    def check_limiter_condition(self, stop_condition_net):
        if self.duration:
            elapsed = stop_condition_net.TimerGet(self.timer)
            # Caffe2 writes this to a blob literally named after ``should_stop`` (None)
            return stop_condition_net.GE([elapsed, self.duration_ns_blob], str(self.should_stop))
        return _false(stop_condition_net)


class ReaderWithDelay(Reader):
    """Each read of ``reader`` first waits ``delay`` seconds (for tests of time limits)."""

    def __init__(self, reader, delay):
        super().__init__(reader._schema)
        self.reader = reader
        self.delay = delay

    def setup_ex(self, init_net, finish_net):
        self.reader.setup_ex(init_net, finish_net)

    def read_ex(self, local_init_net, local_finish_net):
        delay = self.delay
        net = core.Net("reader_delay")

        def sleep(inputs, outputs):
            time.sleep(delay)

        net.Python(sleep)([], [])
        nets, stop, fields = self.reader.read_ex(local_init_net, local_finish_net)
        return [net] + list(nets), stop, fields


class CompositeReader(Reader):
    """Reads one record from each reader in turn; stops when any of them runs out.

    The record is ``Struct((name_i, reader_i.schema()), ...)``.
    """

    def __init__(self, names, readers):
        _need(len(names) == len(readers), "CompositeReader needs one name per reader")
        super().__init__(Struct(*[(n, r.schema()) for n, r in zip(names, readers)]))
        self._names, self._readers = names, readers

    def setup_ex(self, init_net, finish_net):
        for r in self._readers:
            r.setup_ex(init_net, finish_net)

    def read_ex(self, local_init_net, local_finish_net):
        stop = local_init_net.ConstantFill([], local_init_net.NextName("should_stop"), shape=[],
                                           value=False, dtype=core.DataType.BOOL)
        nets, fields = [], []
        for r in self._readers:
            sub_nets, sub_stop, sub_fields = r.read_ex(local_init_net, local_finish_net)
            copy = core.Net("copy_status")
            copy.Copy(sub_stop, stop)
            nets += list(sub_nets) + [copy]
            fields += list(sub_fields)
        return nets, stop, fields


class CompositeReaderBuilder(ReaderBuilder):
    """Builds a CompositeReader from one reader builder per name.

    A builder's ``new_reader`` may return a Reader or anything with a ``reader()``
    method (a Dataset, a pipe's queue ...). ``setup`` returns the builders' data-finished
    blobs in one dict; a ``limiter`` goes to the last builder only, so that it counts a
    batch only when every source had one.
    """

    def __init__(self, names, reader_builders):
        _need(len(names) == len(reader_builders), "CompositeReaderBuilder needs one name per builder")
        self._names, self._builders = names, reader_builders
        self._schema = Struct(*[(n, b.schema()) for n, b in zip(names, reader_builders)])

    def schema(self):
        return self._schema

    def setup(self, **kwargs):
        limiter = kwargs.pop("limiter", None)
        data_finished = {}
        for i, b in enumerate(self._builders):
            if limiter is not None and i == len(self._builders) - 1:
                kwargs["limiter"] = limiter
            got = b.setup(**kwargs) or {}
            if not isinstance(got, dict):  # (a builder returning a list of blobs: keyed by position)
                got = {f"{self._names[i]}/{k}": v for k, v in enumerate(got)}
            both = set(data_finished) & set(got)
            _need(not both, f"two reader builders report data-finished blobs under {sorted(both)}",
                  "give each builder's blobs their own keys")
            data_finished.update(got)
        return data_finished

    def new_reader(self, **kwargs):
        readers = []
        for name, b in zip(self._names, self._builders):
            reader = b.new_reader(**kwargs)
            if not isinstance(reader, Reader):
                make = getattr(reader, "reader", None)
                _need(callable(make), f"reader builder {name!r} made a {type(reader).__name__}, which "
                      "is neither a Reader nor has a reader() method",
                      "return a Reader (or a Dataset / pipe) from new_reader()")
                reader = make()
            readers.append(reader)
        return CompositeReader(self._names, readers)


__all__ = ["Reader", "Writer", "ReaderBuilder", "PipedReaderBuilder", "Pipe", "CounterReader",
           "CountUntil", "ReaderWithLimitBase", "ReaderWithLimit", "ReaderWithTimeLimit",
           "ReaderWithDelay", "CompositeReader", "CompositeReaderBuilder"]
