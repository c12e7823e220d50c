"""The row orders of Caffe2's SortAndShuffle, reproduced exactly.

Caffe2 orders the rows with the C++ standard library as built into its wheel (GNU
libstdc++): ``std::sort`` (introsort, not stable: rows with equal keys end up in an
order of its own) and ``std::shuffle`` with a fresh, default-seeded
``std::default_random_engine`` (minstd_rand0, seed 1) for every range it shuffles.
So its "random" order is the same on every run, and programs (and Caffe2's tests)
rely on it. These functions follow the same algorithms step by step, so they give
the same permutations; the cases were checked against the real Caffe2 (see
tests/ir/ops/test_sort_and_shuffle.py).
"""
from __future__ import annotations

import numpy as np

_MODULUS = 2 ** 31 - 1
_RANGE = _MODULUS - 2  # minstd_rand0 yields 1 .. 2^31 - 2: max - min


class _Minstd0:
    """std::minstd_rand0 with its default seed: x <- 16807 x mod (2^31 - 1), from x = 1."""

    def __init__(self):
        self.x = 1

    def __call__(self) -> int:
        self.x = (16807 * self.x) % _MODULUS
        return self.x


def _uniform(gen, hi: int) -> int:
    """std::uniform_int_distribution over [0, hi]: draws scaled down, rejecting the top."""
    buckets = hi + 1
    scale = _RANGE // buckets
    past = buckets * scale
    while True:
        r = gen() - 1
        if r < past:
            return r // scale


def shuffle(seq: list, lo: int, hi: int) -> None:
    """std::shuffle of seq[lo:hi] in place with a fresh default engine.

    For ranges small enough (n * n fits the engine's range) the library draws one number
    for two swap positions at a time, after one single draw when n is even.
    """
    n = hi - lo
    if n <= 1:
        return
    gen = _Minstd0()
    if _RANGE // n < n:
        for i in range(lo + 1, hi):
            j = lo + _uniform(gen, i - lo)
            seq[i], seq[j] = seq[j], seq[i]
        return
    i = lo + 1
    if n % 2 == 0:
        j = lo + _uniform(gen, 1)
        seq[i], seq[j] = seq[j], seq[i]
        i += 1
    while i < hi:
        r = i - lo + 1  # positions 0 .. r - 1 for seq[i], 0 .. r for seq[i + 1]
        x = _uniform(gen, r * (r + 1) - 1)
        for k, p in ((i, x // (r + 1)), (i + 1, x % (r + 1))):
            seq[k], seq[lo + p] = seq[lo + p], seq[k]
        i += 2


_THRESHOLD = 16  # below this many elements introsort leaves a range to insertion sort


def sort_indices(keys) -> list:
    """The row indices 0..n-1 in the order std::sort leaves them, comparing ``keys[i] < keys[j]``.

    With distinct keys (or few rows: insertion sort is stable) that is numpy's stable
    argsort; equal keys on longer ranges need introsort's own steps.
    """
    keys = np.asarray(keys)
    n = len(keys)
    if n <= _THRESHOLD or len(np.unique(keys)) == n:
        return np.argsort(keys, kind="stable").tolist()
    k = keys.tolist()
    a = list(range(n))
    _introsort(a, k, 0, n, 2 * (n.bit_length() - 1))
    _insertion_sort(a, k, 0, min(n, _THRESHOLD))
    for i in range(_THRESHOLD, n):
        _linear_insert(a, k, i)
    return a


def _introsort(a, k, first, last, depth) -> None:
    while last - first > _THRESHOLD:
        if depth == 0:
            _heapsort(a, k, first, last)
            return
        depth -= 1
        cut = _partition_pivot(a, k, first, last)
        _introsort(a, k, cut, last, depth)
        last = cut


def _partition_pivot(a, k, first, last) -> int:
    """Median of (first + 1, middle, last - 1) moved to first, then Hoare partition around it."""
    x, y, z = first + 1, first + (last - first) // 2, last - 1
    if k[a[x]] < k[a[y]]:
        m = y if k[a[y]] < k[a[z]] else (z if k[a[x]] < k[a[z]] else x)
    else:
        m = x if k[a[x]] < k[a[z]] else (z if k[a[y]] < k[a[z]] else y)
    a[first], a[m] = a[m], a[first]
    pivot = k[a[first]]
    lo, hi = first + 1, last
    while True:
        while k[a[lo]] < pivot:
            lo += 1
        hi -= 1
        while pivot < k[a[hi]]:
            hi -= 1
        if lo >= hi:
            return lo
        a[lo], a[hi] = a[hi], a[lo]
        lo += 1


def _insertion_sort(a, k, first, last) -> None:
    for i in range(first + 1, last):
        v = a[i]
        if k[v] < k[a[first]]:
            a[first + 1:i + 1] = a[first:i]
            a[first] = v
        else:
            _linear_insert(a, k, i)


def _linear_insert(a, k, i) -> None:
    """Move a[i] left past every larger key (something smaller sits before it)."""
    v = a[i]
    while k[v] < k[a[i - 1]]:
        a[i] = a[i - 1]
        i -= 1
    a[i] = v


def _heapsort(a, k, first, last) -> None:
    """make_heap then sort_heap on a[first:last] (introsort's fallback when it recurses too deep)."""
    n = last - first
    for parent in range((n - 2) // 2, -1, -1):
        _adjust_heap(a, k, first, parent, n, a[first + parent])
    while n > 1:
        n -= 1
        v = a[first + n]
        a[first + n] = a[first]
        _adjust_heap(a, k, first, 0, n, v)


def _adjust_heap(a, k, first, hole, n, v) -> None:
    top, child = hole, hole
    while child < (n - 1) // 2:
        child = 2 * (child + 1)
        if k[a[first + child]] < k[a[first + child - 1]]:
            child -= 1
        a[first + hole] = a[first + child]
        hole = child
    if n % 2 == 0 and child == (n - 2) // 2:
        child = 2 * (child + 1)
        a[first + hole] = a[first + child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and k[a[first + parent]] < k[v]:
        a[first + hole] = a[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    a[first + hole] = v


def sort_and_shuffle(keys, n: int, batch_size: int, shuffle_size: int) -> np.ndarray:
    """Caffe2's SortAndShuffle order of ``n`` rows (``keys`` None: not sorted)."""
    idx = sort_indices(keys) if keys is not None else list(range(n))
    if batch_size * shuffle_size > n:
        shuffle_size = n // batch_size
    chunk = batch_size * shuffle_size
    if chunk > 1:
        # (the last chunk, even a full one, stays as it is: the loop stops before it)
        for off in range(0, n, chunk):
            if off + chunk < n:
                shuffle(idx, off, off + chunk)
    num_batches = n // batch_size
    order = list(range(num_batches))
    shuffle(order, 0, num_batches)
    out = [i for b in order for i in idx[b * batch_size:(b + 1) * batch_size]]
    return np.array(out + idx[num_batches * batch_size:], dtype=np.int64)
