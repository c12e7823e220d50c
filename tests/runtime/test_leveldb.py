"""The leveldb db type (Caffe2's ``db_type="leveldb"``, through plyvel): round trips, damage
to the files on disk, other types' checkpoints, and the hint when the extra is missing.

Save / Load / DBExists through ops, CachedReader and DBFileReader run on leveldb in
test_db_ops.py and test_cached_reader.py, and a writer killed mid-save in
test_checkpoint_crash.py, beside the other db types.
"""
from __future__ import annotations

import importlib
import os
import sys

import numpy as np
import pytest

from dbtypes import NEEDS_LEVELDB
from dslc.runtime import blobcodec, blobdb

PATTERN = np.float64(1234.5678)


def values():
    return {"a": np.arange(5, dtype=np.int32), "b": np.full(64, PATTERN),
            "c": np.array(["one", "two"], dtype=object)}


def save(path, vals=None, db_type="leveldb"):
    vals = vals if vals is not None else values()
    blobdb.get(db_type).write(path, [(k, blobcodec.encode(k, v)) for k, v in vals.items()])


def same(got, want) -> bool:
    return got.keys() == want.keys() and all(
        np.asarray(got[k]).dtype == np.asarray(want[k]).dtype and
        np.asarray(got[k]).tolist() == np.asarray(want[k]).tolist() for k in want)


@NEEDS_LEVELDB
def test_round_trip_keys_and_resave(tmp_path):
    path = str(tmp_path / "ck")
    db = blobdb.get("LevelDB")  # Caffe2's spelling names the same type
    assert db is blobdb.get("leveldb")
    assert not db.exists(path)
    save(path)
    assert db.exists(path) and db.keys(path) == ["a", "b", "c"]
    assert same(db.read(path), values())
    assert same(db.read(path, ["c"]), {"c": values()["c"]})
    save(path, {"only": np.int64(3)})  # a save replaces every blob
    assert db.keys(path) == ["only"] and db.read(path)["only"] == 3


def _damage_every_file(path, how):
    """Apply ``how(bytearray) -> bytearray`` to the database file holding the blobs."""
    for name in os.listdir(path):
        f = os.path.join(path, name)
        if name.endswith((".log", ".ldb")) and os.path.getsize(f):
            raw = how(bytearray(open(f, "rb").read()))
            with open(f, "wb") as out:
                out.write(raw)


def _flip(at):
    def how(raw):
        raw[int(len(raw) * at)] ^= 0x40
        return raw
    return how


@NEEDS_LEVELDB
@pytest.mark.parametrize("reopened", [False, True], ids=["log", "table"])
@pytest.mark.parametrize("at", [0.1, 0.3, 0.5])  # (inside the data: the last bytes of a table are padding)
def test_a_flipped_bit_is_an_error_naming_the_checkpoint(tmp_path, reopened, at):
    path = str(tmp_path / "ck")
    save(path)
    if reopened:  # a read moves the blobs from the log into a table file
        blobdb.get("leveldb").read(path)
    _damage_every_file(path, _flip(at))
    db = blobdb.get("leveldb")
    assert not db.exists(path)
    with pytest.raises(blobdb.CorruptDBError) as info:
        db.read(path)
    assert path in info.value.message and info.value.hint


@NEEDS_LEVELDB
@pytest.mark.parametrize("keep", [0.3, 0.9])
def test_a_log_cut_short_is_a_save_that_did_not_finish(tmp_path, keep):
    path = str(tmp_path / "ck")
    save(path)
    _damage_every_file(path, lambda raw: raw[:int(len(raw) * keep)])
    with pytest.raises(blobdb.IncompleteDBError) as info:
        blobdb.get("leveldb").read(path)
    assert path in info.value.message


@NEEDS_LEVELDB
def test_a_cut_short_resave_leaves_the_previous_checkpoint(tmp_path):
    path = str(tmp_path / "ck")
    save(path)
    blobdb.get("leveldb").read(path)  # the first save now lives in a table file
    save(path, {"new": np.arange(1000.0)})
    # cut the second save's log record: LevelDB drops it when it opens the database
    for name in os.listdir(path):
        if name.endswith(".log") and os.path.getsize(os.path.join(path, name)):
            f = os.path.join(path, name)
            os.truncate(f, os.path.getsize(f) // 2)
    assert same(blobdb.get("leveldb").read(path), values())


@NEEDS_LEVELDB
def test_checkpoints_of_other_types_are_named(tmp_path):
    lm, one = str(tmp_path / "lm"), str(tmp_path / "one")
    save(lm, db_type="lmdb")
    save(one, db_type="dslcdb")
    for path, kind in ((lm, "lmdb"), (one, "dslcdb")):
        with pytest.raises(blobdb.DBTypeError) as info:
            blobdb.get("leveldb").read(path)
        assert f"db_type='{kind}'" in info.value.message
    empty = str(tmp_path / "empty")
    os.mkdir(empty)
    with pytest.raises(blobdb.IncompleteDBError):
        blobdb.get("leveldb").read(empty)
    with pytest.raises(blobdb.MissingDBError):
        blobdb.get("leveldb").read(str(tmp_path / "none"))


def test_without_plyvel_leveldb_says_how_to_install_it(monkeypatch):
    # importing the package registers the formats: import it again with plyvel missing, into a
    # copy of the registry (the real one, and the modules, come back afterwards)
    from dslc.runtime.blobdb import base
    monkeypatch.setattr(base, "_TYPES", {k: v for k, v in base._TYPES.items() if k != "leveldb"})
    monkeypatch.setitem(sys.modules, "plyvel", None)  # (so `import plyvel` raises ImportError)
    monkeypatch.delitem(sys.modules, "dslc.runtime.blobdb.dbleveldb", raising=False)
    monkeypatch.delattr(blobdb, "dbleveldb", raising=False)  # (else `from . import` finds it)
    importlib.reload(blobdb)
    with pytest.raises(blobdb.DBTypeError) as info:
        blobdb.get("LevelDB").read("/nowhere")
    assert "dslc[leveldb]" in info.value.hint
    assert "leveldb" not in blobdb.names() and "dslcdb" in blobdb.names()


@NEEDS_LEVELDB
def test_format_2_checksums_are_xxh3_over_1_mib_chunks(tmp_path):
    import json

    import plyvel
    import xxhash

    path = str(tmp_path / "ck")
    big = np.arange((1 << 18) + 5, dtype=np.float64)  # 2 MiB and 40 bytes: three chunks
    save(path, {**values(), "big": big})
    db = plyvel.DB(path)
    try:
        doc = json.loads(db.get(b"manifest"))
        payloads = {b["name"]: db.get(b"blob/" + b["name"].encode()) for b in doc["blobs"]}
    finally:
        db.close()
    assert doc["format"] == 2 and doc["chunk"] == 1 << 20
    for b in doc["blobs"]:
        data = payloads[b["name"]]
        chunks = [data[i:i + (1 << 20)] for i in range(0, len(data), 1 << 20)] or [data]
        want = xxhash.xxh3_64_intdigest(data) if len(chunks) == 1 else xxhash.xxh3_64_intdigest(
            np.array([xxhash.xxh3_64_intdigest(c) for c in chunks], dtype="<u8").tobytes())
        assert b["xxh3"] == want and b["length"] == len(data), b["name"]
    assert len(payloads["big"]) == big.nbytes and payloads["big"] == big.tobytes()


@NEEDS_LEVELDB
def test_a_format_1_checkpoint_with_crc32_is_still_read_and_checked(tmp_path):
    """A format-1 checkpoint, as the writer before XXH3 laid it out, built here with plyvel."""
    import json
    import zlib

    import plyvel

    path = str(tmp_path / "ck")
    a, names = np.arange(6, dtype=np.int16).reshape(2, 3), b"\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00xy"
    rows = [{"name": "a", "kind": "tensor", "dtype": "<i2", "shape": [2, 3], "length": 12, "crc32": zlib.crc32(a.tobytes())},
            {"name": "s", "kind": "strings", "dtype": "", "shape": [2], "length": len(names), "crc32": zlib.crc32(names)}]
    db = plyvel.DB(path, create_if_missing=True)
    db.put(b"blob/a", a.tobytes())
    db.put(b"blob/s", names)
    db.put(b"manifest", json.dumps({"format": 1, "blobs": rows}).encode())
    db.close()
    got = blobdb.get("leveldb").read(path)
    assert got["a"].dtype == np.int16 and got["a"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert got["s"].tolist() == ["x", "y"]
    db = plyvel.DB(path)
    db.put(b"blob/a", (a + 1).tobytes())  # a changed payload: its CRC-32 no longer matches
    db.close()
    with pytest.raises(blobdb.CorruptDBError, match="blob 'a' in the leveldb checkpoint .* checksum does not match"):
        blobdb.get("leveldb").read(path)
