"""Hostile inputs (issue 23): each is refused with exit 2 and no effect, within 60 s and
1 GiB, or, where it is a legitimate program, runs only with the user's consent.

The attacker's files are written here by hand: IR text whose Python ops name os.system,
exec or rmtree; names and locations made to break out of generated source or to drive
the terminal; folds, nesting and shapes that would exhaust memory or the stack; dslcdb
checkpoints with valid checksums but lying records. Each runs `dslc` in a fresh process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dslc.backends.runtime import blobcodec, blobdb
from dslc.backends.runtime.blobcodec import Encoded

GIB = 1 << 30


MEASURED = """
import atexit, sys
def report(path=sys.argv[1]):
    # VmHWM: this process's peak resident memory since its exec (not its parent's)
    peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM"))
    open(path, "w").write(peak.split()[1])
atexit.register(report)
from dslc.cli import main
sys.exit(main(sys.argv[2:]))
"""


def dslc(tmp_path, *args, env=None):
    """Run the CLI in a fresh process in ``tmp_path``; (exit code, stdout, stderr, peak RSS bytes)."""
    full = dict(os.environ, DSLC_CACHE_DIR=str(tmp_path / "cache"), **(env or {}))
    peak_file = tmp_path / "peak.txt"
    done = subprocess.run([sys.executable, "-c", MEASURED, str(peak_file), *args], cwd=tmp_path, env=full,
                          capture_output=True, text=True, timeout=60)  # (60 s at most, as the issue asks)
    peak = int(peak_file.read_text()) * 1024
    assert peak < GIB, f"dslc used {peak / GIB:.2f} GiB"
    return done.returncode, done.stdout, done.stderr, peak


def module(body: str, loc: str = "") -> str:
    """A module of one global task whose body is ``body`` (IR lines)."""
    return ('module {\n  group body {\n    task @"t" {workspace = "global"} body {\n'
            + textwrap.indent(textwrap.dedent(body).strip("\n"), "      ") + "\n    }\n  }\n}\n")


# ----------------------------------------------------------------------------- code from IR text

PYTHON_OP = '%y = Python() {{func = pyref<{ref}>, name = "f"}} : any\nstore @"y"(%y)'


@pytest.mark.parametrize("ref, what", [
    ('"system", "os", "[[\\"touch MARK\\"], {}]"', "os"),
    ('"exec", "builtins", "[[\\"open(\'MARK\', \'w\')\\"], {}]"', "builtins"),
    ('"rmtree", "shutil", "[[\\"victim\\"], {}]"', "shutil"),
])
@pytest.mark.parametrize("command", ["run", "compile"])
def test_ir_text_naming_python_functions_runs_nothing_without_consent(tmp_path, ref, what, command):
    (tmp_path / "victim").mkdir()
    (tmp_path / "evil.dslir").write_text(module(PYTHON_OP.format(ref=ref)))
    code, out, err, _ = dslc(tmp_path, command, "evil.dslir")
    assert code == 2, err
    assert f"from the module '{what}'" in err and "--trust" in err
    assert not (tmp_path / "MARK").exists() and (tmp_path / "victim").is_dir()


def test_a_job_file_named_by_a_relative_path_is_refused_even_with_consent(tmp_path):
    (tmp_path / "mod.py").write_text("open('MARK', 'w').write('ran')\ndef f(i, o):\n    pass\n")
    (tmp_path / "evil.dslir").write_text(module(PYTHON_OP.format(ref='"f", "mod.py"')))
    code, _, err, _ = dslc(tmp_path, "run", "evil.dslir", "--trust")
    assert code == 2 and "relative" in err, err
    assert not (tmp_path / "MARK").exists()


def test_an_allowed_module_does_not_allow_another(tmp_path):
    (tmp_path / "evil.dslir").write_text(module(PYTHON_OP.format(ref='"system", "os", "[[\\"touch MARK\\"], {}]"')))
    code, _, err, _ = dslc(tmp_path, "run", "evil.dslir", "--trust-module", "json")
    assert code == 2 and "'os'" in err
    assert not (tmp_path / "MARK").exists()


TRUSTED = textwrap.dedent("""\
    import os
    import shutil
    from os import system
    from subprocess import run
    from functools import partial


    def own(inputs, outputs):
        outputs[0].feed(7)


    class Box:
        @property
        def poke(self):
            open("MARK", "w").write("property code ran")
            return own


    box = Box()
    touch = partial(os.system, "touch MARK")


    def __getattr__(name):
        open("MARK", "w").write("module __getattr__ ran")
        return own
""")


@pytest.mark.parametrize("name, what", [
    ("system", "a built-in function of 'posix'"),  # imported by name
    ("os.system", "a built-in function of 'posix'"),  # reached through an imported module
    ("shutil.rmtree", "a function of 'shutil'"),
    ("run", "a function of 'subprocess'"),  # a Python function another module defined
    ("touch", "a partial object"),
    ("box.poke", "a property object"),  # named without running the property
    ("missing", ""),  # not defined: the module's __getattr__ does not run either
])
@pytest.mark.parametrize("by_path", [False, True])
def test_a_trusted_module_admits_only_the_functions_it_defines(tmp_path, name, what, by_path):
    """--trust-module M (a module, or a job file by its absolute path) admits M's own
    functions, never what M imported or what is reachable through it (issue 38)."""
    (tmp_path / "victim").mkdir()
    (tmp_path / "mymod.py").write_text(TRUSTED)
    source = str(tmp_path / "mymod.py") if by_path else "mymod"
    args = '[[\\"touch MARK\\"], {}]' if "system" in name else '[[\\"victim\\"], {}]' if "rmtree" in name else ""
    ref = f'"{name}", "{source}"' + (f', "{args}"' if args else "")
    (tmp_path / "evil.dslir").write_text(module(PYTHON_OP.format(ref=ref)))
    code, out, err, _ = dslc(tmp_path, "run", "evil.dslir", "--trust-module", source)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert (what in err and "trusting a module admits only its own functions" in err) if what else \
        "is not in" in err, err
    assert not (tmp_path / "MARK").exists() and (tmp_path / "victim").is_dir()


@pytest.mark.parametrize("backend", ["interp", "numba"])
@pytest.mark.parametrize("by_path", [False, True])
def test_a_trusted_modules_own_function_runs(tmp_path, backend, by_path):
    (tmp_path / "mymod.py").write_text(TRUSTED)
    source = str(tmp_path / "mymod.py") if by_path else "mymod"
    (tmp_path / "job.dslir").write_text(module(PYTHON_OP.format(ref=f'"own", "{source}"'))
                                        .replace("module {", 'module {outputs = [["y", @"y"]]} {', 1))
    code, out, err, _ = dslc(tmp_path, "run", "job.dslir", "--backend", backend, "--trust-module", source)
    assert code == 0 and out.strip().endswith("y = 7"), out + err
    assert not (tmp_path / "MARK").exists()


# ----------------------------------------------------------------------------- generated source

PAYLOAD = 'x.py\\nopen(\\"MARK\\", \\"w\\").write(\\"injected\\")\\n#'  # (no slash: survives basename)
ESCAPES = "to\\u001b]0;TITLE\\u0007tal\\u001b[31m\\nforged line\\u202e"
LOOP = """
%total = Const {value = dense<i64: 0>} : i64  loc("LOC":1)
%n = Const {value = dense<i64: 5000>} : i64  loc("LOC":2)
%r = for(%n, %total) : i64 {
^(%i: i64, %t: i64):
  %three = Const {value = dense<i64: 3>} : i64  loc("LOC":3)
  %s = Add(%t, %three) : i64  loc("LOC":3)
  yield(%s)  loc("LOC":3)
}  loc("LOC":2)
store @"NAME"(%r)  loc("LOC":4)
"""


def hostile_ir(tmp_path) -> str:
    text = module(LOOP.replace("LOC", PAYLOAD).replace("NAME", ESCAPES))
    text = text.replace("module {", 'module {outputs = [["' + ESCAPES + '", @"' + ESCAPES + '"]]} {', 1)
    (tmp_path / "evil.dslir").write_text(text)
    return "evil.dslir"


def no_raw_controls(text: str) -> bool:
    return not any(c in text for c in "\x1b\x07\u202e") and "\nforged line" not in text


@pytest.mark.parametrize("backend", ["interp", "numba", "text"])
def test_names_and_locations_never_reach_generated_code_or_the_terminal_raw(tmp_path, backend):
    ir = hostile_ir(tmp_path)
    env = {"DSLC_NUMBA_MIN_WORK": "0"}
    code, out, err, _ = dslc(tmp_path, "compile", ir, "--backend", backend, "-o", "out", env=env)
    assert code == 0, err
    assert no_raw_controls(out) and no_raw_controls(err)
    for root, _, files in os.walk(tmp_path / "out"):
        for f in files:
            if f.endswith(".py"):  # every generated kernel is valid Python with no injected line
                src = open(os.path.join(root, f)).read()
                compile(src, f, "exec")
                assert not any(line.lstrip().startswith("open(") for line in src.splitlines())
    code, out, err, _ = dslc(tmp_path, "run", ir, "--backend", backend if backend != "text" else "interp", env=env)
    assert code == 0, err
    assert not (tmp_path / "MARK").exists()
    assert no_raw_controls(out) and "\\x1b]0;TITLE\\x07" in out and out.rstrip().endswith("= 15000")
    code, plan, _, _ = dslc(tmp_path, "plan", ir)
    assert code == 0 and no_raw_controls(plan) and "forged line" in plan
    code, dot, _, _ = dslc(tmp_path, "graph", ir)
    assert code == 0 and no_raw_controls(dot)


def test_the_json_output_keeps_names_as_they_are(tmp_path):
    code, out, err, _ = dslc(tmp_path, "run", hostile_ir(tmp_path), "--json")
    assert code == 0, err
    name = json.loads('"' + ESCAPES + '"')
    assert json.loads(out)["outputs"] == {name: 15000}


# ----------------------------------------------------------------------------- sizes and nesting

def test_a_huge_fill_is_not_folded_into_the_text(tmp_path):
    (tmp_path / "fill.dslir").write_text(module("""
        %x = ConstantFill {shape = [4096, 4096], value = 1.0} : f32[4096,4096]
        store @"x"(%x)"""))
    code, out, err, _ = dslc(tmp_path, "opt", "fill.dslir")
    assert code == 0, err
    assert len(out) < 2000 and "ConstantFill" in out  # 16M elements stay one op


@pytest.mark.parametrize("text", [
    '%x = Const {value = dense<i64[4294967296,4294967296]: >} : i64[4294967296,4294967296]\nstore @"x"(%x)',
    '%x = ConstantFill {shape = [4294967296, 4294967296, 4294967296], value = 1.0} : f32[*]\nstore @"x"(%x)',
    '%x = ConstantFill {shape = [20000, 20000], value = 1.0} : f32[*]\nstore @"x"(%x)',
])
@pytest.mark.parametrize("passes", ["none", "default"])
def test_shapes_larger_than_memory_are_refused_before_allocating(tmp_path, text, passes):
    (tmp_path / "big.dslir").write_text(module(text))
    # (the limit is the machine's memory; 1 GiB here, so the 1.6 GB fill is over it too)
    code, _, err, peak = dslc(tmp_path, "run", "big.dslir", "--passes", passes,
                              env={"DSLC_MAX_TENSOR_BYTES": str(GIB)})
    assert code == 2 and "big.dslir:" in err and "GiB" in err, err
    assert peak < 512 << 20


def nested_ifs(depth: int) -> str:
    lines = ["%c = Const {value = dense<bool: true>} : bool"]
    for k in range(depth):
        lines.append("  " * k + "if(%c) then {")
    for k in reversed(range(depth)):
        lines += ["  " * k + "} else {", "  " * k + "}"]
    return "\n".join(lines)


def nested_fors(depth: int) -> str:
    lines = ["%n = Const {value = dense<i64: 1>} : i64"]
    for k in range(depth):
        lines += ["  " * k + "for(%n) {", "  " * k + f"^(%i{k}: i64):"]
    for k in reversed(range(depth)):
        lines.append("  " * k + "}")
    return "\n".join(lines)


@pytest.mark.parametrize("body, says", [(nested_ifs(500), "nest more than"),
                                        (nested_fors(40), "deeper than Python can run")],
                         ids=["500-ifs", "40-fors"])  # (a long id fills PYTEST_CURRENT_TEST past execve's limit)
@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_deep_nesting_is_a_located_error(tmp_path, body, says, backend):
    (tmp_path / "deep.dslir").write_text(module(body))
    code, _, err, _ = dslc(tmp_path, "run", "deep.dslir", "--backend", backend, "--passes", "none",
                           env={"DSLC_NUMBA_MIN_WORK": "0"})
    assert code == 2 and says in err and "deep.dslir:" in err, err


# ----------------------------------------------------------------------------- checkpoints

def crafted(path, entries) -> None:
    """A dslcdb file holding exactly these records: the writer computes valid checksums."""
    blobdb.get("dslcdb").write(str(path), entries)


def raw(kind, shape, data: bytes) -> Encoded:
    return Encoded(kind, "", shape, memoryview(data))


def test_string_lengths_that_wrap_around_are_refused(tmp_path):
    # two strings whose u64 lengths add up to 3 modulo 2^64, over a 3-byte text
    lengths = np.array([2**64 - 1, 4], dtype="<u8").tobytes()
    crafted(tmp_path / "c.db", [("s", raw("strings", (2,), lengths + b"abc"))])
    with pytest.raises(blobdb.CorruptDBError, match="do not add up"):
        blobdb.get("dslcdb").read(str(tmp_path / "c.db"))


def test_a_blob_stored_twice_is_refused(tmp_path):
    one, two = (blobcodec.encode("w", np.full(4, v, np.float32)) for v in (1.0, 2.0))
    crafted(tmp_path / "c.db", [("w", one), ("w", two)])
    with pytest.raises(blobdb.CorruptDBError, match="'w' is stored twice"):
        blobdb.get("dslcdb").read(str(tmp_path / "c.db"))


def test_a_cursor_far_past_any_dataset_is_refused(tmp_path):
    doc = json.dumps({"fields": ["a"], "offsets": [10**30]}).encode()
    crafted(tmp_path / "c.db", [("cursor", raw("cursor", (), doc))])
    with pytest.raises(blobdb.CorruptDBError, match="cannot be at"):
        blobdb.get("dslcdb").read(str(tmp_path / "c.db"))


def test_a_tensor_shape_the_file_cannot_hold_is_refused_without_allocating(tmp_path):
    crafted(tmp_path / "c.db", [("w", Encoded("tensor", "<f4", (1 << 40, 1 << 20), memoryview(b"\0" * 16)))])
    with pytest.raises(blobdb.CorruptDBError, match="does not decode"):
        blobdb.get("dslcdb").read(str(tmp_path / "c.db"))
