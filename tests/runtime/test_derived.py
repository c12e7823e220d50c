"""runtime/derived.py: a value derived from arrays nothing can write is made once per array."""
from __future__ import annotations

import gc

import numpy as np

from dslc.runtime import derived


def _ro(a):
    a.setflags(write=False)
    return a


def test_only_arrays_read_only_down_to_their_memory_are_frozen():
    base = np.arange(6.0)
    view = _ro(base[1:])
    assert not derived.frozen(base) and not derived.frozen(view)  # (its base can still be written)
    assert derived.frozen(_ro(np.arange(3.0)))
    assert derived.frozen(_ro(np.frombuffer(b"\0" * 16, np.float32)))  # (immutable bytes)
    assert not derived.frozen(_ro(np.frombuffer(bytearray(16), np.float32)))
    assert not derived.frozen(3.0)
    shaped = _ro(np.arange(6.0).reshape(2, 3))  # (a statement: an assert would hold the flat array)
    assert derived.frozen(shaped)  # (its flat array: no one else holds it)
    held = np.arange(6.0)
    shaped = _ro(held.reshape(2, 3))
    assert not derived.frozen(shaped)  # (``held`` can still be written)


def test_made_once_per_array_kept_while_it_lives():
    made = []

    def double(a, k):
        made.append(1)
        return a * k

    a = _ro(np.arange(4.0))
    first = derived.once(double, a, extra=(2.0,))
    assert derived.once(double, a, extra=(2.0,)) is first and len(made) == 1
    np.testing.assert_array_equal(first, [0, 2, 4, 6])
    np.testing.assert_array_equal(derived.once(double, a, extra=(3.0,)), [0, 3, 6, 9])  # (another key)
    assert derived.once(double, np.arange(4.0), extra=(2.0,)) is None and len(made) == 2  # (writeable: not kept)
    kept = len(derived._kept)
    del a
    gc.collect()
    assert len(derived._kept) == kept - 2  # (dropped with their source)
