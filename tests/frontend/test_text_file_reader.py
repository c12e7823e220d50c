"""TextFileReader: tab-separated files read in batches, typed by the schema, over several passes."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc.dataset import Dataset
from dslc.ir.diagnostics import DSLError, TraceError
from dslc.net_builder import ops
from dslc.pipeline import pipe
from dslc.schema import FetchRecord, List, Scalar, Struct
from dslc.task import Task, TaskGroup, WorkspaceType
from dslc.text_file_reader import TextFileReader

ROWS = [("ab", "1.5", "7"), ("c d", "-2.25", "-3"), ("", "1e3", "0"), ("x", "0", "12")]
SCHEMA = Struct(("word", Scalar(str)), ("score", Scalar(np.float32)), ("n", Scalar(np.int64)))


@pytest.fixture
def tsv(tmp_path):
    path = tmp_path / "rows.tsv"
    path.write_text("".join("\t".join(r) + "\n" for r in ROWS))
    return str(path)


def read_all(session, reader, read_net, record, should_stop):
    """Run ``read_net`` until should_stop, collecting every batch (as Caffe2 code does)."""
    batches = []
    while True:
        session.run(read_net)
        got = FetchRecord(record)
        if workspace.FetchBlob(should_stop):
            assert all(len(a) == 0 for a in got.field_blobs())  # the last read is empty
            return batches
        batches.append([a.tolist() for a in got.field_blobs()])


@pytest.mark.parametrize("batch_size, num_passes", [(1, 1), (3, 1), (5, 2), (2, 3)])
def test_reads_every_row_per_pass_in_batches(session, tsv, batch_size, num_passes):
    init = core.Net("init")
    reader = TextFileReader(init, filename=tsv, schema=SCHEMA, batch_size=batch_size,
                            num_passes=num_passes)
    session.run(init)
    net = core.Net("read")
    should_stop, record = reader.read_record(net)
    batches = read_all(session, reader, net, record, should_stop)
    words = [w for b in batches for w in b[0]]
    scores = [s for b in batches for s in b[1]]
    counts = [n for b in batches for n in b[2]]
    assert words == ["ab", "c d", "", "x"] * num_passes
    assert scores == [1.5, -2.25, 1000.0, 0.0] * num_passes  # (exact in float32)
    assert counts == [7, -3, 0, 12] * num_passes
    total = 4 * num_passes
    assert [len(b[0]) for b in batches] == [batch_size] * (total // batch_size) + \
        ([total % batch_size] if total % batch_size else [])
    types = [a.dtype for a in FetchRecord(record).field_blobs()]
    assert types[1] == np.float32 and types[2] == np.int64


def test_pipe_from_a_text_file_into_a_dataset(session, tsv):
    with TaskGroup(workspace_type=WorkspaceType.GLOBAL) as init, Task():
        out = Dataset(SCHEMA, name="out")
        out.init_empty(ops)
        reader = TextFileReader(ops, filename=tsv, schema=SCHEMA, batch_size=3)
    session.run(init)
    with TaskGroup() as tg:
        pipe(reader, out.writer(), num_runtime_threads=2)  # two threads share the reader
    session.run(tg)
    got = FetchRecord(out.content())
    # (the threads' batches land in either order; each row keeps its fields together)
    rows = sorted(zip(got.word.get().tolist(), got.n.get().tolist()))
    assert rows == [("", 0), ("ab", 7), ("c d", -3), ("x", 12)]


def test_a_short_row_is_a_runtime_error_naming_the_row(session, tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("a\t1\t2\nb\t3\n")
    init = core.Net("init")
    reader = TextFileReader(init, filename=str(path), schema=SCHEMA, batch_size=5)
    session.run(init)
    net = core.Net("read")
    reader.read_record(net)
    with pytest.raises(DSLError, match="row 2 has 2 tab-separated fields") as e:
        session.run(net)
    assert "test_text_file_reader.py" in str(e.value)


def test_a_bad_number_is_a_runtime_error(session, tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("a\tnot-a-number\t2\n")
    init = core.Net("init")
    reader = TextFileReader(init, filename=str(path), schema=SCHEMA)
    session.run(init)
    net = core.Net("read")
    reader.read_record(net)
    with pytest.raises(DSLError, match="'not-a-number' is not a f32"):
        session.run(net)


def test_a_missing_file_is_an_error_when_the_reader_is_made(session, tmp_path):
    init = core.Net("init")
    TextFileReader(init, filename=str(tmp_path / "nope.tsv"), schema=SCHEMA)
    with pytest.raises(DSLError, match="no file"):
        session.run(init)


def test_schemas_a_text_file_cannot_hold_are_trace_errors(tsv):
    with pytest.raises(TraceError, match="Scalars") as e:
        TextFileReader(core.Net("i"), filename=tsv, schema=Struct(("l", List(np.int32))))
    assert "test_text_file_reader.py" in str(e.value)
    with pytest.raises(TraceError, match="needs a dtype"):
        TextFileReader(core.Net("i"), filename=tsv, schema=Struct(("x", Scalar())))
    with pytest.raises(TraceError, match="schema.Struct"):
        TextFileReader(core.Net("i"), filename=tsv, schema=Scalar(str))
    with pytest.raises(DSLError, match="cannot read a column"):
        net = core.Net("i")
        TextFileReader(net, filename=tsv, schema=Struct(("x", Scalar(np.uint8))))
        workspace.RunNetOnce(net)
