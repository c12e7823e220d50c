"""Readers beyond the dataset's own: counters, composite readers and their builders, piped
reader builders, and the older execution_step API."""
from __future__ import annotations

import numpy as np

from dslc import core, workspace
from dslc.dataio import (CompositeReader, CompositeReaderBuilder, CounterReader, PipedReaderBuilder, Reader,
                         ReaderBuilder)
from dslc.dataset import Dataset
from dslc.net_builder import ops
from dslc.pipeline import pipe
from dslc.schema import NewRecord, Struct, from_column_list
from dslc.task import Task, TaskGroup, WorkspaceType, final_output

GLOBAL = WorkspaceType.GLOBAL


def source(name, values):
    blob = core.BlobReference(f"{name}/label")
    workspace.FeedBlob(str(blob), np.asarray(values))
    return Dataset(from_column_list(["label"], col_blobs=[blob]), name=name)


def destination(name, schema):
    with TaskGroup(workspace_type=GLOBAL) as init, Task(), core.NameScope(name):
        ds = Dataset(schema, name=name)
        ds.init_empty(ops)
    return ds, init


def _composite_check(session, reader, names, ranges):
    schema = Struct(*[(n, Struct(("label", np.int64))) for n in names])
    dst, init = destination("dst", schema)
    with TaskGroup() as tg:
        pipe(reader, dst.writer(), num_runtime_threads=3)
    session.run(init)
    session.run(tg)
    for n, r in zip(names, ranges):
        assert sorted(workspace.FetchBlob(str(dst.content()[n].label())).tolist()) == list(r)


def test_composite_reader_reads_each_source_in_step(session):
    names = [f"src_{i}" for i in range(3)]
    ranges = [range(100 * i, 100 * (i + 1)) for i in range(3)]
    reader = CompositeReader(names, [source(n, list(r)).reader() for n, r in zip(names, ranges)])
    assert reader.schema().field_names() == [f"{n}:label" for n in names]
    _composite_check(session, reader, names, ranges)


def test_composite_reader_stops_with_its_shortest_source(session):
    names = ["long", "short"]
    reader = CompositeReader(names, [source("long", list(range(50))).reader(),
                                     source("short", list(range(100, 120))).reader()])
    schema = Struct(*[(n, Struct(("label", np.int64))) for n in names])
    dst, init = destination("dst", schema)
    with TaskGroup() as tg:
        pipe(reader, dst.writer())  # one thread: rows stay in step
    session.run(init)
    session.run(tg)
    assert workspace.FetchBlob(str(dst.content().short.label())).tolist() == list(range(100, 120))
    assert workspace.FetchBlob(str(dst.content().long.label())).tolist() == list(range(20))


class _DatasetBuilder(ReaderBuilder):
    def __init__(self, ds):
        self.ds, self.setups = ds, 0

    def schema(self):
        return self.ds.content()

    def setup(self, **kwargs):
        self.setups += 1
        return []

    def new_reader(self, **kwargs):
        return self.ds.reader()


def test_composite_reader_builder(session):
    names = [f"b_{i}" for i in range(2)]
    ranges = [range(10 * i, 10 * (i + 1)) for i in range(2)]
    builders = [_DatasetBuilder(source(n, list(r))) for n, r in zip(names, ranges)]
    composite = CompositeReaderBuilder(names, builders)
    assert composite.schema().field_names() == ["b_0:label", "b_1:label"]
    composite.setup(ws=workspace.current())
    assert [b.setups for b in builders] == [1, 1]
    _composite_check(session, composite.new_reader(), names, ranges)


def test_piped_reader_builder_pipes_every_new_reader(session):
    src = source("pb", list(range(8)))

    def plus_ten(rec):
        with core.NameScope("plus_ten"):
            out = NewRecord(ops, rec)
        ops.Add([rec.label(), ops.Const([10])], [out.label()])
        return out

    builder = PipedReaderBuilder(_DatasetBuilder(src), lambda reader, **kw: pipe(reader, processor=plus_ten))
    dst, init = destination("pbd", Struct(("label", np.int64)))
    with TaskGroup() as tg:
        reader = builder.new_reader()
        assert isinstance(reader, Reader)
        pipe(reader, dst.writer())
    session.run(init)
    session.run(tg)
    assert workspace.FetchBlob(str(dst.content().label())).tolist() == list(range(10, 18))


def test_counter_reader_until_the_processor_stops_it(session):
    with TaskGroup(workspace_type=GLOBAL) as init, Task():
        counter = ops.CreateCounter([], ["reads"])

    def until(rec):
        ops.CountUp([counter])
        return None, None, ops.GE([rec.iter(), ops.Const(49)])  # (nets, record, stop)

    with TaskGroup() as tg:
        reader = CounterReader()
        pipe(reader, processor=until)
    with Task() as report:
        seen = final_output(ops.RetrieveCount([counter]))
    for runnable in (init, tg, report):
        session.run(runnable)
    assert seen.fetch() == 50  # 0..49: the processor runs, then its stop ends the pipe
    assert reader.schema().field_names() == ["iter"]


def test_count_until_hands_out_each_value_once_across_threads(session):
    from dslc.dataio import CountUntil
    got, lock = [], __import__("threading").Lock()

    def keep(inputs, outputs):
        with lock:
            got.append(int(inputs[0].data))

    def proc(rec):
        ops.Python(keep)([rec.iter()], [])

    with TaskGroup() as tg:
        pipe(CountUntil(300), processor=proc, num_runtime_threads=4)
    session.run(tg)
    assert sorted(got) == list(range(300))


def test_reader_execution_step(session):
    src = source("es", list(range(7)))
    init = core.Net("es_init")
    reader = src.reader(init)
    step, fields = reader.execution_step(reader_net_name="es_read")
    consume = core.Net("consume")
    with core.NameScope("es"):
        count = consume.Const(0, "count")
    # Caffe2 adds the consumer as a net of the read step: it runs after each successful read
    body = core.Net("count_up")
    body.Add([count, body.Const(1)], [count])
    step.AddNet(body)
    plan = core.Plan("read_all")
    plan.AddStep(core.execution_step("init", [init, consume]))
    plan.AddStep(step)
    session.run(plan)
    assert step.Name() == "es_read_step" and fields.field_names() == ["label"]
    assert workspace.FetchBlob("es/count") == 7
