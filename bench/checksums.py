"""Checksum throughput on one core, for choosing the dslcdb checksum.

Each candidate hashes the same random buffer (``--mib``, default 64 MiB, so it is
not in the CPU cache), a run of 1 MiB chunks of it (the size a chunked reader
hands over), and a 256 KiB and a 1 MiB piece hashed repeatedly (in the cache, as a
piece just read is); each figure is the best of ``--repeat`` rounds. It also tells
whether the function releases the GIL: two threads hashing two buffers at once
take about the time of one when it does (on a machine with two free cores).

Usage: python bench/checksums.py [--mib 64] [--repeat 7]
"""
from __future__ import annotations

import argparse
import importlib
import threading
import time
import zlib

import numpy as np


HOT = (256 << 10, 1 << 20)  # piece sizes hashed again and again, so they stay in the cache


def candidates() -> dict:
    out = {"zlib.crc32": zlib.crc32}
    for mod, attr, label in (("crc32c", "crc32c", "crc32c.crc32c"),
                             ("google_crc32c", "value", "google_crc32c.value"),
                             ("xxhash", "xxh3_64_intdigest", "xxhash.xxh3_64"),
                             ("xxhash", "xxh64_intdigest", "xxhash.xxh64")):
        try:
            out[label] = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError):
            print(f"({label}: not installed)")
    return out


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args(argv)
    buf = np.random.default_rng(0).integers(0, 256, args.mib << 20, dtype=np.uint8)
    other = buf.copy()
    # read-only views: google_crc32c takes nothing else (a view costs no copy)
    whole = memoryview(buf).toreadonly()
    chunks = [whole[i:i + (1 << 20)] for i in range(0, buf.nbytes, 1 << 20)]
    gib = buf.nbytes / (1 << 30)
    print(f"{args.mib} MiB, best of {args.repeat}; GiB/s on one core: the whole buffer, 1 MiB chunks of it, "
          "256 KiB and 1 MiB hashed 64 times (in the CPU cache);\nthen two threads on two buffers as a "
          "multiple of one")
    as_bytes = bytes(buf), [bytes(c) for c in chunks], bytes(other)
    hot_pieces = {False: [whole[:n] for n in HOT], True: [bytes(whole[:n]) for n in HOT]}
    for label, fn in candidates().items():
        # google_crc32c takes only bytes objects (not a view of an array): it is timed on
        # copies made beforehand, but in a checkpoint it would need that copy of every blob
        w, cs, o = as_bytes if label.startswith("google") else (whole, chunks, memoryview(other).toreadonly())
        one = best(lambda: fn(w), args.repeat)
        chunked = best(lambda: [fn(c) for c in cs], args.repeat)

        def two():
            t = threading.Thread(target=fn, args=(o,))
            t.start()
            fn(w)
            t.join()
        pair = best(two, args.repeat)
        hot = [best(lambda: [fn(h) for _ in range(64)], args.repeat) for h in hot_pieces[label.startswith("google")]]
        note = "  (bytes only: a copy per blob)" if label.startswith("google") else ""
        print(f"  {label:>20}: {gib / one:6.2f}  {gib / chunked:6.2f}   in cache "
              + "  ".join(f"{64 * n / (1 << 30) / s:6.2f}" for n, s in zip(HOT, hot))
              + f"   two threads {2 * one / pair:4.2f}x{note}")


if __name__ == "__main__":
    main()
