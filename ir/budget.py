"""How large a value may be: the one memory budget every layer checks before allocating.

* ``check_size(name, shape, dtype)``: a tensor of ``shape`` would take more bytes than
  one value may (``DSLC_MAX_TENSOR_BYTES``, else the machine's memory) -> ``BudgetError``.
  Types check the shapes known before running (``ir.types``); kernels check the shapes
  they compute while running (a fill's shape read from an input, a one-hot's width,
  the sum of lengths), each before it allocates.
* ``foldable(shape)``: whether a constant of ``shape`` is small enough to be computed
  before running (folding, lowering, a backend binding it into its code); a larger one
  is computed when the program runs, so compiling and printing stay small.

    check_size("ConstantFill", (10000, 20000), np.float32)   # 800 MB, budget 256MiB
    -> BudgetError: ConstantFill: a float32[10000, 20000] tensor needs 763 MiB, more than
       the 256 MiB one value may take (DSLC_MAX_TENSOR_BYTES)
"""
from __future__ import annotations

import os

import numpy as np

from . import settings
from .diagnostics import DSLError

MAX_FOLD_ELEMENTS = 1 << 16  # larger constants are computed when the program runs
# A value of at most this many bytes is always allowed, without reading the budget (the
# types dslc makes at import are such: a bad DSLC_MAX_TENSOR_BYTES never fails an import);
# a budget below it is a bad setting.
FLOOR = 1 << 20

_limit = None  # (bytes, where the figure comes from), read once


class BudgetError(DSLError):
    """A value would be larger than the memory one value may take."""


def _memory_bytes() -> int:
    """This machine's physical memory (1 TiB where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def limit() -> tuple[int, str]:
    """(the most bytes one value may take, what sets it); read once per process."""
    global _limit
    if _limit is None:
        given = settings.byte_size("DSLC_MAX_TENSOR_BYTES", least=FLOOR)
        _limit = (given, "DSLC_MAX_TENSOR_BYTES") if given is not None else \
            (_memory_bytes(), "this machine's memory; DSLC_MAX_TENSOR_BYTES lowers it")
    return _limit


def max_tensor_bytes() -> int:
    """The most bytes one value may take (what compiled kernels compare against)."""
    return max(limit()[0], FLOOR)


def over(need: int) -> bool:
    """Whether ``need`` bytes are more than one value may take."""
    return need > FLOOR and need > (_limit or limit())[0]


def size_text(n: int) -> str:
    """``n`` bytes for a person: 763 MiB, 74.5 GiB, 12 KiB, 100 bytes."""
    for unit, scale in (("EiB", 1 << 60), ("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def _shape_text(shape) -> str:
    dims = [int(d) for d in shape]
    text = ", ".join(map(str, dims[:8])) + (f", ... ({len(dims)} dims)" if len(dims) > 8 else "")
    return f"[{text}]"


def check_bytes(name: str, need: int, what: str, error=BudgetError) -> None:
    """Raise ``error`` if ``need`` bytes (``what``: the value, for the message) exceed the
    budget. ``name`` is the op (or reader) asking; '' leaves it out."""
    most, source = limit()
    if need > most:
        raise error(f"{name + ': ' if name else ''}{what} needs {size_text(need)}, more than the "
                    f"{size_text(most)} one value may take ({source})",
                    hint="check the shape (a dim too large, or dims multiplied by mistake), or raise "
                         "DSLC_MAX_TENSOR_BYTES if this machine can hold it")


def check_size(name: str, shape, dtype, error=BudgetError) -> None:
    """Raise ``error`` (a BudgetError) if a tensor of ``shape`` and numpy ``dtype`` would
    take more than the budget; call it before allocating. A negative dim counts as 0
    (numpy refuses it with its own error)."""
    n = 1
    for d in shape:
        n *= max(int(d), 0)
    itemsize = dtype.itemsize if isinstance(dtype, np.dtype) else np.dtype(dtype).itemsize
    if over(n * itemsize):
        check_bytes(name, n * itemsize, f"a {np.dtype(dtype).name}{_shape_text(shape)} tensor", error)


def total(values) -> int:
    """The sum of an integer array, for a budget check: summed in float64, exact below
    2**53 and never wrapped around (numpy's int64 sum wraps, and lengths made to wrap to
    a small total would pass a check of it)."""
    return int(np.add.reduce(values, axis=None, dtype=np.float64))


def foldable(shape) -> bool:
    """Whether a constant of ``shape`` (None: unknown, or with unknown dims) surely has
    at most MAX_FOLD_ELEMENTS elements, so computing it before running costs little
    whatever the input asks for."""
    if shape is None:
        return False
    n = 1
    for d in shape:
        if d is None:
            return False
        n *= d
    return n <= MAX_FOLD_ELEMENTS
