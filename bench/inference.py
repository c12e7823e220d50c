"""Deploy conv nets: dslc (interp, numba) against the real Caffe2 and PyTorch eager.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/inference.py \
        [--models resnet18,mobilenetv2,...] [--batches 1,16] [--size 224] [--reps 5]

Each model is built with brew the way a deploy model is (test-mode SpatialBN, no
gradients), its parameters filled from one seeded generator, then run as a user runs a
predict net: FeedBlob the images, CreateNet once, RunNet timed. The same program runs in
one subprocess per engine: dslc with DSLC_BACKEND=interp and =numba (and xla when JAX is
importable), Caffe2 (``$CAFFE2_VENV/bin/python``, default /tmp/caffe2-venv) with its
imports renamed, and PyTorch eager (torch.nn.functional over the same predict net's ops,
in whichever Python has torch: this one, else Caffe2's venv). ONNX Runtime is not run (it
is not installed here). Every process is pinned to one core, with one BLAS thread; each
figure is the median of ``--reps`` timed RunNets after two warm ones, all in this one run;
the ratios are to Caffe2. Every engine's output is compared with Caffe2's (the largest
difference over the largest output). numpy's BLAS kernel is printed (threadpoolctl).

The models (shapes of the real ones, fewer blocks where noted): ResNet-18 and ResNet-50
(basic and bottleneck blocks, Sum joins), MobileNetV2 (inverted residuals with depthwise
3x3), ShuffleNet (v1's grouped 1x1 convolutions, group 3, and the channel shuffle as
Reshape/Transpose), SqueezeNet 1.1 (fire modules, Concat), VGG-11 and AlexNet (the
classifier's FCs at 1/4 width, so the convolutions dominate as in the real ones at 224).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"  # (the subprocesses inherit them)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from embedding import blas_kernel  # noqa: E402
from timing import one_core  # noqa: E402

# The models, as brew programs: run as they are by dslc, with `dslc` renamed
# `caffe2.python` by Caffe2. `build(name, brew, m, size)` returns the output blob.
MODELS = r'''
def bn_relu(brew, m, x, name, c, relu=True):
    y = brew.spatial_bn(m, x, name + "_bn", c, epsilon=1e-5, is_test=True)
    return brew.relu(m, y, name + "_relu") if relu else y


def conv_bn(brew, m, x, name, cin, cout, k, stride=1, pad=None, group=1, relu=True):
    pad = k // 2 if pad is None else pad
    y = brew.conv(m, x, name, cin, cout, k, stride=stride, pad=pad, group=group, no_bias=True)
    return bn_relu(brew, m, y, name, cout, relu)


def basic(brew, m, x, name, cin, cout, stride):
    y = conv_bn(brew, m, x, name + "_a", cin, cout, 3, stride)
    y = conv_bn(brew, m, y, name + "_b", cout, cout, 3, relu=False)
    if stride != 1 or cin != cout:
        x = conv_bn(brew, m, x, name + "_proj", cin, cout, 1, stride, relu=False)
    return brew.relu(m, brew.sum(m, [y, x], name + "_sum"), name + "_out")


def bottleneck(brew, m, x, name, cin, cout, stride):
    mid = cout // 4
    y = conv_bn(brew, m, x, name + "_a", cin, mid, 1)
    y = conv_bn(brew, m, y, name + "_b", mid, mid, 3, stride)
    y = conv_bn(brew, m, y, name + "_c", mid, cout, 1, relu=False)
    if stride != 1 or cin != cout:
        x = conv_bn(brew, m, x, name + "_proj", cin, cout, 1, stride, relu=False)
    return brew.relu(m, brew.sum(m, [y, x], name + "_sum"), name + "_out")


def resnet(brew, m, x, block, widths, depths, expand):
    y = conv_bn(brew, m, x, "conv1", 3, 64, 7, 2, 3)
    y = brew.max_pool(m, y, "pool1", kernel=3, stride=2, pad=1)
    cin = 64
    for s, (w, d) in enumerate(zip(widths, depths)):
        for i in range(d):
            y = block(brew, m, y, f"s{s}b{i}", cin, w * expand, 2 if i == 0 and s > 0 else 1)
            cin = w * expand
    return head(brew, m, y, cin)


def head(brew, m, y, c, classes=1000):
    y = brew.average_pool(m, y, "gap", global_pooling=True)
    return brew.fc(m, y, "pred", c, classes)


def mobilenetv2(brew, m, x):
    y = conv_bn(brew, m, x, "stem", 3, 32, 3, 2)
    cin = 32
    for s, (t, c, n, stride) in enumerate([(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                                           (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]):
        for i in range(n):
            name, hid = f"ir{s}_{i}", cin * t
            z = conv_bn(brew, m, y, name + "_exp", cin, hid, 1) if t != 1 else y
            z = conv_bn(brew, m, z, name + "_dw", hid, hid, 3, stride if i == 0 else 1, group=hid)
            z = conv_bn(brew, m, z, name + "_lin", hid, c, 1, relu=False)
            y = brew.sum(m, [z, y], name + "_sum") if (i > 0 or stride == 1) and cin == c else z
            cin = c
    y = conv_bn(brew, m, y, "last", cin, 1280, 1)
    return head(brew, m, y, 1280)


def shuffle(m, x, name, groups, c, hw):
    y, _ = m.net.Reshape([x], [name + "_r", name + "_rs"], shape=[0, groups, c // groups, hw, hw])
    y = m.net.Transpose([y], [name + "_t"], axes=[0, 2, 1, 3, 4])
    y, _ = m.net.Reshape([y], [name + "_u", name + "_us"], shape=[0, c, hw, hw])
    return y


def shufflenet(brew, m, x, size, groups=3):
    y = conv_bn(brew, m, x, "stem", 3, 24, 3, 2)
    y = brew.max_pool(m, y, "pool1", kernel=3, stride=2, pad=1)
    cin, hw = 24, size // 4
    for s, (c, n) in enumerate([(240, 4), (480, 8), (960, 4)]):
        for i in range(n):
            name, first = f"u{s}_{i}", i == 0
            out = c - cin if first else c
            mid = out // 4
            z = conv_bn(brew, m, y, name + "_g1", cin, mid, 1, group=1 if s == 0 and first else groups)
            z = shuffle(m, z, name + "_sh", groups, mid, hw)
            z = conv_bn(brew, m, z, name + "_dw", mid, mid, 3, 2 if first else 1, group=mid, relu=False)
            if first:
                hw = (hw - 1) // 2 + 1
            z = conv_bn(brew, m, z, name + "_g2", mid, out, 1, group=groups, relu=False)
            if first:
                p = brew.average_pool(m, y, name + "_ap", kernel=3, stride=2, pad=1)
                y = brew.relu(m, brew.concat(m, [z, p], name + "_cat"), name + "_out")
            else:
                y = brew.relu(m, brew.sum(m, [z, y], name + "_sum"), name + "_out")
            cin = c
    return head(brew, m, y, cin)


def fire(brew, m, x, name, cin, sq, ex):
    s = brew.relu(m, brew.conv(m, x, name + "_sq", cin, sq, 1), name + "_sqr")
    a = brew.relu(m, brew.conv(m, s, name + "_e1", sq, ex, 1), name + "_e1r")
    b = brew.relu(m, brew.conv(m, s, name + "_e3", sq, ex, 3, pad=1), name + "_e3r")
    return brew.concat(m, [a, b], name + "_cat")


def squeezenet(brew, m, x):
    y = brew.relu(m, brew.conv(m, x, "conv1", 3, 64, 3, stride=2), "relu1")
    y = brew.max_pool(m, y, "pool1", kernel=3, stride=2)
    cin = 64
    for i, fire_args in enumerate([(16, 64), (16, 64), "pool", (32, 128), (32, 128), "pool",
                                   (48, 192), (48, 192), (64, 256), (64, 256)]):
        if fire_args == "pool":
            y = brew.max_pool(m, y, f"pool{i}", kernel=3, stride=2)
            continue
        y = fire(brew, m, y, f"fire{i}", cin, *fire_args)
        cin = 2 * fire_args[1]
    y = brew.relu(m, brew.conv(m, y, "conv10", cin, 1000, 1), "relu10")
    return brew.average_pool(m, y, "gap", global_pooling=True)


def plain(brew, m, x, layers, size, fc):
    cin = 3
    for i, (c, k, stride, pool) in enumerate(layers):
        x = brew.relu(m, brew.conv(m, x, f"conv{i}", cin, c, k, stride=stride, pad=k // 2), f"relu{i}")
        size = (size + 2 * (k // 2) - k) // stride + 1
        if pool:
            x = brew.max_pool(m, x, f"pool{i}", kernel=pool, stride=2)
            size = (size - pool) // 2 + 1
        cin = c
    x = brew.relu(m, brew.fc(m, x, "fc1", cin * size * size, fc), "fc1r")
    x = brew.relu(m, brew.fc(m, x, "fc2", fc, fc), "fc2r")
    return brew.fc(m, x, "pred", fc, 1000)


def build(name, brew, m, size):
    x = "data"
    if name == "resnet18":
        return resnet(brew, m, x, basic, [64, 128, 256, 512], [2, 2, 2, 2], 1)
    if name == "resnet50":
        return resnet(brew, m, x, bottleneck, [64, 128, 256, 512], [3, 4, 6, 3], 4)
    if name == "mobilenetv2":
        return mobilenetv2(brew, m, x)
    if name == "shufflenet":
        return shufflenet(brew, m, x, size)
    if name == "squeezenet":
        return squeezenet(brew, m, x)
    if name == "vgg11":
        return plain(brew, m, x, [(64, 3, 1, 2), (128, 3, 1, 2), (256, 3, 1, 0), (256, 3, 1, 2), (512, 3, 1, 0),
                                  (512, 3, 1, 2), (512, 3, 1, 0), (512, 3, 1, 2)], size, 1024)
    if name == "alexnet":
        return plain(brew, m, x, [(64, 11, 4, 3), (192, 5, 1, 3), (384, 3, 1, 0), (256, 3, 1, 0), (256, 3, 1, 3)],
                     size, 1024)
    raise SystemExit("unknown model " + name)
'''

# One engine's run: build each model, fill its parameters, time RunNet, save the output.
RUNNER = r'''
import json, statistics, sys, time
import numpy as np
from {package} import brew, model_helper, workspace
{models}

def fill(m, rng):
    """Every parameter the init net makes, from rng: conv and FC weights scaled by their
    fan-in, BN's scale near 1, its mean and bias small, its variance in [0.5, 1.5]."""
    for op in m.param_init_net.Proto().op:
        shape = [a.ints for a in op.arg if a.name == "shape"][0]
        name = op.output[0]
        if name.endswith(("_w",)):
            v = rng.standard_normal(shape) * np.sqrt(2.0 / max(1, int(np.prod(shape[1:]))))
        elif name.endswith(("_riv", "_s")):
            v = rng.uniform(0.5, 1.5, shape)
        else:
            v = rng.standard_normal(shape) * 0.1
        workspace.FeedBlob(name, v.astype(np.float32))

spec = json.loads(sys.argv[1])
for name in spec["models"]:
    for batch in spec["batches"]:
        workspace.ResetWorkspace()
        m = model_helper.ModelHelper(name=name + "_" + str(batch), init_params=True)
        out = build(name, brew, m, spec["size"])
        rng = np.random.default_rng(0)
        fill(m, rng)
        data = rng.standard_normal((batch, 3, spec["size"], spec["size"])).astype(np.float32)
        np.save(spec["out"] + "/" + name + "_" + str(batch) + "_data.npy", data)
        workspace.FeedBlob("data", data)
        workspace.CreateNet(m.net)
        net = m.net.Proto().name
        try:
            workspace.RunNet(net)
        except Exception as e:
            print("FAILED", name, batch, type(e).__name__, str(e).splitlines()[0][:200], flush=True)
            continue
        workspace.RunNet(net)
        ts = []
        for _ in range(spec["reps"]):
            t = time.perf_counter(); workspace.RunNet(net); ts.append(time.perf_counter() - t)
        np.save(spec["out"] + "/" + name + "_" + str(batch) + ".npy", workspace.FetchBlob(str(out)))
        if batch == spec["batches"][0]:
            proto = m.net.Proto()
            ops = [dict(type=o.type, inputs=list(o.input), outputs=list(o.output),
                        args={{a.name: (list(a.ints) or list(a.floats) or (a.s.decode() if a.s else None)
                                        if not a.HasField("i") and not a.HasField("f") else
                                        (a.i if a.HasField("i") else a.f)) for a in o.arg}}) for o in proto.op]
            params = {{p: np.asarray(workspace.FetchBlob(p)) for p in workspace.Blobs()
                      if p not in ("data",) and not any(p in o.output for o in proto.op)}}
            np.savez(spec["out"] + "/" + name + "_params.npz", **params)
            with open(spec["out"] + "/" + name + "_ops.json", "w") as f:
                json.dump(dict(ops=ops, output=str(out)), f)
        print("TIME", name, batch, statistics.median(ts), flush=True)
'''

# PyTorch eager over the predict net Caffe2 ran (its ops as torch.nn.functional calls).
TORCH = r'''
import json, statistics, sys, time
import numpy as np
import torch
import torch.nn.functional as F
torch.set_num_threads(1)
spec = json.loads(sys.argv[1])


def run(ops, blobs):
    for o in ops:
        t, a, i = o["type"], o["args"], [blobs.get(n) for n in o["inputs"]]
        if t == "Conv":
            k = i[1].shape[2]
            y = F.conv2d(i[0], i[1], i[2] if len(i) > 2 else None, stride=a.get("stride", 1), padding=a.get("pad", 0),
                         groups=a.get("group", 1))
        elif t == "SpatialBN":
            y = F.batch_norm(i[0], i[3], i[4], i[1], i[2], False, 0.0, a.get("epsilon", 1e-5))
        elif t == "Relu":
            y = F.relu(i[0])
        elif t == "Sum":
            y = i[0] + i[1]
        elif t == "Concat":
            y = torch.cat(i, 1)
        elif t == "MaxPool":
            y = F.max_pool2d(i[0], a["kernel"], a.get("stride", 1), a.get("pad", 0))
        elif t == "AveragePool":
            y = (F.adaptive_avg_pool2d(i[0], 1) if a.get("global_pooling") else
                 F.avg_pool2d(i[0], a["kernel"], a.get("stride", 1), a.get("pad", 0), count_include_pad=False))
        elif t == "FC":
            y = F.linear(i[0].flatten(1), i[1], i[2])
        elif t == "Reshape":
            shape = [s if s != 0 else i[0].shape[d] for d, s in enumerate(a["shape"])]
            y = i[0].reshape(shape)
        elif t == "Transpose":
            y = i[0].permute(*a["axes"])
        else:
            raise SystemExit("no torch op for " + t)
        blobs[o["outputs"][0]] = y
    return blobs


for name in spec["models"]:
    net = json.load(open(spec["net"] + "/" + name + "_ops.json"))
    params = {{k: torch.from_numpy(v) for k, v in np.load(spec["net"] + "/" + name + "_params.npz").items()}}
    for batch in spec["batches"]:
        x = np.load(spec["net"] + "/" + name + "_" + str(batch) + "_data.npy")
        with torch.no_grad():
            f = lambda: run(net["ops"], dict(params, data=torch.from_numpy(x)))[net["output"]]
            f(); f()
            ts = []
            for _ in range(spec["reps"]):
                t = time.perf_counter(); y = f(); ts.append(time.perf_counter() - t)
        np.save(spec["out"] + "/" + name + "_" + str(batch) + ".npy", y.numpy().reshape(batch, -1))
        print("TIME", name, batch, statistics.median(ts), flush=True)
'''


def engines():
    """(name, python, environment, program) of every engine this machine has."""
    dslc = RUNNER.format(package="dslc", models=MODELS)
    out = [("dslc interp", sys.executable, {"DSLC_BACKEND": "interp"}, dslc),
           ("dslc numba", sys.executable, {"DSLC_BACKEND": "numba"}, dslc)]
    try:
        import jax  # noqa: F401
        out.append(("dslc xla", sys.executable, {"DSLC_BACKEND": "xla"}, dslc))
    except ImportError:
        pass
    c2 = Path(os.environ.get("CAFFE2_VENV", "/tmp/caffe2-venv")) / "bin" / "python"
    if c2.exists():
        out.insert(0, ("Caffe2", str(c2), {}, RUNNER.format(package="caffe2.python", models=MODELS)))
        out.append(("PyTorch eager", str(c2), {}, TORCH.format()))
    return out


def run_engine(name, python, env, program, spec, folder):
    spec = dict(spec, out=folder)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(program)
    try:
        proc = subprocess.run([python, f.name, json.dumps(spec)], capture_output=True, text=True, timeout=3600,
                              env=dict(os.environ, **env))
    finally:
        os.unlink(f.name)
    times = {}
    for line in proc.stdout.splitlines():
        if line.startswith("TIME "):
            _, model, batch, sec = line.split()
            times[(model, int(batch))] = float(sec)
        elif line.startswith("FAILED "):
            print(f"  {name}: {line}")
    if proc.returncode:
        print(f"  {name} stopped: {proc.stderr.strip().splitlines()[-1:] if proc.stderr.strip() else proc.returncode}")
    return times


def main(argv=None) -> int:
    import numpy as np
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18,resnet50,mobilenetv2,shufflenet,squeezenet,vgg11,alexnet")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    one_core()
    spec = dict(models=args.models.split(","), batches=[int(b) for b in args.batches.split(",")], size=args.size,
                reps=args.reps)
    print(f"numpy's OpenBLAS kernel: {blas_kernel()}; OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; one core, one thread; images {args.size}x{args.size}")
    results, outputs = {}, {}
    with tempfile.TemporaryDirectory() as top:
        for name, python, env, program in engines():
            folder = os.path.join(top, name.replace(" ", "_"))
            os.mkdir(folder)
            if name == "PyTorch eager":  # (reads Caffe2's predict nets, parameters and images; writes its own outputs)
                times = run_engine(name, python, env, program, dict(spec, net=os.path.join(top, "Caffe2")), folder)
            else:
                times = run_engine(name, python, env, program, spec, folder)
            results[name] = times
            outputs[name] = {k: np.load(f"{folder}/{k[0]}_{k[1]}.npy") for k in times
                             if os.path.exists(f"{folder}/{k[0]}_{k[1]}.npy")}
    _report(spec, results, outputs)
    return 0


def _report(spec, results, outputs):
    base = results.get("Caffe2", {})
    names = list(results)
    print(f"{'model':14s} {'batch':>5s} " + " ".join(f"{n:>16s}" for n in names) + "   (ms; ratio to Caffe2)")
    for model in spec["models"]:
        for b in spec["batches"]:
            cells = []
            for n in names:
                t = results[n].get((model, b))
                ref = base.get((model, b))
                cells.append("-" if t is None else f"{t * 1e3:8.1f}" + (f" {t / ref:5.2f}x" if ref else ""))
            print(f"{model:14s} {b:5d} " + " ".join(f"{c:>16s}" for c in cells))
    ref = outputs.get("Caffe2", {})
    for n in names:
        worst = [float(abs(o.reshape(o.shape[0], -1) - ref[k].reshape(o.shape[0], -1)).max() / abs(ref[k]).max())
                 for k, o in outputs[n].items() if k in ref and n != "Caffe2"]
        if worst:
            print(f"{n}: largest difference from Caffe2's output, over its largest: {max(worst):.2e}")


if __name__ == "__main__":
    sys.exit(main())
