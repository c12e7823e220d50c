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
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dbtypes import HAVE_PLYVEL
from dslc.runtime import blobcodec, blobdb
from dslc.runtime.blobdb import lmdbfile
from dslc.runtime.blobcodec import Encoded
from dslc.ir.diagnostics import DSLError, Location
import paths

pytestmark = pytest.mark.slow  # (the README's inner loop skips it: each case runs dslc in a fresh process, about 1.5 s)

GIB = 1 << 30


MEASURED = """
import atexit, sys
def report(path=sys.argv[1]):
    # VmHWM: this process's peak resident memory since its exec (not its parent's)
    peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM"))
    open(path, "w").write(peak.split()[1])
atexit.register(report)
from dslc.driver.cli import main
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


# ----------------------------------------------------------------------------- readers: declared sizes

# A child process per test: each read starts from a fresh peak (/proc/self/clear_refs resets
# VmHWM to what the process holds now), so the figure is what the read itself took.
READ_IN_CHILD = """
import json, sys, tracemalloc
from dslc import workspace
from dslc.ir.diagnostics import DSLError
from dslc.runtime import blobdb
from dslc.runtime.blobdb import dbreader, lmdbfile
from dslc.predictor import predictor_exporter

def kib(field):
    return int(next(l for l in open("/proc/self/status") if l.startswith(field)).split()[1]) * 1024

def measured(code):
    try:
        open("/proc/self/clear_refs", "w").write("5")
        base, traced = kib("VmRSS"), False
    except OSError:  # (no clear_refs: Python's own count, numpy's arrays included)
        tracemalloc.start()
        traced = True
    try:
        exec(code, {"workspace": workspace, "blobdb": blobdb, "dbreader": dbreader,
                    "predictor_exporter": predictor_exporter})
        error = None
    except DSLError as e:
        error = e.one_line()
    peak = tracemalloc.get_traced_memory()[1] if traced else kib("VmHWM") - base
    tracemalloc.stop()
    return {"error": error, "peak": peak}

cases = json.loads(open(sys.argv[1]).read())
json.dump({name: measured(code) for name, code in cases.items()}, open(sys.argv[2], "w"))
"""
MIB = 1 << 20


def read_in_child(tmp_path, cases: dict, budget: int | None = None) -> dict:
    """{case: {"error": its one-line error or None, "peak": bytes its read took}}, read in a
    fresh process (a read that kills its process fails the test, not the test run)."""
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    env = dict(os.environ, **({"DSLC_MAX_TENSOR_BYTES": str(budget)} if budget else {}))
    done = subprocess.run([sys.executable, "-c", READ_IN_CHILD, str(tmp_path / "cases.json"),
                           str(tmp_path / "results.json")], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"the reader's process ended with {done.returncode}: {done.stderr[-2000:]}"
    return json.loads((tmp_path / "results.json").read_text())


def blob_proto(dims, data_type, **fields) -> bytes:
    """A BlobProto holding one TensorProto (chunk) of ``dims``: its bytes as Caffe2's ``Save``."""
    from dslc.proto import caffe2_pb2
    p = caffe2_pb2.BlobProto(name="x", type="Tensor")
    p.tensor.dims.extend(dims)
    p.tensor.data_type = data_type
    for k, v in fields.items():
        if k == "segment":
            p.tensor.segment.begin, p.tensor.segment.end = v
        else:
            getattr(p.tensor, k).extend(v)
    return p.SerializeToString()


def minidb(path, records) -> int:
    """A minidb file of (key, value) records (Caffe2's layout: i32 key and value lengths); its size."""
    raw = b"".join(struct.pack("<ii", len(k), len(v)) + k + v for k, v in records)
    path.write_bytes(raw)
    return len(raw)


def lmdb_db(path, records: dict, map_size=1 << 22) -> None:
    import lmdb
    with lmdb.open(str(path), map_size=map_size) as env, env.begin(write=True) as txn:
        for k, v in records.items():
            txn.put(k, v)


def tensor_protos(dims, data_type=1, **fields) -> bytes:
    from dslc.proto import caffe2_pb2
    tp = caffe2_pb2.TensorProtos()
    t = tp.protos.add(data_type=data_type)
    t.dims.extend(dims)
    for k, v in fields.items():
        getattr(t, k).extend(v)
    return tp.SerializeToString()


def checkpoint_manifest(rows) -> bytes:
    return json.dumps({"format": 2, "chunk": 1 << 20, "blobs": rows}).encode()


def lying_checkpoint_records(length: int, shape) -> dict:
    """A key-value checkpoint (lmdb, leveldb) whose manifest says blob 'w' is a float32
    tensor of ``shape`` taking ``length`` bytes; the database holds 16 bytes for it."""
    row = {"name": "w", "kind": "tensor", "dtype": "<f4", "shape": list(shape), "length": length, "xxh3": 0}
    return {b"manifest": checkpoint_manifest([row]), b"blob/w": bytes(16)}


STRING, FLOAT = 4, 1  # TensorProto data types


def declared_more_than_held(tmp_path) -> dict:
    """Files that each declare far more than they hold, with the read of each."""
    cases = {}
    p = tmp_path / "strings.minidb"  # the issue's 32-byte file: 150M strings, none there
    assert minidb(p, [(b"x#%0", blob_proto([150_000_000], STRING))]) < 40
    cases["minidb strings"] = f"blobdb.get('minidb').read({str(p)!r})"
    p = tmp_path / "floats.minidb"
    minidb(p, [(b"x#%0", blob_proto([1 << 27], FLOAT, float_data=[1.0, 2.0, 3.0]))])
    cases["minidb floats"] = f"blobdb.get('minidb').read({str(p)!r})"
    p = tmp_path / "segment.minidb"  # a chunk saying it holds elements [0, 2^40) of 2^40
    minidb(p, [(b"x#%0", blob_proto([1 << 40], FLOAT, float_data=[1.0, 2.0], segment=(0, 1 << 40)))])
    cases["minidb chunk"] = f"blobdb.get('minidb').read({str(p)!r})"
    cases["BlobProto bytes"] = f"workspace.DeserializeBlob('x', {blob_proto([150_000_000], STRING)!r})"
    p = tmp_path / "texts.dslcdb"  # 2^28 strings in an 8-byte payload
    crafted(p, [("s", raw("strings", (1 << 28,), bytes(8)))])
    cases["dslcdb strings"] = f"blobdb.get('dslcdb').read({str(p)!r})"
    p = tmp_path / "tensor.dslcdb"
    crafted(p, [("w", Encoded("tensor", "<f4", (1 << 40, 1 << 20), memoryview(b"\0" * 16)))])
    cases["dslcdb tensor"] = f"blobdb.get('dslcdb').read({str(p)!r})"
    lmdb_db(tmp_path / "ck.lmdb", lying_checkpoint_records(4 << 30, [1 << 30]))
    cases["lmdb checkpoint"] = f"blobdb.get('lmdb').read({str(tmp_path / 'ck.lmdb')!r})"
    if HAVE_PLYVEL:
        import plyvel
        db = plyvel.DB(str(tmp_path / "ck.leveldb"), create_if_missing=True)
        for k, v in lying_checkpoint_records(4 << 30, [1 << 30]).items():
            db.put(k, v)
        db.close()
        cases["leveldb checkpoint"] = f"blobdb.get('leveldb').read({str(tmp_path / 'ck.leveldb')!r})"
    for name, dims in (("records", [1 << 28]), ("records wrapping", [1 << 32, 1 << 32])):
        lmdb_db(tmp_path / name, {b"0": tensor_protos(dims, float_data=[1.0])})
        cases[name] = (f"dbreader.read_tensor_protos(dbreader.KeyValueReader({str(tmp_path / name)!r}, 'lmdb'), "
                       "2, 1)")
    for op_type, values in (("GivenTensorFill", "values=[1.0]"), ("GivenTensorStringFill", "values=['a']")):
        cases[op_type] = ("from dslc import core\n"
                          f"workspace.RunOperatorOnce(core.CreateOperator('{op_type}', [], ['y'], "
                          f"shape=[1 << 28], {values}).SerializeToString())")
    cases["ConstantFill"] = ("from dslc import core\nworkspace.RunOperatorOnce(core.CreateOperator("
                             "'ConstantFill', [], ['y'], shape=[1 << 20, 1 << 20], value=1.0))")
    p = tmp_path / "model.minidb"  # an exported model whose description is 150M strings
    assert minidb(p, [(b"!!META_NET_DEF#%0", blob_proto([150_000_000], STRING))]) < 600
    cases["exported model"] = f"predictor_exporter.prepare_prediction_net({str(p)!r}, 'minidb')"
    return cases


def test_every_reader_refuses_a_file_declaring_more_than_it_holds_before_allocating(tmp_path):
    cases = declared_more_than_held(tmp_path)
    results = read_in_child(tmp_path, cases)
    for name, got in results.items():
        assert got["error"] is not None, f"{name}: read without an error"
        assert "\n" not in got["error"] and len(got["error"]) < 2100, name
        assert "cases.json" not in got["error"]
        if "minidb" in name or "db " in name or "checkpoint" in name or "records" in name or "model" in name:
            assert str(tmp_path) in got["error"], f"{name}: the error does not name the file: {got['error']}"
        assert got["peak"] < 64 * MIB, f"{name}: the read took {got['peak'] / MIB:.0f} MiB: {got['error']}"
    assert "has dims [150000000] but 0 values" in results["minidb strings"]["error"]
    assert "record b'0' of" in results["records wrapping"]["error"]
    assert "does not decode" in results["dslcdb strings"]["error"]
    assert "missing or has the wrong length" in results["lmdb checkpoint"]["error"]


def test_no_reader_allocates_past_the_tensor_budget(tmp_path):
    """Files that do hold what they declare, 2 MiB each, under a budget of 1 MiB per value."""
    big = np.arange(1 << 19, dtype=np.float32)  # 2 MiB
    cases = {}
    for db_type in ["minidb", "dslcdb", "lmdb"] + (["leveldb"] if HAVE_PLYVEL else []):
        path = str(tmp_path / f"big.{db_type}")
        blobdb.get(db_type).write(path, [("w", blobcodec.encode("w", big))])
        cases[db_type] = f"blobdb.get({db_type!r}).read({path!r})"
    lmdb_db(tmp_path / "records", {b"%d" % i: tensor_protos([1 << 16], float_data=big[:1 << 16].tolist())
                                   for i in range(2)})  # 256 KiB records, a batch of 8 of them
    cases["records"] = f"dbreader.read_tensor_protos(dbreader.KeyValueReader({str(tmp_path / 'records')!r}, 'lmdb'), 8, 1)"
    results = read_in_child(tmp_path, cases, budget=MIB)
    for name, got in results.items():
        assert got["error"] is not None and "one value may take (DSLC_MAX_TENSOR_BYTES)" in got["error"], (name, got)
        assert got["peak"] < 64 * MIB, name
    assert str(tmp_path) in results["minidb"]["error"] and "'w'" in results["minidb"]["error"]


def test_a_huge_argument_makes_a_bounded_error_line(tmp_path):
    """A 4 MB shape argument once made a 4 MB error line."""
    (tmp_path / "job.py").write_text(textwrap.dedent("""
        from caffe2.python import core, workspace
        op = core.CreateOperator("GivenTensorFill", [], ["y"], shape=list(range(1, 500_000)), values=[1.0])
        workspace.RunOperatorOnce(op)
        """))
    code, out, err, _ = dslc(tmp_path, "exec", "job.py")
    assert code == 2 and len(err.splitlines()) == 1 and len(err) < 2100, err[:3000]
    assert "job.py:3" in err and "GivenTensorFill" in err and "(499999 items)" in err  # (the op's line)
    # every error line is capped where it is printed, whatever its message quotes
    line = DSLError("a message quoting " + "[1, 2]\n" * 500_000, Location("job.py", 7), "a hint").one_line()
    assert len(line) <= 2000 and "\n" not in line and line.startswith("job.py:7: error: a message quoting [1, 2]")
    assert line.endswith("[1, 2] ; a hint") and "characters left out" in line


# ----------------------------------------------------------------------------- lmdb files

PAGE = 4096


def lmdb_leaf_node(data: bytearray, page: int) -> int:
    """The byte offset of the first node on ``page`` (LMDB's layout: a 16-byte page header
    holding lower, then the node offsets from byte 16)."""
    return page * PAGE + struct.unpack_from("<H", data, page * PAGE + 16)[0]


def crafted_lmdbs(tmp_path) -> dict:
    """{name: database directory}: lmdb files cut short or edited byte by byte."""
    out = {}
    value = tensor_protos([3000], float_data=[0.5] * 3000)  # 12 KB: on overflow pages 3..5
    cut = tmp_path / "cut"
    lmdb_db(cut, {b"0": value})
    with open(cut / "data.mdb", "r+b") as f:
        f.truncate(3 * PAGE)  # the issue's 12 KiB: meta, meta, leaf; the value's pages gone
    out["cut short"] = cut
    for name, edit in (("inline size", "size"), ("overflow size", "overflow"), ("root page", "root")):
        d = tmp_path / name.replace(" ", "_")
        lmdb_db(d, {b"0": tensor_protos([4], float_data=[1, 2, 3, 4]) if edit == "size" else value})
        data = bytearray((d / "data.mdb").read_bytes())
        node = lmdb_leaf_node(data, 2)
        if edit in ("size", "overflow"):  # the node's data size (u16 lo, u16 hi): 1 GiB
            struct.pack_into("<HH", data, node, 0, 1 << 14)
        else:  # each meta page's main db root (page header 16 + magic, version, address, mapsize 24
            for meta in (0, PAGE):  # + the free db 48 + 40 bytes into the main db)
                struct.pack_into("<Q", data, meta + 16 + 24 + 48 + 40, 1000)
        (d / "data.mdb").write_bytes(bytes(data))
        out[name] = d
    return out


def test_crafted_lmdb_files_are_errors_never_signals(tmp_path):
    """Each once killed the process with SIGBUS (exit 135): the data reader, the checkpoint
    reader and a save over the file each read pages the file does not hold."""
    cases = {}
    for name, d in crafted_lmdbs(tmp_path).items():
        assert (d / "data.mdb").stat().st_size <= 6 * PAGE
        cases[f"{name}: records"] = f"dbreader.read_tensor_protos(dbreader.KeyValueReader({str(d)!r}, 'lmdb'), 1, 1)"
        cases[f"{name}: load"] = f"blobdb.get('lmdb').read({str(d)!r})"
        cases[f"{name}: save over"] = ("import numpy as np\nfrom dslc.runtime import blobcodec\n"
                                       f"blobdb.get('lmdb').write({str(d)!r}, [('x', blobcodec.encode('x', np.ones(3)))])")
        cases[f"{name}: create_db"] = (f"c = workspace.C.create_db('lmdb', {str(d)!r}, workspace.C.Mode.read)"
                                       ".new_cursor()")
    for name, got in read_in_child(tmp_path, cases).items():
        assert got["error"] is not None and str(tmp_path) in got["error"], (name, got)
        assert "damaged" in got["error"] or "no manifest" in got["error"], (name, got)


def test_a_crafted_lmdb_through_create_db_is_a_located_error_on_the_cli(tmp_path):
    d = crafted_lmdbs(tmp_path)["inline size"]
    (tmp_path / "job.py").write_text(textwrap.dedent(f"""
        from caffe2.python import brew, workspace
        from caffe2.python.model_helper import ModelHelper
        model = ModelHelper(name="read")
        brew.db_input(model, ["data"], batch_size=1, db={str(d)!r}, db_type="lmdb")
        workspace.RunNetOnce(model.param_init_net)
        workspace.RunNetOnce(model.net)
        """))
    code, _, err, _ = dslc(tmp_path, "exec", "job.py")
    assert code == 2, (code, err)  # (135: SIGBUS)
    assert len(err.splitlines()) == 1 and "job.py:5" in err and str(d) in err and "runs past the page" in err


def test_lmdb_files_dslc_reads_are_what_lmdb_wrote(tmp_path):
    """Our reader against the lmdb library's own cursor: records in key order, inline and
    on overflow pages, across branch pages (a tree of depth 3)."""
    import lmdb
    rng = np.random.default_rng(5)
    records = {rng.bytes(int(rng.integers(1, 40))): rng.bytes(int(rng.choice([0, 7, 900, 9000], p=[.1, .1, .7, .1])))
               for _ in range(4000)}
    lmdb_db(tmp_path / "db", records, map_size=1 << 30)
    with lmdb.open(str(tmp_path / "db"), readonly=True) as env, env.begin() as txn:
        theirs = [(bytes(k), bytes(v)) for k, v in txn.cursor()]
    assert theirs == sorted(records.items())
    with lmdbfile.LmdbFile(str(tmp_path / "db")) as db:
        assert db.main[2] == 3  # (LMDB's md_depth)
        assert [(k, db.read(v)) for k, v in db.records()] == theirs
        for k in list(records)[:500]:
            assert db.read(db.get(k)) == records[k]
        assert db.get(b"\xff" * 50) is None


# ----------------------------------------------------------------------------- messages

def test_a_predictor_given_bytes_that_are_no_netdef_is_a_located_error(tmp_path):
    (tmp_path / "serve.py").write_text(textwrap.dedent("""
        from caffe2.python import workspace
        workspace.Predictor(b"\\xff\\xff\\xff not a NetDef", b"")
        """))
    code, _, err, _ = dslc(tmp_path, "exec", "serve.py")
    assert code == 2 and len(err.splitlines()) == 1 and "serve.py:3" in err and "init net" in err, err


def nested_step_net(depth: int) -> str:
    inner = 'op { type: "Relu" input: "x" output: "x" }'
    for k in range(depth):
        inner = f'op {{ type: "If" input: "c" arg {{ name: "then_net" n {{ name: "n{k}" {inner} }} }} }}'
    return 'name: "top" ' + inner


@pytest.mark.parametrize("depth", [400, 60])
def test_nets_nested_deep_in_text_form_are_a_located_error(tmp_path, depth):
    (tmp_path / "deep.py").write_text(textwrap.dedent(f"""
        import numpy as np
        from caffe2.python import core, workspace
        workspace.FeedBlob("x", np.ones(3, np.float32))
        workspace.FeedBlob("c", np.array(True))
        net = core.Net("outer")
        net.If(["c"], [], then_net={nested_step_net(depth)!r})
        workspace.RunNetOnce(net)
        """))
    code, _, err, _ = dslc(tmp_path, "exec", "deep.py")
    assert code == 2 and len(err.splitlines()) == 1 and "deep.py:" in err and "nest" in err, err


def test_steps_nested_deep_in_a_plan_are_a_located_error(tmp_path):
    step = 'name: "s0" network: "n"'
    for k in range(400):
        step = f'name: "s{k + 1}" substep {{ {step} }}'
    (tmp_path / "plan.py").write_text(textwrap.dedent(f"""
        import sys
        from google.protobuf import text_format
        from caffe2.python import workspace
        from caffe2.proto import caffe2_pb2
        plan = caffe2_pb2.PlanDef()
        sys.setrecursionlimit(20000)  # (protobuf's text parser recurses: the user's own parse)
        text_format.Parse({('name: "p" network { name: "n" } execution_step { ' + step + ' }')!r}, plan)
        sys.setrecursionlimit(1000)
        workspace.RunPlan(plan)
        """))
    code, _, err, _ = dslc(tmp_path, "exec", "plan.py")
    assert code == 2 and len(err.splitlines()) == 1 and "plan.py:10" in err and "nest more than" in err, err


@pytest.mark.parametrize("attr, value, says, command", [
    ("func", '"os.system"', "func must name a Python function", "run"),
    ("func", '"os.system"', "func must name a Python function", "compile"),
    ("func", "3", "func must name a Python function", "run"),
    ("grad_func", '"x"', "grad_func must name a Python function", "run"),
])
def test_a_python_op_naming_no_function_is_a_located_error(tmp_path, attr, value, says, command):
    """(issue 38.10: a func given as a string was an internal AttributeError)"""
    func = 'pyref<"f", "mod">' if attr == "grad_func" else value
    extra = f", grad_func = {value}" if attr == "grad_func" else ""
    (tmp_path / "evil.dslir").write_text(module(
        f'%y = Python() {{func = {func}, name = "f"{extra}}} : any\nstore @"y"(%y)'))
    code, _, err, _ = dslc(tmp_path, command, "evil.dslir", "--trust")
    assert code == 2 and err.startswith("evil.dslir:4: error: Python: " + says) and len(err.splitlines()) == 1, err


# ----------------------------------------------------------------------------- large NetDefs

def netdef_in_child(n: int, case: str) -> dict:
    """bench/netdef_load.py's measure: a NetDef of ``n`` chained Adds loaded ("load") or
    created ("create") in a fresh process, its peak above the process's baseline."""
    bench = paths.load(paths.BENCH / "netdef_load.py", "netdef_load")
    return bench.measure(n, case)


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="counts the peak through /proc")
def test_loading_a_netdef_costs_at_most_a_kilobyte_per_op():
    """Bytes (29 per op) -> NetDef -> core.Net: records, and the copy kept as bytes (1.3 KB
    per op before, 0.75 now). bench/netdef_load.py times 200k ops."""
    got = netdef_in_child(20_000, "load")
    assert got["peak"] / 20_000 <= 1024, f"{got['peak'] / 20_000:.0f} bytes per op"


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="counts the peak through /proc")
def test_creating_a_large_net_compiles_its_code_in_pieces():
    """CreateNet of a 5k-op chain (one region of 10k generated lines): compiled in pieces,
    CPython's compiler never holds the whole function (12.2 KB per op in one, 7.6 in pieces;
    at 200k ops 11.5 and 4.8)."""
    got = netdef_in_child(5_000, "create")
    assert got["peak"] / 5_000 <= 10 * 1024, f"{got['peak'] / 5_000:.0f} bytes per op"


def test_the_issues_minidb_is_a_located_error_on_the_cli(tmp_path):
    """The 29-byte minidb declaring 150M strings, loaded by a Caffe2 script: one line naming
    the script's line, the file and the blob; exit 2 (it took 1.19 GB before)."""
    minidb(tmp_path / "tiny.minidb", [(b"x#%0", blob_proto([150_000_000], STRING))])
    (tmp_path / "load.py").write_text(textwrap.dedent("""
        from caffe2.python import core, workspace
        net = core.Net("load")
        net.Load([], ["x"], db="tiny.minidb", db_type="minidb", absolute_path=1)
        workspace.RunNetOnce(net)
        """))
    code, _, err, peak = dslc(tmp_path, "exec", "load.py")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "load.py:4" in err and "tiny.minidb" in err and "blob 'x'" in err and "0 values" in err, err
    assert peak < 512 << 20
