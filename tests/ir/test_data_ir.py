"""Pipelines in the IR: handle types and effects in the printed text, round trips, and the
passes keeping blobs that AtomicAppend writes by name out of SSA forwarding."""
from __future__ import annotations

import re

import numpy as np

from dslc import core, workspace
from dslc.driver import cli
from dslc.runtime.values import type_of_value
from dslc.dataset import Dataset
from dslc.ir import parse, print_module
from dslc.ir.passes import DEFAULT_PIPELINE, PassManager
from dslc.lower import lower_group
from dslc.net_builder import ops
from dslc.pipeline import pipe
from dslc.schema import ConstRecord, Struct
from dslc.session import LocalSession
from dslc.task import Task, TaskGroup, WorkspaceType, final_output
import paths

ROOT = paths.ROOT


def _lowered_pipeline():
    """The two-pipe group, lowered against the workspace its init group made."""
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as init, Task():
        src = Dataset(ConstRecord(ops, Struct(("x", np.arange(5)))), name="src")
        with core.NameScope("dst"):
            dst = Dataset(Struct(("x", np.int64)), name="dst")
            dst.init_empty(ops)
    with TaskGroup() as tg:
        q = pipe(src.reader(), num_runtime_threads=2, capacity=3)
        pipe(q, dst.writer())
    ws = workspace.C.Workspace()
    LocalSession(ws).run(init)
    existing = {n: type_of_value(c.v) for n, c in ws.blobs.items() if c.v is not None}
    return lower_group(tg, "job.py", existing)


def test_printed_ir_has_handle_types_and_data_ops():
    module = _lowered_pipeline()
    text = print_module(module, with_locs=False)
    # CHECK: the queue is made at node init and its handle is a !queue
    assert re.search(r'%\w+ = CreateBlobsQueue \{capacity = 3, field_names = \["x"\]\} : !queue', text)
    assert re.search(r'CreateTreeCursor \{fields = \["x"\]\} : !cursor', text)
    assert re.search(r'CreateMutex : !mutex', text)
    assert re.search(r'ReadNextBatch\(%\w+, %\w+\) : i64\[\?\]', text)
    assert re.search(r'SafeEnqueueBlobs\(%\w+, %\w+\) : i64\[\?\], bool', text)
    assert re.search(r'SafeDequeueBlobs\(%\w+\) : any, bool', text)
    assert re.search(r'AtomicAppend\(%\w+, %\w+, %\w+\) \{output_names = \["dst/x"\]\}', text)
    assert text.count("CloseBlobsQueue") == 2  # producer and consumer both close at task exit


def test_pipeline_modules_round_trip_after_each_pass():
    module = _lowered_pipeline()
    for name in ("lowering",) + DEFAULT_PIPELINE:
        if name != "lowering":
            PassManager([name]).run(module)
        text = print_module(module)
        assert print_module(parse(text, name)) == text, name


def test_dslc_ir_of_the_pipeline_example(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert cli.main(["ir", "examples/pipeline.py"]) == 0
    out = capsys.readouterr().out
    assert ": !queue" in out and ": !counter" in out
    assert re.search(r'SafeDequeueBlobs\(%\w+\) : any, bool  loc\("examples/pipeline.py":\d+\)', out)


def test_appending_in_a_loop_then_reading_in_the_same_block(session):
    # The dataset blob is written by AtomicAppend (by name) inside the loop: the lowering
    # and the passes must not forward its pre-loop value past the loop.
    with Task() as task:
        with core.NameScope("ds"):
            ds = Dataset(Struct(("v", np.int64)), name="ds")
            ds.init_empty(ops)
        writer = ds.writer(ops)
        # (re)filled after the mutex, so the lowering holds this value when the loop starts
        ops.ConstantFill([], [ds.content().v()], shape=[0], dtype=core.DataType.INT64)
        with ops.loop(5) as loop:
            batch = ops.Add([ops.Const(np.array([0])), loop.iter()])
            writer.write(ops.net(), [batch])
        after = final_output(ops.Copy([ds.content().v()]))
    session.run(task)
    assert after.fetch().tolist() == [0, 1, 2, 3, 4]


def test_appended_blob_types_are_found_at_run_time():
    # the empty float32 blob becomes int64 rows: its loads after the append are typed `any`
    with Task() as task:
        with core.NameScope("t"):
            ds = Dataset(Struct(("v", np.void)), name="t")
            ds.init_empty(ops)
        ds.writer(ops).write(ops.net(), [ops.Const(np.array([7, 8]))])
        out = final_output(ops.Copy([ds.content().v()]))
    session = LocalSession(workspace.C.Workspace())
    module = session.compile(task).module
    assert re.search(r'load @"t/v" : any', print_module(module, with_locs=False))
    session.run(task)
    assert out.fetch().dtype == np.int64 and out.fetch().tolist() == [7, 8]
