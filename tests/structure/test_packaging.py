"""What pyproject.toml installs is the whole tree: every package of dslc/, ir/, runtime/, backends/
is listed in ``packages`` (an editable install finds one that is not; a wheel leaves it out), and
every other file a package holds is named in ``package-data`` (ir/grammar.lark was not: a regular
install could not parse IR text)."""
from __future__ import annotations

import fnmatch
import importlib
import os
import subprocess
import tomllib

import pytest

import layers
import paths

ROOT = str(paths.ROOT)
# it reads or imports the tree and runs no pass: DSLC_PIPELINE changes nothing it does
pytestmark = pytest.mark.own_pipeline


def setuptools_config() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]


def tracked(folder: str) -> list[str]:
    """The files under ``folder`` git tracks (every file but caches, outside a git checkout)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", folder], cwd=ROOT, capture_output=True, check=True)
        return [f for f in out.stdout.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        return [os.path.relpath(os.path.join(d, n), ROOT) for d, _, names in os.walk(os.path.join(ROOT, folder))
                if "__pycache__" not in d for n in names]


def test_every_package_of_the_tree_is_installed():
    modules = layers.find_modules(ROOT)
    packages = {name for name, path in modules.items() if path.endswith("__init__.py")}
    listed = set(setuptools_config()["packages"])
    assert packages - listed == set(), "packages pyproject.toml does not list (a wheel leaves them out)"
    assert listed - packages == set(), "packages pyproject.toml lists that the tree does not have"


def test_every_data_file_of_a_package_is_installed():
    config = setuptools_config()
    folders = {folder: pkg for pkg, folder in config["package-dir"].items()}
    data = config.get("package-data", {})
    packages = set(config["packages"])
    missing = []
    for folder, top in folders.items():
        for rel in tracked(folder):
            if rel.endswith(".py"):
                continue
            inner = os.path.relpath(os.path.dirname(rel), folder)
            pkg = top if inner == "." else ".".join([top, *inner.split(os.sep)])
            if pkg not in packages:
                continue    # not in a package (the other test names a package left out)
            if not any(fnmatch.fnmatch(os.path.basename(rel), pattern) for pattern in data.get(pkg, [])):
                missing.append(f"{rel} (package {pkg})")
    assert missing == [], f"files no package-data entry installs: {missing}"


def test_dslc_knows_every_folder_mapped_into_it():
    """dslc._MAPPED (the one-tree check's list, and the tracer's: a frame in runtime/ was taken for
    the user's after the runtime moved out of backends/) is pyproject's package-dir."""
    import dslc
    from dslc.trace import tracing
    mapped = {pkg.partition(".")[2] for pkg in setuptools_config()["package-dir"] if pkg != "dslc"}
    assert set(dslc._MAPPED) == mapped
    for name in mapped:
        package = importlib.import_module(f"dslc.{name}")
        assert tracing.is_own_file(os.path.join(os.path.dirname(package.__file__), "any.py")), name
