"""Interpreter kernels of the sampling ops and TrimDataset (``ir/ops/collect.py``).

A tensor vector is a plain list held in a blob. CollectTensor's count of records seen
belongs to the op, as in Caffe2: it starts at 0 each time the op is bound to a
workspace (a run), while the vectors keep their contents.
"""
from __future__ import annotations

import numpy as np

from dslc.runtime.datasets import FieldTree
from dslc.runtime.packed import ObjectMap, PackedRecords
from dslc.ir.diagnostics import DSLError

from .kernels import kernel


class TensorVector(list):
    """A vector of tensors (CreateTensorVector)."""

    handle_kind = "tensorvector"


def _vector(v, op: str) -> TensorVector:
    if not isinstance(v, TensorVector):
        raise DSLError(f"{op} needs a tensor vector, got {type(v).__name__}",
                       hint="pass a blob CreateTensorVector wrote")
    return v


kernel("CreateTensorVector")(lambda op, cfg: TensorVector)
kernel("TensorVectorSize")(lambda op, cfg: lambda v: np.int32(len(_vector(v, "TensorVectorSize"))))


@kernel("ConcatTensorVector")
def _concat_vector(op, cfg):
    def concat(v):
        v = _vector(v, "ConcatTensorVector")
        if not v:
            raise DSLError("ConcatTensorVector of an empty tensor vector", hint="collect something first")
        try:
            return np.concatenate([np.asarray(t) for t in v])
        except ValueError as e:
            raise DSLError(f"ConcatTensorVector: {e}", hint="the tensors must differ in their first dim "
                           "only") from None
    return concat


@kernel("CollectTensor", per_instance=True)
def _collect(op, cfg):
    k, n = int(op.attrs["num_to_collect"]), len(op.results)

    def make(inst):
        seen = [0]
        rng = np.random.default_rng()

        def collect(*args):
            vectors = [_vector(v, "CollectTensor") for v in args[:n]]
            record = args[n:]
            # reservoir sampling: the first k records go in; the i-th (0-based) after that
            # replaces a uniformly chosen one with chance k / (i + 1)
            pos = seen[0] if seen[0] < k else int(rng.integers(0, seen[0] + 1))
            seen[0] += 1
            if pos < k:
                for v, t in zip(vectors, record):
                    t = np.array(t)
                    if pos < len(v):
                        v[pos] = t
                    else:
                        v.append(t)
            return vectors[0] if n == 1 else tuple(vectors)
        return collect
    return make


@kernel("LastNWindowCollector")
def _last_n(op, cfg):
    k, n_out = int(op.attrs["num_to_collect"]), len(op.results)

    def collect(window, nxt, data, *rest):
        data = np.asarray(data)
        fresh = window is None or np.size(window) == 0
        window = None if fresh else np.asarray(window)
        if window is not None and (window.ndim != data.ndim or window.shape[1:] != data.shape[1:]):
            raise DSLError(f"LastNWindowCollector window rows {list(window.shape[1:])} do not match "
                           f"data rows {list(data.shape[1:])}", hint="collect data of one row shape")
        start = 0 if fresh else int(nxt)
        if not 0 <= start < k:
            raise DSLError(f"LastNWindowCollector next is {start}, outside 0..{k - 1}",
                           hint="start next at 0 (np.array(0, dtype=np.int32))")
        out = np.array(window) if window is not None else data[:0].copy()
        rows = data[-k:]  # only the last k rows of a long batch can stay
        if len(data) > k:
            out, start = rows.copy(), 0
        elif len(rows):
            size = min(k, len(out) + len(rows))
            if size > len(out):
                out = np.concatenate([out, np.zeros((size - len(out),) + data.shape[1:], data.dtype)])
            first = min(len(rows), k - start)
            out[start:start + first] = rows[:first]
            out[:len(rows) - first] = rows[first:]
            start = (start + len(rows)) % k
        results = [out, np.int32(start)]
        if n_out == 3:
            visited = 0 if fresh or len(rest) < 2 else int(np.asarray(rest[-1]).reshape(-1)[0])
            results.append(np.array([visited + len(data)], dtype=np.int64))
        return tuple(results)
    return collect


@kernel("TrimDataset")
def _trim(op, cfg):
    tree, m = FieldTree(op.attrs["fields"]), int(op.attrs["multiple_of"])

    def trim(*data):
        data = [np.asarray(d) for d in data]
        try:
            tree.check(data)
        except ValueError as e:
            raise DSLError(f"TrimDataset: {e}", hint="the blobs must form a dataset of these fields") from None
        rows = tree.rows(data)
        keep = rows // m * m
        rng = tree.ranges(data, [0] * tree.num_domains, keep)
        out = tree.take(data, rng)
        return out[0] if len(out) == 1 else tuple(out)
    return trim


kernel("CreateMap")(lambda op, cfg: ObjectMap)


@kernel("ReservoirSampling", per_instance=True)
def _reservoir(op, cfg):
    k, dedupe = int(op.attrs["num_to_collect"]), len(op.results) == 4

    def make(inst):
        rng = np.random.default_rng()

        def sample(reservoir, visited, data, mutex, *book):
            packed = isinstance(data, PackedRecords)
            rows = list(data.rows) if packed else np.asarray(data)
            started = reservoir is not None and len(reservoir) > 0
            kept = (list(reservoir.rows) if isinstance(reservoir, PackedRecords) else list(np.asarray(reservoir))) \
                if started else []
            seen = int(np.asarray(visited).reshape(-1)[0]) if started else 0
            if dedupe:
                ids, where, slots = np.asarray(book[0]).reshape(-1), book[1], book[2]
                if not isinstance(where, ObjectMap):
                    raise DSLError("ReservoirSampling's object map must be a blob CreateMap wrote")
                if len(ids) != len(rows):
                    raise DSLError(f"ReservoirSampling has {len(ids)} object ids for {len(rows)} rows")
                slots = [int(s) for s in np.asarray(slots).reshape(-1)] if started else []
                if not started:
                    where.clear()
                # (an object counts once: not when it is kept already, nor again in this batch)
                fresh = {int(i) for i in ids} - set(where)
            for i in range(len(rows)):
                if dedupe:
                    oid = int(ids[i])
                    if oid not in fresh:
                        continue
                    fresh.discard(oid)
                pos = seen if seen < k else int(rng.integers(0, seen + 1))
                if pos < k:
                    row = rows[i] if packed else np.array(rows[i])
                    if pos == len(kept):
                        kept.append(row)
                        if dedupe:
                            slots.append(oid)
                    else:
                        kept[pos] = row
                        if dedupe:  # (the object it replaces leaves the map)
                            where.pop(slots[pos], None)
                            slots[pos] = oid
                    if dedupe:
                        where[oid] = pos
                seen += 1
            if packed:
                out = PackedRecords(kept)
            else:
                out = np.stack(kept) if kept else rows[:0].copy()
            count = np.asarray(visited).copy() if visited is not None else np.zeros((), np.int64)
            count = np.full(np.shape(count), seen, dtype=np.int64)
            results = [out, count]
            if dedupe:
                results += [where, np.array(slots, dtype=np.int64)]
            return tuple(results)
        return sample
    return make
