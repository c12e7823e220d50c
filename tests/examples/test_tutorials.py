"""Caffe2's MNIST and LMDB tutorials, in the scripts examples/scripts/mnist_lenet.py and
examples/scripts/lmdb_dataset.py (issue 37: they stopped where Caffe2 runs, at
model.TensorProtosDBInput, Print and Summarize to files, LabelCrossEntropy's shapes and
the database that read back empty until a garbage collection).

CAFFE2 holds what ``examples/scripts/mnist_lenet.py --root DIR`` printed on the real Caffe2: the
script with its imports turned to caffe2.python and caffe2.proto, run with
/tmp/caffe2-venv/bin/python (the reference build has no lmdb, so the LMDB script is
checked against the sums it takes itself, as Caffe2's example does).
"""
from __future__ import annotations


import numpy as np

from dslc import workspace
import paths

EXAMPLES = paths.EXAMPLES / "scripts"
CAFFE2 = {
    "loss": [2.480125, 2.218308, 2.175801, 2.384375, 2.117580, 1.949990, 2.131012, 1.856436, 1.797715,
             1.681001, 1.712263, 1.609135],
    "accuracy": [0.1875, 0.4375, 0.4375, 0.0, 0.25, 0.4375, 0.4375, 0.4375, 0.5, 0.625, 0.375, 0.5625],
    "test accuracy": 0.375,
}


def _example(name):
    return paths.load(EXAMPLES / f"{name}.py", name)


def test_the_mnist_tutorial_trains_as_on_caffe2(backend, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DSLC_BACKEND", backend)  # (the workspace's created nets run there)
    root = tmp_path / "mnist"
    losses, accuracies, test_accuracy = _example("mnist_lenet").main(["--root", str(root)])
    np.testing.assert_allclose(losses, CAFFE2["loss"], rtol=1e-4)
    assert accuracies == CAFFE2["accuracy"]
    assert np.mean(test_accuracy) == CAFFE2["test accuracy"]
    # the bookkeeping ops' files: a line per iteration, in Caffe2's form
    lines = (root / "loss.log").read_text().splitlines()
    assert len(lines) == 12 and all(line.startswith("Tensor loss of type float. Dims: (): ") for line in lines)
    np.testing.assert_allclose([float(line.rsplit(" ", 1)[1]) for line in lines], CAFFE2["loss"], rtol=1e-5)
    assert (root / "accuracy.log").read_text().splitlines()[3] == "Tensor accuracy of type float. Dims: (): 0"
    summary = (root / "conv1_w.summary").read_text().splitlines()
    assert len(summary) == 12 and len(summary[0].split()) == 4
    assert sorted(p.name for p in root.glob("*_grad.summary")) == sorted(
        f"{layer}_{kind}_grad.summary" for layer in ("conv1", "conv2", "fc3", "pred") for kind in "wb")
    assert "test accuracy: 0.3750" in capsys.readouterr().out


def test_the_lmdb_example_reads_back_what_it_wrote(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("DSLC_BACKEND", backend)
    written, read, shapes = _example("lmdb_dataset").main(["--output_file", str(tmp_path / "images")])
    assert abs(written - read) < 0.1
    assert shapes == {((16, 3, 8, 4), "float32", (16,), "int32")}
    workspace.ResetWorkspace()
