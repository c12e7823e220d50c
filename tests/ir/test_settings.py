"""ir/settings.py: a bad value of a DSLC_* variable is one located line naming the variable,
the value and what it takes (exit 2), never a traceback, at import or later (issue 38.10)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dslc.ir import settings
import paths

JOB = str(paths.EXAMPLES / "loops.py")


def run(tmp_path, env, *args):
    full = dict(os.environ, DSLC_CACHE_DIR=str(tmp_path / "cache"))
    full.update(env)
    return subprocess.run([sys.executable, "-m", "dslc.cli", *args], capture_output=True, text=True,
                          env=full, cwd=tmp_path, timeout=120)


BAD = [
    ("DSLC_MAX_TENSOR_BYTES", "1G of RAM", "size"),
    ("DSLC_MAX_TENSOR_BYTES", "-1", "size"),
    ("DSLC_MAX_TENSOR_BYTES", "1000", "at least 1 MiB"),
    ("DSLC_NUMBA_MIN_WORK", "lots", "whole number"),
    ("DSLC_NUMBA_MIN_WORK", "-5", "at least 0"),
    ("DSLC_NUMBA_NN_MIN_WORK", "1e5", "whole number"),
    ("DSLC_NUMBA_MAX_OPS", "0", "at least 1"),
    ("DSLC_NUMBA_PARALLEL", "maybe", "on nor off"),
    ("DSLC_CACHE_DIR", "FILE", "not a directory"),
    ("DSLC_CACHE_DIR", "FILE/below", "is not a directory"),
]


@pytest.mark.slow  # (a fresh process each)
@pytest.mark.parametrize("backend", ["interp", "numba"])
@pytest.mark.parametrize("name, value, says", BAD, ids=[f"{n}={v}" for n, v, _ in BAD])
def test_a_bad_setting_is_one_line_naming_it(tmp_path, name, value, says, backend):
    (tmp_path / "FILE").write_text("a file, not a directory")
    value = value.replace("FILE", str(tmp_path / "FILE"))
    done = run(tmp_path, {name: value}, "run", os.path.abspath(JOB), "--backend", backend)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{name}={value!r}" in lines[0] and says in lines[0]


@pytest.mark.slow  # (a fresh process each)
@pytest.mark.parametrize("name, value, says", BAD[:8], ids=[f"{n}={v}" for n, v, _ in BAD[:8]])
def test_a_bad_setting_never_fails_an_import(tmp_path, name, value, says):
    """A library user imports dslc whatever the environment says; the bad value is reported
    (a SettingError, the same line) when something first needs it."""
    code = ("import dslc, dslc.core, dslc.workspace, dslc.net_builder, dslc.backends.numba\n"
            "from dslc.ir import settings\n"
            "try:\n    settings.check_all()\nexcept settings.SettingError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **{name: value}))
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert f"{name}={value!r}" in done.stdout and says in done.stdout


@pytest.mark.parametrize("text, want", [
    ("268435456", 1 << 28), ("256MiB", 1 << 28), ("256M", 1 << 28), ("256 mib", 1 << 28),
    ("1.5GiB", 3 << 29), ("2GB", 2 * 10 ** 9), ("1_000_000_000", 10 ** 9),
])
def test_sizes_take_units(monkeypatch, text, want):
    monkeypatch.setenv("DSLC_MAX_TENSOR_BYTES", text)
    assert settings.byte_size("DSLC_MAX_TENSOR_BYTES") == want


def test_switches_and_counts(monkeypatch):
    for text, want in [("1", True), ("on", True), ("0", False), ("off", False), ("", False)]:
        monkeypatch.setenv("DSLC_NUMBA_PARALLEL", text)
        assert settings.switch("DSLC_NUMBA_PARALLEL") is want
    monkeypatch.setenv("DSLC_NUMBA_MIN_WORK", " 0 ")
    assert settings.count("DSLC_NUMBA_MIN_WORK", 5000) == 0
    monkeypatch.delenv("DSLC_NUMBA_MIN_WORK")
    assert settings.count("DSLC_NUMBA_MIN_WORK", 5000) == 5000


def test_a_long_value_is_quoted_short(monkeypatch):
    monkeypatch.setenv("DSLC_NUMBA_MAX_OPS", "9" * 5000 + "x")
    with pytest.raises(settings.SettingError) as e:
        settings.count("DSLC_NUMBA_MAX_OPS", 400, lo=1)
    assert len(str(e.value)) < 400  # (the value cut to 200 characters)


def test_a_cache_directory_that_can_be_made_is_taken(tmp_path, monkeypatch):
    monkeypatch.setenv("DSLC_CACHE_DIR", str(tmp_path / "new" / "cache"))
    assert settings.directory("DSLC_CACHE_DIR") == str(tmp_path / "new" / "cache")
