"""What the interpreter's generated code calls: compiled islands and fused kernels.

An ``IslandCall`` passes the island's inputs to the numba function and turns its
outputs back into the runtime's values (numpy scalars, arrays). A ``FusedCall``
runs one fused elementwise group, writing into the output blob's existing buffer
when nothing else holds that buffer and its shape and dtype fit (as Caffe2 reuses
output tensors): a fresh 40 MB output costs more in page faults than the kernel.
"""
from __future__ import annotations

import sys
import threading

import numpy as np

from dslc.ir.types import NUMPY_DTYPES

from .failures import KernelFail, Sites
from .kernels import tensor

_parallel_lock = threading.Lock()  # numba's default threading layer is not re-entrant


def _to_value(v):
    t = tensor(v)
    if t.shape == ():
        ctor = np.bool_ if t.dtype == "bool" else NUMPY_DTYPES[t.dtype]
        return ctor
    return None


class IslandCall:
    """Calls one compiled island; ``consts`` are its array constants."""

    def __init__(self, fn, outputs, consts, counters=(), sites=None, streams=0, scalars=()):
        self.fn = fn
        # argument positions typed as scalars: the interpreter may hold a 0-d array there
        # (np.full((), ...)), which numba would type as an array
        self.scalars = tuple(scalars)
        self.streams = streams  # the last arguments: random generators, locked while in use
        self.sites = sites or Sites()
        self.consts = tuple(consts)
        self.convert = [_to_value(v) for v in outputs]
        self.single = len(outputs) == 1
        self.counters = tuple(counters)  # argument positions holding (thread-local) Counters

    def __call__(self, *args):
        if self.scalars:
            args = self.unwrapped(args)
        if self.streams:  # numpy locks a generator while drawing; compiled code does not
            return self.with_streams(args)
        if self.counters:
            return self.with_counters(args)
        return self.results(self.call(args))

    def unwrapped(self, args):
        if not any(isinstance(args[i], np.ndarray) for i in self.scalars):
            return args
        args = list(args)
        for i in self.scalars:
            if isinstance(args[i], np.ndarray):
                args[i] = args[i][()]
        return tuple(args)

    def with_streams(self, args):
        # each lock once (two ops may share a stream), in one global order (no two calls
        # can each hold a lock the other waits for)
        held = {id(g.bit_generator.lock): g.bit_generator.lock for g in args[len(args) - self.streams:]}
        locks = [held[k] for k in sorted(held)]
        for lock in locks:
            lock.acquire()
        try:
            return self.with_counters(args) if self.counters else self.results(self.call(args))
        finally:
            for lock in reversed(locks):
                lock.release()

    def call(self, args):
        try:
            return self.fn(*(args + self.consts))
        except KernelFail as e:
            raise self.sites.error(e) from None

    def with_counters(self, args):
        """Counters go in as int64[1] arrays and their counts come back out: one array per
        counter, however many arguments hold it (two loads of one blob are two values of
        one counter: a reset through one and a count down through the other both count)."""
        args = list(args)
        held: dict = {}  # id(counter) -> (counter, its array)
        for i in self.counters:
            c = args[i]
            got = held.get(id(c))
            if got is None:
                got = held[id(c)] = (c, np.array([c.count], dtype=np.int64))
            args[i] = got[1]
        try:
            res = self.call(tuple(args))
        finally:
            for c, arr in held.values():
                c.count = int(arr[0])
        return self.results(res)

    def results(self, res):
        if not self.convert:
            return None
        out = [c(r) if c is not None else r for c, r in zip(self.convert, res)]
        return out[0] if self.single else tuple(out)


class FusedCall:
    """Runs a fused group: numba for arrays of the expected shape, else ``fallback``."""

    def __init__(self, serial, parallel, n_inputs, out_types, fallback, par_min, sites=None):
        self.serial, self.parallel = serial, parallel
        self.sites = sites or Sites()
        self.n_inputs = n_inputs
        self.out_dtypes = [np.dtype(NUMPY_DTYPES[t.dtype]) for t in out_types]
        self.fallback = fallback
        self.par_min = par_min

    def __call__(self, *args):
        ins, cells = args[:self.n_inputs], args[self.n_inputs:]
        shape = None
        for x in ins:
            if isinstance(x, np.ndarray):
                if shape is None:
                    shape = x.shape
                elif x.shape != shape:
                    return self.fallback(*ins)  # broadcasting at run time: the interpreter's way
        if shape is None:
            return self.fallback(*ins)
        ins = tuple(np.ascontiguousarray(x) if isinstance(x, np.ndarray) else x for x in ins)
        outs = [self.buffer(c, shape, dt) for c, dt in zip(cells, self.out_dtypes)]
        size = outs[0].size
        try:
            if self.parallel is not None and size >= self.par_min:
                with _parallel_lock:
                    self.parallel(*ins, *outs)
            else:
                self.serial(*ins, *outs)
        except KernelFail as e:
            raise self.sites.error(e) from None
        return outs[0] if len(outs) == 1 else tuple(outs)

    @staticmethod
    def buffer(cell, shape, dtype):
        """The cell's array if only the cell holds it and it fits, else a new one."""
        if cell is not None:
            buf = cell.v
            # three references: the cell, `buf`, and getrefcount's argument
            if isinstance(buf, np.ndarray) and sys.getrefcount(buf) <= 3 and buf.shape == shape and \
                    buf.dtype == dtype and buf.flags.c_contiguous and buf.flags.writeable and \
                    buf.base is None:
                return buf
        return np.empty(shape, dtype)
