"""Interpreter kernels of the data-pipeline ops (``ir/ops/data.py``).

Queues, cursors and mutexes are runtime objects (``runtime/``) held in
blobs. Blocking queue operations wait through the runtime's ``wait_for``, so they
end with ``Cancelled`` when a sibling of their thread fails.
"""
from __future__ import annotations

import numpy as np

from dslc.runtime.datasets import (FieldTree, Mutex, TreeCursor, read_rows, row_offsets,
                                            shuffled_rows)
from dslc.runtime.queues import TIMED_OUT, BlobsQueue
from dslc.runtime.resources import STATS, Index, IndexError_
from dslc.ir.diagnostics import DSLError

from .kernels import kernel


def _pack(values):
    """Kernel results: None for none, the value for one, a tuple for more."""
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


# ----------------------------------------------------------------------------- queues
@kernel("CreateBlobsQueue")
def _create_queue(op, cfg):
    a = op.attrs
    name = op.results[0].hint or "queue"  # the blob it is made for, for messages
    return lambda: BlobsQueue(int(a["capacity"]), int(a["num_blobs"]), a["field_names"], name)


def _check_record(q: BlobsQueue, data) -> None:
    if len(data) != q.num_blobs:
        raise DSLError(f"this queue holds records of {q.num_blobs} blobs, got {len(data)}",
                       hint="enqueue as many blobs as the queue's num_blobs")


@kernel("EnqueueBlobs")
def _enqueue(op, cfg):
    n_out = len(op.results)

    def enqueue(q, *data):
        _check_record(q, data)
        if not q.put(data):
            raise DSLError("EnqueueBlobs into a closed queue that is full",
                           hint="use SafeEnqueueBlobs to get a status instead of an error")
        return _pack(list(data[:n_out]))
    return enqueue


@kernel("SafeEnqueueBlobs")
def _safe_enqueue(op, cfg):
    def enqueue(q, *data):
        _check_record(q, data)
        return (*data, np.bool_(not q.put(data)))
    return enqueue


def _take(q: BlobsQueue, k: int, timeout):
    """Up to ``k`` records (each blob concatenated along dim 0 when k > 1), or None."""
    got = []
    for _ in range(k):
        rec = q.get(timeout)
        if rec is TIMED_OUT:
            if got:
                break
            raise DSLError(f"DequeueBlobs timed out after {timeout} s", hint="raise timeout_secs, or "
                           "pass 0 to wait until a record arrives or the queue is closed")
        if rec is None:
            break
        got.append(rec)
    if not got:
        return None
    if k == 1:
        return list(got[0])
    try:
        return [np.concatenate([np.asarray(r[j]) for r in got]) for j in range(q.num_blobs)]
    except ValueError as e:
        raise DSLError(f"cannot concatenate {len(got)} dequeued records: {e}",
                       hint="num_records > 1 needs records whose blobs have a first (batch) "
                            "dimension and equal other dimensions") from None


def _check_count(q: BlobsQueue, n: int) -> None:
    if n != q.num_blobs:
        raise DSLError(f"this queue holds records of {q.num_blobs} blobs, but {n} outputs take them",
                       hint="dequeue into as many blobs as the queue's num_blobs")


@kernel("DequeueBlobs")
def _dequeue(op, cfg):
    k, n = int(op.attrs["num_records"]), len(op.results)
    timeout = float(op.attrs["timeout_secs"]) or None

    def dequeue(q):
        _check_count(q, n)
        values = _take(q, k, timeout)
        if values is None:
            raise DSLError("DequeueBlobs from a closed queue with nothing left",
                           hint="use SafeDequeueBlobs to get a status instead of an error")
        return _pack(values)
    return dequeue


@kernel("SafeDequeueBlobs", per_instance=True)
def _safe_dequeue(op, cfg):
    k, n = int(op.attrs["num_records"]), len(op.results) - 1

    def make(inst):
        # Caffe2 leaves the outputs alone when nothing was read: they keep this op's last record
        last = [None] * n

        def dequeue(q):
            _check_count(q, n)
            values = _take(q, k, None)
            if values is None:
                return (*last, np.True_)
            last[:] = values
            return (*values, np.False_)
        return dequeue
    return make


@kernel("CloseBlobsQueue")
def _close(op, cfg):
    return lambda q: q.close()


# ----------------------------------------------------------------------------- cursors
def _dataset_error(e: Exception):
    return DSLError(f"dataset: {e}", hint="the dataset blobs must match its fields: one row per "
                    "entry of the field's domain, lengths adding up to the nested fields' rows")


@kernel("CreateTreeCursor")
def _create_cursor(op, cfg):
    fields = list(op.attrs["fields"])
    FieldTree(fields)  # bad nesting is an error before the job runs

    return lambda: TreeCursor(fields)


kernel("ResetCursor")(lambda op, cfg: lambda c: c.reset())


@kernel("ReadNextBatch")
def _read_batch(op, cfg):
    size = int(op.attrs["batch_size"])

    def read(c, *data):
        try:
            return _pack(c.read_batch(data, size))
        except (ValueError, IndexError) as e:
            raise _dataset_error(e) from None
    return read


kernel("ComputeOffset")(lambda op, cfg: lambda c, *data: row_offsets(c.tree, data))


@kernel("SortAndShuffle")
def _sort_and_shuffle(op, cfg):
    a = op.attrs
    k, size, chunk = int(a["sort_by_field_idx"]), int(a["batch_size"]), int(a["shuffle_size"])

    def order(c, *data):
        try:
            return shuffled_rows(c.tree, data, k, size, chunk)
        except ValueError as e:
            raise _dataset_error(e) from None
    return order


@kernel("ReadRandomBatch")
def _read_random(op, cfg):
    size, loop = int(op.attrs["batch_size"]), bool(op.attrs["loop_over"])
    return lambda c, idx, offsets, *data: _pack(read_rows(c, idx, offsets, data, size, loop))


@kernel("CheckDatasetConsistency")
def _check(op, cfg):
    tree = FieldTree(op.attrs["fields"])

    def check(*data):
        try:
            tree.check(data)
        except ValueError as e:
            raise _dataset_error(e) from None
    return check


# ----------------------------------------------------------------------------- appending
kernel("CreateMutex")(lambda op, cfg: Mutex)


@kernel("AtomicIter", per_instance=True)
def _atomic_iter(op, cfg):
    (name,) = op.attrs["output_names"]

    stat = f"atomic_iter/stats/{name}/num_iter"  # (Caffe2's key)

    def make(inst):
        cell = inst.ws.cell(name)  # (the counter, read and written by name under the lock)

        def count(mutex, _counter_before_the_lock):
            with mutex.lock:
                v = cell.v
                if v is None:
                    raise DSLError(f"AtomicIter: the counter {name!r} holds nothing",
                                   hint="fill it first (ConstantFill with dtype=INT64)")
                cell.v = np.asarray(v) + np.asarray(1, dtype=np.asarray(v).dtype)
            STATS.add(stat)
        return count
    return make


@kernel("StatRegistryExport")
def _stat_export(op, cfg):
    reset = bool(op.attrs["reset"])
    return lambda: STATS.export(reset)


@kernel("AtomicAppend", per_instance=True)
def _atomic_append(op, cfg):
    names = list(op.attrs["output_names"])
    n = len(names)

    def make(inst):
        cells = [inst.ws.cell(name) for name in names]  # the dataset blobs, written by name

        def append(mutex, *values):
            batches = values[n:]  # values[:n] are the dataset blobs as read before the lock
            with mutex.lock:
                try:
                    mutex.append(cells, batches)
                except (TypeError, ValueError) as e:
                    raise DSLError(f"AtomicAppend: {e}", hint="append batches of the dataset's "
                                   "dtypes, with rows shaped like its rows") from None
        return append
    return make


# --- indexes (ir/ops/index.py)
_INDEX_KEYS = {"IntIndexCreate": np.int32, "LongIndexCreate": np.int64, "StringIndexCreate": object}


def _index_create(name):
    @kernel(name)
    def make(op, cfg):
        dtype, limit = _INDEX_KEYS[name], int(op.attrs["max_elements"])
        return lambda: Index(dtype, limit)
    return make


for _name in _INDEX_KEYS:
    _index_create(_name)


def _index_call(fn):
    try:
        return fn()
    except IndexError_ as e:
        raise DSLError(str(e), hint="create the index with a larger max_elements, or freeze it "
                                    "(IndexFreeze) so that unknown keys get id 0") from None


@kernel("IndexGet")
def _index_get(op, cfg):
    return lambda index, keys: _index_call(lambda: index.get(keys))


@kernel("IndexFreeze")
def _index_freeze(op, cfg):
    def freeze(index):
        index.frozen = True
        return index
    return freeze


@kernel("IndexLoad")
def _index_load(op, cfg):
    skip = bool(op.attrs["skip_first_entry"])

    def load(index, items):
        _index_call(lambda: index.load(items, skip))
        return index
    return load


@kernel("IndexStore")
def _index_store(op, cfg):
    return lambda index: index.store()


@kernel("IndexSize")
def _index_size(op, cfg):
    return lambda index: index.size()
