"""A mutation fuzzer for the IR text: every mutant of the examples' IR either compiles
or is a located user error (exit 2), never an internal error.

The examples' IR (as lowered, and after the default pipeline) is cut into tokens; each
mutant deletes, duplicates, swaps or replaces a few of them (numbers by edge values,
types by other types). Each mutant goes through ``dslc compile --json`` in-process:
parse, verify, the default passes and the interp backend's compilation (which also
evaluates constant fills). The seed is fixed; ``DSLC_FUZZ_MUTANTS`` sets how many
mutants (200 by default, as CI runs it).
"""
from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import pytest

from dslc.driver import cli
import paths

ROOT = paths.ROOT
EXAMPLES = ["loops.py", "setup.py", "multi_instance.py", "python_op.py", "pipeline.py"]
MUTANTS = int(os.environ.get("DSLC_FUZZ_MUTANTS", "200"))
SEED = int(os.environ.get("DSLC_FUZZ_SEED", "14"))

TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|%[\w.]+|@"(?:\\.|[^"\\\n])*"|-?\d+(?:\.\d+)?(?:e[+-]?\d+)?'
                   r'|[A-Za-z_][\w.]*|\s+|.')
NUMBERS = ["0", "-1", "1", "2147483648", "-2147483649", "9223372036854775808", "1e999", "-1e999",
           "nan", "3.5", "-0.0", "100000000000", "255", "256", "-129", "65536"]
TYPES = ["i8", "i16", "i32", "i64", "u8", "f32", "f64", "bool", "str", "?", "any", "!counter",
         "i64[3]", "f32[?]", "f32[2,3]", "i64[?,?]"]
WORDS = ["module", "group", "task", "for", "loop", "if", "yield", "store", "load", "Const", "Div",
         "ConstantFill", "then", "else", "body", "true", "false", "none", "dense<", "pyref<", "\t",
         "\x01", "{", "}", "(", ")", "[", "]", ",", ":", "=", "%x", '@"x"', '"a\tb"', "\n"]


@pytest.fixture(scope="module")
def texts(tmp_path_factory) -> list[str]:
    """The IR text of each example, as lowered and after the default pipeline."""
    out = []
    d = tmp_path_factory.mktemp("ir")
    for name in EXAMPLES:
        for extra in ([], ["-O"]):
            path = d / f"{name}{len(extra)}.dslir"
            assert cli.main(["ir", str(ROOT / "examples" / name), "-o", str(path), *extra]) == 0
            out.append(path.read_text())
    return out


def mutate(text: str, rng: random.Random) -> str:
    tokens = TOKEN.findall(text)
    solid = [i for i, t in enumerate(tokens) if not t.isspace()]
    for _ in range(rng.choice([1, 1, 2, 3])):
        i = rng.choice(solid)
        t = tokens[i]
        how = rng.randrange(6)
        if how == 0:
            tokens[i] = ""
        elif how == 1:
            tokens[i] = t + " " + t
        elif how == 2:
            j = rng.choice(solid)
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif how == 3 or re.fullmatch(r"-?\d.*", t):
            tokens[i] = rng.choice(NUMBERS)
        elif how == 4 or re.fullmatch(r"[iuf]\d+|bool|str|any", t):
            tokens[i] = rng.choice(TYPES)
        else:
            tokens[i] = rng.choice(WORDS)
    return "".join(tokens)


def outcome(path: Path, capsys) -> tuple[int, dict]:
    code = cli.main(["compile", str(path), "--backend", "interp", "--json"])
    out = capsys.readouterr().out
    return code, (json.loads(out) if code != 0 and out.strip() else {})


@pytest.mark.slow
def test_every_mutant_compiles_or_is_a_located_user_error(texts, tmp_path, capsys):
    rng = random.Random(SEED)
    bad, kinds = [], {0: 0, 2: 0}
    for k in range(MUTANTS):
        text = mutate(texts[k % len(texts)], rng)
        path = tmp_path / f"m{k}.dslir"
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
        code, got = outcome(path, capsys)
        err = got.get("error", {})
        if code == 0:
            kinds[0] += 1
        elif code == 2 and err.get("line") and err.get("file") and err.get("hint"):
            kinds[2] += 1
        else:
            bad.append((k, code, err, text))
    if bad:
        k, code, err, text = bad[0]
        pytest.fail(f"{len(bad)} of {MUTANTS} mutants: exit {code}, not a located error with a hint; "
                    f"first (m{k}): {err}\n{text}")
    assert kinds[2] > MUTANTS // 4  # (most mutants are wrong: the fuzzer reaches the checks)


def test_a_non_utf8_file_is_a_located_error(tmp_path, capsys):
    path = tmp_path / "bad.dslir"
    path.write_bytes(b"module {\n  group body {\n  \xff\n  }\n}\n")
    code, got = outcome(path, capsys)
    assert code == 2 and got["error"]["line"] == 3 and "UTF-8" in got["error"]["message"]


# ----------------------------------------------------------------------------- each class by hand

def _module(line: str, where: str = "task") -> str:
    body = f"      {line}  // error: MARK\n"
    if where == "group":
        return f'module {{\n  group body {{\n    {line}  // error: MARK\n  }}\n}}\n'
    return f'module {{\n  group body {{\n    task @"t" {{outputs = [@"y"]}} body {{\n{body}    }}\n  }}\n}}\n'


@pytest.mark.parametrize("line, message", [
    ('%a = Const {value = dense<i32: 2147483648>} : i32',
     "2147483648 is out of range for i32 (-2147483648 to 2147483647)"),
    ('%a = Const {value = dense<i8: -129>} : i8', "-129 is out of range for i8"),
    ('%a = Const {value = dense<i64: 1e999>} : i64', "1e999 is not an i64 value"),
    ('%a = Const {value = dense<i64: 2.5>} : i64', "2.5 is not an i64 value"),
    ('%a = Const {value = dense<bool: 1>} : bool', "1 is not a bool value"),
    ('%a = Const {value = dense<str: "a\tb">} : str', "bad string: Invalid control character"),
    ('%a = Const {value = dense<str: "a\x01b">} : str', "bad string: Invalid control character"),
    ('store @"y"(%v)', "%v is used before it is defined"),
    ('%a = Const {value = dense<i64: 1>} : i64', "Const: must be inside a task, not directly in a group body"),
])
def test_malformed_text_is_a_located_error_with_a_hint(tmp_path, capsys, line, message):
    text = _module(line, "group" if "group" in message else "task")
    path = tmp_path / "t.dslir"
    path.write_text(text)
    code, got = outcome(path, capsys)
    assert code == 2, got
    err = got["error"]
    assert (err["file"], err["line"]) == (str(path), 4 if "group" not in message else 3)
    assert message in err["message"] and err["hint"]


def test_a_constant_fill_larger_than_the_machine_is_a_located_error(tmp_path, capsys):
    """1e15 float32 elements need 3.6 PiB; the fill is refused before numpy allocates."""
    text = _module('%a = ConstantFill {shape = [100000, 100000, 100000], value = 1.0} : '
                   'f32[100000,100000,100000]\n      store @"y"(%a)')
    path = tmp_path / "t.dslir"
    path.write_text(text)
    code, got = outcome(path, capsys)
    assert code == 2 and got["error"]["line"] == 4 and "GiB" in got["error"]["message"]
