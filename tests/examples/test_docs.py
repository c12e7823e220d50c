"""The documentation's code runs: every fenced ```python block of README.md and docs/*.md runs
as a program (in a fresh directory), every ```console block's ``$ dslc ...`` lines run from
the checkout's root, and every relative link between the pages leads to a file. A page whose
example stops working fails here, not in a user's hands.

Indented blocks are sketches (fragments with ``...``) and are not run."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from tests import paths

pytestmark = pytest.mark.slow

PAGES = [paths.ROOT / "README.md"] + sorted((paths.ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)
BIN = os.path.dirname(sys.executable)


def blocks(kind: str):
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            if m.group(1) == kind:
                line = text.count("\n", 0, m.start()) + 2
                yield pytest.param(m.group(2), id=f"{page.name}:{line}")


@pytest.mark.parametrize("code", list(blocks("python")))
def test_python_blocks_run(tmp_path, code):
    (tmp_path / "example.py").write_text(code)
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("session", list(blocks("console")))
def test_console_blocks_run(session):
    for line in session.splitlines():
        if not line.startswith("$ "):
            continue
        argv = shlex.split(line[2:])
        argv[0] = os.path.join(BIN, argv[0]) if os.path.exists(os.path.join(BIN, argv[0])) else argv[0]
        done = subprocess.run(argv, cwd=paths.ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (line, done.stderr[-3000:])


def test_there_are_blocks_to_run():
    assert len(list(blocks("python"))) >= 1 and len(list(blocks("console"))) >= 1


def test_links_between_pages_lead_to_files():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.name}: {target}")
    assert not broken, broken
