"""Data-pipeline operators: record queues, dataset cursors, dataset appends.

Queues, cursors and mutexes live in blobs as handles (``!queue``, ``!cursor``,
``!mutex``); ops on one resource keep their order, and the lowering brings the
workspace up to date around them, since other threads synchronise through them::

    %q = CreateBlobsQueue {capacity = 8, num_blobs = 1} : !queue
    %x2, %failed = SafeEnqueueBlobs(%q, %x) : i64[?], bool
    %y, %empty = SafeDequeueBlobs(%q) : any, bool
    %c = CreateTreeCursor {fields = ["val"]} : !cursor
    %b = ReadNextBatch(%c, %val) {batch_size = 2} : i64[?]
    AtomicAppend(%m, %dst, %b) {output_names = ["dst"]}       appends %b to blob @dst

A dequeued record's types are known only when it runs (``any``). AtomicAppend
writes its target blobs itself, by name, under the mutex (a read, an append and a
write that no other thread can interleave), so it has no results and every pass
treats it as writing the workspace.
"""
from __future__ import annotations

from ..opdef import SIZED_BY_VALUES, Effect, declare, type_error
from ..types import ANY, BOOL, CURSOR, MUTEX, QUEUE, HandleType, TensorType
from .infer import tensors

W_QUEUE = (Effect("queue", "write"),)
W_CURSOR = (Effect("cursor", "write"),)
_MAKER = {"queue": "CreateBlobsQueue", "cursor": "CreateTreeCursor", "mutex": "CreateMutex"}


def _handle(op: str, kind: str, t) -> None:
    if t != ANY and t != HandleType(kind):
        type_error(f"{op} input 0 must be a {kind}, got {t}",
                   f"pass the blob that {_MAKER[kind]} wrote")


def _positive(op: str, attrs, *names) -> None:
    for k in names:
        if int(attrs[k]) < 1:
            type_error(f"{op} {k} must be >= 1, got {attrs[k]}", f"pass {k}=1 or more")


# ----------------------------------------------------------------------------- queues


def _create_queue(types, attrs, n):
    _positive("CreateBlobsQueue", attrs, "capacity", "num_blobs")
    names = attrs["field_names"]
    if names and len(names) != int(attrs["num_blobs"]):
        type_error(f"CreateBlobsQueue has num_blobs={attrs['num_blobs']} but {len(names)} field_names",
                   "give one field name per blob of a record")
    return [QUEUE]


declare("CreateBlobsQueue", 0, _create_queue,
        attrs={"capacity": 1, "num_blobs": 1, "field_names": [], "enforce_unique_name": 0},
        effects=(Effect("queue", "alloc"),),
        doc="a new bounded FIFO of `capacity` records of `num_blobs` tensors each")


def _enqueue(name: str, safe: bool):
    def infer(types, attrs, n):
        _handle(name, "queue", types[0])
        data = list(types[1:])
        tensors(name, data)
        want = len(data) + (1 if safe else 0)
        if n != want and not (not safe and n == 0):
            type_error(f"{name} of {len(data)} blobs needs {want} outputs, got {n}",
                       "its outputs are the data blobs themselves" + (", then a bool status" if safe else ""))
        return data + [BOOL] if safe else data[:n]
    return infer


declare("EnqueueBlobs", (2, None), _enqueue("EnqueueBlobs", False), results=(0, None),
        effects=W_QUEUE,
        doc="append the record (operands after the queue), waiting while the queue is full; "
            "an error if it is closed and full")
declare("SafeEnqueueBlobs", (2, None), _enqueue("SafeEnqueueBlobs", True), results=(2, None),
        effects=W_QUEUE,
        doc="as EnqueueBlobs, but a closed and full queue gives status (last result) True "
            "instead of an error")


def _dequeue(name: str, safe: bool):
    def infer(types, attrs, n):
        _handle(name, "queue", types[0])
        _positive(name, attrs, "num_records")
        if attrs.get("timeout_secs", 0) < 0:
            type_error(f"{name} timeout_secs must be >= 0, got {attrs['timeout_secs']}",
                       "pass 0 to wait for as long as it takes")
        return [ANY] * (n - 1) + [BOOL] if safe else [ANY] * n
    return infer


declare("DequeueBlobs", 1, _dequeue("DequeueBlobs", False), results=(1, None),
        attrs={"timeout_secs": 0.0, "num_records": 1}, effects=W_QUEUE,
        doc="take the oldest record (num_records > 1: up to that many, concatenated), waiting "
            "while the queue is empty and open; an error once closed and drained, or after "
            "timeout_secs > 0")
declare("SafeDequeueBlobs", 1, _dequeue("SafeDequeueBlobs", True), results=(2, None),
        attrs={"num_records": 1}, effects=W_QUEUE,
        doc="as DequeueBlobs, but a closed and drained queue gives status (last result) True "
            "instead of an error")


def _close(types, attrs, n):
    _handle("CloseBlobsQueue", "queue", types[0])
    return []


declare("CloseBlobsQueue", 1, _close, results=(0, 0), effects=W_QUEUE,
        doc="close the queue: waiting writers fail, readers drain what is left")

# ----------------------------------------------------------------------------- dataset cursors


def _fields(op: str, attrs) -> list:
    fields = attrs["fields"]
    if not fields or not all(isinstance(f, str) for f in fields):
        type_error(f"{op} needs fields=[...], the dataset's field names",
                   "pass fields=dataset.field_names()")
    return fields


def _create_cursor(types, attrs, n):
    _fields("CreateTreeCursor", attrs)
    return [CURSOR]


declare("CreateTreeCursor", 0, _create_cursor, attrs={"fields": []},
        effects=(Effect("cursor", "alloc"),),
        doc="a new cursor at the start of a dataset with these field names (`a:lengths` "
            "fields open nested domains)")


def _reset(types, attrs, n):
    _handle("ResetCursor", "cursor", types[0])
    return []


declare("ResetCursor", 1, _reset, results=(0, 0), effects=W_CURSOR,
        doc="move the cursor back to the start")


def _batch_types(op: str, data) -> list:
    out = []
    for t in tensors(op, data):
        if t.shape == ():
            type_error(f"{op} reads rows of tensors, got a scalar {t}",
                       "dataset fields are tensors with one entry per row")
        out.append(TensorType(t.dtype, None if t.shape is None else (None,) + t.shape[1:]))
    return out


def _read_batch(types, attrs, n):
    _handle("ReadNextBatch", "cursor", types[0])
    _positive("ReadNextBatch", attrs, "batch_size")
    if n != len(types) - 1:
        type_error(f"ReadNextBatch of {len(types) - 1} fields needs as many outputs, got {n}",
                   "name one output blob per dataset field")
    return _batch_types("ReadNextBatch", types[1:])


declare("ReadNextBatch", (2, None), _read_batch, results=(1, None),
        attrs={"batch_size": 1, "enforce_batch_size": 0}, effects=W_CURSOR,
        doc="the next batch_size top-level rows of the dataset (operands after the cursor), "
            "atomically; empty tensors once exhausted")


def _offsets(types, attrs, n):
    _handle("ComputeOffset", "cursor", types[0])
    tensors("ComputeOffset", types[1:])
    return [TensorType("i64", (None, None))]


declare("ComputeOffset", (2, None), _offsets, effects=(Effect("cursor", "read"),),
        doc="int64 [rows + 1, domains]: where each top-level row starts in each nested domain")


def _shuffle(types, attrs, n):
    _handle("SortAndShuffle", "cursor", types[0])
    tensors("SortAndShuffle", types[1:])
    _positive("SortAndShuffle", attrs, "batch_size", "shuffle_size")
    k = int(attrs["sort_by_field_idx"])
    if k >= len(types) - 1:
        type_error(f"SortAndShuffle sort_by_field_idx={k} but the dataset has {len(types) - 1} fields",
                   "pass -1 (no sort) or the index of a top-level field")
    return [TensorType("i64", (None,))]


declare("SortAndShuffle", (2, None), _shuffle,
        attrs={"sort_by_field_idx": -1, "batch_size": 1, "shuffle_size": 1},
        effects=(Effect("cursor", "read"),),
        doc="row indices sorted by a field (-1: unsorted), shuffled within chunks of "
            "shuffle_size * batch_size rows, then batch order shuffled: Caffe2's fixed order "
            "(the same on every run)")


def _read_random(types, attrs, n):
    _handle("ReadRandomBatch", "cursor", types[0])
    _positive("ReadRandomBatch", attrs, "batch_size")
    tensors("ReadRandomBatch", types[1:3])
    if n != len(types) - 3:
        type_error(f"ReadRandomBatch of {len(types) - 3} fields needs as many outputs, got {n}",
                   "name one output blob per dataset field")
    return _batch_types("ReadRandomBatch", types[3:])


declare("ReadRandomBatch", (4, None), _read_random, results=(1, None),
        attrs={"batch_size": 1, "enforce_batch_size": 0, "loop_over": 0}, effects=W_CURSOR,
        traits={SIZED_BY_VALUES},
        doc="the rows at the next batch_size entries of the indices (operand 1), using the "
            "offsets (operand 2); loop_over starts again at the end")


def _consistency(types, attrs, n):
    tensors("CheckDatasetConsistency", types)
    if len(_fields("CheckDatasetConsistency", attrs)) != len(types):
        type_error(f"CheckDatasetConsistency has {len(types)} blobs but {len(attrs['fields'])} fields",
                   "give one field name per blob")
    return []


declare("CheckDatasetConsistency", (1, None), _consistency, results=(0, 0), attrs={"fields": []},
        effects=(Effect("check", "read"),),
        doc="an error unless the fields have matching row counts and their lengths add up")

# ----------------------------------------------------------------------------- appending


declare("CreateMutex", 0, lambda t, a, n: [MUTEX], effects=(Effect("mutex", "alloc"),),
        doc="a new mutex")


def _append(types, attrs, n):
    _handle("AtomicAppend", "mutex", types[0])
    rest = tensors("AtomicAppend", types[1:])
    names = attrs["output_names"]
    if len(rest) % 2 or len(names) != len(rest) // 2:
        type_error(f"AtomicAppend takes the mutex, k dataset blobs and k batches, and writes the k "
                   f"dataset blobs; got {len(rest)} tensors and {len(names)} outputs",
                   "call AtomicAppend([mutex] + dataset_blobs + batches, dataset_blobs)")
    return []


declare("AtomicAppend", (3, None), _append, results=(0, 0),
        attrs={"output_names": []},
        effects=(Effect("mutex", "write"), Effect("workspace", "write")),
        doc="under the mutex, append each batch to the dataset blob named in output_names "
            "(an empty blob takes the batch as it is, with its dtype)")


def _atomic_iter(types, attrs, n):
    _handle("AtomicIter", "mutex", types[0])
    tensors("AtomicIter", types[1:])
    if len(attrs["output_names"]) != 1:
        type_error("AtomicIter writes one counter blob", "call AtomicIter([mutex, counter], [counter])")
    return []


declare("AtomicIter", 2, _atomic_iter, results=(0, 0), attrs={"output_names": []},
        effects=(Effect("mutex", "write"), Effect("workspace", "write"), Effect("stats", "write")),
        doc="(mutex, counter) -> counter + 1, read and written under the mutex (an int64 counter "
            "several threads count up together); adds 1 to the stat atomic_iter/stats/<counter>/num_iter")


def _stat_export(types, attrs, n):
    if types:
        type_error("StatRegistryExport reads the process's stat registry; dslc has no other",
                   "call it without inputs: StatRegistryExport([], [keys, values, timestamps])")
    return [TensorType("str", (None,)), TensorType("i64", (None,)), TensorType("i64", (None,))]


declare("StatRegistryExport", (0, 1), _stat_export, results=3, attrs={"reset": 1},
        effects=(Effect("stats", "write"),),
        doc="(keys, values, timestamps) of every stat the process's ops keep (AtomicIter's counts), "
            "in key order; with reset (default) their values start again from 0")
