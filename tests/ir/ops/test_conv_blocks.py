"""Conv's window matrix is prod(kernel) times its input: where the whole batch's would pass
the budget (DSLC_MAX_TENSOR_BYTES, or conv_math.WINDOW_BLOCK_BYTES), Conv, ConvGradient,
ConvTranspose and its gradient work in blocks of images, or of one image's output rows, and
give the same answers with their peak memory (tracemalloc: numpy's allocations, the numba
kernels' results included) near their inputs' and outputs'. On both backends, through a
session run of a net (its second run: the first compiles)."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from dslc import core, workspace
from dslc.ir import budget
from dslc.session import LocalSession

MiB = 1 << 20
rng = np.random.default_rng(3)
# 16 channels of [8, 32, 32] float32 images (512 KiB), a 5x5 kernel: 13 MB of windows in
# all (2 channels on the other side keep the GEMMs small)
X16 = rng.standard_normal((8, 16, 32, 32)).astype(np.float32)
X2 = rng.standard_normal((8, 2, 32, 32)).astype(np.float32)
W = (rng.standard_normal((2, 16, 5, 5)) * 0.1).astype(np.float32)


def _net(op_type, inputs, outputs, **args):
    net = core.Net(f"blocks_{op_type}")
    getattr(net, op_type)(inputs, outputs, **args)
    return net


CASES = {  # (op, inputs, outputs, args): every one cuts windows of a 16-channel image
    "Conv": ("Conv", {"x": X16, "w": W, "b": np.ones(2, np.float32)}, ["y"], dict(kernel=5, pad=2)),
    "ConvGradient": ("ConvGradient", {"x": X16, "w": W, "dy": X2}, ["dw", "db", "dx"], dict(kernel=5, pad=2)),
    "ConvTranspose": ("ConvTranspose", {"x": X2, "w": W, "b": np.ones(16, np.float32)}, ["y"],
                      dict(kernel=5, pad=2)),
    "ConvTransposeGradient": ("ConvTransposeGradient", {"x": X2, "w": W, "dy": X16}, ["dw", "db", "dx"],
                              dict(kernel=5, pad=2)),
}


def _peak_run(backend, case):
    """(outputs, peak bytes above the start) of the net's second run."""
    op_type, inputs, outputs, args = CASES[case]
    for name, value in inputs.items():
        workspace.FeedBlob(name, value)
    net = _net(op_type, list(inputs), outputs, **args)
    with LocalSession(backend=backend) as s:
        s.run(net)
        for name in outputs:
            workspace.FeedBlob(name, np.zeros(1, np.float32))  # (the first run's results freed)
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            s.run(net)
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    return [workspace.FetchBlob(name) for name in outputs], peak


@pytest.mark.parametrize("case", list(CASES))
def test_windows_work_in_blocks_under_the_budget(backend, case, monkeypatch):
    whole, whole_peak = _peak_run(backend, case)
    monkeypatch.setattr(budget, "_limit", (1 * MiB, "DSLC_MAX_TENSOR_BYTES"))
    got, peak = _peak_run(backend, case)
    for g, w in zip(got, whole):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5 * float(np.abs(w).max()))
    # (inputs 1.5 MiB, outputs 0.5 - 1 MiB; the whole batch's windows alone are 13 MB)
    assert whole_peak > 12 * MiB, f"{whole_peak / MiB:.1f} MiB: the case no longer needs blocks"
    assert peak < 4 * MiB, f"{case} on {backend}: {peak / MiB:.1f} MiB at its peak under a 1 MiB budget"


def test_a_budget_below_one_output_row_of_windows_is_a_located_error(monkeypatch):
    from dslc import hypothesis_test_util as hu
    from dslc.ir.diagnostics import DSLError
    monkeypatch.setattr(budget, "_limit", (1 * MiB, "DSLC_MAX_TENSOR_BYTES"))
    x = np.ones((1, 256, 3, 256), np.float32)  # (768 KiB; one output row's windows: 256 x 9 x 256 x 4 = 2.25 MiB)
    op = core.CreateOperator("Conv", ["x", "w"], ["y"], kernel=3, pad=1)
    with pytest.raises(DSLError) as e:
        hu.runOpOnInput(hu.cpu_do, op, [x, np.ones((1, 256, 3, 3), np.float32)])
    assert "one output row of windows needs" in str(e.value) and "DSLC_MAX_TENSOR_BYTES" in str(e.value)
    assert e.value.loc.file.endswith("test_conv_blocks.py")
