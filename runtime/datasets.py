"""In-memory columnar datasets: cursors over them, and appending to them under a mutex.

A dataset is one tensor per field; field names (``a``, ``b:lengths``,
``b:values:x``...) give the nesting. A field named ``<p>lengths`` opens a *domain*:
the fields whose names start with ``<p>`` (the longest such prefix wins) have one
entry per unit of those lengths. Top-level fields are domain 0. Reading ``n``
top-level rows takes ``n`` entries of domain 0 and, in each nested domain, as many
entries as the lengths of the rows taken so far add up to::

    fields  a, b:lengths, b:values          a = [1, 2, 3]   b:lengths = [2, 0, 1]
    domains 0,  0,         1                b:values = [10, 11, 12]
    rows 0..1 -> a = [1, 2], b:lengths = [2, 0], b:values = [10, 11]

Cursors are shared by threads; every read is atomic.
"""
from __future__ import annotations

import threading

import numpy as np

from dslc.ir.budget import check_size

from .cxxorder import sort_and_shuffle


class FieldTree:
    """The domain of every field, and the lengths field that opens each nested domain."""

    def __init__(self, fields):
        self.fields = [str(f) for f in fields]
        if not self.fields:
            raise ValueError("a dataset cursor needs at least one field")
        self.domain = [0] * len(self.fields)
        self.opens: dict[int, int] = {}  # lengths field index -> the domain it opens
        prefixes = {}  # "<p>" of each "<p>lengths" field -> its index
        for i, name in enumerate(self.fields):
            if name == "lengths" or name.endswith(":lengths"):
                prefixes[name[: -len("lengths")]] = i
        for i, name in enumerate(self.fields):
            parents = [(len(p), j) for p, j in prefixes.items() if j != i and name.startswith(p)]
            if parents:
                j = max(parents)[1]
                if j > i:
                    raise ValueError(f"field {name!r} comes before its lengths field {self.fields[j]!r}")
                if j not in self.opens:
                    self.opens[j] = len(self.opens) + 1
                self.domain[i] = self.opens[j]
        self.num_domains = len(self.opens) + 1

    def rows(self, data) -> int:
        """The number of top-level rows in ``data`` (one array per field)."""
        for i, d in enumerate(self.domain):
            if d == 0:
                return len(data[i])
        return 0

    def ranges(self, data, start: list, count: int) -> list:
        """(begin, end) per domain for ``count`` rows from the offsets ``start`` (clipped)."""
        rng = [None] * self.num_domains
        b0 = start[0]
        rng[0] = (b0, min(b0 + count, self.rows(data)))
        for i in range(len(self.fields)):  # a lengths field comes before its domain's fields
            child = self.opens.get(i)
            if child is not None:
                b, e = rng[self.domain[i]]
                n = int(np.sum(data[i][b:e])) if e > b else 0
                rng[child] = (start[child], start[child] + n)
        return rng

    def take(self, data, rng) -> list:
        return [np.array(data[i][slice(*rng[self.domain[i]])]) for i in range(len(self.fields))]

    def check(self, data) -> None:
        """Every field of a domain has as many entries as the domain; lengths add up."""
        if len(data) != len(self.fields):
            raise ValueError(f"expected {len(self.fields)} fields, got {len(data)}")
        if self.num_domains == 1 and all(np.ndim(d) > 0 and len(d) == len(data[0]) for d in data):
            return  # flat and consistent (the common case, checked cheaply)
        size = [None] * self.num_domains
        size[0] = self.rows(data)
        for i, name in enumerate(self.fields):
            arr = np.asarray(data[i])
            if arr.ndim == 0:
                raise ValueError(f"field {name!r} is a scalar; dataset fields are tensors with one row "
                                 "per entry")
            d = self.domain[i]
            if size[d] is not None and len(arr) != size[d]:
                raise ValueError(f"field {name!r} has {len(arr)} entries, its domain has {size[d]}")
            size[d] = len(arr)
            if i in self.opens:
                size[self.opens[i]] = int(np.sum(arr))


class TreeCursor:
    """A position in a dataset: one offset per domain (CreateTreeCursor)."""

    handle_kind = "cursor"

    def __init__(self, fields):
        self.tree = FieldTree(fields)
        self.offsets = [0] * self.tree.num_domains
        self.lock = threading.Lock()

    def read_batch(self, data, batch_size: int) -> list:
        """The next ``batch_size`` rows (fewer at the end; empty arrays once exhausted)."""
        if self.tree.num_domains == 1:  # flat records: one offset, plain slices
            with self.lock:
                b = self.offsets[0]
                e = self.offsets[0] = min(b + batch_size, len(data[0]))
            return [d[b:e].copy() for d in data]
        with self.lock:
            rng = self.tree.ranges(data, self.offsets, batch_size)
            self.offsets = [e for _, e in rng]
        return self.tree.take(data, rng)

    def reset(self) -> None:
        with self.lock:
            self.offsets = [0] * self.tree.num_domains

    def __repr__(self):
        return f"TreeCursor({self.tree.fields}, offsets={self.offsets})"


def row_offsets(tree: FieldTree, data) -> np.ndarray:
    """int64 [rows + 1, domains]: where each top-level row starts in each domain (ComputeOffset)."""
    n = tree.rows(data)
    out = np.zeros((n + 1, tree.num_domains), dtype=np.int64)
    for r in range(n):
        rng = tree.ranges(data, list(out[r]), 1)
        out[r + 1] = [e for _, e in rng]
    return out


def shuffled_rows(tree: FieldTree, data, sort_by: int, batch_size: int, shuffle_size: int) -> np.ndarray:
    """Row indices as Caffe2's SortAndShuffle orders them (``cxxorder``): sorted by field
    ``sort_by`` (-1: not sorted), shuffled within chunks of ``shuffle_size * batch_size``
    rows, then whole batches shuffled; the same order on every call, as in Caffe2."""
    n = tree.rows(data)
    keys = None
    if sort_by >= 0:
        if tree.domain[sort_by] != 0:
            raise ValueError(f"cannot sort by {tree.fields[sort_by]!r}: it is not a top-level field")
        keys = np.asarray(data[sort_by])
        if keys.ndim != 1:
            raise ValueError(f"cannot sort by {tree.fields[sort_by]!r}: its rows are not single values")
    return sort_and_shuffle(keys, n, batch_size, shuffle_size)


def read_rows(cursor: TreeCursor, indices, offsets, data, batch_size: int, loop_over: bool) -> list:
    """The rows ``indices[pos:pos + batch_size]`` (ReadRandomBatch); wraps around if ``loop_over``."""
    tree = cursor.tree
    total = len(indices)
    with cursor.lock:
        pos = cursor.offsets[0]
        if loop_over and total and pos >= total:
            pos = 0
        picked = indices[pos:pos + batch_size]
        cursor.offsets[0] = pos + len(picked)
    parts = [[] for _ in tree.fields]
    for r in picked:
        r = int(r)
        for i, d in enumerate(tree.domain):
            parts[i].append(data[i][offsets[r][d]:offsets[r + 1][d]])
    for p, field in zip(parts, data):  # (the indices may pick a long row many times)
        check_size("ReadRandomBatch", (sum(map(len, p)),) + np.shape(field)[1:], np.asarray(field).dtype)
    return [np.concatenate(p) if p else np.array(data[i][:0]) for i, p in enumerate(parts)]


class Mutex:
    """A lock held in a blob (CreateMutex); AtomicAppend appends under it.

    Appends grow a spare buffer geometrically, as Caffe2's tensors do, so n appends
    cost O(n) in all: a blob's value is a view of the first rows of its buffer, and the
    next append fills rows past that view (which no holder of the view can see).
    """

    handle_kind = "mutex"

    def __init__(self):
        self.lock = threading.Lock()
        self._buffers: dict = {}  # id(cell) -> (cell, buffer, the view the cell was given)

    def append(self, cells, batches) -> None:
        """Append each batch to its blob along dim 0 (hold ``lock``); all of them or none."""
        batches = [np.asarray(b) for b in batches]
        for c, b in zip(cells, batches):
            _check_append(c.v, b)
        for c, b in zip(cells, batches):
            self._append(c, b)

    def _append(self, cell, batch) -> None:
        cur = cell.v
        if cur is None or np.size(cur) == 0:  # an empty blob takes the batch, with its dtype
            self._buffers.pop(id(cell), None)
            cell.v = np.array(batch)
            return
        n, k = len(cur), len(batch)
        known = self._buffers.get(id(cell))
        if known is not None and known[0] is cell and known[2] is cur and len(known[1]) >= n + k:
            buf = known[1]
        else:
            cur = np.asarray(cur)
            buf = np.empty((max(16, 2 * (n + k)),) + cur.shape[1:], dtype=cur.dtype)
            buf[:n] = cur
        buf[n:n + k] = batch
        view = buf[:n + k]
        self._buffers[id(cell)] = (cell, buf, view)
        cell.v = view

    def __repr__(self):
        return "Mutex()"


def _check_append(current, batch) -> None:
    if current is None or np.size(current) == 0:
        return
    current = np.asarray(current)
    if batch.ndim == 0:
        raise ValueError("cannot append a scalar: a batch has one row per entry")
    if current.dtype != batch.dtype:
        raise TypeError(f"cannot append {batch.dtype} data to a {current.dtype} dataset field")
    if current.shape[1:] != batch.shape[1:]:
        raise ValueError(f"cannot append rows of shape {list(batch.shape[1:])} to a field whose rows "
                         f"are {list(current.shape[1:])}")
