"""The I/O under ``dbfile``: payloads go between the file and the arrays' own buffers
with no copy in between, and their checksums are computed while the I/O runs.

Reading: the blobs wanted are cut along the file into pieces of about one checksum
chunk. A piece is one ``preadv`` straight into the destination arrays (the record
headers and padding between payloads go to small scratch buffers, compared with
what they must hold). Two threads take pieces in turn, and each hashes the piece it
just read while it is still in the CPU cache.

Writing: blobs are gathered into batches of about ``BATCH`` bytes. The hashing of a
batch goes to the helper thread, then the batch is written with ``writev`` from the
arrays' buffers, so the hashing overlaps the copy into the page cache.

The checksum libraries (xxhash, zlib) release the GIL on large buffers, so the
threads really run at once.
"""
from __future__ import annotations

import os
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np
import xxhash

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
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
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

@dataclass(slots=True, eq=False)
class Wanted:
    """One blob to read: where it is, the bytes before its payload (record header, name,
    padding), where its payload goes; the readers fill in ``digests`` and the flags."""

    name: str
    record: int
    offset: int
    gap: bytes
    dest: memoryview  # writable bytes, the payload's length
    digests: list = field(default_factory=list)
    bad_gap: bool = False
    cut: bool = False


@dataclass(slots=True, eq=False)
class _Piece:
    pos: int
    iovs: list = field(default_factory=list)
    size: int = 0
    gaps: list = field(default_factory=list)  # (Wanted, scratch buffer)
    hashes: list = field(default_factory=list)  # (Wanted, chunk number, view)

    def add(self, buf) -> None:
        self.iovs.append(buf)
        self.size += memoryview(buf).nbytes


def _pieces(blobs: list, scheme: Checksum) -> list:
    """The reads for ``blobs`` (sorted by position): contiguous runs of records cut into
    pieces of about one chunk (at most _IOV_MAX buffers each)."""
    limit = scheme.chunk or (1 << 20)
    out: list[_Piece] = []
    cur: _Piece | None = None
    for b in blobs:
        if cur is None or cur.pos + cur.size != b.record or cur.size >= limit or len(cur.iovs) >= _IOV_MAX - 2:
            cur = _Piece(b.record)
            out.append(cur)
        scratch = bytearray(len(b.gap))
        cur.add(scratch)
        cur.gaps.append((b, scratch))
        chunks = scheme.chunks(b.dest)
        b.digests = [0] * len(chunks)
        for i, c in enumerate(chunks):
            if cur.size >= limit or len(cur.iovs) >= _IOV_MAX:
                cur = _Piece(cur.pos + cur.size)
                out.append(cur)
            cur.add(c)
            cur.hashes.append((b, i, c))
    return out


def _preadv_fully(fd: int, iovs: list, pos: int) -> bool:
    """Fill every buffer of ``iovs`` from ``pos`` on; False if the file ends first."""
    views = [memoryview(v) for v in iovs]
    while views:
        n = os.preadv(fd, views, pos)
        if n <= 0:
            return False
        pos += n
        views = _after(views, n)
    return True


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


def _read_piece(fd: int, p: _Piece, scheme: Checksum) -> None:
    if not _preadv_fully(fd, p.iovs, p.pos):
        for b, _ in p.gaps:
            b.cut = True
        for b, _, _ in p.hashes:
            b.cut = True
        return
    for b, scratch in p.gaps:
        if scratch != b.gap:
            b.bad_gap = True
    for b, i, view in p.hashes:
        b.digests[i] = scheme.hash(view)


def read_into(fd: int, blobs: list, scheme: Checksum) -> None:
    """Read every blob's payload into its ``dest`` and hash it; the caller then checks
    ``bad_gap``, ``cut`` and ``scheme.combine(digests)`` of each."""
    pieces = _pieces(sorted(blobs, key=lambda b: b.record), scheme)
    total = sum(p.size for p in pieces)
    _run_all(pieces, lambda p: _read_piece(fd, p, scheme), parallel=total >= PARALLEL_MIN)


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
    payloads on the helper thread; ``finish`` gives each index item its checksum."""

    def __init__(self, fd: int, pos: int, scheme: Checksum):
        self.fd, self.pos, self.scheme = fd, pos, scheme
        self._iovs: list = []
        self._jobs: list = []  # (index item, chunks) of the batch being gathered
        self._size = 0
        self._pending: list = []  # (index items, future of their digests)

    def add(self, gap: bytes, payload: memoryview, item: dict) -> None:
        """Append ``gap`` then ``payload``; ``item`` gets the payload's checksum at ``finish``."""
        self._iovs += (gap, payload)
        self._jobs.append((item, self.scheme.chunks(payload)))
        self._size += len(gap) + payload.nbytes
        self.pos += len(gap) + payload.nbytes
        if self._size >= BATCH or len(self._iovs) >= _IOV_MAX:
            self.flush()

    def flush(self) -> None:
        if not self._iovs:
            return
        jobs, hash_ = [chunks for _, chunks in self._jobs], self.scheme.hash
        run = lambda: [[hash_(c) for c in chunks] for chunks in jobs]  # noqa: E731
        # Large pieces are hashed by the helper while this thread writes them. Many small
        # ones are hashed here, after the write, while the copy left them in the cache:
        # handing the GIL back and forth at every small piece costs more than the hashing.
        helper = self._size >= PARALLEL_MIN and len(self._iovs) <= 2 * self._size // _HELPER_PIECE
        fut = _helpers()[0].submit(run) if helper else None
        write_all(self.fd, self._iovs)
        if EARLY_WRITEBACK:
            _start_writeback(self.fd, self.pos - self._size, self._size)
        self._pending.append(([item for item, _ in self._jobs], fut or _Done(run())))
        self._iovs, self._jobs, self._size = [], [], 0

    def finish(self) -> None:
        self.flush()
        for items, fut in self._pending:
            for item, digests in zip(items, fut.result()):
                item[self.scheme.field] = self.scheme.combine(digests)
        self._pending = []


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
