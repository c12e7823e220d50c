"""The tree itself: no merge-conflict block left in any file (one once landed in the docs)."""
from __future__ import annotations

import os
import re
import subprocess

import paths

ROOT = str(paths.ROOT)
# a conflict block's opening and closing lines (spelled in pieces so this file has neither)
MARKER = re.compile("^(" + "<" * 7 + "|" + ">" * 7 + ")( |$)", re.MULTILINE)
SKIP_DIRS = {".git", ".pytest_cache", "__pycache__", "build", "dist", ".venv", "venv"}


def tracked_files() -> list[str]:
    """The files git tracks (every file under the tree, when it is not a git checkout)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
        files = [f for f in out.stdout.decode().split("\0") if f]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    found = []
    for d, dirs, names in os.walk(ROOT):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.endswith(".egg-info")]
        found += [os.path.relpath(os.path.join(d, n), ROOT) for n in names]
    return found


def test_no_file_holds_a_merge_conflict_block():
    bad = []
    for rel in tracked_files():
        try:
            with open(os.path.join(ROOT, rel), "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        for m in MARKER.finditer(text):
            bad.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}")
    assert not bad, "merge-conflict markers at " + ", ".join(bad)


def test_the_check_sees_a_marker():
    assert MARKER.search("text\n" + "<" * 7 + " HEAD\nmore\n")
    assert not MARKER.search("a = '" + "<" * 7 + "'\n")


def test_no_tracked_file_is_named_like_an_option():
    """Stray files a command wrote under a name it meant as a flag (two `--node-manager-port=...`
    files once landed at the top of the tree)."""
    stray = [rel for rel in tracked_files() if os.path.basename(rel).startswith("-")]
    assert not stray, f"files named like command-line options: {stray}"
