"""Checkpoints of many small blobs of every kind, the case the load and save paths batch:
a load reads runs of records with few preadv calls and checks their headers and
checksums all at once, a save writes batches on a helper thread. Every value must
come back as it was written (dtype, shape, elements), and one damaged byte in a
small blob in the middle of a run must still be reported for that blob.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from dbtypes import leveldb
from dslc.runtime import blobcodec, blobdb
from dslc.runtime.blobdb import dbfile
from dslc.runtime.resources import Counter
from dslc.net_builder import ops
from dslc.task import Task

DB_TYPES = ["dslcdb", "lmdb", leveldb()]


def mixed_values(n: int) -> dict:
    """``n`` blobs cycling through the kinds a checkpoint holds, with a 9 MiB one (more than a
    save's batch and a load's 1 MiB checksum chunk) in the middle."""
    rng = np.random.default_rng(11)
    makers = [
        lambda i: rng.random(int(rng.integers(1, 3000)), dtype=np.float32),
        lambda i: rng.integers(-9, 9, (2, 3, int(rng.integers(0, 4))), dtype=np.int8),
        lambda i: np.float64(i) / 7,  # a numpy scalar (a 0-d tensor)
        lambda i: np.zeros((3, 0), np.uint16),  # empty
        lambda i: rng.random((5, 4)).T,  # not C-contiguous: saved as its C-order copy
        lambda i: rng.random(7) > 0.5,
        lambda i: np.array([f"s{i}", "", "\u00e9\u4e2d"], dtype=object),
        lambda i: f"text {i}",  # a str scalar
        lambda i: np.array([b"\x00b", b""], dtype=object),
        lambda i: _counter(i),
        lambda i: np.int64(-i),
        lambda i: rng.integers(0, 1 << 60, 1, dtype=np.uint64),
    ]
    vals = {f"v{i}": makers[i % len(makers)](i) for i in range(n)}
    vals[f"v{n // 2}"] = rng.random(9 << 18)  # 9 MiB of float64
    return vals


def _counter(i: int) -> Counter:
    c = Counter(i + 3)
    c.count_down()
    return c


def same(got, want) -> bool:
    if isinstance(want, Counter):
        return isinstance(got, Counter) and (got.count, got.init) == (want.count, want.init)
    if isinstance(want, str):
        return type(got) is str and got == want
    g, w = np.asarray(got), np.asarray(want)
    return g.dtype == w.dtype and g.shape == w.shape and g.tolist() == w.tolist()


def save(db_type, path, vals: dict) -> None:
    blobdb.get(db_type).write(path, ((k, blobcodec.encode(k, v)) for k, v in vals.items()))


@pytest.mark.parametrize("db_type", DB_TYPES)
def test_many_small_blobs_of_every_kind_round_trip(tmp_path, db_type):
    vals = mixed_values(600)
    path = str(tmp_path / "ck")
    save(db_type, path, vals)
    db = blobdb.get(db_type)
    got = db.read(path)
    assert list(got) == list(vals)
    bad = [k for k in vals if not same(got[k], vals[k])]
    assert not bad, bad[:5]
    assert all(got[k].flags.c_contiguous and got[k].flags.writeable for k in vals if isinstance(got[k], np.ndarray))
    # a part, out of the file's order and with a name asked for twice
    pick = [f"v{i}" for i in range(599, 0, -7)] + ["v3", "v599"]
    part = db.read(path, pick)
    assert list(part) == list(dict.fromkeys(pick)) and all(same(part[k], vals[k]) for k in part)
    assert sorted(db.keys(path)) == sorted(vals)


def test_through_save_and_load_ops(tmp_path, session):
    vals = {k: v for k, v in mixed_values(200).items() if isinstance(v, np.ndarray) and v.dtype != object}
    for k, v in vals.items():
        session.workspace.feed(k, v)
    path = str(tmp_path / "ck")
    names = list(vals)
    with Task() as save_task:
        ops.Save(names, [], db=path, db_type="dslcdb", absolute_path=True)
    with Task() as load_task:
        ops.Load([], [f"r_{k}" for k in names], db=path, db_type="dslcdb", absolute_path=True,
                 source_blob_names=names)
    session.run(save_task)
    session.run(load_task)
    assert all(same(session.workspace.fetch(f"r_{k}"), v) for k, v in vals.items())


def small_blobs(n=300, size=1000) -> dict:
    return {f"b{i}": np.arange(size // 4, dtype=np.int32) + i for i in range(n)}


def rows(path) -> dict:
    raw = open(path, "rb").read()
    off, length, _, _ = dbfile.TRAILER.unpack(raw[-dbfile.TRAILER.size:])
    return {b["name"]: b for b in json.loads(raw[off:off + length])["blobs"]}


def flip(path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x04]))


def test_a_damaged_byte_in_a_small_blob_in_the_middle_of_a_run_is_located(scratch):
    path = os.path.join(scratch, "ck")
    vals = small_blobs()
    save("dslcdb", path, vals)
    layout = rows(path)
    # the records lie back to back: the load reads them as runs of many blobs
    assert all(layout[f"b{i + 1}"]["record"] == layout[f"b{i}"]["offset"] + 1000 for i in range(299))
    db = blobdb.get("dslcdb")
    flip(path, layout["b150"]["offset"] + 517)
    with pytest.raises(blobdb.CorruptDBError) as info:
        db.read(path)
    assert info.value.message == f"blob 'b150' in the checkpoint {path} is damaged: its checksum does not match"
    others = [k for k in vals if k != "b150"]
    got = db.read(path, others)  # the blobs around it are fine, and load
    assert all(same(got[k], vals[k]) for k in others)
    # with two damaged blobs, the one asked for first is named
    flip(path, layout["b40"]["record"] + 17)  # in its name
    for want, first in ((["b40", "b150"], "the record header of blob 'b40'"), (["b150", "b40"], "blob 'b150'")):
        with pytest.raises(blobdb.CorruptDBError) as info:
            db.read(path, want)
        assert info.value.message.startswith(first), info.value.message


@pytest.mark.parametrize("part", ["tag", "length", "padding"])
def test_a_damaged_record_header_in_a_run_names_its_blob(scratch, part):
    path = os.path.join(scratch, "ck")
    save("dslcdb", path, small_blobs(100, 200))
    b = rows(path)["b57"]
    assert b["offset"] - b["record"] > 16 + 3  # header, name "b57", at least one byte of padding
    flip(path, {"tag": b["record"], "length": b["record"] + 9, "padding": b["offset"] - 1}[part])
    with pytest.raises(blobdb.CorruptDBError) as info:
        blobdb.get("dslcdb").read(path)
    assert info.value.message == f"the record header of blob 'b57' in the checkpoint {path} is damaged", part


def test_the_manifest_is_the_json_of_its_rows(tmp_path):
    """The writer builds the manifest's text row by row: it must be what json.dumps gives."""
    path = str(tmp_path / "ck")
    vals = {"w\u00e9\"\\": np.zeros((2, 3), np.float32), "s": np.array(["a"], dtype=object), "z": np.int8(1)}
    save("dslcdb", path, vals)
    raw = open(path, "rb").read()
    off, length, _, _ = dbfile.TRAILER.unpack(raw[-dbfile.TRAILER.size:])
    doc = json.loads(raw[off:off + length])
    assert json.dumps(doc).encode() == raw[off:off + length]
    assert [(b["name"], b["kind"], b["dtype"], b["shape"]) for b in doc["blobs"]] == [
        ("w\u00e9\"\\", "tensor", "<f4", [2, 3]), ("s", "strings", "", [1]), ("z", "tensor", "|i1", [])]


def test_manifest_rows_without_kind_dtype_or_shape_are_read_as_format_1_writers_left_them():
    """A row may lack kind, dtype and shape (""/""/() then); a row without its place or
    checksum is not valid, whichever row it is."""
    from dslc.runtime.blobdb.manifest import Index

    rows = [{"name": "a", "kind": "tensor", "dtype": "<f4", "shape": [2], "length": 8, "xxh3": 5},
            {"name": "b", "length": 3, "xxh3": (1 << 64) - 1}]
    index = Index(rows, "xxh3")
    assert index.names == ["a", "b"] and index.kinds == ["tensor", ""] and index.dtypes == ["<f4", ""]
    assert index.shapes == [[2], ()] and index.length.tolist() == [8, 3]
    assert index.digest.tolist() == [5, (1 << 64) - 1]
    with pytest.raises(KeyError):  # no checksum
        Index([rows[0], {"name": "c", "length": 1}], "xxh3")
    with pytest.raises(KeyError):  # no record/offset, which a dslcdb manifest must have
        Index(rows, "xxh3", placed=True)
    with pytest.raises(OverflowError):
        Index([{**rows[0], "xxh3": -1}], "xxh3")
