"""Loading a NetDef: time and memory against its size (issue 38's item 11).

A NetDef of n ops (a chain of Adds, ``x{i+1} = x{i} + one``: 29 bytes per op, 5.8 MB at
200k) is loaded in a fresh process per case, its peak memory counted from the process's
own baseline (VmHWM reset through /proc/self/clear_refs just before):

    load     bytes -> NetDef -> core.Net (the records every entry point makes first)
    create   workspace.CreateNet(bytes): load, lower, passes, the interp backend's code
    run      workspace.RunNetOnce(bytes) (create, then one run)

It prints seconds, MB and bytes per op for each case and size, and the ratio of the
largest size to the smallest (linear: the ratio of the sizes). Targets: load at most
1 KB per op, linear, a 200k-op NetDef under 10 s and 300 MB.

Usage: python bench/netdef_load.py [--sizes 20000,200000] [--cases load,create,run]

Deploy models (issue 41): ``--weights vgg19`` loads the init_net of a VGG-19 (143.7M
float32 weights in 38 GivenTensorFills, written once to --dir in protobuf's wire form: 5
bytes a weight, as Caffe2 and protobuf serialize them) with ``workspace.RunNetOnce``, in
a fresh process per case, on dslc and on the real Caffe2 (``--caffe2 PYTHON``, default
/tmp/caffe2-venv/bin/python when present), each from the file's bytes already read:

    bytes    RunNetOnce(data)                        (dslc reads the fills off the bytes)
    message  RunNetOnce(NetDef.FromString(data)), the message parsed before the baseline
    parse    RunNetOnce(NetDef.FromString(data)), the parse counted

It prints seconds and peak memory above the baseline (as a multiple of the weights' own
bytes) for each, and dslc's ratios to Caffe2's. Targets: time at most 1.5x Caffe2's,
peak at most 1.3x the weights. ``--scale 0.25`` scales the widths (1/16 of the weights).

    python bench/netdef_load.py --weights vgg19 [--scale 1] [--dir /tmp] [--caffe2 PYTHON]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time
import numpy as np
from dslc import core, workspace
from dslc.proto import caffe2_pb2

n, case = int(sys.argv[1]), sys.argv[2]
msg = caffe2_pb2.NetDef(name="chain")
for i in range(n):
    msg.op.add(type="Add", input=[f"x{i}", "one"], output=[f"x{i + 1}"])
msg.external_input.extend(["x0", "one"])
data = msg.SerializeToString()
del msg
workspace.FeedBlob("x0", np.float32(0))
workspace.FeedBlob("one", np.float32(1))
warm = caffe2_pb2.NetDef(name="warm")  # (the modules a first net imports, before counting)
warm.op.add(type="Add", input=["x0", "one"], output=["w"])
workspace.RunNetOnce(warm)

def kib(field):
    return int(next(l for l in open("/proc/self/status") if l.startswith(field)).split()[1]) * 1024

open("/proc/self/clear_refs", "w").write("5")
base = kib("VmRSS")
t = time.perf_counter()
if case == "load":
    net = core.Net(caffe2_pb2.NetDef.FromString(data))
elif case == "create":
    workspace.CreateNet(data)
else:
    workspace.RunNetOnce(data)
seconds, peak = time.perf_counter() - t, kib("VmHWM") - base
if case == "load":  # (the net is whole: its records and its message)
    assert [op.outputs for op in net._ops[-2:]] == [(f"x{n - 1}",), (f"x{n}",)]
    assert len(net.Proto().op) == n and net.Proto().op[-1].output == [f"x{n}"]
else:
    if case == "create":
        workspace.RunNet("chain")
    assert workspace.FetchBlob(f"x{n}") == n
print(json.dumps({"bytes": len(data), "seconds": seconds, "peak": peak}))
"""


def measure(n: int, case: str) -> dict:
    """{"bytes": the NetDef's, "seconds", "peak": bytes above the baseline} of ``case``
    on a NetDef of ``n`` ops, in a fresh process (tests/cli/test_hostile_inputs.py uses it)."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(n), case], capture_output=True, text=True, timeout=3000)
    if done.returncode:
        raise RuntimeError(f"{case} of {n} ops failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


# ----------------------------------------------------------------------------- deploy models

def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def vgg19_shapes(scale: float = 1.0) -> list:
    """(blob, shape) of VGG-19's weights and biases, its widths times ``scale``."""
    import numpy as np  # (the chain cases above run without it in this process)
    width = lambda c: max(1, int(round(c * scale)))  # noqa: E731
    shapes, cin = [], 3
    for i, c in enumerate([64, 64, 128, 128] + [256] * 4 + [512] * 8):
        shapes += [(f"conv{i + 1}_w", (width(c), cin, 3, 3)), (f"conv{i + 1}_b", (width(c),))]
        cin = width(c)
    dims = [cin * 49, width(4096), width(4096), 1000]
    for j in range(3):
        shapes += [(f"fc{j + 6}_w", (dims[j + 1], dims[j])), (f"fc{j + 6}_b", (dims[j + 1],))]
    assert scale != 1 or sum(int(np.prod(s)) for _, s in shapes) == 143_667_240  # (VGG-19's count)
    return shapes


def write_init_net(path: str, shapes: list, seed: int = 0) -> int:
    """Write the init_net of ``shapes`` (random weights) to ``path`` as protobuf serializes
    it (each float its own field: a tag byte, then 4 bytes); return the weights' count."""
    import numpy as np
    rng = np.random.default_rng(seed)
    total = 0
    with open(path, "wb") as f:
        f.write(_field(1, b"init"))
        for name, shape in shapes:
            n = int(np.prod(shape))
            total += n
            values = np.empty(n, dtype=[("tag", "u1"), ("v", "<f4")])
            values["tag"] = 5 << 3 | 5  # (Argument.floats, fixed32)
            values["v"] = rng.standard_normal(n, dtype=np.float32) * 0.01
            shape_arg = _field(1, b"shape") + b"".join(_varint(6 << 3) + _varint(d) for d in shape)
            op = _field(2, name.encode()) + _field(4, b"GivenTensorFill") + _field(5, shape_arg)
            op += _field(5, _field(1, b"values") + values.tobytes())
            f.write(_field(2, op))
    return total


DEPLOY_CHILD = r"""
import json, sys, time
try:
    from dslc import workspace
    from dslc.proto import caffe2_pb2
except ImportError:
    from caffe2.python import workspace
    from caffe2.proto import caffe2_pb2

path, case = sys.argv[1], sys.argv[2]
warm = caffe2_pb2.NetDef(name="warm")  # (the modules a first net imports, before counting)
op = warm.op.add(type="GivenTensorFill", output=["warm"])
op.arg.add(name="shape", ints=[2]); op.arg.add(name="values", floats=[1.0, 2.0])
workspace.RunNetOnce(warm)
data = open(path, "rb").read()
net = caffe2_pb2.NetDef.FromString(data) if case == "message" else None

def kib(field):
    return int(next(l for l in open("/proc/self/status") if l.startswith(field)).split()[1]) * 1024

open("/proc/self/clear_refs", "w").write("5")
base = kib("VmRSS")
t = time.perf_counter()
if case == "bytes":
    workspace.RunNetOnce(data)
elif case == "message":
    workspace.RunNetOnce(net)
else:
    workspace.RunNetOnce(caffe2_pb2.NetDef.FromString(data))
seconds, peak = time.perf_counter() - t, kib("VmHWM") - base
weights = sum(workspace.FetchBlob(b).nbytes for b in workspace.Blobs() if b != "warm")
print(json.dumps({"seconds": seconds, "peak": peak, "weights": weights}))
"""


def measure_deploy(python: str, path: str, case: str) -> dict:
    """{"seconds", "peak": bytes above the baseline, "weights": their bytes} of loading the
    init_net at ``path`` as ``case`` says, in a fresh process of ``python``."""
    env = dict(os.environ, GLOG_minloglevel="2")
    done = subprocess.run([python, "-c", DEPLOY_CHILD, path, case], capture_output=True, text=True,
                          timeout=3000, env=env)
    if done.returncode:
        raise RuntimeError(f"{case} with {python} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def deploy(args) -> None:
    shapes = vgg19_shapes(args.scale)
    path = os.path.join(args.dir, f"dslc_bench_vgg19_{args.scale:g}.pb")
    if not os.path.exists(path):
        t = time.perf_counter()
        n = write_init_net(path + ".part", shapes)
        os.replace(path + ".part", path)
        print(f"wrote {path}: {n} weights in {time.perf_counter() - t:.1f} s")
    print(f"{path}: {os.path.getsize(path) / 1e6:.0f} MB (no BLAS kernel runs in a load)")
    caffe2 = args.caffe2 if args.caffe2 and os.path.exists(args.caffe2) else None
    for case in args.deploy_cases.split(","):
        ours = measure_deploy(sys.executable, path, case)
        ref = measure_deploy(caffe2, path, case) if caffe2 else None
        for who, r in (("dslc", ours), ("caffe2", ref)):
            if r is not None:
                print(f"{case:8s} {who:7s} {r['seconds']:7.2f} s  peak {r['peak'] / 2**20:8.0f} MB "
                      f"= {r['peak'] / r['weights']:5.2f}x the weights ({r['weights'] / 2**20:.0f} MB)")
        if ref is not None:
            print(f"{case:8s} dslc/caffe2: time {ours['seconds'] / ref['seconds']:.2f}x, "
                  f"peak {ours['peak'] / max(ref['peak'], 1):.2f}x")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="20000,200000")
    p.add_argument("--cases", default="load,create,run")
    p.add_argument("--weights", choices=["vgg19"], help="time a deploy model's init_net instead")
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"))
    p.add_argument("--caffe2", default="/tmp/caffe2-venv/bin/python")
    p.add_argument("--deploy-cases", default="bytes,message,parse")
    args = p.parse_args(argv)
    if args.weights:
        return deploy(args)
    sizes = [int(s) for s in args.sizes.split(",")]
    for case in args.cases.split(","):
        got = {n: measure(n, case) for n in sizes}
        for n, r in got.items():
            print(f"{case:7s} {n:>8d} ops ({r['bytes'] / 1e6:5.1f} MB): {r['seconds']:7.2f} s "
                  f"{r['peak'] / 2**20:8.1f} MB  {r['peak'] / n:7.0f} B/op  {r['seconds'] / n * 1e6:6.1f} us/op")
        if len(sizes) > 1:
            lo, hi = got[sizes[0]], got[sizes[-1]]
            print(f"{case:7s} {sizes[-1]}/{sizes[0]} ops = {sizes[-1] / sizes[0]:.0f}x: time "
                  f"{hi['seconds'] / lo['seconds']:.1f}x, memory {hi['peak'] / max(lo['peak'], 1):.1f}x")


if __name__ == "__main__":
    main()
