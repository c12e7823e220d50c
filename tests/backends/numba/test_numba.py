"""What the numba backend promises beyond matching the interpreter (which the whole
suite checks): kernels are cached across processes, type changes recompile, output
buffers are reused only when nothing else holds them, and `dslc compile -o` writes
readable kernel sources.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dslc import workspace
from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Task, TaskGroup, final_output
import paths

ROOT = str(paths.ROOT)


def compile_json(tmp_path, cache):
    env = dict(os.environ, DSLC_CACHE_DIR=str(cache), DSLC_NUMBA_MIN_WORK="0")  # compile even this tiny job
    env.pop("DSLC_PIPELINE", None)  # (the optimized job: its loops are what compiles)
    out = subprocess.run([sys.executable, "-m", "dslc.cli", "compile", "examples/loops.py", "--backend",
                          "numba", "--json", "-o", str(tmp_path / "out")],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["modules"][0]["summary"]


def test_a_second_process_compiles_nothing(tmp_path):
    cache = tmp_path / "cache"
    first = compile_json(tmp_path, cache)
    second = compile_json(tmp_path, cache)
    assert len(first["regions compiled"]) >= 1 and first["functions compiled now"] >= 1
    assert second["functions compiled now"] == 0
    assert second["functions from cache"] == first["functions compiled now"]


def test_compile_writes_readable_kernel_sources(tmp_path):
    compile_json(tmp_path, tmp_path / "cache")
    kernels = sorted((tmp_path / "out" / "kernels").iterdir())
    assert (tmp_path / "out" / "job.dslir").exists() and kernels
    text = kernels[0].read_text()
    assert '@njit(nogil=True, error_model="numpy")' in text  # IEEE float division (cached by dslc, not numba)
    assert "# loops.py:" in text  # every statement carries the user's line
    compile(text, str(kernels[0]), "exec")  # real Python source


def _sum_task(n_iters):
    with TaskGroup() as tg, Task():
        total = ops.Copy("x")
        with ops.loop(n_iters):
            ops.Add([total, "x"], [total])
        out = final_output(total)
    return tg, out


@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.int64])
def test_a_type_change_compiles_a_new_specialization(dtype):
    """Feeding x as another dtype recompiles: each answer is right for its own dtype."""
    tg, out = _sum_task(7)
    with LocalSession(backend="numba") as s:
        for value in (np.int64(3), dtype(2.5) if np.dtype(dtype).kind == "f" else dtype(-4)):
            workspace.FeedBlob("x", np.array([value, value]))
            s.run(tg)
            got = out.fetch()
            assert got.dtype == np.array([value]).dtype
            np.testing.assert_array_equal(got, np.array([value, value]) * 8)


def _fused_job(n):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    workspace.FeedBlob("a", a)
    workspace.FeedBlob("b", b)
    workspace.FeedBlob("y", np.zeros(n, np.float32))
    with TaskGroup() as tg, Task():
        t = ops.Mul(["a", "b"])
        ops.Sub([ops.Relu(ops.Add([t, "a"])), "b"], ["y"])
    return tg, np.maximum(a * b + a, np.float32(0)) - b


def test_fused_output_reuses_the_blobs_buffer_when_nothing_else_holds_it():
    tg, want = _fused_job(1 << 12)
    with LocalSession(backend="numba", passes="default") as s:  # fusion is a pass
        assert s.compile(tg).program.summary()["kernels fused"] == 1
        s.run(tg)
        first_id = id(workspace.current().fetch("y"))
        s.run(tg)
        assert id(workspace.current().fetch("y")) == first_id  # written in place
        np.testing.assert_allclose(workspace.FetchBlob("y"), want, rtol=1e-6)


def test_fused_output_never_overwrites_an_array_someone_holds():
    tg, want = _fused_job(1 << 12)
    with LocalSession(backend="numba", passes="default") as s:
        s.run(tg)
        held = workspace.FetchBlob("y")  # the user keeps the array
        kept = held.copy()
        workspace.FeedBlob("a", np.ones(1 << 12, np.float32))
        s.run(tg)
        np.testing.assert_array_equal(held, kept)
        assert not np.array_equal(workspace.FetchBlob("y"), kept)


def test_a_loop_reading_an_unset_blob_still_reports_it():
    """A loop reads `later` before anything wrote it: the same error as the interpreter's."""
    from dslc.ir.diagnostics import ExecutionError
    with Task() as task:
        acc = ops.Const(0)
        with ops.loop(3):
            ops.Add([acc, "later"], [acc])  # @read
        ops.Const(1, blob_out="later")
    line = next(i for i, t in enumerate(open(__file__), 1) if t.rstrip().endswith("# @read"))
    with LocalSession(backend="numba") as s, pytest.raises(ExecutionError, match="'later'") as err:
        s.run(task)
    assert err.value.loc.line == line
