"""``dslcdb``: a checkpoint as one file, written to a temporary file,
fsynced and renamed into place, so a reader sees the whole old file or the whole new one.

Layout (little-endian; docs/checkpoints.md has the details):

    "DSLCDB2\\n"                                    8-byte file magic ("DSLCDB1\\n": format 1)
    per blob:  "BLOB" u32 name_len u64 data_len     a record header, then the UTF-8 name,
               zero padding to a 64-byte boundary,   so every payload starts aligned,
               payload                               then the payload bytes
    manifest   JSON: every blob's name, kind, dtype, shape, offset, length, checksum
    trailer    u64 manifest_offset  u64 manifest_len  u64 xxh3(manifest)
               "DSLCEND\\n"                            32 bytes in all

Format 2 checksums with XXH3-64 (in 1 MiB chunks, see ``dbio.Checksum``); format 1,
still read, with zlib's CRC-32 (its trailer: u32 crc32, 4 zero bytes). The trailer is
written last, so a file cut short has none; the record headers then say which blob
the cut went through. Every payload, and the bytes between payloads, is checked
before Load returns anything. ``dbio`` moves the bytes.
"""
from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, replace

import numpy as np

from .. import partials
from . import base, dbio, manifest
from ..files import fsync_dir
from ..blobcodec import BlobEncodingError, allocate_all, from_buffer
from .base import CorruptDBError, DBTypeError, IncompleteDBError, MissingDBError
from .manifest import Index, rows_text

END = b"DSLCEND\n"
RECORD = struct.Struct("<4sIQ")
ALIGN = 64


@dataclass(frozen=True)
class Format:
    """What differs between the format versions: the magic, the trailer's manifest
    checksum, and the payloads' checksum."""

    number: int
    magic: bytes
    trailer: struct.Struct
    manifest_hash: object
    payload: dbio.Checksum


V1 = Format(1, b"DSLCDB1\n", struct.Struct("<QQI4x8s"), zlib.crc32, dbio.CRC32)
V2 = Format(2, b"DSLCDB2\n", struct.Struct("<QQQ8s"), dbio.XXH3.hash, dbio.XXH3)
CURRENT = V2
FORMATS = {f.magic: f for f in (V1, V2)}
MAGIC, TRAILER, FORMAT_VERSION = CURRENT.magic, CURRENT.trailer, CURRENT.number
MAGIC_SIZE = len(MAGIC)  # (the same for every version, and so is the trailer's size)


class FileDB:
    """The single-file blob database (see the module docstring for the layout)."""

    name = base.DEFAULT_DB_TYPE

    # --- writing
    def write(self, path: str, entries) -> None:
        write_atomically(path, lambda f: self._write_all(f.fileno(), entries), buffering=0)

    def _write_all(self, fd: int, entries) -> None:
        dbio.write_all(fd, [MAGIC])
        w = dbio.Writer(fd, MAGIC_SIZE, CURRENT.payload)
        names, metas = [], []
        for name, enc in entries:
            self._put(w, name, enc, names, metas)
        w.finish()
        manifest = rows_text({"format": CURRENT.number, "chunk": CURRENT.payload.chunk}, names, metas, [
            ("record", w.records), ("offset", w.offsets), ("length", [e.data.nbytes for e in metas]),
            (CURRENT.payload.field, w.digests)]).encode("utf-8")
        dbio.write_all(fd, [manifest, TRAILER.pack(w.pos, len(manifest), CURRENT.manifest_hash(manifest), END)])

    def _put(self, w: dbio.Writer, name: str, enc, names: list, metas: list) -> None:
        """Add one blob's record at the writer's position (written when its batch is full)."""
        w.add(_gap(w.pos, name.encode("utf-8"), enc.data.nbytes), enc.data)
        names.append(name)
        metas.append(enc)

    # --- reading
    def exists(self, path: str) -> bool:
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < MAGIC_SIZE + TRAILER.size or f.read(MAGIC_SIZE) not in FORMATS:
                    return False
                f.seek(size - TRAILER.size)
                return f.read(TRAILER.size)[-len(END):] == END
        except OSError:
            return False

    def keys(self, path: str) -> list[str]:
        fd = self._open(path)
        try:
            return list(self._manifest(fd, path)[1].names)
        finally:
            os.close(fd)

    def read(self, path: str, names=None) -> dict:
        fd = self._open(path)
        try:
            fmt, index, end = self._manifest(fd, path)
            wanted, pick = index.select(f"the checkpoint {path}", names)
            order = np.argsort(index.record[pick], kind="stable")  # file order, for few long reads
            at = pick[order]
            raws = [index.names[i].encode("utf-8") for i in at.tolist()]
            gap_lens = _check_places(path, index, pick, order, raws, end)
            dests = _allocated(path, index, pick)
            got = dbio.read_blobs(fd, index.record[at].tolist(), gap_lens.tolist(),
                                  [dests[k] for k in order.tolist()], index.length[at].tolist(), fmt.payload)
            _verify(path, index, at, order, raws, gap_lens, got)
            return _decoded(path, index, wanted, pick, dests)
        finally:
            os.close(fd)

    def _open(self, path: str) -> int:
        if os.path.isdir(path):
            other = "an lmdb database; pass db_type='lmdb'" if os.path.exists(os.path.join(path, "data.mdb")) \
                else "a directory, not a dslcdb checkpoint file"
            raise DBTypeError(f"{path} is {other}", hint="give the db_type the checkpoint was saved with")
        try:
            return os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise MissingDBError(f"there is no checkpoint at {path}",
                                 hint="check the db name and epoch (DBExists tells whether a checkpoint is "
                                      "there)") from None
        except OSError as e:
            raise base.DBError(f"cannot open the checkpoint {path}: {e.strerror}",
                                 hint="check the file's permissions") from None

    def _manifest(self, fd: int, path: str) -> tuple:
        """(format, blob index, manifest offset) of the checkpoint open at ``fd``."""
        size = os.fstat(fd).st_size
        fmt = self._format(fd, path, size)
        trailer = fmt.trailer
        tail = os.pread(fd, trailer.size, max(0, size - trailer.size)) if size >= MAGIC_SIZE + trailer.size \
            else b""
        if len(tail) != trailer.size or tail[-len(END):] != END:
            raise CorruptDBError(f"the checkpoint {path} is cut short ({size} bytes): "
                                 f"{self._cut_blob(fd, size)}", hint=_CORRUPT_HINT)
        offset, length, digest, _ = trailer.unpack(tail)
        if offset + length + trailer.size != size:
            raise CorruptDBError(f"the end marker of the checkpoint {path} is damaged", hint=_CORRUPT_HINT)
        raw = os.pread(fd, length, offset)
        if fmt.manifest_hash(raw) != digest:
            raise CorruptDBError(f"the manifest (the index of blob names, dtypes and shapes) of the "
                                 f"checkpoint {path} is damaged", hint=_CORRUPT_HINT)
        try:
            doc = manifest.parse(raw)
            index = Index(doc["blobs"], fmt.payload.field, placed=True)
        except (ValueError, KeyError, TypeError, OverflowError) as e:
            raise CorruptDBError(f"the manifest of the checkpoint {path} is not valid: {e}",
                                 hint=_CORRUPT_HINT) from None
        if doc.get("format") != fmt.number:
            raise DBTypeError(f"the checkpoint {path} has format {doc.get('format')!r}; this dslc reads "
                              f"formats {', '.join(str(f.number) for f in FORMATS.values())}",
                              hint="load it with the dslc that wrote it")
        try:
            return replace(fmt, payload=dbio.as_in_manifest(fmt.payload, doc)), index, offset
        except ValueError as e:
            raise CorruptDBError(f"the manifest of the checkpoint {path} is not valid: {e}",
                                 hint=_CORRUPT_HINT) from None

    def _format(self, fd: int, path: str, size: int) -> Format:
        head = os.pread(fd, MAGIC_SIZE, 0)
        fmt = FORMATS.get(head)
        if fmt is None:
            if len(head) < MAGIC_SIZE and any(m.startswith(head) for m in FORMATS):
                raise IncompleteDBError(f"the checkpoint {path} is empty or cut short ({size} bytes)",
                                        hint=_CORRUPT_HINT)
            raise DBTypeError(f"{path} is not a dslcdb checkpoint (it does not start with {MAGIC!r})",
                              hint="give the db_type the checkpoint was saved with (e.g. db_type='lmdb')")
        return fmt

    def _cut_blob(self, fd: int, size: int) -> str:
        """Which blob a cut-short file loses, from its record headers."""
        pos = MAGIC_SIZE
        while pos + RECORD.size <= size:
            tag, name_len, length = RECORD.unpack(os.pread(fd, RECORD.size, pos))
            if tag != b"BLOB":
                return "its manifest is missing"
            name = os.pread(fd, name_len, pos + RECORD.size).decode("utf-8", "replace")
            end = _aligned(pos + RECORD.size + name_len) + length
            if end > size:
                return f"blob {name!r} is cut off"
            pos = end
        return "it ends inside a record header" if pos < size else "its manifest is missing"


def _check_places(path: str, index: Index, pick, order, raws: list, end: int):
    """The length of each picked blob's gap (record header, name, padding), in file
    order, after checking that the blob lies where its record says, inside the file."""
    at = pick[order]
    rec, off, n = index.record[at], index.offset[at], index.length[at]
    gap = _aligned(rec + RECORD.size + np.fromiter(map(len, raws), np.int64, len(raws))) - rec
    bad = (rec < MAGIC_SIZE) | (off != rec + gap) | (n < 0) | (off + n > end)
    if bad.any():
        name = index.names[pick[int(order[bad].min())]]  # the first one asked for
        raise CorruptDBError(f"blob {name!r} in the checkpoint {path} lies outside the file", hint=_CORRUPT_HINT)
    return gap


def _allocated(path: str, index: Index, pick) -> list:
    """The buffers the picked blobs are read to (for a tensor, its array)."""
    try:
        return allocate_all(*index.take(pick))
    except BlobEncodingError as e:
        raise CorruptDBError(f"{e.message} (in the checkpoint {path})", hint=e.hint) from None


def _verify(path: str, index: Index, at, order, raws: list, gap_lens, got) -> None:
    """Raise for the first blob asked for whose gap, length or checksum is not right."""
    gaps, cut, sums = got
    starts = np.zeros(len(at), dtype=np.int64)
    np.cumsum(gap_lens[:-1], out=starts[1:])
    bad_gap = np.zeros(len(at), dtype=bool)
    diff = np.flatnonzero(gaps != _expected_gaps(raws, index.length[at], starts, len(gaps)))
    bad_gap[np.searchsorted(starts, diff, "right") - 1] = True
    bad_gap &= ~cut  # (a piece the file ended in was not compared)
    bad_sum = sums != index.digest[at]
    problem = np.flatnonzero(bad_gap | cut | bad_sum)
    if not problem.size:
        return
    j = problem[np.argmin(order[problem])]  # the first one asked for
    name = index.names[at[j]]
    if bad_gap[j]:
        raise CorruptDBError(f"the record header of blob {name!r} in the checkpoint {path} is damaged",
                             hint=_CORRUPT_HINT)
    if cut[j]:
        raise CorruptDBError(f"blob {name!r} in the checkpoint {path} is cut off", hint=_CORRUPT_HINT)
    raise CorruptDBError(f"blob {name!r} in the checkpoint {path} is damaged: its checksum does not match",
                         hint=_CORRUPT_HINT)


_HEADERS = np.dtype([("tag", "S4"), ("name_len", "<u4"), ("length", "<u8")])  # RECORD as numpy sees it


def _expected_gaps(raws: list, lengths, starts, total: int):
    """What the gaps before the payloads must hold, one after the other: each record
    header, name and zero padding, at ``starts``."""
    n = len(raws)
    name_lens = np.fromiter(map(len, raws), np.int64, n)
    heads = np.zeros(n, dtype=_HEADERS)
    heads["tag"], heads["name_len"], heads["length"] = b"BLOB", name_lens, lengths
    out = np.zeros(total, dtype=np.uint8)
    out[(starts[:, None] + np.arange(RECORD.size)).ravel()] = heads.view(np.uint8)
    joined = np.frombuffer(b"".join(raws), dtype=np.uint8)
    if joined.size:
        name_at = starts + RECORD.size - (np.cumsum(name_lens) - name_lens)
        out[np.repeat(name_at, name_lens) + np.arange(joined.size)] = joined
    return out


def _decoded(path: str, index: Index, wanted: list, pick, bufs: list) -> dict:
    out = {}
    kinds = index.kinds
    for name, i, buf in zip(wanted, pick.tolist(), bufs):
        if kinds[i] == "tensor":  # (the buffer is the array)
            out[name] = buf if buf.ndim else buf[()]
            continue
        try:
            out[name] = from_buffer(name, kinds[i], index.dtypes[i], index.shapes[i], buf)
        except BlobEncodingError as e:
            raise CorruptDBError(f"{e.message} (in the checkpoint {path})", hint=e.hint) from None
    return out


def _gap(record: int, raw_name: bytes, length: int) -> bytes:
    """The bytes from a blob's record to its payload: header, name, zero padding."""
    head = RECORD.pack(b"BLOB", len(raw_name), length) + raw_name
    return head + _ZEROS[:-(record + len(head)) % ALIGN]


_ZEROS = bytes(ALIGN)


_CORRUPT_HINT = "the file was changed or cut short after it was saved; load an earlier epoch's checkpoint"


def write_atomically(path: str, fill, buffering: int = -1) -> None:
    """Write the checkpoint file ``path`` whole: ``fill(f)`` writes a temporary file beside
    it (what a killed save of it left is removed first), which is fsynced and renamed over
    ``path``, so a reader sees the old file or the new one, never a part."""
    partials.remove_stale(path)
    tmp = partials.temp_name(path)
    try:
        f = open(tmp, "wb", buffering=buffering)
    except OSError as e:
        raise base.DBError(f"cannot create the checkpoint {path}: {e.strerror}",
                             hint="check that its directory exists and is writable") from None
    try:
        with f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def _aligned(pos: int) -> int:
    return -(-pos // ALIGN) * ALIGN


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


base.register(FileDB.name, FileDB())
