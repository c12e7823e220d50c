"""``Print(to_file=1)`` and ``Summarize(to_file=1)``: Caffe2's MNIST tutorial logs its accuracy,
loss and every parameter's statistics this way (issue 37; dslc refused both).

The expected files are the real Caffe2's: this test's net run there (/tmp/caffe2-venv,
workspace.ResetWorkspace(root), CreateNet, RunNet twice) wrote exactly these lines, in
``<root>/<blob>.log`` and ``<root>/<blob with / as #>.summary``.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import workspace
from dslc.model_helper import ModelHelper


def _run_twice(root):
    workspace.ResetWorkspace(str(root))
    model = ModelHelper(name="logs")
    workspace.FeedBlob("acc", np.array([0.25, 0.5], np.float32))
    workspace.FeedBlob("w/x", np.arange(6, dtype=np.float32).reshape(2, 3))
    workspace.FeedBlob("i", np.array([1, 2, 3], np.int64))
    workspace.FeedBlob("s", np.array(["ab", "c"]))
    workspace.FeedBlob("f", np.array([0.1, 1e-7, 123456789.0, -2.5, np.inf], np.float32))
    for blob in ("acc", "i", "s", "f"):
        model.Print(blob, [], to_file=1)
    model.Summarize("w/x", [], to_file=1)
    model.Summarize("acc", "stats", to_file=1)
    workspace.CreateNet(model.net)  # (on DSLC_BACKEND's backend)
    workspace.RunNet(model.net)
    workspace.RunNet(model.net)


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_print_and_summarize_write_caffe2s_files(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("DSLC_BACKEND", backend)
    root = tmp_path / "root" / "made"  # (ResetWorkspace makes it, as Caffe2's does)
    _run_twice(root)
    two = lambda line: line + "\n" + line + "\n"  # noqa: E731  (a line per run)
    assert (root / "acc.log").read_text() == two("Tensor acc of type float. Dims: (2,): 0.25,0.5")
    assert (root / "i.log").read_text() == two("Tensor i of type long int. Dims: (3,): 1,2,3")
    assert (root / "s.log").read_text() == two("Tensor s of type std::basic_string<char>. Dims: (2,): ab,c")
    assert (root / "f.log").read_text() == two("Tensor f of type float. Dims: (5,): 0.1,1e-07,1.23457e+08,-2.5,inf")
    assert (root / "w#x.summary").read_text() == two("0 5 2.5 1.87083")
    assert (root / "acc.summary").read_text() == two("0.25 0.5 0.375 0.176777")
    np.testing.assert_allclose(workspace.FetchBlob("stats"), [0.25, 0.5, 0.375, 0.17677669], rtol=1e-6)
    assert sorted(p.name for p in root.iterdir()) == ["acc.log", "acc.summary", "f.log", "i.log", "s.log",
                                                     "w#x.summary"]


def test_a_second_net_starts_its_files_afresh(tmp_path):
    # (Caffe2 empties an op's file when it makes the op: a new net's Print starts it again)
    root = tmp_path / "root"
    _run_twice(root)
    workspace.FeedBlob("acc", np.array([1.0], np.float32))
    again = ModelHelper(name="again")
    again.Print("acc", [], to_file=1)
    workspace.CreateNet(again.net)
    for _ in range(3):
        workspace.RunNet(again.net)
    assert (root / "acc.log").read_text() == "Tensor acc of type float. Dims: (1,): 1\n" * 3
