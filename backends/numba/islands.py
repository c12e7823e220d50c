"""Choosing what the numba backend compiles: islands of a region's ops.

An island is a run of consecutive ops of one region that numba can compile as one
function: numeric ops, ``fused`` groups and structured control flow (``for``,
``loop``, ``if``) made only of such ops. Blob access, counters, Python ops and the
like stay on the interpreter, which calls the island with its inputs and gets its
outputs back. A run becomes an island only if it is worth compiling: numba takes
about 3 ms per statement to compile, so a loop nest expected to run a few dozen
ops stays interpreted; estimates use the loop counts the IR knows (an unknown
count counts as ``UNKNOWN_TRIPS``).
"""
from __future__ import annotations

import functools

from dslc.ir import Operation, Region, settings

# (the kernel tables below are imported when a region is first partitioned: a "hot" compile
# reads this module's settings long before, and most jobs never partition anything, lazy.py)

UNKNOWN_TRIPS = 1000
# The thresholds below are read from the environment when first needed (ir/settings.py:
# a bad value is the user's error, never an import failure); set one of these names to
# a number to override it (tests do).
MIN_WORK = None     # estimated op executions: DSLC_NUMBA_MIN_WORK, default 5000
# a straight run of training ops (no loop) is compiled when its arrays are this large
# (element operations; a matrix product counts M N sqrt(K)): smaller ones gain less than
# numba's compile time
NN_MIN_WORK = None  # DSLC_NUMBA_NN_MIN_WORK, default 100_000
# ops per generated function: DSLC_NUMBA_MAX_OPS, default 32. numba's compile time grows faster
# than a function's statements (8/16/32/64: 3.3/5.7/12.8/40 s of CPU, 0.41/0.36/0.40/0.63 s a
# statement), so a long straight run (an optimizer's updates over every parameter: 145 ops
# and 261 arrays in the ResNet trainer) costs least as functions of about 32 ops
MAX_OPS = None
# when to compile (hot.py): "hot" (an island starts on the interpreter and is compiled, in
# the background, once it has run HOT_MS milliseconds there) or "now" (every island before
# the job runs; the tests' setting: every region compiled, deterministically)
WHEN = None         # DSLC_NUMBA_COMPILE, default "hot"
HOT_MS = None       # DSLC_NUMBA_HOT_MS, default: hot.py's (1000 ms, 200 once numba is loaded)
# timed runs each way in which a compiled region races the interpreter's code (trial.py);
# 0: every compiled region kept, untimed (the tests' setting: they run the compiled code)
TRIAL_RUNS = None   # DSLC_NUMBA_TRIAL_RUNS, default 3
# seconds numba may take over one function compiled before the run (DSLC_NUMBA_COMPILE=now):
# it compiles in the compile worker (hot.Worker), stopped past the limit, and the region runs
# on the interpreter with a warning naming it; 0: no limit (compiled in this process, the
# tests' setting). Its compile time grows faster than a function's size (and for some
# shapes of code, much faster): a job must not wait an hour without a word.
COMPILE_LIMIT = None  # DSLC_NUMBA_COMPILE_LIMIT, default 300
STRUCTURE = ("for", "loop", "if")
EXITS = ("yield", "break_if")
HOISTED = ("load", "must")  # interpreted ops that may run before an island they sit in
MAX_BREAKS = 40  # break_ifs in one loop body: each nests the generated code one level deeper


def min_work_default() -> int:
    return MIN_WORK if MIN_WORK is not None else settings.count("DSLC_NUMBA_MIN_WORK", 5000)


def when_default() -> str:
    return WHEN if WHEN is not None else settings.choice("DSLC_NUMBA_COMPILE", ("hot", "now"), "hot")


def hot_ms_default() -> int | None:
    """The milliseconds a region runs interpreted before it is compiled; None: hot.py's rule."""
    if HOT_MS is not None:
        return HOT_MS
    return settings.count("DSLC_NUMBA_HOT_MS", 0) if settings.raw("DSLC_NUMBA_HOT_MS") else None


def trial_runs_default() -> int:
    return TRIAL_RUNS if TRIAL_RUNS is not None else settings.count("DSLC_NUMBA_TRIAL_RUNS", 3)


def compile_limit_default() -> float:
    """Seconds one function compiled before the run may take (0: no limit)."""
    return COMPILE_LIMIT if COMPILE_LIMIT is not None else settings.count("DSLC_NUMBA_COMPILE_LIMIT", 300)


def nn_min_work_default() -> int:
    return NN_MIN_WORK if NN_MIN_WORK is not None else settings.count("DSLC_NUMBA_NN_MIN_WORK", 100_000)


class Island:
    """(A plain class: a dataclass costs every numba run its making at import.)"""

    __slots__ = ("ops", "inputs", "outputs", "work", "unread")

    def __init__(self, ops: list, work: float = 0.0):
        self.ops = ops            # consecutive top-level ops of one region
        self.inputs: list = []    # values used inside, defined before it
        self.outputs: list = []   # its results used after it
        self.work = work
        # inputs that may be unset when the island runs: a `for` of a constant count >= 1
        # carries them but its body writes them before reading them (a step's activations and
        # gradients, unset before its first run); the call passes a stand-in of their type
        self.unread: list = []


@functools.cache
def nn_ops() -> frozenset:
    """The training ops whose runs are worth a function of their own."""
    from . import kernels_embedding  # noqa: F401  (registers its kernels in NN_HELPERS first)
    from .kernels_nn import ACTIVATION_FORMS, NN_HELPERS
    return frozenset(NN_HELPERS) | frozenset(ACTIVATION_FORMS) | {
        "FC", "MatMul", "ReluGradient", "Sigmoid", "SigmoidGradient", "Tanh", "TanhGradient", "WeightedSum",
        "AveragedLoss", "AveragedLossGradient"}


COUNTER_OPS = ("CountUp", "CountDown", "RetrieveCount", "CheckCounterDone", "ResetCounter")


def compilable(op: Operation, local=frozenset()) -> bool:
    """Whether numba can compile ``op`` (with everything nested in it).

    ``local`` holds the counter handles only one thread uses (those can be compiled).
    """
    from . import kernels_embedding, kernels_nn  # noqa: F401  (they add their kernels to EXPR)
    from .kernels import ElementView, supported, tensor
    if op.name in COUNTER_OPS:
        return op.operands[0] in local
    if op.name in STRUCTURE:
        carried = list(op.results) + [a for r in op.regions for a in r.args]
        if any(tensor(v) is None and v not in local for v in carried + list(op.operands)):
            return False
        if sum(o.name == "break_if" for r in op.regions for o in r.ops) > MAX_BREAKS:
            return False  # Python allows 100 levels of indentation
        # a `must` inside is the identity there: compiled code holds no unset values (an
        # island with an unset input runs on the interpreter, which reports it)
        return all(o.name in EXITS or o.name == "must" or compilable(o, local) for r in op.regions for o in r.ops)
    if op.name == "fused":  # written element by element: each member needs its scalar form
        body = op.regions[0].ops
        return all(tensor(v) is not None for v in op.operands) and \
            all(o.name == "yield" or (supported(o) and supported(ElementView(o))) for o in body)
    return supported(op)


def trips(op: Operation) -> float:
    """How many times a ``for`` runs, as far as the IR knows.

    A constant count is exact (a negative one fails before the body runs); a count
    that is an enclosing loop's index is below that loop's count; anything else is
    UNKNOWN_TRIPS.
    """
    v = op.operands[0]
    owner = getattr(v, "owner", None)
    if owner is not None and owner.name == "Const":
        return max(0, int(owner.attrs["value"]))
    region = getattr(v, "region", None)
    if region is not None and region.parent is not None and region.parent.name == "for" and v.index == 0:
        return trips(region.parent)
    return UNKNOWN_TRIPS


def work(op: Operation) -> float:
    """Estimated op executions for one run of ``op``."""
    from .kernels import tensor
    from .kernels_nn import elements
    if op.name == "for":
        return 1 + trips(op) * _region_work(op.regions[0])
    if op.name == "loop":
        return 1 + UNKNOWN_TRIPS * _region_work(op.regions[0])
    if op.name == "if":
        return 1 + max(_region_work(r) for r in op.regions)
    if op.name in nn_ops():
        return elements(op)
    if op.name == "fused":
        t = tensor(op.results[0])
        size = 1
        for d in t.shape:
            size *= UNKNOWN_TRIPS if d is None else d
        return size * len(op.regions[0].ops)
    return 1


def _region_work(r: Region) -> float:
    return sum(work(o) for o in r.ops)


def nested_ops(op: Operation) -> int:
    return len(op.walk())


def partition(r: Region, local=frozenset(), min_work=None, nn_min_work=None) -> list:
    """The region's ops, with worthwhile runs of compilable ops replaced by Islands
    (``min_work``, ``nn_min_work``: the thresholds, default MIN_WORK and NN_MIN_WORK).

    A blob load met inside a run does not end it: it runs on the interpreter just
    before the island instead (see ``_Gathered.takes``), so a training step whose
    parameters are loaded where each layer first uses them is still one function.
    """
    min_work = min_work_default() if min_work is None else min_work
    nn_min_work = nn_min_work_default() if nn_min_work is None else nn_min_work
    out, run = [], []
    gathered = _Gathered()

    def close():
        nonlocal gathered
        for chunk in _chunks(run):
            loads = [o for o in chunk if o.name in HOISTED]
            body = [o for o in chunk if o.name not in HOISTED]
            island = Island(body, work=sum(work(o) for o in body))
            # a lone fused group is a kernel call of its own (op_fused), which can reuse buffers;
            # training ops are worth a function of their own (BLAS calls and loops without
            # the interpreter between them)
            loops = any(o.name in STRUCTURE for o in body)
            nn = not loops and any(o.name in nn_ops() for o in body)
            if body and ((loops and island.work >= min_work) or (nn and island.work >= nn_min_work)):
                _connect(island)
                out.extend(loads)
                out.append(island)
            else:
                out.extend(chunk)  # in their own order
        run.clear()
        gathered = _Gathered()

    for op in r.ops:
        if op.name not in EXITS and compilable(op, local):
            run.append(op)
        elif run and gathered.takes(op):
            run.append(op)
        else:
            close()
            out.append(op)
            continue
        gathered.add(op)
    close()
    return out


class _Gathered:
    """What the run being gathered holds, as far as a load joining it needs to know: the
    values its ops make, and whether one of them may fail (kept as ops are added, so a
    long run is walked once)."""

    def __init__(self):
        self.made: set = set()
        self.may_fail = False

    def add(self, op: Operation) -> None:
        for o in op.walk():
            self.made.update(o.results)
            self.may_fail = self.may_fail or o.opdef.fails(o)

    def takes(self, op: Operation) -> bool:
        """Whether ``op`` is a load (or the check that a carried blob is set, ``must``) that
        may run before the run's compilable ops.

        Those ops touch no blob (a store ends a run), so the load reads what it would
        have read after them; moved over ops that may fail, an unset blob would be
        reported in place of their error, so not then.
        """
        return op.name in HOISTED and not self.may_fail and not any(v in self.made for v in op.operands)


def _chunks(run: list):
    """Split a run into functions of at most about MAX_OPS ops (compile time grows with size)."""
    chunk, size = [], 0
    most = MAX_OPS if MAX_OPS is not None else settings.count("DSLC_NUMBA_MAX_OPS", 32, lo=1)
    for op in run:
        n = 0 if op.name in HOISTED else nested_ops(op)
        if chunk and size + n > most:
            yield chunk
            chunk, size = [], 0
        chunk.append(op)
        size += n
    if chunk:
        yield chunk


def _connect(island: Island) -> None:
    inside = [o for op in island.ops for o in op.walk()]
    _find_unread(island, set(inside))
    inside_set = set(inside)
    defined = {v for o in inside for v in o.results} | {a for o in inside for r in o.regions for a in r.args}
    for o in inside:
        for v in o.operands:
            if v not in defined and v not in island.inputs:
                island.inputs.append(v)
    for op in island.ops:
        if op.name == "Const":
            continue  # the interpreter binds constants itself: users read them directly
        for res in op.results:
            if any(user not in inside_set for user, _ in res.uses):
                island.outputs.append(res)


def _find_unread(island: Island, inside: set) -> None:
    """Fill ``island.unread`` (see Island): values only a ``for`` that surely runs reads,
    as the first value of a carried variable its body does not read."""
    from .kernels import tensor
    for op in island.ops:
        owner = getattr(op.operands[0], "owner", None) if op.name == "for" else None
        if owner is None or owner.name != "Const" or int(owner.attrs["value"]) < 1:
            continue
        for v, arg in zip(op.operands[1:], op.regions[0].args[1:]):
            if not arg.uses and tensor(v) is not None and \
                    all(user is op for user, _ in v.uses if user in inside) and v not in island.unread:
                island.unread.append(v)
