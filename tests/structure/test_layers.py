"""The layers hold (docs/architecture.md): the import-contract check over dslc/, ir/, runtime/,
backends/ (layers.py), against the KNOWN list of violations still to fix: empty since issue 39.

Never add an entry to make a new violation pass: fix the import. (Where a stricter rule finds what
the tree already does, its entries name who removes them; the test fails on an entry that no longer
occurs, so the list only shrinks; where an entry's module is moved, its owner updates the entry.)
"""
from __future__ import annotations

import os
import textwrap

import pytest

import layers
import paths
from layers import Known

ROOT = str(paths.ROOT)
# it reads or imports the tree and runs no pass: DSLC_PIPELINE changes nothing it does
pytestmark = pytest.mark.own_pipeline

# owner: the helper of issue 39 who removes it (runtime: runtime/ out of backends, proto, the DB
# registry, the progress callback, backends/common; frontend: the dslc/ split into trace/, autodiff/,
# lower/, driver/ and a thin Caffe2 surface)
OWNERS = {"runtime", "frontend"}
KNOWN = [
]


# Every function-local import of dslc's own modules, and why it is not at the top (docs/
# architecture.md, "Allowed function-local imports"). A new one fails the test below until it is
# listed here with its reason; a listed one that is gone fails it too.
LAZY = "startup: loads a heavy part (sessions, lowering, Ray, lark, numba, the DB formats) only when used"
RECURSION = "a cycle of at most 4 modules: each needs the other while it runs, not while it loads"
ORDER = "inside one package: a module its package's __init__ loads after this one (registries)"
ALLOWED_LOCAL = {
    ("dslc.backends.interp.kernels_db", "dslc.ir.ops.dbinput"): ORDER,
    ("dslc.backends.interp.kernels_db", "dslc.runtime.blobdb.dbreader"): LAZY,
    ("dslc.backends.numba.cache", "dslc.backends.numba.compiled"): LAZY + " (compiled imports numba.core)",
    ("dslc.backends.numba.emitter", "dslc.backends.interp.kernels"): ORDER,
    # numba's first run imports only islands and lazy: the rest loads when a region turns hot
    ("dslc.backends.numba", "dslc.backends.numba.hot"): LAZY,
    ("dslc.backends.numba", "dslc.backends.numba.kernels"): LAZY + " (kernels imports numba)",
    ("dslc.backends.numba", "dslc.backends.common.names"): LAZY,
    ("dslc.backends.numba", "dslc.backends.common.source"): LAZY,
    ("dslc.backends.numba", "dslc.backends.common.race"): LAZY + " (a race's verdict: once a region has raced)",
    ("dslc.backends.numba", "dslc.backends.numba.lazy"): LAZY,
    ("dslc.backends.numba", "dslc.backends.numba.emitter"): LAZY,
    ("dslc.backends.numba.islands", "dslc.backends.numba.kernels_embedding"): LAZY + " (the kernel tables)",
    ("dslc.backends.numba.islands", "dslc.backends.numba.kernels_nn"): LAZY + " (the kernel tables)",
    ("dslc.backends.numba.islands", "dslc.backends.numba.kernels"): LAZY + " (the kernel tables)",
    ("dslc.backends.numba.lazy", "dslc.backends.numba.hot"): LAZY,
    ("dslc.backends.numba.lazy", "dslc.backends.numba"): RECURSION + " (the package's __init__ loads lazy)",
    ("dslc.backends.numba.lazy", "dslc.backends.numba.emitter"): LAZY,
    ("dslc.backends.numba.hot", "dslc.backends.numba.compiled"): LAZY + " (compiled imports numba.core)",
    ("dslc.backends.numba.emitter", "dslc.backends.numba.conv"): RECURSION,
    ("dslc.backends.numba.emitter", "dslc.backends.numba.source"): LAZY,
    ("dslc.backends.numba.emitter", "dslc.backends.numba.sparse"): RECURSION,
    ("dslc.backends.numba.failures", "dslc.backends.interp.kernels"): ORDER,
    ("dslc.backends.numba.sparse", "dslc.backends.numba.kernels"): RECURSION,
    ("dslc.backends.numba.sparse", "dslc.backends.numba.source"): LAZY,
    ("dslc.backends.ray", "dslc.backends.ray.worker"): LAZY + " (the worker brings in the interpreter)",
    ("dslc.backends.ray.worker", "dslc.ir"): LAZY + " (the IR parser, lark)",
    ("dslc.backends.text", "dslc.backends.text.analysis"): LAZY,
    ("dslc.backends.xla", "dslc.backends.xla.emitter"): LAZY + " (the emitter imports JAX: an optional extra)",
    ("dslc.backends.text", "dslc.backends.text.dot"): LAZY,
    ("dslc.backends.text", "dslc.backends.text.render"): LAZY,
    ("dslc.checkpoint_managers", "dslc.runtime.blobdb"): LAZY,
    ("dslc.checkpoint_managers", "dslc.runtime.partials"): LAZY,
    ("dslc.driver.cli", "dslc.compat"): LAZY + " (dslc --help and usage errors load none of these)",
    ("dslc.driver.cli", "dslc.driver.distributed"): LAZY,
    ("dslc.driver.cli", "dslc.driver.jobfile"): LAZY,
    ("dslc.driver.cli", "dslc.driver.opdocs"): LAZY,
    ("dslc.driver.cli", "dslc.driver.session"): LAZY,
    ("dslc.driver.cli", "dslc.driver.surface"): LAZY,
    ("dslc.driver.cli", "dslc.lower"): LAZY,
    ("dslc.driver.cli", "dslc.lower.records"): LAZY,
    ("dslc.driver.cli", "dslc.trace.job"): LAZY,
    ("dslc.driver.cli", "dslc.trace.net"): LAZY,
    ("dslc.driver.cli_parser", "dslc.backends"): LAZY + " (the entry-point scan, importlib.metadata)",
    ("dslc.driver.cli_parser", "dslc.ir.passes"): LAZY + " (networkx)",
    ("dslc.driver.db_api", "dslc.runtime.blobdb"): LAZY,
    ("dslc.driver.db_api", "dslc.runtime.blobdb.dbminidb"): LAZY,
    ("dslc.driver.db_api", "dslc.runtime.blobdb.lmdbfile"): LAZY,
    ("dslc.driver.distributed", "dslc.runtime.cancel"): LAZY,
    ("dslc.driver.runner", "dslc.driver.session"): RECURSION + " (the runner runs nets through a session; "
                                                   "a session defaults to the runner's workspace)",
    ("dslc.ir", "dslc.ir.parser"): LAZY + " (lark, through ir.__getattr__)",
    ("dslc.ir.ops.activations", "dslc.ir.ops.numeric"): ORDER,
    ("dslc.ir.ops.db", "dslc.ir.ops.dbinput"): ORDER,
    ("dslc.lower.control", "dslc.lower.steps"): RECURSION + " (If branches and step nets lower through ops)",
    ("dslc.lower.ops", "dslc.lower.recurrent"): RECURSION,
    ("dslc.lower.recurrent", "dslc.lower.ops"): RECURSION,
    ("dslc.workspace", "dslc.driver.shapes"): LAZY + " (InferShapesAndTypes loads lowering and the passes)",
    ("dslc.workspace", "dslc.runtime.blobdb"): LAZY,
}


def test_every_function_local_import_is_listed_with_its_reason(tree):
    found = {}
    for i in tree.imports:
        if i.local:
            found.setdefault((i.source, i.target), i.where())
    new = {pair: where for pair, where in found.items() if pair not in ALLOWED_LOCAL}
    stale = [pair for pair in ALLOWED_LOCAL if pair not in found]
    assert not new, "function-local imports not in ALLOWED_LOCAL (move them to the top, or list " \
        "them with why): " + "; ".join(f"{w}: {a} imports {b}" for (a, b), w in new.items())
    assert not stale, f"ALLOWED_LOCAL lists imports that are gone (delete them): {stale}"


@pytest.fixture(scope="module")
def tree():
    return layers.scan(ROOT)


def test_the_tree_keeps_its_layers(tree):
    found = layers.layer_violations(tree) + layers.cycles(tree) + layers.base_violations(tree)
    new, stale = layers.compare(found, KNOWN)
    assert not new and not stale, layers.report(new, stale)


def test_each_known_entry_names_its_owner_and_rule():
    for k in KNOWN:
        assert k.owner in OWNERS and k.rule in layers.RULES and k.name and k.names, k


def test_the_map_gives_todays_names_and_the_target_ones_one_layer(tree):
    assert layers.layer_of("dslc.backends.runtime.blobdb") == layers.layer_of("dslc.runtime.blobdb") == "runtime"
    assert layers.layer_of("dslc.ir.passes.dce") == "passes" and layers.layer_of("dslc.ir.ops.nn") == "ir"
    assert layers.layer_of("dslc.backends.common.names") == "backend.common"
    assert layers.layer_of("dslc.trace.net") == "trace"
    assert layers.layer_of("dslc.autodiff.gradients") == "autodiff"
    assert layers.layer_of("dslc.driver.cli") == "driver"
    assert layers.layer_of("dslc.core") == "surface" and layers.layer_of("dslc") == "root"
    # the table of flat modules names only modules the tree has (it shrinks as they move)
    for layer, names in layers.FLAT.items():
        for name in names.split():
            assert f"dslc.{name}" in tree.modules, f"FLAT[{layer!r}] names dslc.{name}, which is gone"
    assert len(tree.modules) > 200 and len(tree.imports) > 1000


# ---- the check catches what it should: a small tree of its own, with one violation of each kind

PYPROJECT = """
[tool.setuptools.package-dir]
"dslc" = "dslc"
"dslc.ir" = "ir"
"dslc.runtime" = "runtime"
"dslc.backends" = "backends"
"""

FAKE = {
    "dslc/__init__.py": "from dslc import ir\n",
    "dslc/core.py": "from dslc.trace import net\n",
    "dslc/trace/__init__.py": "",
    "dslc/trace/net.py": "from dslc.ir import types\nfrom dslc.backends import get\n",
    # five modules in a ring of function-local imports; four in a ring of top-level ones
    **{f"dslc/trace/c{i}.py": f"def f():\n    from dslc.trace import c{(i + 1) % 5}\n" for i in range(5)},
    **{f"dslc/trace/d{i}.py": f"from . import d{(i + 1) % 4}\n" for i in range(4)},
    "dslc/driver/__init__.py": "",
    "dslc/driver/run.py": "from dslc.backends import get\nimport dslc.trace.net\n",
    "ir/__init__.py": "from .types import Type\n",
    "ir/types.py": """
        class Type:
            pass


        def parse(text):
            from dslc.trace.net import Net   # the IR reaching up into the front end
            return Net
        """,
    "ir/passes/__init__.py": "from dslc.ir import types\n",
    "runtime/__init__.py": "from . import db, dbfile  # the package registers its formats: allowed\n",
    "runtime/db.py": """
        class DB:
            pass


        def open_db(kind):
            if kind == "file":
                from dslc.runtime import dbfile
                return dbfile.FileDB()


        def codecs():
            from . import codec
            return codec
        """,
    "runtime/dbfile.py": "from dslc.runtime.db import DB\n\n\nclass FileDB(DB):\n    pass\n",
    "runtime/codec.py": "import dslc.runtime.db as dbs\n\n\nclass Codec(dbs.DB):\n    pass\n",
    "backends/__init__.py": "def get(name):\n    pass\n",
    "backends/interp/__init__.py": "from dslc.ir import passes\nfrom dslc.runtime import db\n",
    "backends/numba/__init__.py": "from dslc.backends.interp import *  # declared: numba builds on interp\n",
    "backends/text/__init__.py": """
        import importlib

        from dslc.backends import interp


        def load():
            return importlib.import_module("dslc.core")
        """,
}


@pytest.fixture
def fake_tree(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    for rel, text in FAKE.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return str(tmp_path)


def test_a_violation_of_each_kind_is_caught_with_its_file_and_line(fake_tree):
    found = layers.check(fake_tree)
    by_key = {(v.rule, tuple(v.key)): v for v in found}
    messages = {k: str(v) for k, v in by_key.items()}

    # the IR importing the front end, function-local
    ir_up = messages.pop(("layer", ("dslc.ir.types", "dslc.trace.net")))
    assert "ir/types.py:6 (function-local): dslc.ir.types imports dslc.trace.net" in ir_up
    assert "(ir) may not import" in ir_up and "(trace)" in ir_up
    # a backend importing another, by ``from pkg import name`` naming a submodule; and through a string
    assert "backends/text/__init__.py:3:" in messages.pop(("layer", ("dslc.backends.text", "dslc.backends.interp")))
    assert "backends/text/__init__.py:7 (function-local)" in messages.pop(
        ("layer", ("dslc.backends.text", "dslc.core")))
    # the front end reaching a backend (the registry's name resolved to the package, not a module)
    assert "dslc/trace/net.py:2:" in messages.pop(("layer", ("dslc.trace.net", "dslc.backends")))
    # a 5-cycle, through function-local imports
    ring = tuple(f"dslc.trace.c{i}" for i in range(5))
    cycle = messages.pop(("cycle", ring))
    assert "cycle of 5 modules" in cycle
    assert "dslc/trace/c4.py:2 (function-local): dslc.trace.c4 imports dslc.trace.c0" in cycle
    # a 4-cycle is allowed as a cycle, but not made of top-level imports
    dag = messages.pop(("dag", tuple(f"dslc.trace.d{i}" for i in range(4))))
    assert "through top-level imports alone" in dag and "dslc/trace/d3.py:1: dslc.trace.d3 imports dslc.trace.d0" in dag
    # bases importing their subclasses: through a from-import and through a module attribute
    base = messages.pop(("base", ("dslc.runtime.db", "dslc.runtime.dbfile")))
    assert "FileDB" in base and "runtime/db.py:7 (function-local): dslc.runtime.db imports dslc.runtime.dbfile" in base
    assert "Codec" in messages.pop(("base", ("dslc.runtime.db", "dslc.runtime.codec")))
    # nothing else: numba on interp, the driver on the registry, the package __init__ importing the
    # formats, ir.passes on the IR are all allowed
    assert messages == {}, messages


def test_known_entries_cover_their_violations_and_go_stale_when_fixed(fake_tree):
    found = layers.check(fake_tree)
    ring = " ".join(f"dslc.trace.c{i}" for i in range(5))
    known = [
        Known("frontend", "layer", "dslc.ir.types", "dslc.trace.net"),
        Known("runtime", "layer", "dslc.backends.text", "dslc.backends.interp dslc.core"),
        Known("frontend", "layer", "dslc.trace.net", "dslc.backends"),
        Known("frontend", "cycle", "the ring", ring),
        Known("frontend", "dag", "the d ring", "dslc.trace.d0 dslc.trace.d1 dslc.trace.d2 dslc.trace.d3"),
        Known("runtime", "base", "dslc.runtime.db", "dslc.runtime.dbfile dslc.runtime.codec"),
    ]
    assert layers.compare(found, known) == ([], [])
    # a violation no entry names is new; an entry whose violation is gone is stale
    new, stale = layers.compare(found, known[1:] + [Known("runtime", "layer", "dslc.runtime.db", "dslc.ir")])
    assert [(v.rule, v.key) for v in new] == [("layer", ("dslc.ir.types", "dslc.trace.net"))]
    assert stale == ["runtime: layer dslc.runtime.db -> dslc.ir no longer occurs: delete it from that entry"]
    # a cycle entry covers the cycle shrinking, not a module joining it; members it lost are stale
    wider = Known("frontend", "cycle", "the ring", ring + " dslc.trace.gone")
    new, stale = layers.compare(found, known[:3] + [wider] + known[4:])
    assert new == [] and stale == ["frontend: the cycle 'the ring' no longer holds dslc.trace.gone: "
                                   "delete them from its members"]
    narrower = Known("frontend", "cycle", "the ring", ring.replace(" dslc.trace.c4", ""))
    new, stale = layers.compare(found, known[:3] + [narrower] + known[4:])
    assert stale == [] and len(new) == 1 and new[0].message.startswith("dslc.trace.c4 joined the cycle")
    assert "dslc.trace.c4 joined" in layers.report(new, stale)


def test_a_cycle_made_function_local_is_no_top_level_cycle(fake_tree):
    ring = tuple(f"dslc.trace.d{i}" for i in range(4))
    assert [v.rule for v in layers.check(fake_tree) if v.key == ring] == ["dag"]
    for i in range(3):
        with open(os.path.join(fake_tree, "dslc", "trace", f"d{i}.py"), "w") as f:
            f.write(f"def f():\n    from . import d{i + 1}\n")
    assert [v.rule for v in layers.check(fake_tree) if v.key == ring] == []
