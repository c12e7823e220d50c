"""net_drawer and visualize (Caffe2's modules): the graph of a net as DOT text (and an
image where graphviz is installed), and the patch mosaic, worked out by hand."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from dslc import core, net_drawer, visualize


def _net():
    net = core.Net("toy")
    y = net.FC(["x", "w", "b"], "y")
    net.Relu(y, "z")
    return net


def test_the_graph_has_an_op_node_per_op_and_an_arrow_per_blob_use():
    text = net_drawer.GetPydotGraph(_net(), rankdir="TB").to_string()
    assert "rankdir=TB;" in text
    assert len(re.findall(r'shape=box', text)) == 2  # FC, Relu
    assert len(re.findall(r"shape=ellipse", text)) == 5  # x, w, b, y, z
    assert len(re.findall(r" -> ", text)) == 3 + 1 + 1 + 1  # FC's 3 inputs and 1 output, Relu's
    minimal = net_drawer.GetPydotGraphMinimal(_net()).to_string()
    assert minimal.count(" -> ") == 1  # (Relu reads what FC wrote)


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's dot is not installed")
def test_images_come_from_graphviz(tmp_path):
    g = net_drawer.GetPydotGraph(_net())
    assert g.create_png().startswith(b"\x89PNG")
    assert g.write_svg(tmp_path / "net.svg") and (tmp_path / "net.svg").read_bytes().lstrip().startswith(b"<?xml")
    plan = core.Plan("p")
    plan.AddStep(core.ExecutionStep("s", _net()))
    assert net_drawer.GetPlanGraph(plan.Proto()).create_png().startswith(b"\x89PNG")


def test_the_mosaic_lays_patches_out_with_gaps():
    """3 patches of 2x2 in 2 columns with a 1-pixel gap: a 5x5 canvas, the rest filled with
    the patches' mean (by hand: patches 0, 1, 2 everywhere, mean 1)."""
    patches = np.stack([np.full((2, 2), v, np.float64) for v in (0.0, 1.0, 2.0)])
    canvas = visualize.PatchVisualizer(gap=1).mosaic(patches, ncols=2)
    want = np.ones((5, 5))
    want[0:2, 0:2], want[0:2, 3:5], want[3:5, 0:2] = 0.0, 1.0, 2.0
    np.testing.assert_array_equal(canvas, want)
    assert visualize.ChannelLast(np.zeros((2, 3, 4, 5))).shape == (2, 4, 5, 3)
    assert visualize.ChannelFirst(np.zeros((2, 4, 5, 3))).shape == (2, 3, 4, 5)


def test_showing_without_matplotlib_says_what_to_install():
    try:
        import matplotlib  # noqa: F401
        pytest.skip("matplotlib is installed")
    except ImportError:
        pass
    with pytest.raises(ImportError, match="matplotlib") as err:
        visualize.NCHW.ShowMultiple(np.zeros((2, 1, 3, 3)))
    assert "test_drawing.py" in str(err.value)
