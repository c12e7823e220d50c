"""``dslc.models`` (Caffe2's ``caffe2.python.models``): the ResNet and ShuffleNet builders.

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
from dslc.models import resnet, shufflenet

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
    from {pkg}.models import resnet, shufflenet
    def dump(net):
        return [[op.type, list(op.input), list(op.output),
                 sorted([a.name, a.f if a.HasField("f") else a.i if a.HasField("i") else list(a.ints)]
                        for a in op.arg if a.name not in ("order", "cudnn_exhaustive_search", "use_cudnn")
                        and (op.type, a.name) != ("Concat", "axis"))]
                for op in net.op]
    nets = {{}}
    for name, build in [("r50", lambda m: resnet.create_resnet50(m, "data", 3, 1000, label="label")),
                        ("rx", lambda m: resnet.create_resnext(m, "data", 3, 10, num_layers=101, num_groups=32,
                                                               num_width_per_group=4, is_test=True)),
                        ("cifar", lambda m: resnet.create_resnet_32x32(m, "data", 3, 2, 10)),
                        ("shuffle", lambda m: shufflenet.create_shufflenet(m, "data", 3, 1000, label="label"))]:
        m = model_helper.ModelHelper(name)
        build(m)
        nets[name] = [dump(m.net.Proto()), dump(m.param_init_net.Proto()), [str(p) for p in m.params]]
    print(json.dumps(nets, default=str))
""")


@pytest.mark.skipif(not os.path.exists(CAFFE2_PY), reason="the real Caffe2's venv (/tmp/caffe2-venv) is absent")
def test_the_nets_are_caffe2s_op_for_op(tmp_path):
    """Caffe2's brew adds order/cudnn arguments ours leaves at their defaults (and its concat
    says order=NCHW where ours says axis=1, the same axis): those aside,
    every op, input, output and argument is the same, and so are the fills and params."""
    def run(python, pkg):
        script = tmp_path / f"build_{pkg.split('.')[0]}.py"
        script.write_text(_BUILD.format(pkg=pkg))
        done = subprocess.run([python, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.splitlines()[-1])
    assert run(sys.executable, "dslc") == run(CAFFE2_PY, "caffe2.python")


def test_shufflenet_v2_half_width_predicts_as_caffe2():
    """ShuffleNetV2Builder at width 0.5x, is_test, one 199x199 image (the least size that
    ends at the 7x7 average pool): params, BN statistics and data drawn from RandomState(0)
    in sorted-name order. Caffe2's last_out_L4 for the same feeds (caffe2-ref run.sh of this
    very program): [-0.9397451, -0.6469232, 1.2159939, -0.4261587]."""
    model = model_helper.ModelHelper("sn")
    builder = shufflenet.ShuffleNetV2Builder(model, "data", 3, 4, width="0.5x", is_test=True)
    builder.create()
    types = [op.type for op in model.net.Proto().op]
    # 1 + 3 stages x (1 down-sampling unit of 5 convs + repeats of 3) + conv5 = 56 convs; 3 + 7 + 3 + 3 shuffles
    assert types.count("Conv") == 1 + 3 * 5 + 13 * 3 + 1 and types.count("ChannelShuffle") == 16
    with _fresh():
        workspace.RunNetOnce(model.param_init_net)
        rs = np.random.RandomState(0)
        for p in sorted(str(p) for p in model.GetAllParams()):
            shape = workspace.FetchBlob(p).shape
            workspace.FeedBlob(p, (rs.standard_normal(shape) * 0.1 + (1.0 if p.endswith("_s") else 0)).astype(np.float32))
        for p in sorted(b for b in workspace.Blobs() if b.endswith(("_rm", "_riv"))):
            shape = workspace.FetchBlob(p).shape
            v = rs.uniform(0.5, 1.5, shape) if p.endswith("_riv") else rs.standard_normal(shape) * 0.1
            workspace.FeedBlob(p, v.astype(np.float32))
        workspace.FeedBlob("data", rs.standard_normal((1, 3, 199, 199)).astype(np.float32))
        workspace.RunNetOnce(model.net)
        np.testing.assert_allclose(workspace.FetchBlob(str(builder.last_out)),
                                   [[-0.9397451, -0.6469232, 1.2159939, -0.4261587]], rtol=1e-5, atol=1e-6)


def test_an_unknown_shufflenet_width_is_a_located_error():
    with pytest.raises(TraceError) as e:
        shufflenet.ShuffleNetV2Builder(model_helper.ModelHelper("x"), "data", 3, 10, width="3.0x")
    assert "test_models.py" in str(e.value) and "'3.0x'" in str(e.value) and "0.5x" in str(e.value)
