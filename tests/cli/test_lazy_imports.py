"""What a first run imports: the heavy modules wait until a backend or pass needs them.

A Caffe2 test's first example (hypothesis allows 200 ms) pays for every module the first
``RunNetOnce`` imports; these tests keep the ones it does not need out of that path.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dslc.backends.interp import kernels

pytestmark = pytest.mark.slow  # (the README's inner loop skips it: fresh processes importing every module)

HEAVY = ["numba", "llvmlite", "scipy", "networkx", "lark", "importlib.metadata", "dslc.checkpoint",
         "dslc.backends.interp.kernels_nn", "dslc.backends.interp.kernels_db",
         "dslc.backends.interp.kernels_data", "dslc.backends.interp.kernels_collect"]

PROGRAM = """
import json, sys
heavy = %r
from dslc import core, workspace
after_import = [m for m in heavy if m in sys.modules]
net = core.Net("n")
net.ConstantFill([], "x", shape=[3], value=1.0)
net.Add(["x", "x"], "y")
workspace.RunNetOnce(net)
assert workspace.FetchBlob("y").tolist() == [2.0, 2.0, 2.0]
after_run = [m for m in heavy if m in sys.modules]
net = core.Net("m")
net.ConstantFill([], "x", shape=[2, 3], value=1.0)
net.Concat(["x", "x"], ["c", "split"], axis=0)   # a records-module kernel, imported on use
workspace.RunNetOnce(net)
print(json.dumps([after_import, after_run, workspace.FetchBlob("c").shape[0],
                  "dslc.backends.interp.kernels_records" in sys.modules]))
"""


def test_a_first_run_imports_only_what_it_uses():
    out = subprocess.run([sys.executable, "-c", PROGRAM % HEAVY], capture_output=True, text=True,
                         env={**os.environ, "DSLC_BACKEND": "interp"}, timeout=120)
    assert out.returncode == 0, out.stderr
    after_import, after_run, rows, records = json.loads(out.stdout)
    assert after_import == [] and after_run == []
    assert rows == 4 and records


def test_each_kernel_module_holds_the_kernels_its_home_map_says():
    kernels.load_all()
    for name, module in kernels.DEFINED_IN.items():
        opdef_module = kernels.OPS[name].module.rpartition(".")[2]
        want = kernels._HOMES.get(opdef_module, "kernels")
        assert module.rpartition(".")[2] == want, (name, opdef_module, module)
    assert {"Save", "FC", "PackRecords", "CollectTensor", "CreateBlobsQueue"} <= set(kernels.KERNELS)


EACH_ALONE = """
import importlib, json, pkgutil, sys
import dslc
names = sorted(m.name for m in pkgutil.walk_packages(dslc.__path__, "dslc."))
failed = []
for name in names:
    for k in [k for k in sys.modules if k == "dslc" or k.startswith("dslc.")]:
        del sys.modules[k]  # (as a fresh interpreter would have it)
    try:
        importlib.import_module(name)
    except Exception as e:
        failed.append([name, repr(e)[:200]])
print(json.dumps([len(names), failed]))
"""


def test_every_module_imports_first():
    """A script may import any dslc module before the others (``import dslc.autodiff.gradients`` and
    ``import dslc.records`` first used to fail on import cycles)."""
    out = subprocess.run([sys.executable, "-c", EACH_ALONE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    count, failed = json.loads(out.stdout.strip().splitlines()[-1])
    assert count > 50 and failed == []
