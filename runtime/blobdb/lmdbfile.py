"""Reading an LMDB database (a directory holding ``data.mdb``) without mapping it: every
page is read with ``pread``, and every page number, offset and size in it is checked
against its page and the file before it is used, so a file cut short or crafted is an
error naming the file and the page, never a signal.

Why not through the ``lmdb`` library: it maps the file and believes it. It checks a page
number against the meta page's last page, nothing more: a last page past the file's end,
a node whose data size runs past its page, an overflow value longer than the file, each
makes it read a mapped page no byte of the file backs, which the kernel answers with
SIGBUS (a crafted 12 KiB file is enough). Writing still goes through the library.

The layout read (LMDB 0.9's data format, version 1, as a 64-bit little-endian machine
writes it; anything else is refused):

    page   u64 pgno  u16 pad  u16 flags  u16 lower  u16 upper  u16 ptrs[]     (16-byte header)
           an overflow page has u32 pages where lower and upper are; its data follows the header
    meta   pages 0 and 1, after the header: u32 magic  u32 version  u64 address  u64 mapsize
           db free  db main  u64 last_pgno  u64 txnid       (the one with the larger txnid holds)
    db     u32 psize (free db's)  u16 flags  u16 depth  u64 branch  u64 leaf  u64 overflow
           u64 entries  u64 root
    node   u16 lo  u16 hi  u16 flags  u16 ksize  key  data   at ptrs[i] in its page; a leaf's
           data size is lo | hi << 16 (its data, or with F_BIGDATA the u64 page of its
           overflow pages); a branch node's child page is lo | hi << 16 | flags << 32
"""
from __future__ import annotations

import os
import struct
from typing import NamedTuple

from .base import CorruptDBError, MissingDBError

MAGIC, VERSION = 0xBEEFC0DE, 1
HEADER = struct.Struct("<QHHHH")           # pgno, pad, flags, lower, upper
PAGEHDRSZ = HEADER.size                    # 16
META = struct.Struct("<IIQQ")              # magic, version, address, mapsize
DB = struct.Struct("<IHHQQQQQ")            # pad (psize), flags, depth, branch, leaf, overflow, entries, root
TAIL = struct.Struct("<QQ")                # last_pgno, txnid
NODE = struct.Struct("<HHHH")              # lo, hi, flags, ksize
P_BRANCH, P_LEAF, P_OVERFLOW, P_META, P_LEAF2, P_SUBP = 0x01, 0x02, 0x04, 0x08, 0x20, 0x40
F_BIGDATA, F_SUBDATA, F_DUPDATA = 0x01, 0x02, 0x04
DUPSORT, INTEGERKEY, REVERSEKEY = 0x04, 0x08, 0x02
FREE_FLAGS = 0x4009                        # the free pages' db: INTEGERKEY, and the env's FIXEDMAP, NOSUBDIR
MAX_DEPTH = 32                             # LMDB's own cursor stack
NO_PAGE = (1 << 64) - 1                    # an empty tree's root
_HINT = "the database was changed or cut short after it was written; write it again"


class Value(NamedTuple):
    """Where a record's value lies: ``data`` (on its leaf page), or ``size`` bytes at
    ``offset`` in the file (on overflow pages, read when asked for)."""

    data: bytes | None
    offset: int
    size: int


class LmdbFile:
    """One LMDB database, read-only: ``get(key)``, ``records()`` in key order, ``read(value)``."""

    def __init__(self, path: str):
        self.path = path
        data = os.path.join(path, "data.mdb")
        try:
            self.fd = os.open(data, os.O_RDONLY)
        except FileNotFoundError:
            raise MissingDBError(f"{path} holds no lmdb database (it has no data.mdb)",
                                 hint="check the path names a directory lmdb wrote") from None
        except OSError as e:
            raise CorruptDBError(f"cannot open the lmdb database {path}: {e.strerror}",
                                 hint="check the file's permissions") from None
        try:
            self.size = os.fstat(self.fd).st_size
            self._meta()
        except BaseException:
            os.close(self.fd)
            raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _bad(self, what: str) -> CorruptDBError:
        return CorruptDBError(f"the lmdb database {self.path} is damaged: {what}", hint=_HINT)

    # --- the meta pages
    def _meta(self) -> None:
        """Read both meta pages as LMDB does (each must be valid; the larger txnid holds)."""
        best, psize = None, 0
        for i in range(2):
            at = i * psize
            raw = os.pread(self.fd, PAGEHDRSZ + META.size + 2 * DB.size + TAIL.size, at)
            if len(raw) < PAGEHDRSZ + META.size + 2 * DB.size + TAIL.size:
                raise self._bad(f"it is cut short ({self.size} bytes) inside meta page {i}")
            flags = HEADER.unpack_from(raw)[2]
            magic, version, _, _ = META.unpack_from(raw, PAGEHDRSZ)
            if not flags & P_META or magic != MAGIC:
                raise CorruptDBError(f"{self.path} is not an lmdb database (meta page {i} has no LMDB magic "
                                     "number; or it was written on a 32-bit or big-endian machine)", hint=_HINT)
            if version != VERSION:
                raise CorruptDBError(f"the lmdb database {self.path} has data format {version}; dslc reads "
                                     f"format {VERSION} (LMDB 0.9)", hint="write it with LMDB 0.9")
            free = DB.unpack_from(raw, PAGEHDRSZ + META.size)
            main = DB.unpack_from(raw, PAGEHDRSZ + META.size + DB.size)
            last, txnid = TAIL.unpack_from(raw, PAGEHDRSZ + META.size + 2 * DB.size)
            if i == 0:
                psize = free[0]
                if psize < 256 or psize > 1 << 16 or psize & (psize - 1):
                    raise self._bad(f"its page size {psize} is not a power of two from 256 to 65536")
            if best is None or txnid > best[0]:
                best = (txnid, main, last, free)
        self.psize = psize
        _, main, self.last, self.free = best
        self.main = main
        self.flags, self.root = main[1], main[7]
        # pages past the file's end are never read, whatever the meta page says
        self.pages = min(self.last + 1, self.size // psize)
        if self.flags & DUPSORT:
            raise CorruptDBError(f"the lmdb database {self.path} keeps several values per key (MDB_DUPSORT), "
                                 "which dslc does not read", hint="write one value per key")

    # --- pages and nodes
    def _page(self, pgno: int, want: int) -> tuple:
        """(bytes, flags, node offsets) of branch or leaf page ``pgno`` (``want``: which)."""
        if not 2 <= pgno < self.pages:
            raise self._bad(f"a node points at page {pgno}, outside its {self.pages} pages")
        raw = os.pread(self.fd, self.psize, pgno * self.psize)
        if len(raw) != self.psize:
            raise self._bad(f"page {pgno} is cut short")
        _, _, flags, lower, upper = HEADER.unpack_from(raw)
        if not flags & want or flags & (P_LEAF2 | P_SUBP | P_OVERFLOW | P_META):
            raise self._bad(f"page {pgno} is not the {'branch' if want == P_BRANCH else 'leaf'} page its "
                            f"parent says (flags {flags:#x})")
        if not PAGEHDRSZ <= lower <= upper <= self.psize or (lower - PAGEHDRSZ) % 2:
            raise self._bad(f"page {pgno} has free space bounds {lower}..{upper}")
        n = (lower - PAGEHDRSZ) // 2
        ptrs = struct.unpack_from(f"<{n}H", raw, PAGEHDRSZ)
        if n and (min(ptrs) < upper or max(ptrs) > self.psize - NODE.size):
            raise self._bad(f"a node of page {pgno} lies outside the page")
        if want == P_BRANCH and not n:
            raise self._bad(f"branch page {pgno} is empty")
        return raw, ptrs

    def _node(self, raw: bytes, at: int, pgno: int) -> tuple:
        """(key, lo | hi << 16, flags, where its data starts) of the node at ``at``."""
        lo, hi, flags, ksize = NODE.unpack_from(raw, at)
        start = at + NODE.size
        if start + ksize > self.psize:
            raise self._bad(f"a key on page {pgno} runs past the page")
        return raw[start:start + ksize], lo | hi << 16, flags, start + ksize

    def _child(self, raw: bytes, at: int, pgno: int) -> int:
        _, low, flags, _ = self._node(raw, at, pgno)
        return low | flags << 32

    def _value(self, raw: bytes, at: int, pgno: int) -> tuple:
        """(key, Value) of the leaf node at ``at``."""
        key, size, flags, start = self._node(raw, at, pgno)
        if flags & (F_SUBDATA | F_DUPDATA):
            raise CorruptDBError(f"the lmdb database {self.path} holds named sub-databases or duplicate "
                                 "values, which dslc does not read", hint="write one plain value per key")
        if not flags & F_BIGDATA:
            if start + size > self.psize:
                raise self._bad(f"a value on page {pgno} runs past the page ({size} bytes)")
            return key, Value(raw[start:start + size], 0, size)
        if start + 8 > self.psize:
            raise self._bad(f"a node of page {pgno} runs past the page")
        (first,) = struct.unpack_from("<Q", raw, start)
        pages = (PAGEHDRSZ - 1 + size) // self.psize + 1
        if not 2 <= first < self.pages or pages > self.pages - first:
            raise self._bad(f"a value of {size} bytes on page {pgno} would lie on pages {first}.."
                            f"{first + pages - 1}, past the file's {self.pages}")
        return key, Value(None, first * self.psize + PAGEHDRSZ, size)

    # --- reading
    def read(self, value: Value, into=None):
        """The bytes of ``value`` (into the writable buffer ``into``, of its size, if given)."""
        if value.data is not None:
            if into is None:
                return value.data
            memoryview(into).cast("B")[:] = value.data
            return into
        head = os.pread(self.fd, PAGEHDRSZ, value.offset - PAGEHDRSZ)
        if len(head) != PAGEHDRSZ or not HEADER.unpack_from(head)[2] & P_OVERFLOW:
            raise self._bad(f"the overflow page at byte {value.offset - PAGEHDRSZ} is not one")
        if into is None:
            raw = os.pread(self.fd, value.size, value.offset)
            if len(raw) != value.size:
                raise self._bad(f"a value at byte {value.offset} is cut short")
            return raw
        view, at = memoryview(into).cast("B"), 0
        while at < value.size:  # (one preadv reads at most 2 GiB)
            got = os.preadv(self.fd, [view[at:]], value.offset + at)
            if got <= 0:
                raise self._bad(f"a value at byte {value.offset} is cut short")
            at += got
        return into

    def get(self, key: bytes) -> Value | None:
        """The value stored under ``key``, or None (keys compared as LMDB's default does)."""
        if self.flags & (INTEGERKEY | REVERSEKEY):
            raise CorruptDBError(f"the lmdb database {self.path} orders its keys its own way "
                                 f"(flags {self.flags:#x}); dslc looks keys up in plainly ordered ones",
                                 hint="write it with the default key order")
        pgno = self.root
        if pgno == NO_PAGE:
            return None
        for _ in range(MAX_DEPTH):
            raw, ptrs = self._page(pgno, P_BRANCH | P_LEAF)
            if HEADER.unpack_from(raw)[2] & P_LEAF:
                lo, hi = 0, len(ptrs)
                while lo < hi:  # (the node with this very key)
                    mid = (lo + hi) // 2
                    k = self._node(raw, ptrs[mid], pgno)[0]
                    if k == key:
                        return self._value(raw, ptrs[mid], pgno)[1]
                    lo, hi = (mid + 1, hi) if k < key else (lo, mid)
                return None
            lo, hi = 1, len(ptrs)  # (the last child whose first key is <= key; node 0's key is -inf)
            while lo < hi:
                mid = (lo + hi) // 2
                if self._node(raw, ptrs[mid], pgno)[0] <= key:
                    lo = mid + 1
                else:
                    hi = mid
            pgno = self._child(raw, ptrs[lo - 1], pgno)
        raise self._bad(f"its tree is deeper than {MAX_DEPTH} pages")

    def records(self, db=None):
        """(key, Value) of every record of the main database (or of ``db``, a DB tuple), in
        the tree's order. A tree that goes round, or holds more records than its header
        says, is an error (each pass is finite)."""
        _, flags, _, _, _, _, entries, root = db or self.main
        if root == NO_PAGE:
            return
        ordered = not flags & (INTEGERKEY | REVERSEKEY)
        count, last = 0, None
        stack = [self._frame(root)]  # [pgno, page, node offsets, next node, leaf?] per level
        while stack:
            frame = stack[-1]
            pgno, raw, ptrs, i, leaf = frame
            if i == len(ptrs):
                stack.pop()
                continue
            frame[3] = i + 1
            if not leaf:
                if len(stack) == MAX_DEPTH:
                    raise self._bad(f"its tree is deeper than {MAX_DEPTH} pages")
                stack.append(self._frame(self._child(raw, ptrs[i], pgno)))
                continue
            key, value = self._value(raw, ptrs[i], pgno)
            count += 1
            if count > entries or (ordered and last is not None and key <= last):
                raise self._bad(f"its tree holds records out of order, or more than the {entries} "
                                "its header counts")
            last = key
            yield key, value

    def _frame(self, pgno: int) -> list:
        raw, ptrs = self._page(pgno, P_BRANCH | P_LEAF)
        return [pgno, raw, ptrs, 0, bool(HEADER.unpack_from(raw)[2] & P_LEAF)]

    def check(self) -> None:
        """Walk every page the lmdb library would touch to write to this database (its main
        tree, each overflow page's header, its tree of free pages and their lists), so that
        a damaged file is refused before the library maps it: it would fault on it too,
        or stop at one of its assertions. Only the kind of database dslc and Caffe2 write
        passes: plain keys, one value each; free pages listed under 8-byte keys."""
        free_flags = self.free[1]
        if self.flags or free_flags & ~FREE_FLAGS or not free_flags & INTEGERKEY:
            raise self._bad(f"its databases have flags {self.flags:#x} and {free_flags:#x}; dslc writes "
                            "to plain ones only")
        for _, value in self.records():
            if value.data is None:
                head = os.pread(self.fd, PAGEHDRSZ, value.offset - PAGEHDRSZ)
                flags, pages = (struct.unpack_from("<2xHI", head, 8) if len(head) == PAGEHDRSZ else (0, 0))
                first = (value.offset - PAGEHDRSZ) // self.psize  # (LMDB frees this many pages from there)
                if not flags & P_OVERFLOW or not (PAGEHDRSZ - 1 + value.size) // self.psize + 1 <= pages \
                        <= self.last + 1 - first:
                    raise self._bad(f"the overflow page at byte {value.offset - PAGEHDRSZ} does not hold "
                                    f"the {value.size} bytes its node says")
        for key, value in self.records(self.free):
            if len(key) != 8:
                raise self._bad("a key of its list of free pages is not 8 bytes")
            raw = self.read(value)
            count = struct.unpack_from("<Q", raw)[0] if len(raw) >= 8 else -1
            if len(raw) % 8 or count != len(raw) // 8 - 1 or \
                    any(not 2 <= p <= self.last for p in struct.unpack_from(f"<{max(count, 0)}Q", raw, 8)):
                raise self._bad("a list of its free pages is not one")


def check_existing(path: str) -> None:
    """Refuse a damaged database at ``path`` before the lmdb library opens it to write
    (nothing there, or an empty file, is a new database)."""
    data = os.path.join(path, "data.mdb")
    if os.path.exists(data) and os.path.getsize(data) > 0:
        with LmdbFile(path) as db:
            db.check()
