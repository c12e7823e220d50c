"""``minidb`` is Caffe2's own file format: files the real Caffe2 wrote load here, and what
dslc writes is byte for byte what Caffe2 writes.

tests/runtime/data/caffe2_saved.minidb and caffe2_saved_chunked.minidb were written by the real
Caffe2 (torch 1.10.2's, ../shared/tools/caffe2-ref) with the feeds of ``_feed`` below:

    workspace.RunOperatorOnce(core.CreateOperator("Save", ["w", "ids", "names", "d", "h"], [],
        absolute_path=1, db=<file>, db_type="minidb"))
    workspace.FeedBlob("big", np.arange(10, dtype=np.float32))
    ...Save(["big"], ..., db=<file>.chunked, chunk_size=4)
"""
from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from dslc import core, workspace
from dslc.runtime import blobdb
from dslc.proto import caffe2_pb2

DATA = os.path.join(os.path.dirname(__file__), "data")
NAMES = ["w", "ids", "names", "d", "h"]


def _feed():
    workspace.FeedBlob("w", np.arange(6, dtype=np.float32).reshape(2, 3) / 4)
    workspace.FeedBlob("ids", np.array([3, -1, 7], np.int64))
    workspace.FeedBlob("names", np.array([b"ab", b"c"], dtype=object))
    workspace.FeedBlob("d", np.array([1.5, -2.25], np.float64))
    workspace.FeedBlob("h", np.array([[1, 2]], np.int32))


def _records(path):
    """[(key, value size)] of a minidb file, read with struct as Caffe2 lays it out."""
    out, raw, pos = [], open(path, "rb").read(), 0
    while pos < len(raw):
        k, v = struct.unpack_from("=ii", raw, pos)
        out.append((raw[pos + 8:pos + 8 + k].decode(), v))
        pos += 8 + k + v
    return out


@pytest.fixture(autouse=True)
def _fresh():
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def test_a_file_caffe2_saved_loads_with_every_dtype(backend):
    load = core.Net("load")
    load.Load([], NAMES, db=os.path.join(DATA, "caffe2_saved.minidb"), db_type="minidb", absolute_path=1)
    load.Load([], ["big"], db=os.path.join(DATA, "caffe2_saved_chunked.minidb"), db_type="minidb", absolute_path=1)
    workspace.RunNetOnce(load)
    np.testing.assert_array_equal(workspace.FetchBlob("w"), np.arange(6, dtype=np.float32).reshape(2, 3) / 4)
    assert workspace.FetchBlob("ids").dtype == np.int64 and workspace.FetchBlob("ids").tolist() == [3, -1, 7]
    assert workspace.FetchBlob("names").tolist() == [b"ab", b"c"]  # (bytes, as Caffe2 fetches strings)
    assert workspace.FetchBlob("d").tolist() == [1.5, -2.25]
    assert workspace.FetchBlob("h").dtype == np.int32 and workspace.FetchBlob("h").tolist() == [[1, 2]]
    np.testing.assert_array_equal(workspace.FetchBlob("big"), np.arange(10, dtype=np.float32))


def test_what_dslc_saves_is_byte_for_byte_what_caffe2_saved(tmp_path):
    _feed()
    path = str(tmp_path / "mine.minidb")
    workspace.RunOperatorOnce(core.CreateOperator("Save", NAMES, [], absolute_path=1, db=path, db_type="minidb"))
    with open(path, "rb") as mine, open(os.path.join(DATA, "caffe2_saved.minidb"), "rb") as theirs:
        assert mine.read() == theirs.read()


def test_chunks_follow_chunk_size_and_serialization_options(tmp_path):
    """Records per blob: ceil(elements / chunk size); an option's regex must match the whole
    name, and the first matching option wins (as Caffe2's load_save tests count them)."""
    for name in ("int16_data", "uint16_data", "float16_data", "int64_data"):
        workspace.FeedBlob(name, np.arange(100).astype(name.split("_")[0]))
    names = ["int16_data", "uint16_data", "float16_data", "int64_data"]
    path = str(tmp_path / "opts.minidb")
    options = caffe2_pb2.SerializationOptions(options=[
        caffe2_pb2.BlobSerializationOptions(blob_name_regex="int16_data", chunk_size=10),
        caffe2_pb2.BlobSerializationOptions(blob_name_regex=".*16_data", chunk_size=20),
        caffe2_pb2.BlobSerializationOptions(blob_name_regex="float16_data", chunk_size=30)])
    workspace.RunOperatorOnce(core.CreateOperator("Save", names, [], absolute_path=1, db=path, db_type="minidb",
                                                  chunk_size=40, options=options))
    counts = {}
    for key, _ in _records(path):
        counts[key.rsplit("#%", 1)[0]] = counts.get(key.rsplit("#%", 1)[0], 0) + 1
    assert counts == {"int16_data": 10, "uint16_data": 5, "float16_data": 5, "int64_data": 3}
    workspace.ResetWorkspace()
    workspace.RunOperatorOnce(core.CreateOperator("Load", [], names, absolute_path=1, db=path, db_type="minidb"))
    for name in names:
        got = workspace.FetchBlob(name)
        assert got.dtype == np.dtype(name.split("_")[0]) and got.tolist() == list(range(100))
    for chunk_size, records in ((0, 1), (-1, 1), (7, 15)):
        workspace.FeedBlob("x", np.zeros(100, np.float32))
        workspace.RunOperatorOnce(core.CreateOperator("Save", ["x"], [], absolute_path=1, db=path,
                                                      db_type="minidb", chunk_size=chunk_size))
        assert len(_records(path)) == records


# The minidb the real Caffe2 (torch 1.10.2, with fbgemm) wrote for Save(["float1"], absolute_path=1,
# db_type="minidb", options: float1 as FLOAT_BFLOAT16) of [1, 3.14159, -2.5e-3, 65504, 1e-40]
# (float32): a FLOAT TensorProto with data_format FMT_BFLOAT16 and the bfloat16 halves as raw_data
CAFFE2_BFLOAT16 = bytes.fromhex(
    "0900000036000000666c6f6174312325300a06666c6f617431120654656e736f721a24080510013a06666c6f6174"
    "31420208005a04080010056a0a803f494024bb804701007801")


def test_float_blobs_save_as_bfloat16_as_caffe2_writes_them(tmp_path):
    """Save with FLOAT_BFLOAT16 writes Caffe2's bytes; Load gives the rounded floats (Caffe2
    loads 1, 3.140625, -2.5024414e-3, 65536, 9.1835e-41 from its file: the top 16 bits of
    each float, rounded half away from zero, by hand: 65504 = 0x477fe000 -> 0x4780)."""
    x = np.array([1.0, 3.14159, -2.5e-3, 65504.0, 1e-40], np.float32)
    workspace.FeedBlob("float1", x)
    workspace.FeedBlob("float2", x)
    path = str(tmp_path / "bf16.minidb")
    bf16 = caffe2_pb2.BlobSerializationOptions.FLOAT_BFLOAT16
    options = caffe2_pb2.SerializationOptions(options=[
        caffe2_pb2.BlobSerializationOptions(blob_name_regex="float1", float_format=bf16)])
    workspace.RunOperatorOnce(core.CreateOperator("Save", ["float1"], [], absolute_path=1, db=path,
                                                  db_type="minidb", options=options))
    with open(path, "rb") as f:
        assert f.read() == CAFFE2_BFLOAT16
    workspace.RunOperatorOnce(core.CreateOperator("Save", ["float1", "float2"], [], absolute_path=1, db=path,
                                                  db_type="minidb", options=options))
    workspace.ResetWorkspace()
    workspace.RunOperatorOnce(core.CreateOperator("Load", [], ["float1", "float2"], absolute_path=1, db=path,
                                                  db_type="minidb"))
    got = workspace.FetchBlob("float1")
    want = ((x.view(np.uint32).astype(np.uint64) + 0x8000) >> 16 << 16).astype(np.uint32).view(np.float32)
    assert got.dtype == np.float32 and got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    assert got[3] == 65536.0 and got[1] == 3.140625
    np.testing.assert_array_equal(workspace.FetchBlob("float2"), x)


def test_blob_size_estimates_count_bfloat16_as_two_bytes():
    """Caffe2's EstimateAllBlobSizes with float1 (4000 floats) saved as bfloat16 in chunks of
    500: 8448 = 8 (6 + 50) + 4000 * 2; float2 as floats: 16056 = 6 + 50 + 4000 * 4."""
    workspace.FeedBlob("float1", np.zeros(4000, np.float32))
    workspace.FeedBlob("float2", np.zeros(4000, np.float32))
    opt = caffe2_pb2.BlobSerializationOptions
    options = caffe2_pb2.SerializationOptions(options=[
        opt(blob_name_regex="float1", chunk_size=500, float_format=opt.FLOAT_BFLOAT16)])
    workspace.RunOperatorOnce(core.CreateOperator("EstimateAllBlobSizes", [], ["n", "s"], options=options))
    got = dict(zip(workspace.FetchBlob("n").tolist(), workspace.FetchBlob("s").tolist()))
    assert (got[b"float1"], got[b"float2"]) == (8448, 16056)


def test_a_cut_or_damaged_file_is_a_clear_error(tmp_path):
    raw = open(os.path.join(DATA, "caffe2_saved.minidb"), "rb").read()
    db = blobdb.get("minidb")
    cut = tmp_path / "cut.minidb"
    cut.write_bytes(raw[:-5])
    assert not db.exists(str(cut))
    with pytest.raises(blobdb.IncompleteDBError, match="cut short"):
        db.read(str(cut))
    huge = tmp_path / "huge.minidb"  # (a record claiming 2 GiB: refused before anything is read)
    huge.write_bytes(struct.pack("=ii", 3, 2 ** 31 - 1) + b"w#%")
    with pytest.raises(blobdb.IncompleteDBError):
        db.read(str(huge))
    lying = caffe2_pb2.BlobProto(name="w", type="Tensor")  # (dims for 2^50 elements, 2 values)
    lying.tensor.dims.extend([1 << 25, 1 << 25])
    lying.tensor.data_type = caffe2_pb2.TensorProto.FLOAT
    lying.tensor.float_data.extend([1.0, 2.0])
    value = lying.SerializeToString()
    bad = tmp_path / "lying.minidb"
    bad.write_bytes(struct.pack("=ii", 3, len(value)) + b"w#%" + value)
    with pytest.raises(blobdb.DBError):
        db.read(str(bad))


def test_counters_and_texts_round_trip_in_dslcs_own_record_type(tmp_path):
    """A counter has no Caffe2 form: it is stored as a BlobProto of type dslc:counter."""
    path = str(tmp_path / "c.minidb")
    net = core.Net("save")
    c = net.CreateCounter([], ["c"], init_count=5)
    net.CountUp(c)
    net.Save([c], [], db=path, db_type="minidb", absolute_path=1)
    workspace.RunNetOnce(net)
    types = []
    for key, _ in _records(path):
        types.append(key)
    assert types == ["c#%0"]
    load = core.Net("load")
    load.Load([], ["c"], db=path, db_type="minidb", absolute_path=1)
    load.RetrieveCount(["c"], ["n"])
    workspace.RunNetOnce(load)
    assert int(workspace.FetchBlob("n")) == 6


def test_a_model_caffe2_exported_predicts_here():
    """tests/runtime/data/caffe2_predictor.minidb: predictor_exporter.save_to_db("minidb", ...) of
    brew.fc(model, "data", "fc", 3, 2) and a Softmax "prob", on the real Caffe2 (its random
    init); for data [[1, 2, 3]] Caffe2 printed prob [[0.997848629951477, 0.0021513495594263077]]."""
    from dslc.predictor import predictor_exporter as pe
    net = pe.prepare_prediction_net(os.path.join(DATA, "caffe2_predictor.minidb"), "minidb")
    workspace.FeedBlob("data", np.array([[1.0, 2.0, 3.0]], np.float32))
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob("prob"), [[0.997848629951477, 0.0021513495594263077]],
                               rtol=1e-6)


def _read_all(db_type, path) -> list:
    cursor, got = workspace.C.create_db(db_type, path, workspace.C.Mode.read).new_cursor(), []
    while cursor.valid():
        got.append((cursor.key(), cursor.value()))
        cursor.next()
    return got


@pytest.mark.parametrize("db_type", ["minidb", "lmdb"])
def test_a_dropped_transaction_and_db_are_written_at_once(tmp_path, db_type):
    """Caffe2's dataset tutorial writes with ``del transaction; del db`` and reads the db
    straight away. dslc's db held its transactions and each transaction its db: the commit
    waited for a garbage collection, and the db read back empty (a lost write). The real
    Caffe2 read the record back at once, garbage collection off (/tmp/caffe2-venv)."""
    import gc
    path = str(tmp_path / "kv")
    gc.disable()
    try:
        db = workspace.C.create_db(db_type, path, workspace.C.Mode.write)
        transaction = db.new_transaction()
        transaction.put("train_000", b"features")
        del transaction
        del db
        assert _read_all(db_type, path) == [(b"train_000", b"features")]
    finally:
        gc.enable()


def test_a_committed_minidb_record_is_in_the_file_before_the_db_closes(tmp_path):
    # (Caffe2's minidb commit flushes its file: the real Caffe2 read the record back with
    # the db still open for writing)
    path = str(tmp_path / "kv")
    db = workspace.C.create_db("minidb", path, workspace.C.Mode.write)
    t = db.new_transaction()
    t.put(b"k", b"v")
    t.commit()
    assert _read_all("minidb", path) == [(b"k", b"v")]
    db.close()


@pytest.mark.parametrize("db_type", ["minidb", "lmdb"])
def test_raw_records_through_create_db(tmp_path, db_type):
    """Caffe2's key-value API: records put in transactions come back through a cursor
    (minidb in put order, lmdb sorted by key); a minidb of records is Caffe2's layout."""
    path = str(tmp_path / "kv")
    pairs = [(b"key2", b"v2"), (b"key1", b"value1"), (b"key3", b"")]
    db = workspace.C.create_db(db_type, path, workspace.C.Mode.write)
    t = db.new_transaction()
    for k, v in pairs[:2]:
        t.put(k, v)
    t.commit()
    t = db.new_transaction()
    t.put(*pairs[2])
    del t  # (commits, as Caffe2's transaction does when it goes)
    db.close()
    db = workspace.C.create_db(db_type, path, workspace.C.Mode.read)
    cursor, got = db.new_cursor(), []
    while cursor.valid():
        got.append((cursor.key(), cursor.value()))
        cursor.next()
    db.close()
    assert got == (pairs if db_type == "minidb" else sorted(pairs))
    if db_type == "minidb":
        assert _records(path) == [(k.decode(), len(v)) for k, v in pairs]
    with pytest.raises(RuntimeError, match="opened to read"):
        workspace.C.create_db(db_type, path, workspace.C.Mode.read).new_transaction()
