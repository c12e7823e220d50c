"""The blob databases on damaged files: truncated, bit-flipped, wrong type; and the codec.

Checkpoints are written through the runtime interface with values made here; the
damage is done to the bytes on disk, and every read must either raise a DBError
that names the file (and the blob, where one blob is hit) or give back exactly
the values written.
"""
from __future__ import annotations

import json
import os
import struct
import zlib

import lmdb
import numpy as np
import pytest
import xxhash

from dslc.runtime import blobcodec, blobdb
from dslc.runtime.blobdb import dbfile
from dslc.runtime.resources import Counter, Timer
from dslc.ir.diagnostics import ExecutionError
from dslc.net_builder import ops
from dslc.session import LocalSession
from dslc.task import Task, final_output

PATTERN = np.float64(1234.5678)  # the 8 bytes that fill blob "b", easy to find in a file


def values():
    return {
        "a": np.arange(5, dtype=np.int32),
        "b": np.full(64, PATTERN),
        "c": np.array(["one", "two"], dtype=object),
    }


def save(db_type, path, vals=None):
    vals = vals or values()
    blobdb.get(db_type).write(path, [(k, blobcodec.encode(k, v)) for k, v in vals.items()])


def same(got: dict, want: dict) -> bool:
    return got.keys() == want.keys() and all(
        np.asarray(got[k]).dtype == np.asarray(want[k]).dtype and np.asarray(got[k]).tolist() ==
        np.asarray(want[k]).tolist() for k in want)


def layout(path):
    """(record offset, payload offset, length) of each blob, from the file's own manifest."""
    raw = open(path, "rb").read()
    off, length, _, _ = dbfile.TRAILER.unpack(raw[-dbfile.TRAILER.size:])
    return {b["name"]: (b["record"], b["offset"], b["length"]) for b in json.loads(raw[off:off + length])["blobs"]}, \
        (off, length)


# ----------------------------------------------------------------------------- dslcdb


def test_truncation_anywhere_is_an_error_naming_the_file_and_the_cut_blob(scratch):
    path = os.path.join(scratch, "ck")
    save("dslcdb", path)
    raw = open(path, "rb").read()
    blobs, (moff, _) = layout(path)
    _, b_start, b_len = blobs["b"]
    db = blobdb.get("dslcdb")
    for cut in range(0, len(raw), 7):
        with open(path, "wb") as f:
            f.write(raw[:cut])
        assert not db.exists(path)
        with pytest.raises(blobdb.DBError) as info:
            db.read(path)
        assert path in info.value.message and info.value.hint
        if b_start < cut < b_start + b_len:
            assert "blob 'b' is cut off" in info.value.message
        if moff < cut:
            assert "manifest" in info.value.message or "cut short" in info.value.message


def test_every_single_bit_flip_is_caught_or_harmless(scratch):
    path = os.path.join(scratch, "ck")
    save("dslcdb", path)
    raw = bytearray(open(path, "rb").read())
    blobs, _ = layout(path)
    db = blobdb.get("dslcdb")
    caught = 0
    for i in range(len(raw)):
        damaged = bytearray(raw)
        damaged[i] ^= 1 << (i % 8)
        with open(path, "wb") as f:
            f.write(damaged)
        try:
            got = db.read(path)
        except blobdb.DBError as e:
            caught += 1
            assert path in e.message and e.hint
            for name, (_, start, length) in blobs.items():
                if start <= i < start + length:
                    assert f"blob {name!r}" in e.message and "damaged" in e.message
            continue
        assert same(got, values()), f"a flip at byte {i} changed the values without an error"
    assert caught > len(raw) // 2  # only padding bytes may flip unnoticed


def test_a_damaged_blob_does_not_stop_reading_the_others(tmp_path):
    path = str(tmp_path / "ck")
    save("dslcdb", path)
    blobs, _ = layout(path)
    _, start, _ = blobs["b"]
    with open(path, "r+b") as f:
        f.seek(start + 3)
        f.write(b"\xff")
    got = blobdb.get("dslcdb").read(path, ["a", "c"])
    assert same(got, {k: values()[k] for k in ("a", "c")})


def test_a_file_that_is_not_a_checkpoint(tmp_path):
    path = str(tmp_path / "ck")
    with open(path, "wb") as f:
        f.write(b"PK\x03\x04 some zip file, not ours" * 10)
    with pytest.raises(blobdb.DBTypeError, match="not a dslcdb checkpoint"):
        blobdb.get("dslcdb").read(path)


def test_a_newer_format_version_is_refused(tmp_path):
    path = str(tmp_path / "ck")
    save("dslcdb", path)
    raw = open(path, "rb").read()
    off, length, _, end = dbfile.TRAILER.unpack(raw[-dbfile.TRAILER.size:])
    manifest = raw[off:off + length].replace(b'"format": 2', b'"format": 9')
    with open(path, "wb") as f:  # (format 2's trailer holds the manifest's XXH3-64)
        f.write(raw[:off] + manifest + dbfile.TRAILER.pack(off, len(manifest), xxhash.xxh3_64_intdigest(manifest), end))
    with pytest.raises(blobdb.DBTypeError, match="format 9"):
        blobdb.get("dslcdb").read(path)


def test_a_save_that_fails_leaves_the_old_checkpoint_and_no_temporary_file(tmp_path):
    path = str(tmp_path / "ck")
    save("dslcdb", path)
    t = Timer("t")
    with pytest.raises(blobcodec.BlobEncodingError, match="Timer"):
        blobdb.get("dslcdb").write(path, ((k, blobcodec.encode(k, v)) for k, v in [("x", np.int64(1)), ("t", t)]))
    assert os.listdir(tmp_path) == ["ck"]
    assert same(blobdb.get("dslcdb").read(path), values())


# ----------------------------------------------------------------------------- lmdb


def test_lmdb_payload_damage_names_the_blob(tmp_path):
    path = str(tmp_path / "ck")
    save("lmdb", path)
    data = os.path.join(path, "data.mdb")
    raw = bytearray(open(data, "rb").read())
    at = raw.find(PATTERN.tobytes() * 4)
    assert at > 0
    raw[at + 100] ^= 0x40
    with open(data, "wb") as f:
        f.write(raw)
    with pytest.raises(blobdb.CorruptDBError) as info:
        blobdb.get("lmdb").read(path)
    assert "blob 'b'" in info.value.message and path in info.value.message


@pytest.mark.parametrize("keep", [0, 100, 4096, 8192, 0.5])
def test_lmdb_truncation_is_an_error_not_a_crash(tmp_path, keep):
    path = str(tmp_path / "ck")
    save("lmdb", path)
    data = os.path.join(path, "data.mdb")
    size = os.path.getsize(data)
    with open(data, "r+b") as f:
        f.truncate(int(size * keep) if isinstance(keep, float) else keep)
    assert not blobdb.get("lmdb").exists(path)
    with pytest.raises(blobdb.CorruptDBError) as info:
        blobdb.get("lmdb").read(path)
    assert path in info.value.message and info.value.hint


def test_lmdb_resave_replaces_every_blob(tmp_path):
    path = str(tmp_path / "ck")
    save("lmdb", path)
    save("lmdb", path, {"only": np.int64(3)})
    assert blobdb.get("lmdb").keys(path) == ["only"]


def test_lmdb_format_2_checksums_are_xxh3_over_1_mib_chunks(tmp_path):
    path = str(tmp_path / "ck")
    big = np.random.default_rng(1).random(300_000)  # 2.3 MiB: three 1 MiB chunks
    save("lmdb", path, {"big": big, "small": np.int32(7)})
    with lmdb.open(path, readonly=True) as env, env.begin() as txn:
        doc = json.loads(txn.get(b"manifest"))
    assert doc["format"] == 2 and doc["chunk"] == 1 << 20
    data = big.tobytes()
    parts = [xxhash.xxh3_64_intdigest(data[i:i + (1 << 20)]) for i in range(0, len(data), 1 << 20)]
    want = {"big": xxhash.xxh3_64_intdigest(struct.pack(f"<{len(parts)}Q", *parts)),
            "small": xxhash.xxh3_64_intdigest(np.int32(7).tobytes())}
    assert {b["name"]: b["xxh3"] for b in doc["blobs"]} == want


def test_lmdb_format_1_with_crc32_is_still_read_and_checked(tmp_path):
    """A format-1 lmdb checkpoint, written here with the lmdb package as docs/checkpoints.md
    lays it out (CRC-32 per blob), loads; a changed payload byte names its blob."""
    path = str(tmp_path / "ck")
    vals = {"a": np.arange(5, dtype=np.int32), "b": np.full(64, PATTERN)}
    with lmdb.open(path, map_size=1 << 24) as env, env.begin(write=True) as txn:
        for k, v in vals.items():
            txn.put(b"blob/" + k.encode(), v.tobytes())
        txn.put(b"manifest", json.dumps({"format": 1, "blobs": [
            {"name": k, "kind": "tensor", "dtype": v.dtype.str, "shape": list(v.shape), "length": v.nbytes,
             "crc32": zlib.crc32(v.tobytes())} for k, v in vals.items()]}).encode())
    assert same(blobdb.get("lmdb").read(path), vals)
    data = os.path.join(path, "data.mdb")
    raw = bytearray(open(data, "rb").read())
    raw[raw.find(PATTERN.tobytes()) + 3] ^= 0x40
    open(data, "wb").write(raw)
    with pytest.raises(blobdb.CorruptDBError, match="blob 'b' in the lmdb checkpoint .* checksum does not match"):
        blobdb.get("lmdb").read(path)


# ----------------------------------------------------------------------------- through Load


@pytest.mark.parametrize("db_type", ["dslcdb", "lmdb"])
def test_a_failed_load_changes_no_blob(tmp_path, db_type):
    path = str(tmp_path / "ck")
    save(db_type, path)
    if db_type == "dslcdb":
        _, start, _ = layout(path)[0]["b"]
        with open(path, "r+b") as f:
            f.seek(start)
            f.write(b"\x00")
    else:
        data = os.path.join(path, "data.mdb")
        raw = bytearray(open(data, "rb").read())
        raw[raw.find(PATTERN.tobytes())] ^= 1
        open(data, "wb").write(raw)
    with LocalSession() as s:
        s.workspace.feed("a", np.zeros(5, np.int32) - 1)
        with Task() as task:
            a, b = ops.Load([], ["a", "b"], db=path, db_type=db_type, absolute_path=True)
            final_output(a)
        with pytest.raises(ExecutionError) as info:
            s.run(task)
        assert "'b'" in info.value.message and path in info.value.message
        assert isinstance(info.value.__cause__, blobdb.CorruptDBError)
        assert s.workspace.fetch("a").tolist() == [-1] * 5  # "a" was read fine, yet not written
        assert s.workspace.lookup("b") is None or s.workspace.lookup("b").v is None


# ----------------------------------------------------------------------------- the codec


def roundtrip(v):
    e = blobcodec.encode("x", v)
    return blobcodec.decode("x", e.kind, e.dtype, e.shape, bytes(e.data))


@pytest.mark.parametrize("v", [np.float16(1.5), np.uint16(7), np.array([[1, 2]], np.int8),
                               np.zeros((2, 0), np.float32), np.array([b"x", b"\x00y"], dtype=object),
                               "ünï", np.array([["a", "bc"], ["", "d"]], dtype=object)])
def test_codec_round_trips(v):
    got = roundtrip(v)
    if isinstance(v, str):
        assert got == v and isinstance(got, str)
    else:
        assert np.asarray(got).dtype == np.asarray(v).dtype and np.asarray(got).shape == np.shape(v)
        assert np.asarray(got).tolist() == np.asarray(v).tolist()


def test_codec_counter_keeps_its_count_and_init():
    c = Counter(4)
    c.count_down()
    got = roundtrip(c)
    assert isinstance(got, Counter) and (got.count, got.init) == (3, 4)


@pytest.mark.parametrize("v, words", [(Timer("t"), "Timer"), (np.array([1, "a"], dtype=object), "int"),
                                      (None, "never written"), (np.array([1 + 2j]), "complex")])
def test_codec_refuses_what_it_cannot_store_safely(v, words):
    with pytest.raises(blobcodec.BlobEncodingError) as info:
        blobcodec.encode("x", v)
    assert words in info.value.message and info.value.hint


@pytest.mark.parametrize("kind, dtype", [("tensor", "|O"), ("tensor", "V8"), ("pickle", ""), ("tensor", "<f4")])
def test_decoding_never_builds_objects_from_a_file(kind, dtype):
    with pytest.raises(blobcodec.BlobEncodingError):
        blobcodec.decode("x", kind, dtype, (3,), b"\x00" * 5)  # 5 bytes fit no (3,) f4 either


def test_registered_kinds_are_private_to_their_class():
    class Thing:
        pass

    with pytest.raises(ValueError):
        blobcodec.register(Thing, "counter", bytes, lambda b: Thing())
    assert isinstance(blobcodec.decode("x", "counter", "", (), struct.pack("<qq", 1, 1)), Counter)


def test_dataset_cursors_keep_their_position():
    datasets = pytest.importorskip("dslc.runtime.datasets")
    c = datasets.TreeCursor(["a", "b"])
    c.offsets = [7]
    got = roundtrip(c)
    assert isinstance(got, datasets.TreeCursor) and got.offsets == [7] and got.tree.fields == ["a", "b"]
    e = blobcodec.encode("x", c)
    bad = json.dumps({"fields": ["a"], "offsets": [1, 2]}).encode()
    with pytest.raises(blobcodec.BlobEncodingError, match="cannot be at"):
        blobcodec.decode("x", e.kind, "", (), bad)
