"""The Ray nodes' collective transport without a cluster: shared memory segments between
processes of one machine (backends/ray/shm.py), and PeerTransport's choice between them
and sending by value, with stand-in actors delivering to each other's mailboxes."""
from __future__ import annotations

import os
import stat
import threading

import numpy as np
import pytest

pytest.importorskip("ray")

from dslc.backends.ray import shm  # noqa: E402
from dslc.backends.ray.collective import Mailbox, PeerTransport  # noqa: E402
from dslc.backends.interp.executor import CancelToken  # noqa: E402
from dslc.runtime import collectives  # noqa: E402
from dslc.runtime.cancel import swap_token  # noqa: E402

pytestmark = pytest.mark.skipif(not shm.available(), reason="no writable /dev/shm")


def test_a_payload_read_back_from_shared_memory_in_place():
    out, inbox = shm.Outbox(), shm.Inbox()
    payload = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([7, 8], np.int64), np.zeros((0, 4))]
    desc = out.pack("g", 0, payload)
    assert os.path.dirname(desc.path) == shm.root()
    assert stat.S_IMODE(os.stat(desc.path).st_mode) == 0o600  # only this user reads it
    got = inbox.unpack(desc)
    for g, want in zip(got, payload):
        assert g.dtype == want.dtype and g.shape == want.shape
        np.testing.assert_array_equal(g, want)
    assert not got[0].flags.writeable
    # round 1 writes the other slot: round 0's view still holds round 0's values
    second = inbox.unpack(out.pack("g", 1, [p + 1 for p in payload]))
    np.testing.assert_array_equal(got[0], payload[0])
    np.testing.assert_array_equal(second[0], payload[0] + 1)
    assert os.path.exists(desc.path)
    out.pack("g", 2, payload)  # every peer took round 0 by now: the file loses its name
    assert not os.path.exists(desc.path)
    np.testing.assert_array_equal(got[1], payload[1])  # (the mapping stays)
    out.close()


def test_a_larger_payload_gets_a_new_segment_and_odd_payloads_go_by_value():
    out, inbox = shm.Outbox(), shm.Inbox()
    small = out.pack("g", 0, np.ones(4))
    big = out.pack("g", 1, np.full(1 << 16, 3.0))
    assert big.path != small.path and not os.path.exists(small.path)
    np.testing.assert_array_equal(inbox.unpack(big), np.full(1 << 16, 3.0))
    assert inbox.unpack(out.pack("g", 2, None)) is None
    assert out.pack("g", 3, np.array(["a", "b"], dtype=object)) is None  # (not plain numbers)
    assert out.pack("g", 4, {"not": "a payload"}) is None
    out.close()
    assert not os.path.exists(big.path)
    for path in ("/etc/passwd", os.path.join(shm.root(), "..", "x"), os.path.join(shm.root(), "dslc-1-zz")):
        with pytest.raises(ValueError, match="not a collective segment"):  # (what a message names is checked)
            inbox.unpack(shm.ShmPayload(path, 8, "array", [("<f4", (2,), 0)]))


@pytest.mark.parametrize("planted", ["a symlink to a file of ours", "a symlink to a segment",
                                     "a file others may read", "a fifo", "a file shorter than said"])
def test_a_file_planted_under_a_segments_name_is_not_mapped(tmp_path, monkeypatch, planted):
    """In the cluster's own directory a segment-named entry is opened without following a
    symlink and mapped only if it is a regular file private to this user, as long as the
    message says (issue 38: defence in depth, the directory is 0700 already)."""
    d = tmp_path / "shm"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("DSLC_SHM_DIR", str(d))
    secret = tmp_path / "secret"
    secret.write_bytes(np.arange(4, dtype=np.float32).tobytes())
    out = shm.Outbox()
    real = out.pack("g", 0, np.arange(4, dtype=np.float32))
    name = d / "dslc-1-0123456789abcdef"
    if planted == "a symlink to a file of ours":
        name.symlink_to(secret)
    elif planted == "a symlink to a segment":
        name.symlink_to(real.path)
    elif planted == "a fifo":
        os.mkfifo(name, 0o600)
    else:
        name.write_bytes(bytes(16 if planted == "a file others may read" else 8))
        name.chmod(0o644 if planted == "a file others may read" else 0o600)
    with pytest.raises(ValueError, match="not a collective segment"):
        shm.Inbox().unpack(shm.ShmPayload(str(name), 16, "array", [("<f4", (4,), 0)]))
    np.testing.assert_array_equal(shm.Inbox().unpack(real), np.arange(4, dtype=np.float32))  # (the control)
    out.close()


def test_a_cluster_directory_someone_else_could_enter_is_not_used(tmp_path, monkeypatch):
    d = tmp_path / "shm"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    monkeypatch.setenv("DSLC_SHM_DIR", str(d))
    assert not shm.available()  # (payloads then go by value)
    os.chmod(d, 0o700)
    assert shm.available()
    (tmp_path / "link").symlink_to(d)
    monkeypatch.setenv("DSLC_SHM_DIR", str(tmp_path / "link"))
    assert not shm.available()


class _Actor:
    """Stands in for a NodeWorker actor handle: ``collective_put.remote`` delivers now."""

    def __init__(self, mailbox):
        self.collective_put = self
        self.mailbox = mailbox
        self.sent = []

    def remote(self, key, sender, payload):
        self.sent.append(type(payload).__name__)
        self.mailbox.put(key, sender, payload)


@pytest.mark.parametrize("machines", [("m", "m", "m"), ("m", "n", "o"), ("m", "m", "n")])
def test_three_shards_sum_in_rank_order_through_memory_or_by_value(machines):
    boxes = [Mailbox() for _ in machines]
    actors = [_Actor(b) for b in boxes]
    peers = {"g": {r: (actors[r], machines[r]) for r in range(3)}}
    results = {}

    outboxes = [shm.Outbox() for _ in machines]

    def shard(r):
        t = PeerTransport(peers, boxes[r], run=1, here=machines[r], outbox=outboxes[r], inbox=shm.Inbox(),
                          put=lambda v: v)  # (by value: what ray.put and Ray's argument passing give)
        prev = swap_token(CancelToken(collective=t))  # (as a Ray node's run sets it)
        try:
            xs = [np.full(5, 10.0 ** r, np.float32), np.array([r], np.int64)]
            results[r] = collectives.allreduce(*xs, tensors=2, shards=3, shard=r, group="g")
        finally:
            swap_token(prev)

    threads = [threading.Thread(target=shard, args=(r,)) for r in range(1, 3)]
    for t in threads:
        t.start()
    shard(0)
    for t in threads:
        t.join()
    for r in range(3):
        np.testing.assert_array_equal(results[r][0], np.full(5, 111.0, np.float32))
        np.testing.assert_array_equal(results[r][1], [3])
    # what each actor received: descriptors from its machine's shards, arrays from the others'
    for r in range(3):
        near = sum(machines[q] == machines[r] for q in range(3) if q != r)
        assert actors[r].sent.count("ShmPayload") == near
        assert actors[r].sent.count("list") == 2 - near
    assert all(len(b) == 0 for b in boxes)
    for out in outboxes:
        out.close()


def test_a_shard_missing_from_the_job_is_named(monkeypatch):
    box = Mailbox()
    t = PeerTransport({"g": {0: (_Actor(box), "m")}}, box, run=1)
    with pytest.raises(collectives.CollectiveError, match=r"has 2 shards, but the job runs shard\(s\) \[0\]"):
        t.exchange("g", 0, 2, np.ones(2))
    monkeypatch.setenv("DSLC_COLLECTIVE_TIMEOUT_S", "0.1")
    other = _Actor(Mailbox())  # (delivers nowhere this shard listens)
    t = PeerTransport({"g": {0: (_Actor(box), "m"), 1: (other, "n")}}, box, run=1)
    with pytest.raises(collectives.CollectiveError, match=r"shard\(s\) \[1\] of 2 did not arrive within 0.1 s"):
        t.exchange("g", 0, 2, np.ones(2))
