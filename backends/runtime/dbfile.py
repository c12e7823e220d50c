"""``dslcdb`` (alias ``minidb``): a checkpoint as one file, written to a temporary file,
fsynced and renamed into place, so a reader sees the whole old file or the whole new one.

Layout (little-endian; docs/checkpoints.md has the details):

    "DSLCDB1\\n"                                    8-byte file magic
    per blob:  "BLOB" u32 name_len u64 data_len     a record header, then the UTF-8 name,
               zero padding to a 64-byte boundary,   so every payload starts aligned,
               payload                               then the payload bytes
    manifest   JSON: every blob's name, kind, dtype, shape, offset, length, crc32
    trailer    u64 manifest_offset  u64 manifest_len  u32 manifest_crc32  4 zero bytes
               "DSLCEND\\n"                            32 bytes in all

The trailer is written last, so a file cut short has none; the record headers then
say which blob the cut went through. Every payload is checked against its CRC-32
before Load returns anything.
"""
from __future__ import annotations

import json
import os
import struct
import zlib

import numpy as np

from . import blobdb, partials
from .blobcodec import BlobEncodingError, decode
from .blobdb import CorruptDBError, DBTypeError, IncompleteDBError, MissingBlobError, MissingDBError

MAGIC = b"DSLCDB1\n"
END = b"DSLCEND\n"
RECORD = struct.Struct("<4sIQ")
TRAILER = struct.Struct("<QQI4x8s")
ALIGN = 64
FORMAT_VERSION = 1


class FileDB:
    """The single-file blob database (see the module docstring for the layout)."""

    name = blobdb.DEFAULT_DB_TYPE

    # --- writing
    def write(self, path: str, entries) -> None:
        partials.remove_stale(path)  # what a killed save of this checkpoint left
        tmp = partials.temp_name(path)
        try:
            f = open(tmp, "wb", buffering=0)
        except OSError as e:
            raise blobdb.DBError(f"cannot create the checkpoint {path}: {e.strerror}",
                                 hint="check that its directory exists and is writable") from None
        try:
            with f:
                self._write_all(f, entries)
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            _remove_quietly(tmp)
            raise
        _fsync_dir(os.path.dirname(os.path.abspath(path)))

    def _write_all(self, f, entries) -> None:
        _write_fully(f, MAGIC)
        pos, index, crcs = len(MAGIC), [], []
        for name, enc in entries:
            pos = self._put(f, pos, name, enc, index)
            crcs.append(blobdb.crc32_async(enc.data))
        for item, crc in zip(index, crcs):
            item["crc32"] = crc.result()
        manifest = json.dumps({"format": FORMAT_VERSION, "blobs": index}).encode("utf-8")
        _write_fully(f, manifest)
        _write_fully(f, TRAILER.pack(pos, len(manifest), _crc(manifest), END))

    def _put(self, f, pos: int, name: str, enc, index: list) -> int:
        """Write one blob's record at ``pos``; returns the position after it."""
        raw = name.encode("utf-8")
        head = RECORD.pack(b"BLOB", len(raw), enc.nbytes) + raw
        start = _aligned(pos + len(head))
        _write_fully(f, head + bytes(start - pos - len(head)))
        _write_fully(f, enc.data)
        index.append({"name": name, "kind": enc.kind, "dtype": enc.dtype, "shape": list(enc.shape),
                      "record": pos, "offset": start, "length": enc.nbytes})
        return start + enc.nbytes

    # --- reading
    def exists(self, path: str) -> bool:
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < len(MAGIC) + TRAILER.size or f.read(len(MAGIC)) != MAGIC:
                    return False
                f.seek(size - TRAILER.size)
                return TRAILER.unpack(f.read(TRAILER.size))[3] == END
        except (OSError, struct.error):
            return False

    def keys(self, path: str) -> list[str]:
        fd = self._open(path)
        try:
            return [b["name"] for b in self._manifest(fd, path)]
        finally:
            os.close(fd)

    def read(self, path: str, names=None) -> dict:
        fd = self._open(path)
        try:
            index = self._manifest(fd, path)
            by_name = {b["name"]: b for b in index}
            wanted = list(by_name) if names is None else list(names)
            missing = [n for n in wanted if n not in by_name]
            if missing:
                raise MissingBlobError(f"the checkpoint {path} has no blob {missing[0]!r}",
                                       hint=_missing_hint(by_name))
            size = os.fstat(fd).st_size
            bufs, crcs = [], []
            for n in wanted:
                buf = self._payload(fd, path, by_name[n], size)
                bufs.append(buf)
                crcs.append(blobdb.crc32_async(memoryview(buf)))
            for n, crc in zip(wanted, crcs):
                if crc.result() != by_name[n]["crc32"]:
                    raise CorruptDBError(f"blob {n!r} in the checkpoint {path} is damaged: its "
                                         "checksum does not match", hint=_CORRUPT_HINT)
            return {n: _decoded(path, by_name[n], buf) for n, buf in zip(wanted, bufs)}
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
            raise blobdb.DBError(f"cannot open the checkpoint {path}: {e.strerror}",
                                 hint="check the file's permissions") from None

    def _manifest(self, fd: int, path: str) -> list:
        size = os.fstat(fd).st_size
        head = os.pread(fd, len(MAGIC), 0)
        if head != MAGIC:
            if len(head) < len(MAGIC) and MAGIC.startswith(head):
                raise IncompleteDBError(f"the checkpoint {path} is empty or cut short ({size} bytes)",
                                        hint=_CORRUPT_HINT)
            raise DBTypeError(f"{path} is not a dslcdb checkpoint (it does not start with {MAGIC!r})",
                              hint="give the db_type the checkpoint was saved with (e.g. db_type='lmdb')")
        tail = os.pread(fd, TRAILER.size, max(0, size - TRAILER.size)) if size >= len(MAGIC) + TRAILER.size \
            else b""
        if len(tail) != TRAILER.size or tail[-len(END):] != END:
            raise CorruptDBError(f"the checkpoint {path} is cut short ({size} bytes): "
                                 f"{self._cut_blob(fd, size)}", hint=_CORRUPT_HINT)
        offset, length, crc, _ = TRAILER.unpack(tail)
        if offset + length + TRAILER.size != size:
            raise CorruptDBError(f"the end marker of the checkpoint {path} is damaged", hint=_CORRUPT_HINT)
        raw = os.pread(fd, length, offset)
        if _crc(raw) != crc:
            raise CorruptDBError(f"the manifest (the index of blob names, dtypes and shapes) of the "
                                 f"checkpoint {path} is damaged", hint=_CORRUPT_HINT)
        try:
            doc = json.loads(raw)
            index = doc["blobs"]
            for b in index:
                b["name"], b["offset"], b["length"], b["crc32"] = (str(b["name"]), int(b["offset"]),
                                                                    int(b["length"]), int(b["crc32"]))
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptDBError(f"the manifest of the checkpoint {path} is not valid: {e}",
                                 hint=_CORRUPT_HINT) from None
        if doc.get("format") != FORMAT_VERSION:
            raise DBTypeError(f"the checkpoint {path} has format {doc.get('format')!r}; this dslc reads "
                              f"format {FORMAT_VERSION}", hint="load it with the dslc that wrote it")
        return index

    def _cut_blob(self, fd: int, size: int) -> str:
        """Which blob a cut-short file loses, from its record headers."""
        pos = len(MAGIC)
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

    def _payload(self, fd: int, path: str, b: dict, size: int) -> np.ndarray:
        name, offset, length = b["name"], b["offset"], b["length"]
        if offset < len(MAGIC) or offset + length > size:
            raise CorruptDBError(f"blob {name!r} in the checkpoint {path} lies outside the file",
                                 hint=_CORRUPT_HINT)
        head = os.pread(fd, RECORD.size, int(b.get("record", 0)))
        raw = name.encode("utf-8")
        if len(head) != RECORD.size or RECORD.unpack(head) != (b"BLOB", len(raw), length) or \
                os.pread(fd, len(raw), int(b["record"]) + RECORD.size) != raw:
            raise CorruptDBError(f"the record header of blob {name!r} in the checkpoint {path} is damaged",
                                 hint=_CORRUPT_HINT)
        buf = np.empty(length, dtype=np.uint8)
        view, done = memoryview(buf), 0
        while done < length:
            n = os.preadv(fd, [view[done:]], offset + done)
            if n <= 0:
                raise CorruptDBError(f"blob {name!r} in the checkpoint {path} is cut off", hint=_CORRUPT_HINT)
            done += n
        return buf


_CORRUPT_HINT = "the file was changed or cut short after it was saved; load an earlier epoch's checkpoint"


def _missing_hint(by_name: dict) -> str:
    names = sorted(by_name)
    shown = ", ".join(repr(n) for n in names[:8]) + (" ..." if len(names) > 8 else "")
    return f"pass allow_incomplete=True to skip blobs it lacks; it holds {len(names)} blobs: {shown}"


def _decoded(path: str, b: dict, buf: np.ndarray):
    try:
        return decode(b["name"], b.get("kind", ""), b.get("dtype", ""), b.get("shape", ()), buf)
    except BlobEncodingError as e:
        raise CorruptDBError(f"{e.message} (in the checkpoint {path})", hint=e.hint) from None


def _aligned(pos: int) -> int:
    return -(-pos // ALIGN) * ALIGN


def _crc(data) -> int:
    return zlib.crc32(data)


def _write_fully(f, data) -> None:
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    while view.nbytes:
        n = f.write(view)
        view = view[n:]


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _fsync_dir(d: str) -> None:
    """Make the rename itself durable (the directory entry lives in the directory)."""
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


blobdb.register(FileDB.name, FileDB())
