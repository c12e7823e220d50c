"""One tree at a time: ``import dslc`` refuses ``dslc/`` from one checkout with ``ir/``, ``backends/``
or ``runtime/`` from another (the trap of running from checkout A's root with dslc installed from
checkout B: A's ``dslc/`` comes first on the path, B's folders through the install's mapping).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import dslc
import paths

ROOT = str(paths.ROOT)
# it reads or imports the tree and runs no pass: DSLC_PIPELINE changes nothing it does
pytestmark = pytest.mark.own_pipeline
FOLDERS = [f for f in ("dslc", "ir", "backends", "runtime") if os.path.isdir(os.path.join(ROOT, f))]
SHOW = "import dslc, dslc.backends; print(dslc.__file__, dslc.ir.__file__, dslc.backends.__file__)"


def python(code: str, cwd, *flags) -> subprocess.CompletedProcess:
    # cwd first on sys.path, as ``python -c`` and ``python -m pytest`` put it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def checkout(path, link=()) -> str:
    """A second checkout at ``path``: a copy of this tree's packages (those named in ``link``
    linked to this tree's instead)."""
    os.makedirs(path)
    for folder in FOLDERS:
        if folder in link:
            os.symlink(os.path.join(ROOT, folder), os.path.join(path, folder))
        else:
            shutil.copytree(os.path.join(ROOT, folder), os.path.join(path, folder),
                            ignore=shutil.ignore_patterns("__pycache__"))
    return str(path)


def test_import_from_another_checkouts_root_fails_saying_what_to_do(tmp_path):
    other = checkout(tmp_path / "A")
    out = python("import dslc", cwd=other)
    assert out.returncode == 1, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ImportError: dslc is imported from {os.path.join(other, 'dslc')} but dslc.ir from ")
    assert "two checkouts mixed" in last and "Run from outside that checkout" in last
    assert last.endswith(f"{sys.executable} -m pip install -e {other}")
    # from outside any checkout, the same interpreter imports the installed dslc, whole
    out = python(SHOW, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    files = out.stdout.split()
    installed = os.path.dirname(os.path.dirname(dslc.__file__))
    assert all(f.startswith(installed + os.sep) for f in files), (files, installed)


def test_import_refuses_one_package_from_another_tree(tmp_path):
    # ir/ and backends/ the installed tree's own (links, so the same folders), runtime/ a copy
    other = checkout(tmp_path / "A", link=[f for f in FOLDERS if f not in ("dslc", "runtime")])
    if "runtime" not in FOLDERS:
        os.makedirs(os.path.join(other, "runtime"))
        open(os.path.join(other, "runtime", "__init__.py"), "w").close()
    out = python("import dslc", cwd=other)
    assert out.returncode == 1, out.stderr
    assert f"{os.path.join(other, 'dslc')} but dslc.runtime from " in out.stderr


def test_import_from_a_checkout_not_installed_says_to_install_it(tmp_path):
    other = checkout(tmp_path / "A")
    out = python("import dslc", other, "-S")     # no site-packages: nothing installed
    assert out.returncode == 1, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ImportError: dslc is imported from {os.path.join(other, 'dslc')} but dslc.ir "
                           f"({os.path.join(other, 'ir')}) is not installed with it")
    assert last.endswith(f"{sys.executable} -m pip install -e {other}")


@pytest.mark.skipif(os.path.dirname(os.path.dirname(dslc.__file__)) != ROOT,
                    reason="dslc is not installed from this checkout")
def test_import_from_the_installed_checkouts_own_root_works():
    out = python(SHOW, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [os.path.join(ROOT, "dslc", "__init__.py"), os.path.join(ROOT, "ir", "__init__.py"),
                                  os.path.join(ROOT, "backends", "__init__.py")]
