"""``dslc.models`` (Caffe2's ``caffe2.python.models``): the ResNet builders.

Independent figures: ResNet-50 has 25,557,032 trainable parameters without conv biases
(torchvision's resnet50, the same architecture: conv weights, BN scale and bias, FC);
the layer counts follow from the block layouts of He et al. The nets are compared op by op
with the real Caffe2's builders when its venv (/tmp/caffe2-venv) is present.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dslc import model_helper, workspace
from dslc.ir.diagnostics import TraceError
from dslc.models import resnet

CAFFE2_PY = os.path.join(os.environ.get("TMPDIR", "/tmp"), "caffe2-venv", "bin", "python")


def _params(model) -> dict:
    """param name -> shape, from the init net's fills."""
    shapes = {}
    for op in model.param_init_net.Proto().op:
        shape = next((list(a.ints) for a in op.arg if a.name == "shape"), None)
        shapes[op.output[0]] = shape
    return {str(p): shapes[str(p)] for p in model.params}


def test_resnet50_has_resnet50s_parameters():
    model = model_helper.ModelHelper("r50")
    softmax, loss = resnet.create_resnet50(model, "data", 3, 1000, label="label", no_bias=1)
    assert (str(softmax), str(loss)) == ("softmax", "loss")
    params = _params(model)
    assert sum(math.prod(s) for s in params.values()) == 25_557_032
    types = [op.type for op in model.net.Proto().op]
    # 1 + 16 blocks x 3 + 4 projections = 53 convs, each with its BN; 16 residual sums
    assert types.count("Conv") == 53 and types.count("SpatialBN") == 53 and types.count("Sum") == 16
    assert params["conv1_w"] == [64, 3, 7, 7] and params["last_out_L1000_w"] == [1000, 2048]
    assert params["comp_15_conv_3_w"] == [2048, 512, 1, 1] and params["shortcut_projection_3_w"] == [512, 256, 1, 1]
    assert params["shortcut_projection_13_w"] == [2048, 1024, 1, 1]  # (blocks 3, 4, 6, 3: stage 4 starts at 13)


def test_resnext_groups_and_small_images_run():
    model = model_helper.ModelHelper("rx")
    last = resnet.create_resnext(model, "data", 3, 5, num_layers=18, num_groups=2, num_width_per_group=4,
                                 conv1_kernel=3, conv1_stride=1, final_avg_kernel=2, no_loss=True, is_test=True)
    params = _params(model)
    # inner width 2 x 4 = 8, doubling per stage; the 3x3 convs are grouped by 2
    assert params["comp_0_conv_2_w"] == [8, 4, 3, 3] and params["comp_7_conv_2_w"] == [64, 32, 3, 3]
    assert [str(last)] == ["last_out_L5"] and params["last_out_L5_w"] == [5, 512]
    with _fresh():
        workspace.RunNetOnce(model.param_init_net)
        workspace.FeedBlob("data", np.random.RandomState(0).rand(2, 3, 8, 8).astype(np.float32))
        workspace.RunNetOnce(model.net)
        assert workspace.FetchBlob("last_out_L5").shape == (2, 5)


class _fresh:
    """An empty workspace for the block (param names like conv1_w recur across tests)."""

    def __enter__(self):
        workspace.ResetWorkspace()

    def __exit__(self, *exc):
        workspace.ResetWorkspace()


def test_resnet_32x32_depth_is_12n_plus_2():
    """Caffe2 puts 2 x num_groups simple blocks in each of its three stages (two 3x3 convs
    each), so its depth is 12n + 2, not the paper's 6n + 2."""
    model = model_helper.ModelHelper("cifar")
    resnet.create_resnet_32x32(model, "data", 3, num_groups=3, num_labels=10)
    types = [op.type for op in model.net.Proto().op]
    assert types.count("Conv") + types.count("FC") - 2 == 12 * 3 + 2  # (less the two projections)


def test_an_unknown_depth_is_a_located_error():
    with pytest.raises(TraceError) as e:
        resnet.create_resnext(model_helper.ModelHelper("x"), "data", 3, 10, num_layers=42, num_groups=1,
                              num_width_per_group=64)
    assert "test_models.py" in str(e.value) and "42 layers" in str(e.value) and "[18, 34, 50" in str(e.value)


_BUILD = textwrap.dedent("""
    import json, sys
    from {pkg} import model_helper
    from {pkg}.models import resnet
    def dump(net):
        return [[op.type, list(op.input), list(op.output),
                 sorted([a.name, a.f if a.HasField("f") else a.i if a.HasField("i") else list(a.ints)]
                        for a in op.arg if a.name not in ("order", "cudnn_exhaustive_search", "use_cudnn"))]
                for op in net.op]
    nets = {{}}
    for name, build in [("r50", lambda m: resnet.create_resnet50(m, "data", 3, 1000, label="label")),
                        ("rx", lambda m: resnet.create_resnext(m, "data", 3, 10, num_layers=101, num_groups=32,
                                                               num_width_per_group=4, is_test=True)),
                        ("cifar", lambda m: resnet.create_resnet_32x32(m, "data", 3, 2, 10))]:
        m = model_helper.ModelHelper(name)
        build(m)
        nets[name] = [dump(m.net.Proto()), dump(m.param_init_net.Proto()), [str(p) for p in m.params]]
    print(json.dumps(nets, default=str))
""")


@pytest.mark.skipif(not os.path.exists(CAFFE2_PY), reason="the real Caffe2's venv (/tmp/caffe2-venv) is absent")
def test_the_nets_are_caffe2s_op_for_op(tmp_path):
    """Caffe2's brew adds order/cudnn arguments ours leaves at their defaults: those aside,
    every op, input, output and argument is the same, and so are the fills and params."""
    def run(python, pkg):
        script = tmp_path / f"build_{pkg.split('.')[0]}.py"
        script.write_text(_BUILD.format(pkg=pkg))
        done = subprocess.run([python, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.splitlines()[-1])
    assert run(sys.executable, "dslc") == run(CAFFE2_PY, "caffe2.python")
