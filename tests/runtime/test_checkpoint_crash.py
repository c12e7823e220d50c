"""A writer killed with SIGKILL in the middle of a save, for both database types.

Each child process saves a complete checkpoint (values ``1.0 + i``), then starts a
second Save through a LocalSession: a new checkpoint, or over the first one. After
its third blob it prints MID and waits; the test kills it there with SIGKILL. The
first checkpoint must still load with its values, and the interrupted one must be
absent (dslcdb) or reported as incomplete (lmdb, leveldb), never half-loaded.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dbtypes import HAVE_PLYVEL, leveldb
from dslc.runtime import blobdb

pytestmark = pytest.mark.slow  # (the README's inner loop skips it: writers in child processes, killed mid-save)

N_BLOBS, SIZE = 8, 1 << 18  # 1 MiB of float32 per blob

CHILD = textwrap.dedent(f"""
    import sys, time
    import numpy as np
    from dslc import workspace
    from dslc.runtime.blobdb import dbfile, dblmdb
    from dslc.net_builder import ops
    from dslc.session import LocalSession
    from dslc.task import Task

    db_type, first, second = sys.argv[1:]
    names = [f"w{{i}}" for i in range({N_BLOBS})]

    def save(path, base):
        for i, n in enumerate(names):
            workspace.FeedBlob(n, np.full({SIZE}, base + i, dtype=np.float32))
        with Task() as task:
            ops.Save(names, [], db=path, db_type=db_type, absolute_path=True)
        LocalSession().run(task)

    save(first, 1.0)
    print("SAVED", flush=True)
    classes = [dbfile.FileDB, dblmdb.LmdbDB]
    try:
        from dslc.runtime.blobdb import dbleveldb
        classes.append(dbleveldb.LevelDB)
    except ImportError:  # (without the leveldb extra its cases are skipped)
        pass
    for cls in classes:
        put, count = cls._put, [0]
        def slow_put(self, *args, put=put, count=count):
            out = put(self, *args)
            count[0] += 1
            if count[0] == 3:
                print("MID", flush=True)
                time.sleep(120)
            return out
        cls._put = slow_put
    save(second, 100.0)
    print("FINISHED", flush=True)
""")

_LEVELDB_CASES = [("leveldb", "new"), ("leveldb", "overwrite")]
CASES = [(db, mode) for db in ("dslcdb", "lmdb") for mode in ("new", "overwrite")] + \
    (_LEVELDB_CASES if HAVE_PLYVEL else [])  # the children the fixture runs
CASE_PARAMS = CASES[:4] + [leveldb(*c) for c in _LEVELDB_CASES]  # (skipped without plyvel)
DB_TYPES = ["dslcdb", "lmdb", leveldb()]


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """Run every case's child at once; kill each at MID. -> {case: (first, second, lines)}"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = {}
    for db, mode in CASES:
        d = tmp_path_factory.mktemp(f"{db}-{mode}")
        first = str(d / "ck.1")
        second = first if mode == "overwrite" else str(d / "ck.2")
        procs[(db, mode)] = (first, second, subprocess.Popen(
            [sys.executable, "-c", CHILD, db, first, second], stdout=subprocess.PIPE, text=True, env=env))
    out = {}
    for case, (first, second, p) in procs.items():
        lines = []
        for line in p.stdout:
            lines.append(line.strip())
            if line.strip() == "MID":
                p.send_signal(signal.SIGKILL)
                break
        p.wait(timeout=60)
        p.stdout.close()
        out[case] = (first, second, lines, p.returncode)
    return out


def expected(base):
    return {f"w{i}": np.full(SIZE, base + i, dtype=np.float32) for i in range(N_BLOBS)}


@pytest.mark.parametrize("db, mode", CASE_PARAMS)
def test_the_previous_checkpoint_survives(killed, db, mode):
    first, second, lines, code = killed[(db, mode)]
    assert lines == ["SAVED", "MID"] and code == -signal.SIGKILL
    store = blobdb.get(db)
    assert store.exists(first)
    got = store.read(first)
    want = expected(1.0)
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].dtype == np.float32 and np.array_equal(got[k], want[k])


@pytest.mark.parametrize("db", DB_TYPES)
def test_the_interrupted_checkpoint_is_absent_or_incomplete(killed, db):
    first, second, lines, code = killed[(db, "new")]
    store = blobdb.get(db)
    assert not store.exists(second)
    with pytest.raises((blobdb.MissingDBError, blobdb.IncompleteDBError)) as info:
        store.read(second)
    assert second in info.value.message
    if db == "dslcdb":
        assert not os.path.exists(second)  # only a temporary file is left, under another name
        leftovers = [n for n in os.listdir(os.path.dirname(second)) if n.startswith("ck.2.tmp-")]
        assert len(leftovers) == 1
    else:
        assert isinstance(info.value, blobdb.IncompleteDBError)
