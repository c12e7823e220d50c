"""The dslcdb file format, versions 1 and 2, checked against the layout docs/checkpoints.md
gives: the checksums are recomputed here with xxhash and zlib directly, a format-1
file written by the last format-1 writer still loads, and one damaged byte in any
part of either version is reported with the part it hit.
"""
from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import xxhash

from dslc.runtime import blobcodec, blobdb
from dslc.runtime.resources import Counter

# Written by dslc at commit 9e12481 (format 1, zlib CRC-32) from the values of fixture_values().
FORMAT_1_FILE = Path(__file__).parent / "data" / "dslcdb-format1.ckpt"
MIB = 1 << 20


def fixture_values() -> dict:
    c = Counter(5)
    c.count_down()
    c.count_down()
    return {"w": np.arange(512, dtype=np.float32) * 0.5, "ids": np.array([[1, -2], [3, 4]], np.int64),
            "names": np.array(["\u03b1", "b"], dtype=object), "count": c, "flag": np.bool_(True)}


def same(got, want) -> bool:
    if isinstance(want, Counter):
        return isinstance(got, Counter) and (got.count, got.init) == (want.count, want.init)
    g, w = np.asarray(got), np.asarray(want)
    return g.dtype == w.dtype and g.shape == w.shape and g.tolist() == w.tolist()


def save(path, vals: dict) -> None:
    blobdb.get("dslcdb").write(path, [(k, blobcodec.encode(k, v)) for k, v in vals.items()])


def parts(path, trailer="<QQQ8s", field="xxh3"):
    """(the file's bytes, its manifest document, manifest offset), parsed here from the layout."""
    raw = open(path, "rb").read()
    off, length, digest, end = struct.unpack(trailer, raw[-32:])
    assert end == b"DSLCEND\n" and off + length + 32 == len(raw)
    doc = json.loads(raw[off:off + length])
    assert all(field in b for b in doc["blobs"])
    return raw, doc, off, digest


def damaged_read(path, raw: bytes, at: int):
    bad = bytearray(raw)
    bad[at] ^= 0x10
    with open(path, "wb") as f:
        f.write(bad)
    with pytest.raises(blobdb.DBError) as info:
        blobdb.get("dslcdb").read(path)
    assert path in info.value.message and info.value.hint
    return info.value


# ----------------------------------------------------------------------------- format 1


def test_a_format_1_file_from_the_old_writer_still_loads():
    db = blobdb.get("dslcdb")
    path = str(FORMAT_1_FILE)
    assert open(path, "rb").read(8) == b"DSLCDB1\n"
    assert db.exists(path) and db.keys(path) == list(fixture_values())
    got = db.read(path)
    assert got.keys() == fixture_values().keys()
    assert all(same(got[k], v) for k, v in fixture_values().items())
    assert same(db.read(path, ["flag", "w"])["w"], fixture_values()["w"])


def test_format_1_checksums_are_zlib_crc32():
    raw, doc, moff, digest = parts(FORMAT_1_FILE, "<QQI4x8s", "crc32")
    assert doc["format"] == 1 and digest == zlib.crc32(raw[moff:-32])
    for b in doc["blobs"]:
        assert b["crc32"] == zlib.crc32(raw[b["offset"]:b["offset"] + b["length"]])


def test_a_damaged_byte_in_a_format_1_file_is_located(scratch):
    raw, doc, moff, _ = parts(FORMAT_1_FILE, "<QQI4x8s", "crc32")
    path = os.path.join(scratch, "old.ckpt")
    assert "not a dslcdb checkpoint" in damaged_read(path, raw, 2).message
    assert "manifest" in damaged_read(path, raw, moff + 20).message
    assert "manifest" in damaged_read(path, raw, len(raw) - 14).message  # the trailer's CRC-32
    for b in doc["blobs"]:
        name = b["name"]
        assert f"record header of blob {name!r}" in damaged_read(path, raw, b["record"] + 4).message
        for at in (b["offset"], b["offset"] + b["length"] - 1):
            e = damaged_read(path, raw, at)
            assert isinstance(e, blobdb.CorruptDBError) and f"blob {name!r}" in e.message, e.message
            assert "checksum does not match" in e.message or "does not decode" in e.message


# ----------------------------------------------------------------------------- format 2


def big_values() -> dict:
    rng = np.random.default_rng(7)
    return {"tiny": np.int16(-3), "one_mib": rng.random(MIB // 8), "big": rng.random(5 * MIB // 4 + 3,
            dtype=np.float32), "text": np.array(["x", "yz"], dtype=object), "empty": np.zeros((0, 4), np.uint8)}


def test_format_2_checksums_are_xxh3_over_1_mib_chunks(scratch):
    path = os.path.join(scratch, "ck")
    save(path, big_values())
    raw, doc, moff, digest = parts(path)
    assert raw[:8] == b"DSLCDB2\n" and doc["format"] == 2 and doc["chunk"] == MIB
    assert digest == xxhash.xxh3_64_intdigest(raw[moff:-32])
    for b in doc["blobs"]:
        data = raw[b["offset"]:b["offset"] + b["length"]]
        assert b["offset"] % 64 == 0
        assert raw[b["record"]:b["record"] + 16] == struct.pack("<4sIQ", b"BLOB", len(b["name"]), len(data))
        if len(data) <= MIB:
            want = xxhash.xxh3_64_intdigest(data)
        else:  # the hash of the chunks' digests, as little-endian u64s
            chunks = [data[i:i + MIB] for i in range(0, len(data), MIB)]
            assert len(chunks) == 6
            want = xxhash.xxh3_64_intdigest(b"".join(struct.pack("<Q", xxhash.xxh3_64_intdigest(c))
                                                     for c in chunks))
        assert b["xxh3"] == want, b["name"]
    got = blobdb.get("dslcdb").read(path)
    assert all(same(got[k], v) for k, v in big_values().items())


def test_a_damaged_byte_anywhere_in_a_format_2_file_is_located(scratch):
    path = os.path.join(scratch, "ck")
    save(path, big_values())
    raw, doc, moff, _ = parts(path)
    assert "not a dslcdb checkpoint" in damaged_read(path, raw, 5).message
    assert "manifest" in damaged_read(path, raw, moff + 30).message
    assert "manifest" in damaged_read(path, raw, len(raw) - 12).message  # the trailer's digest
    for b in doc["blobs"]:
        name, start, n = b["name"], b["offset"], b["length"]
        for at in (b["record"], b["record"] + 16, start - 1):  # tag, name, the padding before the payload
            if at < start:
                assert f"record header of blob {name!r}" in damaged_read(path, raw, at).message
        # the first and last byte, and one byte in each 1 MiB chunk
        for at in sorted({start, start + n - 1, *range(start + MIB // 2, start + n, MIB)}) if n else ():
            e = damaged_read(path, raw, at)
            assert f"blob {name!r} in the checkpoint {path} is damaged: its checksum does not match" \
                in e.message, (at, e.message)


def test_parallel_and_partial_reads_of_many_blobs(scratch, monkeypatch):
    rng = np.random.default_rng(3)
    vals = {f"b{i}": rng.integers(-1000, 1000, int(rng.integers(0, 5000)), dtype=np.int32) for i in range(400)}
    path = os.path.join(scratch, "ck")
    save(path, vals)
    db = blobdb.get("dslcdb")
    pick = [f"b{i}" for i in range(399, 0, -3)]  # not contiguous in the file, and out of its order
    got = db.read(path, pick)
    assert list(got) == pick and all(same(got[k], vals[k]) for k in pick)
    # reads and writes that the kernel cuts short are resumed where they stopped
    preadv, writev = os.preadv, os.writev
    monkeypatch.setattr(os, "preadv", lambda fd, bufs, pos: preadv(fd, _first(bufs, 3001), pos))
    monkeypatch.setattr(os, "writev", lambda fd, bufs: writev(fd, _first(bufs, 2999)))
    save(path, vals)
    got = db.read(path)
    assert all(same(got[k], vals[k]) for k in vals)


def _first(bufs, n):
    """The buffers covering at most the first ``n`` bytes of ``bufs``."""
    out = []
    for b in bufs:
        b = memoryview(b)
        out.append(b[:n])
        n -= out[-1].nbytes
        if n <= 0:
            break
    return out
