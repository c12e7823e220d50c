"""Collective payloads between node processes of one machine, through shared memory.

Ray's object store costs ~5 ms per 3 MB put on this kind of machine (it was most of a
data-parallel step); a memcpy into a mapped file costs a tenth of that. A sender keeps,
per collective group, one segment of two slots under /dev/shm (a file only its user can
read, opened O_EXCL), writes round k's arrays into slot k % 2, and sends the peers a
small descriptor (``Outbox.pack``) by the actor call it would have sent the arrays with.
A receiver maps the segment read-only (``Inbox.unpack``) and reads the arrays in place.

Why two slots suffice: a sender writes slot k % 2 again only in round k + 2, which it
cannot start before it received every peer's round k + 1 payload, and a peer sends that
only after its round-k call returned and consumed what it received (the collective
kernels sum, copy or join the payloads before they return). So a view handed out by
``unpack`` is valid until the receiver's next call in that group, and no longer.

Files are unlinked as soon as every peer has mapped them (a mapping outlives its name):
a segment loses its name when it is written the third time (every peer took the first
payload by then), when it grows (replaced by a new file), and when the driver says the
run is over on every node (``Outbox.release``). What a killed process leaves lives in
the cluster's own directory (``DSLC_SHM_DIR``), removed when dslc stops the cluster.
"""
from __future__ import annotations

import mmap
import os
import re
import secrets
import stat
from typing import NamedTuple

import numpy as np

ROOT = "/dev/shm"
ALIGN = 64
_NAME = re.compile(r"dslc-\d+-[0-9a-f]{16}")


def root() -> str:
    """Where segments go: the cluster's own directory when dslc started the cluster
    (``DSLC_SHM_DIR``, removed when it stops, also by its watchdog), else /dev/shm."""
    path = os.environ.get("DSLC_SHM_DIR") or ROOT
    if path != ROOT:
        os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def available() -> bool:
    """Whether segments can go to ``root()`` safely: a real directory, and the cluster's own
    one only if this user owns it and nobody else may enter it (else payloads go by value)."""
    if not (os.path.isdir(ROOT) and os.access(ROOT, os.W_OK)):
        return False
    try:
        path = root()
        st = os.lstat(path)
    except OSError:
        return False
    if path == ROOT:
        return True
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _flat(payload):
    """(kind, arrays): the payloads collectives exchange are an array, a list of arrays, or None."""
    if payload is None:
        return "none", []
    if isinstance(payload, np.ndarray):
        return "array", [payload]
    if isinstance(payload, list) and all(isinstance(a, np.ndarray) for a in payload):
        return "list", payload
    return None, None


def _shareable(arrays) -> bool:
    return all(a.dtype.kind in "biufc" for a in arrays)


class _Segment:
    def __init__(self, slot_bytes: int):
        self.slot = slot_bytes
        self.path = os.path.join(root(), f"dslc-{os.getpid()}-{secrets.token_hex(8)}")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, 2 * slot_bytes)
            self.map = mmap.mmap(fd, 2 * slot_bytes)
        finally:
            os.close(fd)
        self.packs = 0  # payloads written so far
        self.named = True

    def unlink(self) -> None:
        if self.named:
            self.named = False
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


class Outbox:
    """A sender's segments, one per collective group."""

    def __init__(self):
        self._segments: dict = {}  # group -> _Segment

    def pack(self, group: str, seq: int, payload):
        """``payload`` written to shared memory: its ShmPayload, or None (send it by value)."""
        kind, arrays = _flat(payload)
        if kind is None or not _shareable(arrays):
            return None
        offsets, size = [], 0
        for a in arrays:
            offsets.append(size)
            size += -(-a.nbytes // ALIGN) * ALIGN
        seg = self._segments.get(group)
        if seg is not None and seg.packs >= 2:
            seg.unlink()  # (every peer mapped it: see the module docstring)
        if seg is None or seg.slot < size:
            if seg is not None:
                seg.unlink()
            seg = self._segments[group] = _Segment(max(size, 1 << 16) * 5 // 4)
        seg.packs += 1
        base = (seq % 2) * seg.slot
        metas = []
        for a, off in zip(arrays, offsets):
            view = np.ndarray(a.shape, a.dtype, buffer=seg.map, offset=base + off)
            np.copyto(view, a, casting="no")
            metas.append((a.dtype.str, a.shape, base + off))
        return ShmPayload(seg.path, 2 * seg.slot, kind, metas)

    def release(self) -> None:
        """Unlink every segment: call once every peer's run is over (all mapped theirs)."""
        for seg in self._segments.values():
            seg.unlink()

    def close(self) -> None:
        self.release()
        self._segments.clear()


class Inbox:
    """A receiver's mappings of its peers' segments."""

    def __init__(self):
        self._maps: dict = {}  # path -> mmap

    def unpack(self, desc: "ShmPayload"):
        path, size, kind, metas = desc
        m = self._maps.get(path)
        if m is None:
            # only a segment a peer of this cluster made: never any other file a message names
            if os.path.dirname(path) != root() or not _NAME.fullmatch(os.path.basename(path)):
                raise ValueError(f"not a collective segment: {path!r}")
            try:  # (never through a symlink, even in the cluster's own directory; a fifo never blocks)
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as e:
                raise ValueError(f"not a collective segment: {path!r} ({e.strerror})") from None
            try:
                why = _not_a_segment(os.fstat(fd), size)
                if why:
                    raise ValueError(f"not a collective segment: {path!r} ({why})")
                m = self._maps[path] = mmap.mmap(fd, size, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
        arrays = [np.ndarray(shape, np.dtype(dt), buffer=m, offset=off) for dt, shape, off in metas]
        return None if kind == "none" else arrays[0] if kind == "array" else arrays


def _not_a_segment(st, size: int) -> str:
    """Why the opened file is not a segment a peer of this user made as ``_Segment`` does, or ""."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        return "not this user's private file"
    if st.st_size < size:
        return f"{st.st_size} bytes, not {size}"
    return ""


class ShmPayload(NamedTuple):
    """Where a payload lies in a sender's segment (what travels instead of the arrays)."""

    path: str
    size: int
    kind: str    # "none", "array" or "list"
    metas: list  # (dtype str, shape, offset) of each array
