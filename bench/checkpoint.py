"""Save and Load of 1 GiB of float32 blobs (100 blobs) for each db type, against plain file I/O.

The same bytes are written and read with plain file I/O in the same run: one file,
``write`` of each array then ``fsync`` (the durable baseline; a checkpoint is
fsynced too), and ``preadv`` into new arrays. Save and Load run as ops in a
LocalSession, so the figures include the whole path (workspace, kernels, codec,
checksums, manifest). Each figure is the best of ``--repeat`` rounds; every write
starts after ``os.sync()``, every read finds its file in the page cache.

Usage: python bench/checkpoint.py [--mib 1024] [--blobs 100] [--repeat 3] [--dir DIR]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import numpy as np

from dslc import names
from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Task


def plain_write(path, arrays, sync=True):
    with open(path, "wb", buffering=0) as f:
        for a in arrays:
            view = memoryview(a).cast("B")
            while view.nbytes:
                view = view[f.write(view):]
        if sync:
            os.fsync(f.fileno())


def plain_read(path, arrays):
    """Read the bytes back into new arrays like the ones written (one preadv per array)."""
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


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def warm(path) -> None:
    """Read ``path`` (a file, or every file of a directory) once, so the timed read finds it
    in the page cache whichever file was written last: reads then compare the formats'
    own costs rather than what the machine's cache happened to keep."""
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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=1024)
    p.add_argument("--blobs", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--verbose", action="store_true", help="print every round's figures")
    p.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    args = p.parse_args(argv)
    per_blob = args.mib * (1 << 20) // args.blobs // 4
    rng = np.random.default_rng(0)
    arrays = [rng.random(per_blob, dtype=np.float32) for _ in range(args.blobs)]
    blob_names = [f"w{i}" for i in range(args.blobs)]
    gib = sum(a.nbytes for a in arrays) / (1 << 30)
    root = tempfile.mkdtemp(dir=args.dir)
    db_types = ("dslcdb", "lmdb")
    sessions, tasks = {}, {}
    for db_type in db_types:
        names.reset()
        session = sessions[db_type] = LocalSession()
        for n, a in zip(blob_names, arrays):
            session.workspace.feed(n, a)
        path = os.path.join(root, f"ck.{db_type}")
        with Task() as save:
            ops.Save(blob_names, [], db=path, db_type=db_type, absolute_path=True)
        with Task() as load:
            ops.Load([], [f"r{i}" for i in range(args.blobs)], db=path, db_type=db_type,
                     absolute_path=True, source_blob_names=blob_names)
        session.compile(save), session.compile(load)  # compiling is not what is measured
        tasks[db_type] = (path, save, load)
    plain = os.path.join(root, "plain.bin")

    def write_plain():
        plain_write(plain, arrays)

    def reader(db_type):
        def load():
            for i in range(args.blobs):  # free the previous round's loaded blobs first
                sessions[db_type].workspace.blobs.pop(f"r{i}", None)
            sessions[db_type].run(tasks[db_type][2])
        return load

    writes = {"plain": (plain, write_plain)}
    writes.update({db: (tasks[db][0], lambda db=db: sessions[db].run(tasks[db][1])) for db in db_types})
    reads = {"plain": lambda: plain_read(plain, arrays)}
    reads.update({db: reader(db) for db in db_types})
    # The disk of a shared machine is the noisiest part: whichever file is written
    # right after another one is slowed by the other's write-back. So every write
    # starts after os.sync(), the order rotates each round, and each figure is the
    # best of its rounds (the median is printed too).
    t: dict = {}
    try:
        kinds = list(writes)
        for r in range(args.repeat):
            order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
            for k in order:
                path, fn = writes[k]
                _remove(path)
                os.sync()
                t.setdefault(("write", k), []).append(timed(fn))
            for k in order:
                warm(writes[k][0])
                t.setdefault(("read", k), []).append(timed(reads[k]))
            for db in db_types:
                assert np.array_equal(sessions[db].workspace.fetch("r7"), arrays[7]), "loaded values differ"
        if args.verbose:
            for (what, k), v in sorted(t.items()):
                print(f"  {what:>5} {k:>6}: " + " ".join(f"{gib / x:.2f}" for x in v) + " GiB/s")
        b = {k: min(v) for k, v in t.items()}
        med = {k: statistics.median(v) for k, v in t.items()}
        print(f"{gib:.3f} GiB in {args.blobs} float32 blobs; {args.repeat} rounds, best (median); dir {root}")
        print(f"plain file: write+fsync {gib / b['write', 'plain']:5.2f} ({gib / med['write', 'plain']:.2f}) GiB/s"
              f"   read {gib / b['read', 'plain']:5.2f} ({gib / med['read', 'plain']:.2f}) GiB/s")
        for db in db_types:
            save, load = b["write", db], b["read", db]
            print(f"{db:>10}: save {gib / save:5.2f} ({gib / med['write', db]:.2f}) GiB/s = "
                  f"{b['write', 'plain'] / save:6.1%} of plain write+fsync"
                  f"   load {gib / load:5.2f} ({gib / med['read', db]:.2f}) GiB/s = "
                  f"{b['read', 'plain'] / load:6.1%} of plain read")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
