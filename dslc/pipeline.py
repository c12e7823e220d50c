"""``pipe``: a Task that moves records from a reader through a processor into a writer.

    q = pipe(dataset.reader(), processor=double, num_runtime_threads=4, capacity=8)
    pipe(q, dataset2.writer())

builds two tasks: the first reads the dataset on 4 threads, calls ``double`` on each
record and writes the results into a new queue of capacity 8 (returned); the second
drains that queue into ``dataset2``. Each thread loops ``[read nets, processor nets,
write nets]`` until the reader, the processor or the writer sets the stop blob,
which is checked after every net. Threads are either runtime instances of one task
(``num_runtime_threads``: the read and the processor are recorded once) or, the
older way, ``num_threads`` copies recorded one by one as concurrent substeps.

A processor is a function of the record (or a Net, see ``NetProcessor``). It runs
inside a fresh NetBuilder, so it may record with ``ops`` (even ``ops.task_init()``
blocks) or return nets; it returns a record, ``(record, stop_blob)``, ``(nets,
record, stop_blob)``, an ``Output``, or nothing (then nothing is written).
"""
from __future__ import annotations

from dslc import core, queue_util
from dslc.dataio import Reader, Writer
from dslc.net_builder import NetBuilder, StopIf, ops
from dslc.schema import Field, as_record, from_blob_list
from dslc.task import Node, Task, TaskGroup
from dslc.trace.pipes import PipelineError, ZeroThreadPipe, watch_zero_thread_reader
from dslc.trace.tracing import user_location

DEFAULT_QUEUE_CAPACITY = 100

class Output:
    """What a processor produced: nets to run, the record it made, an optional stop blob.

    Without ``nets``, the children recorded so far in the current builder are taken.
    """

    def __init__(self, nets=None, record=None, should_stop=None):
        children = NetBuilder.current().get()
        if isinstance(nets, (core.BlobReference, str)):
            raise PipelineError(f"a processor returned the blob {nets!r}, not a record or nets",
                                user_location(), "return a record (e.g. schema.NewRecord(ops, ...)), "
                                "(record, stop_blob), nets, or nothing")
        if nets is not None and children:
            raise PipelineError("a processor both recorded ops and returned nets", user_location(),
                                "either record with ops.* or build and return your own nets")
        if nets is None:
            nets = children
        if isinstance(nets, core.Net):
            nets = [nets]
        self.nets = [] if nets is None else list(nets)
        self.record = None if record is None else as_record(record)
        self.should_stop = should_stop


def _init_output(output, capacity, global_init_net, global_exit_net):
    """The writer of ``output`` (a new queue of ``capacity`` when None), set up; and the queue."""
    if output is None:
        queue = queue_util.Queue(capacity=capacity if capacity is not None else DEFAULT_QUEUE_CAPACITY)
        writer = queue.writer()
    elif isinstance(output, Writer) or hasattr(output, "writer"):
        if capacity is not None:
            raise PipelineError("capacity is only for the queue pipe() makes when output is None",
                                user_location(), "drop capacity=, or drop output=")
        queue, writer = (None, output) if isinstance(output, Writer) else (output, output.writer())
    else:
        raise PipelineError(f"pipe output must be a Writer or a Queue, got {type(output).__name__}",
                            user_location(), "pass dataset.writer(), a Queue, or nothing (a new queue)")
    writer.setup_ex(global_init_net, global_exit_net)
    return queue, writer


def make_processor(processor):
    if processor is None:
        return lambda rec: rec
    if isinstance(processor, core.Net):
        return NetProcessor(processor)
    return processor


def normalize_processor_output(output):
    """An ``Output`` from whatever a processor returned."""
    if isinstance(output, Output):
        return output
    if isinstance(output, Field):
        return Output(record=output)
    if isinstance(output, tuple):
        if len(output) == 2 and isinstance(output[0], Field) and isinstance(output[1], core.BlobReference):
            return Output(None, *output)
        return Output(*output)
    return Output(output)  # nets, or nothing


def processor_name(processor) -> str:
    """The ``name`` attribute, else (Python 2) the function name, else the class name."""
    if hasattr(processor, "name"):
        return processor.name
    if hasattr(processor, "func_name"):
        return processor.func_name
    return type(processor).__name__


def pipe(input, output=None, num_threads=1, processor=None, name=None, capacity=None, group=None,
         num_runtime_threads=1):
    """Add a Task piping ``input`` (a Reader, or a Queue) into ``output``; see the module docstring.

    Returns the output queue (made when ``output`` is None), or None when the output
    is a Writer or the processor produces no record; with ``num_threads=0`` or
    ``num_runtime_threads=0`` no task is made and the (processing) reader is returned.
    """
    result, _ = _pipe_step(input, output, num_threads, processor, name, capacity, group,
                           num_runtime_threads)
    return result


def pipe_and_output(input, output=None, num_threads=1, processor=None, name=None, capacity=None,
                    group=None, num_runtime_threads=1, final_outputs=None):
    """``pipe``, plus the task's outputs for ``final_outputs``: ``(result, outputs)``."""
    if num_threads < 1:
        raise PipelineError("pipe_and_output needs a task: num_threads must be >= 1", user_location())
    result, task = _pipe_step(input, output, num_threads, processor, name, capacity, group,
                              num_runtime_threads, final_outputs)
    outputs = None
    if final_outputs is not None:
        outputs = task.outputs()
        if type(final_outputs) not in (list, tuple):
            outputs = outputs[0]
    return result, outputs


def _pipe_step(input, output=None, num_threads=1, processor=None, name=None, capacity=None, group=None,
               num_runtime_threads=None, final_outputs=None):
    runtime = 1 if num_runtime_threads is None else num_runtime_threads
    _check_threads("num_threads", num_threads)
    _check_threads("num_runtime_threads", runtime)
    if num_threads > 1 and runtime > 1:
        raise PipelineError("pipe takes num_threads or num_runtime_threads, not both above 1",
                            user_location(), "use num_runtime_threads (num_threads is the older form)")
    if isinstance(input, Reader):
        reader = input
    elif hasattr(input, "reader"):
        reader = input.reader()
    else:
        raise PipelineError(f"pipe input must be a Reader or a Queue, got {type(input).__name__}",
                            user_location(), "pass dataset.reader(), a Queue, or another pipe's result")
    if processor is not None:
        reader = ProcessingReader(reader, processor)
    if num_threads == 0 or runtime == 0:
        if output is not None:
            raise PipelineError("a pipe without threads has no output: it returns its reader",
                                user_location(), "drop output=, or give it threads")
        watch_zero_thread_reader(reader, ZeroThreadPipe(
            user_location(), "num_threads" if num_threads == 0 else "num_runtime_threads"))
        return reader, None
    if name is None and processor is not None:
        name = processor_name(processor)
    if name is None and output is not None:
        name = f"pipe_into:{processor_name(output)}"
    if name is None:
        name = f"pipe_from:{processor_name(input)}"
    build = _static_threads_task if num_threads > 1 else _runtime_threads_task
    return build(name, group, final_outputs, reader, num_threads if num_threads > 1 else runtime,
                 output, capacity, input)


def _timer_nets(name, input, output):
    """The profiling nets around each iteration (TimerBegin / TimerEnd; they change no data)."""
    label = "/".join([str(Node.current()), "pipe", str(name),
                      processor_name(input) if input else "NoInput",
                      processor_name(output) if output else "NoOutput"])
    start = core.Net("timer_start")
    timer = start.TimerBegin([], counter_name=label)
    end = core.Net("timer_end")
    end.TimerEnd(timer, [])
    return start, end


def _runtime_threads_task(name, group, final_outputs, reader, num_threads, output, capacity, input=None):
    """One Task of ``num_threads`` instances: the read and the processor are recorded once."""
    with Task(name=name, group=group, outputs=final_outputs, num_instances=num_threads) as task:
        task_exit = core.Net("pipe:exit")
        task_init = core.Net("pipe:init")
        reader.setup_ex(task_init, task_exit)
        inst_init = core.Net("pipe:instance:init")
        inst_exit = core.Net("pipe:instance:exit")
        read_nets, status, rec = reader.read_record_ex(inst_init, inst_exit)
        inst_init.ConstantFill([], [status], shape=[], value=False, dtype=core.DataType.BOOL)
        queue, write_nets = None, []
        if rec is not None:
            queue, writer = _init_output(output, capacity, task_init, task_exit)
            write_nets, _ = writer.write_record_ex(rec, inst_init, inst_exit, status)
        with ops.task_init():
            ops.net(task_init)
        with ops.task_instance_init():
            ops.net(inst_init)
        start, end = _timer_nets(name, input, output)
        ops.net(core.execution_step("body", [start] + list(read_nets) + list(write_nets) + [end],
                                    should_stop_blob=status))
        ops.net(end)
        with ops.task_instance_exit():
            ops.net(inst_exit)
        with ops.task_exit():
            ops.net(task_exit)
    return queue, task


def _static_threads_task(name, group, final_outputs, reader, num_threads, output, capacity, input=None):
    """One Task whose body runs ``num_threads`` substeps concurrently, each recorded separately
    (so the processor is called once per thread)."""
    with Task(name=name, group=group, outputs=final_outputs) as task:
        task_exit = core.Net("exit")
        task_init = core.Net("init")
        reader.setup_ex(task_init, task_exit)
        queue = writer = None
        threads = []
        for i in range(num_threads):
            with NetBuilder(name=f"t:{i}") as nb:
                init, exit_ = core.Net("init"), core.Net("exit")
                read_nets, status, rec = reader.read_record_ex(init, exit_)
                init.ConstantFill([], [status], shape=[], value=False, dtype=core.DataType.BOOL)
                write_nets = []
                if rec is not None:
                    if writer is None:
                        # named as the task's, not the thread's (the builder gives the prefix)
                        with NetBuilder(_fullname=task.name):
                            queue, writer = _init_output(output, capacity, task_init, task_exit)
                    write_nets, _ = writer.write_record_ex(rec, init, exit_, status)
                start, end = _timer_nets(name, input, output)
                ops.net(init)
                ops.net(core.execution_step("body", [start] + list(read_nets) + list(write_nets) + [end],
                                            should_stop_blob=status))
                ops.net(end)
                ops.net(exit_)
            threads.append(core.to_execution_step(nb))
        ops.net(task_init)
        ops.net(core.execution_step("body", threads, concurrent_substeps=True))
        ops.net(task_exit)
    return queue, task


def _check_threads(what: str, n) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise PipelineError(f"pipe's {what} must be an int >= 0, got {n!r}", user_location(),
                            f"{what}=1 (the default) runs one thread; 0 makes no task and returns "
                            "the (processing) reader")


class ProcessingReader(Reader):
    """Reads from ``reader``, then runs the processor on the record; reads what it returns."""

    def __init__(self, reader, processor):
        super().__init__()
        self.reader = reader
        self.processor = make_processor(processor)

    def setup_ex(self, init_net, finish_net):
        self.reader.setup_ex(init_net, finish_net)

    def read_ex(self, init_net, exit_net):
        read_nets, status, rec = self.reader.read_record_ex(init_net, exit_net)
        with NetBuilder():
            result = normalize_processor_output(self.processor(rec))
        # a stop_if in the processor's own block stops the pipe once the processor ran,
        # as Caffe2's processor stop blob does; the other items run as recorded
        stops = [item.cond for item in result.nets if isinstance(item, StopIf)]
        nets = list(read_nets) + [item for item in result.nets if not isinstance(item, StopIf)]
        if result.should_stop is not None or stops:
            stop_net = core.Net("stop_net")
            for cond in ([result.should_stop] if result.should_stop is not None else []) + stops:
                stop_net.Or([status, cond], [status])
            nets.append(stop_net)
        if hasattr(self.processor, "setup"):
            init_net.add_attribute(TaskGroup.LOCAL_SETUP, self.processor)
        self._set_schema(result.record)
        return nets, status, result.record.field_blobs() if result.record is not None else None


def _clone_and_bind(net, name, prefix, blob_remap, inputs=None):
    """A copy of ``net`` named ``name``: its input record bound to ``inputs``, the blobs it
    defines prefixed with ``prefix``, the blobs it only reads kept; records follow."""
    if inputs is not None:
        original = net.input_record()
        if original is None:
            raise PipelineError(f"net {net.Name()} has no input record to bind", user_location(),
                                "call net.set_input_record(record) on a processor net")
        missing = set(original.field_names()) - set(inputs.field_names())
        if missing:
            raise PipelineError(f"the record read lacks fields {sorted(missing)} that net "
                                f"{net.Name()} takes", user_location())
        by_name = dict(zip(original.field_names(), original.field_blobs()))
        for field, blob in zip(inputs.field_names(), inputs.field_blobs()):
            if field in by_name:
                blob_remap[str(by_name[field])] = str(blob)
    written, read_first = set(), set()
    for op in net.ops():
        read_first.update(b for b in op.inputs if b not in written)
        written.update(op.outputs)
    for b in sorted(read_first | written | set(map(str, net.external_inputs))):
        if b not in blob_remap:
            blob_remap[b] = b if (b in read_first or b not in written) else prefix + b
    clone = net.Clone(name, blob_remap, keep_schema=False)
    for record, setter in ((net.input_record(), clone.set_input_record),
                           (net.output_record(), clone.set_output_record)):
        if record is not None:
            setter(from_blob_list(record, [core.BlobReference(blob_remap.get(str(b), str(b)), clone)
                                           for b in record.field_blobs()]))
    return clone, blob_remap


class NetProcessor:
    """A processor that runs a copy of ``net`` per call: the net's input record is bound to
    the record read and the blobs it defines get the calling builder's name as prefix."""

    def __init__(self, net, stop_signal=None, thread_init_nets=None, name=None):
        if not isinstance(net, core.Net):
            raise PipelineError(f"NetProcessor needs a Net, got {type(net).__name__}", user_location())
        self.name = name or net.Name()
        self.thread_init_nets = thread_init_nets or []
        self.net = net
        self._stop_signal = stop_signal
        self._blob_maps = []
        self._frozen = False
        self._cloned_init_nets = []

    def setup(self, init_net):
        self._frozen = True
        nets, self._cloned_init_nets = self._cloned_init_nets, []
        return nets

    def __call__(self, rec):
        if self._frozen:
            raise PipelineError(f"processor {self.name} was already set up; it cannot be used again",
                                user_location())
        prefix = NetBuilder.current().name + "/"
        remap: dict = {}
        for init in self.thread_init_nets:
            clone, _ = _clone_and_bind(init, init.Name() + prefix, prefix, remap)
            self._cloned_init_nets.append(clone)
        clone, remap = _clone_and_bind(self.net, self.net.Name() + prefix, prefix, remap, rec)
        stop = self._stop_signal
        if stop is not None and str(stop) in remap:
            stop = core.BlobReference(remap[str(stop)], clone)
        self._blob_maps.append(remap)
        return Output([clone], clone.output_record(), stop)

    def blob_maps(self):
        self._frozen = True
        return self._blob_maps


__all__ = ["DEFAULT_QUEUE_CAPACITY", "Output", "ProcessingReader", "NetProcessor", "make_processor",
           "normalize_processor_output", "processor_name", "pipe", "pipe_and_output"]
