"""Save and Load of float32 blobs with each db type, against plain file I/O of the same bytes.

Cases: 256 MiB and 2 GiB (``--sizes``), each as many small blobs (``--many``, 4096:
64 KiB each at 256 MiB) and as a few large ones (``--few``, 8). In each case the same bytes are
also written and read with plain file I/O in the same run: one file, ``writev`` of
the arrays then ``fsync`` (the durable baseline: a checkpoint is fsynced too), and
``preadv`` into new arrays. Save and Load run as ops in a LocalSession, so their
figures include the whole path (workspace, kernels, codec, checksums, manifest).

Every write starts after ``os.sync()``; every read finds its file in the page cache
(it is read once just before). The kinds take turns within a round, in an order that
rotates, and each figure is the best of its rounds; a ratio is the best plain time
over the best db time, and in brackets the median of the ratios within each round
(the machine is shared: a neighbour's burst slows one round, not one kind).

Usage: python bench/checkpoint.py [--sizes 256,2048] [--many 4096] [--few 8]
                                  [--repeat 5] [--repeat-large 3] [--dir DIR]
"""
from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import tempfile
import time

import numpy as np

from dslc.trace import names
from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Task

DB_TYPES = ("dslcdb", "lmdb")


def plain_write(path, arrays):
    """All the arrays' bytes into one file, then fsync: what a durable save costs at least."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        views = [memoryview(a).cast("B") for a in arrays]
        for i in range(0, len(views), 1024):  # (IOV_MAX buffers per call)
            part = views[i:i + 1024]
            left = sum(v.nbytes for v in part)
            while left:
                n = os.writev(fd, part)
                left -= n
                while part and n >= part[0].nbytes:
                    n -= part[0].nbytes
                    part = part[1:]
                if n:
                    part[0] = part[0][n:]
        os.fsync(fd)
    finally:
        os.close(fd)


def plain_read(path, arrays):
    """The bytes back into new arrays like the ones written (one preadv per array)."""
    out = [np.empty_like(a) for a in arrays]
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = 0
        for a in out:
            view, done = memoryview(a).cast("B"), 0
            while done < view.nbytes:
                done += os.preadv(fd, [view[done:]], pos + done)
            pos += view.nbytes
    finally:
        os.close(fd)
    return out


def warm(path) -> None:
    """Read ``path`` (a file, or every file of a directory) once, so the timed read finds
    it in the page cache whichever file was written last."""
    files = [os.path.join(path, n) for n in os.listdir(path)] if os.path.isdir(path) else [path]
    buf = bytearray(16 << 20)
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass


def _remove(path) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


class Case:
    """One checkpoint shape: the arrays, and per db type a session with Save and Load compiled."""

    def __init__(self, root: str, mib: int, blobs: int):
        per_blob = mib * (1 << 20) // blobs // 4
        rng = np.random.default_rng(0)
        self.arrays = [rng.random(per_blob, dtype=np.float32) for _ in range(blobs)]
        self.gib = sum(a.nbytes for a in self.arrays) / (1 << 30)
        self.blobs, self.root = blobs, root
        self.names = [f"w{i}" for i in range(blobs)]
        self.plain = os.path.join(root, "plain.bin")
        self.sessions, self.tasks = {}, {}
        for db in DB_TYPES:
            names.reset()
            s = self.sessions[db] = LocalSession()
            for n, a in zip(self.names, self.arrays):
                s.workspace.feed(n, a)
            path = os.path.join(root, f"ck.{db}")
            with Task() as save:
                ops.Save(self.names, [], db=path, db_type=db, absolute_path=True)
            with Task() as load:
                ops.Load([], [f"r{i}" for i in range(blobs)], db=path, db_type=db, absolute_path=True,
                         source_blob_names=self.names)
            s.compile(save), s.compile(load)  # compiling is not what is measured
            self.tasks[db] = (path, save, load)

    def writers(self) -> dict:
        out = {"plain": (self.plain, lambda: plain_write(self.plain, self.arrays))}
        for db in DB_TYPES:
            path, save, _ = self.tasks[db]
            out[db] = (path, lambda db=db, save=save: self.sessions[db].run(save))
        return out

    def readers(self) -> dict:
        out = {"plain": lambda: plain_read(self.plain, self.arrays)}
        for db in DB_TYPES:
            out[db] = lambda db=db: self.sessions[db].run(self.tasks[db][2])
        return out

    def forget_loaded(self) -> None:
        """Drop the blobs a Load made, so each round allocates afresh, as the plain read does."""
        for s in self.sessions.values():
            for i in range(self.blobs):
                s.workspace.blobs.pop(f"r{i}", None)
        gc.collect()

    def check(self, db: str) -> None:
        for k in (0, self.blobs // 2, self.blobs - 1):
            assert np.array_equal(self.sessions[db].workspace.fetch(f"r{k}"), self.arrays[k]), db


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(case: Case, repeat: int) -> dict:
    """{("save"|"load", kind): [seconds per round]}"""
    t: dict = {}
    writers, readers = case.writers(), case.readers()
    kinds = list(writers)
    for r in range(repeat):
        order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
        for k in order:
            path, fn = writers[k]
            _remove(path)
            os.sync()
            t.setdefault(("save", k), []).append(timed(fn))
        for k in order:
            case.forget_loaded()
            warm(writers[k][0])
            t.setdefault(("load", k), []).append(timed(readers[k]))
            if k != "plain":
                case.check(k)
        case.forget_loaded()
    return t


def report(case: Case, t: dict, label: str) -> None:
    gib = case.gib
    best = {k: min(v) for k, v in t.items()}
    print(f"{label}: {gib:.3f} GiB in {case.blobs} float32 blobs of {gib * (1 << 20) / case.blobs:.0f} KiB, "
          f"best of {len(t['save', 'plain'])} (GiB/s; ratio to plain, [median of per-round ratios])")
    print(f"  {'plain':>7}: write+fsync {gib / best['save', 'plain']:6.2f}"
          f"             read {gib / best['load', 'plain']:6.2f}")
    for db in DB_TYPES:
        cols = []
        for what in ("save", "load"):
            ratio = best[what, "plain"] / best[what, db]
            paired = statistics.median(p / d for p, d in zip(t[what, "plain"], t[what, db]))
            cols.append(f"{what} {gib / best[what, db]:6.2f} = {ratio:4.2f}x [{paired:4.2f}x]")
        print(f"  {db:>7}: " + "   ".join(cols))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="256,2048", help="checkpoint sizes in MiB, comma-separated")
    p.add_argument("--many", type=int, default=4096, help="blobs in the many-small-blobs cases")
    p.add_argument("--few", type=int, default=8, help="blobs in the few-large-blobs cases")
    p.add_argument("--repeat", type=int, default=5, help="rounds for sizes under 1 GiB")
    p.add_argument("--repeat-large", type=int, default=3, help="rounds for sizes of 1 GiB and more")
    p.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    args = p.parse_args(argv)
    root = tempfile.mkdtemp(dir=args.dir)
    print(f"dir {root}; {os.cpu_count()} cores")
    try:
        for mib in (int(s) for s in args.sizes.split(",")):
            for blobs, what in ((args.many, "many small"), (args.few, "few large")):
                case = Case(root, mib, blobs)
                t = measure(case, args.repeat if mib < 1024 else args.repeat_large)
                report(case, t, f"{mib} MiB, {what}")
                for path, _ in case.writers().values():
                    _remove(path)
                del case
                gc.collect()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
