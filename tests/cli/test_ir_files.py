"""``.dslir`` files carry the IR's version (an older, unstamped file still loads; a newer one
says which dslc wrote it), and ``dslc ir`` on a terminal elides large constants unless
``--full-constants``."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests import paths

pytestmark = pytest.mark.slow

DSLC = os.path.join(os.path.dirname(sys.executable), "dslc")


def _dslc(cwd, *argv):
    return subprocess.run([DSLC, *map(str, argv)], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_a_file_is_stamped_an_old_one_loads_and_a_newer_one_names_its_writer(tmp_path):
    import dslc
    loops = paths.EXAMPLES / "loops.py"
    expected = _dslc(tmp_path, "run", loops).stdout
    assert _dslc(tmp_path, "ir", loops, "-o", "job.dslir").returncode == 0
    text = (tmp_path / "job.dslir").read_text()
    assert text.startswith(f"// dslir 1, written by dslc {dslc.__version__}\n")
    assert _dslc(tmp_path, "run", "job.dslir").stdout == expected
    (tmp_path / "old.dslir").write_text(text.split("\n", 1)[1])  # (as written before the stamp)
    assert _dslc(tmp_path, "run", "old.dslir").stdout == expected
    (tmp_path / "new.dslir").write_text(text.replace("// dslir 1, written by dslc 0", "// dslir 9, written by dslc 7", 1))
    done = _dslc(tmp_path, "run", "new.dslir")
    assert done.returncode == 2 and done.stderr.startswith(
        "new.dslir:1:1: error: this IR file is version 9 of the IR (written by dslc 7"), done.stderr
    assert "reads versions up to 1" in done.stderr


def _on_a_terminal(*argv) -> str:
    """dslc's stdout when it is a terminal (a pseudo-terminal read to its end)."""
    import pty
    master, slave = pty.openpty()
    proc = subprocess.Popen([DSLC, *map(str, argv)], stdout=slave, stderr=subprocess.DEVNULL, cwd=paths.ROOT)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # (EIO: the other side closed)
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=300)
    os.close(master)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_ir_elides_large_constants_on_a_terminal_only():
    """examples/data_parallel.py holds constants of thousands of elements (its data)."""
    job = paths.EXAMPLES / "data_parallel.py"
    piped = _dslc(paths.ROOT, "ir", job, "--no-locs").stdout
    shown = _on_a_terminal("ir", job, "--no-locs")
    full = _on_a_terminal("ir", job, "--no-locs", "--full-constants")
    assert full == piped and "elements)>" not in piped
    assert len(shown) < len(piped) / 4 and "elements)>" in shown
    assert shown.count("\n") == piped.count("\n")  # (the same ops, line for line)
