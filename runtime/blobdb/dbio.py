"""The I/O under ``dbfile``: payloads go between the file and the arrays' own buffers
with no copy in between, and their checksums are computed while the I/O runs.

Reading: the blobs wanted are cut along the file into pieces of about one checksum
chunk. A piece is one ``preadv`` straight into the destination arrays (the record
headers and padding between payloads go to one scratch buffer, which the caller
compares with what they must hold, all at once). Two threads take pieces in turn,
and each hashes the piece it just read while it is still in the CPU cache.

Writing: blobs are gathered into batches of about ``BATCH`` bytes. The hashing of a
batch of large payloads goes to the helper thread, then the batch is written with
``writev`` from the arrays' buffers, so the hashing overlaps the copy into the page
cache; small payloads are hashed after the write, while they are in the cache.

The checksum libraries (xxhash, zlib) release the GIL on large buffers, so the
threads really run at once.
"""
from __future__ import annotations

import itertools
import os
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import xxhash

from dslc.ir.cores import usable_cpus

BATCH = 8 << 20  # bytes gathered per writev on save
PARALLEL_MIN = 1 << 20  # below this, a helper thread costs more than it saves
_HELPER_PIECE = 256 << 10  # the mean payload size from which a save's hashing goes to the helper
_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)


@dataclass(frozen=True)
class Checksum:
    """How a payload is checksummed: ``hash`` over chunks of ``chunk`` bytes (0: the
    payload whole); a payload of several chunks has the hash of its chunks' digests
    (little-endian u64), so the chunks can be hashed in any order, by any thread."""

    field: str  # the manifest's key for it
    chunk: int
    hash: object  # bytes-like -> int

    def chunks(self, view: memoryview) -> list:
        n = view.nbytes
        if not self.chunk or n <= self.chunk:
            return [view]
        return [view[i:i + self.chunk] for i in range(0, n, self.chunk)]

    def combine(self, digests: list) -> int:
        if len(digests) == 1:
            return digests[0]
        return self.hash(np.array(digests, dtype="<u8"))

    def of(self, view: memoryview) -> int:
        if not self.chunk or view.nbytes <= self.chunk:
            return self.hash(view)
        return self.combine([self.hash(c) for c in self.chunks(view)])


def as_in_manifest(scheme: Checksum, doc: dict) -> Checksum:
    """``scheme`` with the chunk size a manifest ``doc`` gives (a chunked scheme's manifest
    records it); ValueError if it has none that is valid."""
    if not scheme.chunk:
        return scheme
    chunk = doc.get("chunk")
    if type(chunk) is not int or not 4096 <= chunk <= 1 << 30:
        raise ValueError(f"its checksum chunk size {chunk!r} is not valid")
    return scheme if chunk == scheme.chunk else replace(scheme, chunk=chunk)


CRC32 = Checksum("crc32", 0, zlib.crc32)  # dslcdb format 1
XXH3 = Checksum("xxh3", 1 << 20, xxhash.xxh3_64_intdigest)  # format 2: see bench/checksums.py


# --- the helper threads

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _helpers() -> tuple[ThreadPoolExecutor, int]:
    """The shared helper pool and its size: the cores beyond the caller's, at most 3."""
    global _pool
    with _pool_lock:
        if _pool is None:
            cores = usable_cpus()
            _pool = ThreadPoolExecutor(max_workers=max(1, min(3, cores - 1)), thread_name_prefix="dslc-dbio")
        return _pool, _pool._max_workers


class _Done:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


def digest_async(scheme: Checksum, view: memoryview):
    """A future-like whose ``result()`` is ``scheme.of(view)``, computed on a helper thread
    (while the caller goes on to the next blob) when ``view`` is large."""
    if view.nbytes < PARALLEL_MIN:
        return _Done(scheme.of(view))
    return _helpers()[0].submit(scheme.of, view)


# --- reading

def read_blobs(fd: int, records: list, gap_lens: list, dests: list, lengths: list, scheme: Checksum):
    """Read blobs laid out as ``records[i]``: ``gap_lens[i]`` bytes of record header, name
    and padding, then ``lengths[i]`` bytes of payload into ``dests[i]`` (a writable buffer
    of that size). Give them in file order: a run of records back to back is read with
    few ``preadv`` calls. Returns (every gap's bytes, one after the other; which blobs the
    file ended inside; each payload's checksum), for the caller to check."""
    starts = list(itertools.accumulate(gap_lens, initial=0))
    gaps = np.empty(starts[-1], dtype=np.uint8)
    pieces, slots, multi, nslots = _pieces(records, gap_lens, dests, lengths, starts, memoryview(gaps), scheme)
    digests, cut_pieces = [0] * nslots, []
    hash_ = scheme.hash

    def read(p) -> None:
        pos, iovs, size, hashes, _, _ = p
        if not _preadv_fully(fd, iovs, pos, size):
            cut_pieces.append(p)
            return
        for slot, view in hashes:
            digests[slot] = hash_(view)

    _run_all(pieces, read, parallel=starts[-1] + sum(lengths) >= PARALLEL_MIN)
    cut = np.zeros(len(records), dtype=bool)
    for p in cut_pieces:
        cut[p[4]:p[5]] = True
    flat = np.array(digests, dtype=np.uint64)
    sums = flat[np.array(slots, dtype=np.intp)] if slots else np.zeros(0, np.uint64)
    for i, (first, count) in multi.items():
        sums[i] = scheme.combine(flat[first:first + count].tolist())
    return gaps, cut, sums


def _pieces(records, gap_lens, dests, lengths, starts, gaps: memoryview, scheme: Checksum):
    """The reads: contiguous runs of records cut into pieces of about one chunk (at most
    _IOV_MAX buffers each), as (file position, buffers, size, [(digest slot, buffer)],
    first blob, end blob); each blob's digest slot (a payload longer than a chunk has
    one per chunk: ``multi`` maps it to its first slot and count); the number of slots."""
    chunk = scheme.chunk
    limit = chunk or (1 << 20)
    pieces: list = []
    slots, multi = [0] * len(records), {}
    iovs: list = []
    hashes: list = []
    pos = size = first = hi = nslots = 0
    end = -1
    for i, rec in enumerate(records):
        if rec != end or size >= limit or len(iovs) >= _IOV_MAX - 2:
            if iovs:
                pieces.append((pos, iovs, size, hashes, first, hi))
            iovs, hashes, pos, size, first = [], [], rec, 0, i
        g, dest, n = gap_lens[i], dests[i], lengths[i]
        iovs.append(gaps[starts[i]:starts[i + 1]])
        size += g
        slots[i] = nslots
        if not chunk or n <= chunk:
            iovs.append(dest)
            hashes.append((nslots, dest))
            nslots += 1
            size += n
        else:
            view = np.asarray(dest).reshape(-1).view(np.uint8)
            multi[i] = (nslots, -(-n // chunk))
            for c in range(0, n, chunk):
                if size >= limit or len(iovs) >= _IOV_MAX:
                    pieces.append((pos, iovs, size, hashes, first, i + 1))
                    iovs, hashes, pos, size, first = [], [], pos + size, 0, i
                part = view[c:c + chunk]
                iovs.append(part)
                hashes.append((nslots, part))
                nslots += 1
                size += n - c if n - c < chunk else chunk
        hi = i + 1
        end = rec + g + n
    if iovs:
        pieces.append((pos, iovs, size, hashes, first, hi))
    return pieces, slots, multi, nslots


def _preadv_fully(fd: int, iovs: list, pos: int, size: int) -> bool:
    """Fill every buffer of ``iovs`` (``size`` bytes in all) from ``pos`` on; False if
    the file ends first."""
    n = os.preadv(fd, iovs, pos)
    if n == size:
        return True
    views = [memoryview(v).cast("B") for v in iovs]
    while True:
        if n <= 0:
            return False
        pos += n
        views = _after(views, n)
        if not views:
            return True
        n = os.preadv(fd, views, pos)


def _after(views: list, n: int) -> list:
    """What is left of ``views`` once their first ``n`` bytes are done."""
    i = 0
    while i < len(views) and n >= views[i].nbytes:
        n -= views[i].nbytes
        i += 1
    rest = views[i:]
    if rest and n:
        rest[0] = rest[0][n:]
    return rest


def _run_all(items: list, work, parallel: bool) -> None:
    """``work(item)`` for every item, by this thread and the helpers, in turns."""
    it, stop = iter(items), []

    def drain():
        try:
            for item in it:  # (a list iterator hands each item out once, whichever thread asks)
                if stop:
                    return
                work(item)
        except BaseException:
            stop.append(True)  # the others stop at their next item
            raise

    futures = []
    if parallel and len(items) > 1:
        pool, n = _helpers()
        futures = [pool.submit(drain) for _ in range(min(n, len(items) - 1))]
    try:
        drain()
    finally:
        for f in futures:  # the helpers may still be using the fd and the buffers
            f.result()


# --- writing

class Writer:
    """Writes records at the end of an open file, ``add`` by ``add``, and hashes their
    payloads; after ``finish``, ``records``, ``offsets`` and ``digests`` hold each
    record's position, its payload's position and its payload's checksum."""

    def __init__(self, fd: int, pos: int, scheme: Checksum):
        self.fd, self.pos, self.scheme = fd, pos, scheme
        self.records: list = []
        self.offsets: list = []
        self.digests: list = []
        self._iovs: list = []
        self._payloads: list = []  # of the batch being gathered
        self._size = 0

    def add(self, gap: bytes, payload: memoryview) -> None:
        """Append ``gap`` then ``payload`` (written when the batch is full)."""
        pos, g, n = self.pos, len(gap), payload.nbytes
        self.records.append(pos)
        self.offsets.append(pos + g)
        self._iovs += (gap, payload)
        self._payloads.append(payload)
        self.pos = pos + g + n
        self._size += g + n
        if self._size >= BATCH or len(self._iovs) >= _IOV_MAX:
            self.flush()

    def flush(self) -> None:
        if not self._iovs:
            return
        payloads, of = self._payloads, self.scheme.of
        run = lambda: [of(p) for p in payloads]  # noqa: E731
        # Large payloads are hashed by the helper while this thread writes them. Many small
        # ones are hashed here, after the write, while the copy left them in the cache:
        # handing the GIL back and forth at every small piece costs more than the hashing.
        helper = self._size >= PARALLEL_MIN and len(payloads) <= self._size // _HELPER_PIECE
        fut = _helpers()[0].submit(run) if helper else None
        write_all(self.fd, self._iovs)
        if EARLY_WRITEBACK:
            _start_writeback(self.fd, self.pos - self._size, self._size)
        self.digests += fut.result() if fut is not None else run()
        self._iovs, self._payloads, self._size = [], [], 0

    def finish(self) -> None:
        self.flush()


EARLY_WRITEBACK = True


def _libc_sync_file_range():
    try:
        import ctypes
        import ctypes.util
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return fn


_sync_file_range = _libc_sync_file_range() if os.name == "posix" else None


def _start_writeback(fd: int, pos: int, size: int) -> None:
    """Have the kernel start writing ``size`` bytes at ``pos`` to the disk now, without
    waiting (Linux's sync_file_range, SYNC_FILE_RANGE_WRITE): the disk then works while
    the next batch is copied, and the closing fsync finds less to do."""
    if _sync_file_range is not None:
        _sync_file_range(fd, pos, size, 2)


def write_all(fd: int, iovs: list) -> None:
    """Write every buffer of ``iovs`` at the file position (``writev`` until done)."""
    views = [memoryview(v) for v in iovs]
    while views:
        views = _after(views, os.writev(fd, views))
