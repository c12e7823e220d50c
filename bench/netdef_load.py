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
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

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


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="20000,200000")
    p.add_argument("--cases", default="load,create,run")
    args = p.parse_args(argv)
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
