"""Values derived from arrays nothing can write: made once per array, not once per call.

A kernel that turns an operand into another form on every call (a convolution's weights
with its test-mode batch norm folded in, say) asks ``once(make, *sources)`` instead.
When every source is a frozen array, one that is read-only down to the memory it views
(an IR constant, a weight a deploy model's init net filled: ``lower/blocks.py`` and the
fold pass freeze them), nothing can change it in place: numpy refuses the write, and the
runtime's in-place kernels (sparse updates, a fused kernel reusing its output's buffer,
``blob.tensor().data``) check ``writeable`` and write a new array instead, which is a
new key. So the result is kept, keyed by ``make``, ``extra`` and the sources' identities,
for as long as the sources live (dropped with them), and a write of the weights makes
it once more. For any other source (a fed array its owner may still write) ``once``
answers None: the kernel does its per-call work as before.

The kept value holds as much memory as it is (folded weights: as much as the weights);
``make`` must return new arrays, not views of its sources (a view would keep them alive).
"""
from __future__ import annotations

import sys
import threading
import weakref

import numpy as np

_kept: dict = {}
_lock = threading.Lock()


def frozen(a) -> bool:
    """Whether no one can write ``a``: a read-only array whose memory is numpy's own or
    immutable bytes, viewed only through read-only arrays, or through writeable ones that
    nothing but the view above them holds (a filled weight is a read-only reshape of the
    flat array its values were read into: no one else has that array to write it)."""
    if not isinstance(a, np.ndarray) or a.flags.writeable:
        return False
    a = a.base
    while isinstance(a, np.ndarray):
        # (references: the view's ``base``, ``a`` here, getrefcount's argument)
        if a.flags.writeable and sys.getrefcount(a) > 3:
            return False
        a = a.base
    return a is None or isinstance(a, bytes)


def once(make, *sources, extra=()):
    """``make(*sources, *extra)``, made once for frozen sources and kept while they live;
    None when a source is not frozen (``extra``: hashable arguments, part of the key)."""
    if not all(frozen(s) for s in sources):
        return None
    key = (make, extra, *map(id, sources))
    got = _kept.get(key)
    if got is not None and all(r() is s for r, s in zip(got[0], sources)):
        return got[1]
    value = make(*sources, *extra)

    def forget(_, key=key):
        with _lock:
            _kept.pop(key, None)
    with _lock:
        _kept[key] = ([weakref.ref(s, forget) for s in sources], value)
    return value
