"""Fused 8-bit row-wise quantized tables: the bytes, the dequantized rows and the lookups,
as the real Caffe2 (torch 1.10.2's) gives them for the same inputs through
workspace.RunOperatorOnce, and the quantization error bound for random tables."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core
from dslc import hypothesis_test_util as hu

DEVICES = pytest.mark.parametrize("do", hu.device_options, ids=["interp", "numba"])
X = np.array([[0.0, 0.5, 1.0, -1.0], [2.0, 2.0, 2.0, 2.0], [0.1, 0.2, 0.3, 0.35]], np.float32)
Q = [[128, 191, 255, 0, 129, 128, 0, 60, 0, 0, 128, 191], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64],
     [0, 102, 204, 255, 129, 128, 128, 58, 205, 204, 204, 61]]  # Caffe2
IDX, LEN, W = np.array([2, 0, 2], np.int64), np.array([2, 1], np.int32), np.array([0.5, 2.0, -1.0], np.float32)
ROW2 = [0.10000000149011612, 0.20000000298023224, 0.30000001192092896, 0.3500000238418579]


def _run(do, op_type, inputs, n_out=1):
    op = core.CreateOperator(op_type, list(inputs), [f"y{k}" for k in range(n_out)])
    return [o.tolist() for o in hu.runOpOnInput(do, op, list(inputs.values()))]


@DEVICES
def test_quantized_bytes_and_lookups_match_caffe2(do):
    (q,) = _run(do, "FloatToFused8BitRowwiseQuantized", {"x": X})
    assert q == Q
    q = np.array(Q, np.uint8)
    (d,) = _run(do, "Fused8BitRowwiseQuantizedToFloat", {"q": q})
    assert d == [[0.003921627998352051, 0.4980393052101135, 1.0000001192092896, -1.0], [2.0] * 4, ROW2]
    (s,) = _run(do, "SparseLengthsSumFused8BitRowwise", {"q": q, "i": IDX, "l": LEN})
    assert s == [[0.10392165184020996, 0.6980392932891846, 1.3000000715255737, -0.6499999761581421], ROW2]
    (m,) = _run(do, "SparseLengthsMeanFused8BitRowwise", {"q": q, "i": IDX, "l": LEN})
    assert m == [[0.05196082592010498, 0.3490196466445923, 0.6500000357627869, -0.32499998807907104], ROW2]
    (w,) = _run(do, "SparseLengthsWeightedSumFused8BitRowwise", {"q": q, "w": W, "i": IDX, "l": LEN})
    assert w == [[0.05784320831298828, 1.096078634262085, 2.1500000953674316, -1.8250000476837158],
                 [-v for v in ROW2]]
    (g,) = _run(do, "GatherFused8BitRowwise", {"q": q, "i": IDX})
    assert g[1] == [0.003921627998352051, 0.49803924560546875, 1.0, -1.0]  # (Caffe2's gather rounds twice)


def test_random_tables_come_back_within_half_a_step():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((50, 16)) * rng.uniform(0.01, 10, (50, 1))).astype(np.float32)
    (q,) = hu.runOpOnInput(hu.cpu_do, core.CreateOperator("FloatToFused8BitRowwiseQuantized", ["x"], ["q"]), [x])
    (d,) = hu.runOpOnInput(hu.cpu_do, core.CreateOperator("Fused8BitRowwiseQuantizedToFloat", ["q"], ["d"]), [q])
    step = (x.max(axis=1) - x.min(axis=1)) / 255
    assert (np.abs(d - x) <= step[:, None] * 0.5 + 1e-6).all()
    idx = rng.integers(0, 50, 30)
    lengths = np.array([10, 0, 20], np.int32)
    (s,) = hu.runOpOnInput(hu.cpu_do, core.CreateOperator("SparseLengthsSumFused8BitRowwise", ["q", "i", "l"], ["s"]),
                           [q, idx, lengths])
    want = np.stack([d[idx[:10]].sum(axis=0), np.zeros(16), d[idx[10:]].sum(axis=0)])
    np.testing.assert_allclose(s, want, rtol=1e-5, atol=1e-5)
