"""pipe(): the seed's programs and the spec's pipeline tests (sections 8.2-8.5), processors in
every form, static and runtime threads, names, and misuse."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import seed_pipeline
from dslc import core, workspace
from dslc.dataio import CountUntil, ReaderWithDelay, ReaderWithLimit, ReaderWithTimeLimit
from dslc.dataset import Dataset
from dslc.net_builder import ops
from dslc.pipeline import NetProcessor, PipelineError, pipe, pipe_and_output
from dslc.queue_util import Queue
from dslc.schema import ConstRecord, InitEmptyRecord, NewRecord, Struct, from_column_list
from dslc.task import Node, Task, TaskGroup, WorkspaceType, final_output

GLOBAL = WorkspaceType.GLOBAL


def source(name, **columns):
    """A Dataset of ``columns`` fed into the workspace under NameScope(name) (as 8.3 does)."""
    with core.NameScope(name):
        blobs = [core.ScopedBlobReference(k) for k in columns]
    for b, v in zip(blobs, columns.values()):
        workspace.FeedBlob(str(b), np.asarray(v))
    return Dataset(from_column_list(list(columns), col_blobs=blobs), name=name)


def destination(name, schema):
    """An empty Dataset, and the GLOBAL group that initializes it."""
    with TaskGroup(workspace_type=GLOBAL) as init, Task(), core.NameScope(name):
        ds = Dataset(schema, name=name)
        ds.init_empty(ops)
    return ds, init


def fetch(blob):
    return workspace.FetchBlob(str(blob))


# ----------------------------------------------------------------------------- 8.2: the seed


def test_seed_pipeline_totals_run_by_hand(session):
    data = list(range(10))
    init_group, epoch_group = TaskGroup(workspace_type=GLOBAL), TaskGroup()
    with Node("trainer_0"):
        with init_group, Task():
            rec = ConstRecord(ops, Struct(("val", np.array(data))))
            full_reader = Dataset(rec, name="dataset:0").reader(ops)
            total = ops.Const([100])

        def inc_total(rec):
            ops.Add([total, rec.val()], [total])

        with epoch_group:
            epoch_reader = ReaderWithLimit(full_reader, num_iter=3)
            pipe(epoch_reader, processor=inc_total)
            finished = Task(outputs=[epoch_reader.data_finished()]).outputs()[0]  # add_stop_signal
        fetcher = Task(step=core.Net("empty"), outputs=[total])
    assert str(full_reader.cursor) == "dataset:0_cursor" and str(rec.val()) == "val"
    assert str(epoch_reader.data_finished()) == "reader_with_limit/data_finished"
    session.run(init_group)
    totals, stops = [], []
    for _ in range(5):
        session.run(epoch_group)
        session.run(fetcher)
        totals.append(fetcher.outputs()[0].fetch().tolist())
        stops.append(bool(finished.fetch()))
    expected = [[100 + sum(data[:3 * e])] for e in range(1, 5)]  # [103], [115], [136], [145]
    assert totals[:4] == expected and totals[4] == expected[3]
    assert stops == [False, False, False, True, True]  # epoch 4 finds the dataset exhausted


# ----------------------------------------------------------------------------- 8.3: dataio_test


def _counting_processor(totals):
    """The 8.3 processor: per record CountUp(counter1), CountUp(task_counter); counter2 sums
    the per-instance counts at instance exit; counter3 counts instances."""
    def proc(rec):
        with ops.task_init():
            counter1 = ops.CreateCounter([], ["global_counter"])
            counter2 = ops.CreateCounter([], ["global_counter2"])
            counter3 = ops.CreateCounter([], ["global_counter3"])
        with ops.task_instance_init():
            task_counter = ops.CreateCounter([], ["task_counter"])
        ops.CountUp(counter1)
        ops.CountUp(task_counter)
        with ops.task_instance_exit():
            with ops.loop(ops.RetrieveCount(task_counter)):
                ops.CountUp(counter2)
            ops.CountUp(counter3)
        with ops.task_exit():
            totals[:] = [final_output(ops.RetrieveCount(c)) for c in (counter1, counter2, counter3)]
        return rec
    return proc


def test_runtime_threads_counters_per_record_and_per_instance(session):
    src = source("src", label=np.arange(100))
    totals = []
    with TaskGroup() as tg:
        pipe(src.reader(), num_runtime_threads=8, processor=_counting_processor(totals))
    session.run(tg)
    assert [t.fetch() for t in totals] == [100, 100, 8]


def test_runtime_threads_through_a_limited_queue_reader(session):
    src = source("src", label=np.arange(100))
    totals = []
    with TaskGroup() as tg:
        q1 = pipe(src.reader(), num_runtime_threads=2)
        q2 = pipe(ReaderWithLimit(q1.reader(), num_iter=25), num_runtime_threads=3)
        pipe(q2, processor=_counting_processor(totals), num_runtime_threads=6)
    session.run(tg)
    assert [t.fetch() for t in totals] == [25, 25, 6]


@pytest.mark.parametrize("num_iter, n_read, finished", [(None, 100, True), (0, 0, False), (10, 10, False),
                                                        (110, 100, True)])
def test_count_limit_reader(session, num_iter, n_read, finished):
    src = source("src", label=np.arange(100))
    dst, init = destination("dst", Struct(("label", np.int64)))
    with TaskGroup(workspace_type=GLOBAL) as tg:
        reader = ReaderWithLimit(src.reader(), num_iter=num_iter)
        pipe(reader, dst.writer(), num_runtime_threads=8)
    session.run(init)
    session.run(tg)
    got = sorted(fetch(dst.content().label()).tolist())
    assert len(got) == n_read and len(set(got)) == n_read and set(got) <= set(range(100))
    if num_iter == 10:  # exactly the first ten rows: reads take the cursor in order
        assert got == list(range(10))
    assert bool(fetch(reader.data_finished())) is finished


def test_time_limit_reader(session):
    src = source("src", label=np.arange(200))
    dst, init = destination("dst", Struct(("label", np.int64)))
    with TaskGroup(workspace_type=GLOBAL) as tg:
        reader = ReaderWithTimeLimit(ReaderWithDelay(src.reader(), 0.02), duration=0.2)
        pipe(reader, dst.writer(), num_runtime_threads=4)
    session.run(init)
    start = time.monotonic()
    session.run(tg)
    took = time.monotonic() - start
    n = len(fetch(dst.content().label()))
    # 4 threads reading one record per 0.02 s for 0.2 s: about 40; timing varies, so bounds
    assert 4 <= n < 200 and took < 2
    assert not fetch(reader.data_finished())


def test_time_limit_reader_without_limit_reads_everything(session):
    src = source("src", label=np.arange(20))
    dst, init = destination("dst", Struct(("label", np.int64)))
    with TaskGroup(workspace_type=GLOBAL) as tg:
        reader = ReaderWithTimeLimit(ReaderWithDelay(src.reader(), 0.001), duration=0)
        pipe(reader, dst.writer(), num_runtime_threads=4)
    session.run(init)
    session.run(tg)
    assert sorted(fetch(dst.content().label()).tolist()) == list(range(20))
    assert fetch(reader.data_finished())


def test_count_until():
    from dslc.session import LocalSession
    got = []

    def keep(inputs, outputs):
        got.append(int(inputs[0].data))

    with TaskGroup() as tg:
        pipe(CountUntil(5), processor=lambda rec: ops.Python(keep)([rec.iter()], []) and None)
    LocalSession().run(tg)
    assert got == [0, 1, 2, 3, 4]


# ----------------------------------------------------------------------------- 8.4 and 8.5


def test_local_session_pipes_with_net_processors(session):
    with core.NameScope("src"):
        src_blobs = NewRecord(core.Net("src_init"), Struct(("uid", np.int64), ("value", np.float32)))
    workspace.FeedBlob(str(src_blobs.uid()), np.array([1, 2, 6]))
    workspace.FeedBlob(str(src_blobs.value()), np.array([1.4, 1.6, 1.7], dtype=np.float32))
    src = Dataset(src_blobs)
    init_net = core.Net("dst_init")
    with core.NameScope("dst"):
        dst_rec = InitEmptyRecord(init_net, src_blobs.clone_schema())
    dst = Dataset(dst_rec)

    def proc1(rec):
        net = core.Net("proc1")
        out = NewRecord(net, rec)
        net.Add([rec.uid(), rec.uid()], [out.uid()])
        out.value.set(blob=rec.value(), unsafe=True)
        return [net], out

    def proc2(rec):
        net = core.Net("proc2")
        out = NewRecord(net, rec)
        out.uid.set(blob=rec.uid(), unsafe=True)
        net.Sub([rec.value(), rec.value()], [out.value()])
        return [net], out

    with TaskGroup() as tg:
        out1 = pipe(src.reader(), processor=proc1)
        out2 = pipe(out1, processor=proc2)
        pipe(out2, dst.writer())
    session.run(init_net)
    session.run(tg)
    assert fetch(dst.content().uid()).tolist() == [2, 4, 12]
    assert fetch(dst.content().value()).tolist() == [0.0, 0.0, 0.0]


def test_dequeue_many(session):
    n = 17
    src = source("src", uid=np.arange(n), value=np.arange(n) * 0.1)
    dst, init = destination("dst", Struct(("uid", np.int64), ("value", np.float64)))
    with TaskGroup(workspace_type=GLOBAL) as counter_init, Task():
        counter = ops.Const(0)

    def proc1(rec):
        with core.NameScope("proc1"):
            out = NewRecord(ops, rec)
        ops.Add([rec.uid(), rec.uid()], [out.uid()])
        out.value.set(blob=rec.value(), unsafe=True)
        return out

    def proc2(rec):
        with core.NameScope("proc2"):
            out = NewRecord(ops, rec)
        out.uid.set(blob=rec.uid(), unsafe=True)
        ops.Sub([rec.value(), rec.value()], [out.value()])
        ops.Add([counter, ops.Const(1)], [counter])
        return out

    with TaskGroup() as tg:
        out1 = pipe(src.reader(), output=Queue(capacity=11, num_dequeue_records=3), processor=proc1)
        out2 = pipe(out1, processor=proc2)
        pipe(out2, dst.writer())
    for g in (init, counter_init, tg):
        session.run(g)
    assert fetch(counter) == -(-n // 3)  # ceil(17 / 3) = 6 dequeues of up to 3 records
    assert fetch(dst.content().uid()).tolist() == [2 * i for i in range(n)]
    assert fetch(dst.content().value()).tolist() == [0.0] * n


# ----------------------------------------------------------------------------- processors


def test_net_processor_is_cloned_per_thread(session):
    src = source("src", x=np.arange(30))
    dst, init = destination("dst", Struct(("x", np.int64)))
    net = core.Net("dbl")
    inp = net.set_input_record(NewRecord(net, Struct(("x", np.int64))))
    doubled = net.Add([inp.x(), inp.x()], "doubled")
    net.set_output_record(Struct(("x", doubled)))
    proc = NetProcessor(net)
    with TaskGroup() as tg:
        pipe(src.reader(), dst.writer(), processor=proc, num_threads=3)
    session.run(init)
    session.run(tg)
    assert sorted(fetch(dst.content().x()).tolist()) == [2 * i for i in range(30)]
    maps = proc.blob_maps()
    assert [m["doubled"] for m in maps] == [f"local/dbl/t:{i}/doubled" for i in range(3)]
    assert all(m["x"] != "x" and m["x"].endswith("/src_cursor/x") for m in maps)  # bound to the read


def test_processor_stop_if_stops_after_the_processor_ran(session):
    src = source("src", v=np.arange(10))
    dst, init = destination("dst", Struct(("v", np.int64)))
    with TaskGroup(workspace_type=GLOBAL) as cinit, Task():
        seen = ops.CreateCounter([], ["seen"])
        budget = ops.CreateCounter([], ["budget"], init_count=5)

    def upto5(rec):
        ops.stop_if(ops.CountDown([budget]))  # a scalar bool: True from the 6th record on
        ops.CountUp(seen)  # still runs in the iteration that stops (as in Caffe2)
        return rec

    with TaskGroup() as tg:
        pipe(src.reader(), dst.writer(), processor=upto5)
    with Task() as count:
        n_seen = final_output(ops.RetrieveCount(seen))
    for g in (init, cinit, tg, count):
        session.run(g)
    assert fetch(dst.content().v()).tolist() == [0, 1, 2, 3, 4]  # the stopping record is not written
    assert n_seen.fetch() == 6


def test_processor_returning_record_and_stop_blob(session):
    src = source("src", v=np.arange(10))
    dst, init = destination("dst", Struct(("v", np.int64)))
    with TaskGroup(workspace_type=GLOBAL) as cinit, Task():
        budget = ops.CreateCounter([], ["budget"], init_count=7)

    def until7(rec):
        return rec, ops.CountDown([budget])

    with TaskGroup() as tg:
        pipe(src.reader(), dst.writer(), processor=until7)
    session.run(init)
    session.run(cinit)
    session.run(tg)
    assert fetch(dst.content().v()).tolist() == list(range(7))


def test_processor_with_its_own_loop(session):
    src = source("src", v=np.arange(5))
    dst, init = destination("dst", Struct(("v", np.int64)))

    def times4(rec):
        with core.NameScope("t4"):
            out = NewRecord(ops, rec)
        ops.Copy([rec.v()], [out.v()])
        with ops.loop(2):
            ops.Add([out.v(), out.v()], [out.v()])
        return out

    with TaskGroup() as tg:
        pipe(src.reader(), dst.writer(), processor=times4)
    session.run(init)
    session.run(tg)
    assert fetch(dst.content().v()).tolist() == [4 * i for i in range(5)]


def test_pipe_and_output(session):
    src = source("src", v=np.arange(6))
    acc, count = core.BlobReference("acc"), core.BlobReference("count")

    def square(rec):
        with core.NameScope("sq"):
            out = NewRecord(ops, rec)
        ops.Mul([rec.v(), rec.v()], [out.v()])
        return out

    def add_up(rec):
        with ops.task_init():
            ops.Const(np.array([0]), acc)
            ops.Const(0, count)
        ops.Add([acc, rec.v()], [acc])
        ops.Add([count, ops.Const(1)], [count])

    with TaskGroup() as squares:
        q, none = pipe_and_output(src.reader(), processor=square)
        nothing, one = pipe_and_output(q, processor=add_up, final_outputs=acc)
    with TaskGroup() as plain:
        _, two = pipe_and_output(src.reader(), processor=add_up, final_outputs=[acc, count])
    assert none is None and nothing is None and isinstance(q, Queue) and len(two) == 2
    session.run(squares)
    assert one.fetch().tolist() == [sum(i * i for i in range(6))]
    session.run(plain)
    assert two[0].fetch().tolist() == [sum(range(6))] and two[1].fetch() == 6


def test_threads_really_run_concurrently(session):
    src = source("src", v=np.arange(40))
    idents = set()

    def note(inputs, outputs):
        idents.add(threading.get_ident())
        time.sleep(0.005)

    def proc(rec):
        ops.Python(note)([rec.v()], [])

    with TaskGroup() as tg:
        pipe(src.reader(), processor=proc, num_runtime_threads=4)
    session.run(tg)
    assert len(idents) == 4


# ----------------------------------------------------------------------------- static threads


def test_static_threads_with_the_seed_code(session):
    src = source("src", v=np.arange(60))
    dst, init = destination("dst", Struct(("v", np.int64)))
    calls = []

    def inc(rec):
        calls.append(1)
        with core.NameScope(f"inc{len(calls)}"):
            out = NewRecord(ops, rec)
        ops.Add([rec.v(), ops.Const([1])], [out.v()])
        return out

    with TaskGroup() as tg:
        q, task = seed_pipeline._pipe_step(src.reader(), None, num_threads=3, processor=inc, capacity=4)
        pipe(q, dst.writer())
    assert len(calls) == 3  # the processor is called once per static thread
    assert str(q.queue()) == "local/function/queue/handler"  # named after the task, not a thread
    session.run(init)
    session.run(tg)
    assert sorted(fetch(dst.content().v()).tolist()) == list(range(1, 61))


def test_seed_static_threads_task_directly(session):
    src = source("src", v=np.arange(25))
    dst, init = destination("dst", Struct(("v", np.int64)))
    with TaskGroup() as tg:
        seed_pipeline._static_threads_task("copy", None, None, src.reader(), 4, dst.writer(), None)
    session.run(init)
    session.run(tg)
    assert sorted(fetch(dst.content().v()).tolist()) == list(range(25))


def test_dslc_static_threads_match(session):
    src = source("src", v=np.arange(25))
    dst, init = destination("dst", Struct(("v", np.int64)))
    with TaskGroup() as tg:
        pipe(src.reader(), dst.writer(), num_threads=4)
    session.run(init)
    session.run(tg)
    assert sorted(fetch(dst.content().v()).tolist()) == list(range(25))


# ----------------------------------------------------------------------------- names and misuse


def test_task_and_queue_names():
    src = source("src", v=np.arange(3))
    with TaskGroup() as tg:
        q = pipe(src.reader(), processor=lambda rec: rec)
        q2 = pipe(q)
        pipe(q2, destination("dst", Struct(("v", np.int64)))[0].writer())
        pipe(src.reader(), name="mine", num_runtime_threads=0)  # no task: a reader comes back
    names = [t.name for t in tg.tasks()]
    assert names == ["local/function", "local/pipe_from:Queue", "local/pipe_into:_DatasetWriter"]
    assert [str(q.queue()), str(q2.queue())] == ["local/function/queue/handler",
                                                 "local/pipe_from:Queue/queue/handler"]


def test_misuse_is_located_with_a_hint():
    src = source("src", v=np.arange(3))
    with TaskGroup():
        for call, msg in [(lambda: pipe(42), "must be a Reader or a Queue"),
                          (lambda: pipe(src.reader(), num_threads=2, num_runtime_threads=2), "not both"),
                          (lambda: pipe(src.reader(), Queue(4), capacity=3), "capacity is only"),
                          (lambda: pipe(src.reader(), Queue(4), num_threads=0), "has no output"),
                          (lambda: pipe(src.reader(), processor=lambda rec: rec.v()), "returned the blob")]:
            with pytest.raises(PipelineError, match=msg) as e:
                call()
            assert e.value.loc.file.endswith("test_pipeline.py") and e.value.hint
