"""The workspace runner: workspaces that run nets, steps and plans themselves, and the
current workspace.

``Workspace`` is a runtime workspace (its blobs) that runs a Net, step or Plan through
a ``LocalSession`` of its own (one per backend and options, so a net run again reuses
its compiled plan), and compiles nets once to run them by name (``create_net`` /
``run_net``, Caffe2's ``CreateNet`` / ``RunNet``). There is one current workspace per
process, as in Caffe2, and named ones to switch between; ``current_as`` makes a
session's root current while it runs, so Python ops that call ``FetchBlob`` read it.
NetDef and OperatorDef messages run as the Nets made from them (the same Net for the
same message). ``dslc.workspace`` is Caffe2's API over this module.
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
import time

from dslc.runtime import workspace as _rt
from dslc.driver import blobs, compile_clock
from dslc.ir.diagnostics import DSLError, DSLTypeError
from dslc.runtime.proto import caffe2 as caffe2_pb2
from dslc.trace import devices
from dslc.trace.net import Net
from dslc.trace import netdef_wire
from dslc.trace.netdef import is_bulky, parse_message
from dslc.trace.steps import iter_nets
from dslc.trace.task import BareTask, TaskGroup, WorkspaceType, wrap_runnable
from dslc.trace.tracing import user_location


class WorkspaceError(DSLError, RuntimeError):
    """A workspace that does not exist (SwitchWorkspace without create_if_missing)."""


class NotANetError(DSLError, TypeError):
    """Something that is not a net where a net is needed (create_net of a string...)."""


class _Current:
    """``C.Workspace.current``: the current workspace, read from the class (Caffe2's static property)."""

    def __get__(self, obj, cls=None):
        return current()


class Workspace(_rt.Workspace):
    """A workspace you can run things in directly (``ws.run(plan)``, ``ws.create_net(net)``).

    Nets are run as Caffe2's workspace runs them: without a task around them, so no
    task output blob appears. Nets made with ``create_net`` are compiled once and run
    by name; the session doing it belongs to the workspace and uses the default
    backend (``DSLC_BACKEND``, else interp).
    """

    cell_type = blobs.Blob
    current = _Current()
    _sessions: dict | None = None  # (backend, options) -> the session running nets here
    _nets: dict | None = None  # created nets by name

    def run(self, runnable, backend: str | None = None, **options) -> bool:
        """Run a Net, step or Plan once (or a created net, by name); True when it finished.
        ``backend`` and ``options``: the backend to run it on (default: DSLC_BACKEND, else interp)."""
        if isinstance(runnable, str):
            return self.run_net(runnable)
        if isinstance(runnable, caffe2_pb2.OperatorDef):  # (Caffe2's ws.run(op): one operator)
            if backend is None and runnable.HasField("device_option"):
                backend, options = devices.backend_of(runnable.device_option)
            runnable = operator_net([runnable])
        runnable = as_net(runnable)
        self.session(backend, **options).run(_bare_group(runnable))
        if not isinstance(runnable, str) and not hasattr(runnable, "_ops"):  # (a plan's nets: made here too)
            if self._nets is None:
                self._nets = {}
            for net in iter_nets(runnable):
                self._nets.setdefault(net.Name(), net)
        return True

    def session(self, backend: str | None = None, **options):
        """The LocalSession that runs nets in this workspace on ``backend`` (one per backend
        and options, so that a net run again reuses its compiled plan)."""
        key = (backend, tuple(sorted(options.items())) if options else ())
        if self._sessions is None:
            self._sessions = {}
        got = self._sessions.get(key)
        if got is None:
            got = self._sessions[key] = _new_session(self, backend, **options)
        return got

    def fetch_blob(self, name):
        return blobs.fetch(self, name)

    def feed_blob(self, name, value):
        blobs.feed(self, name, value)
        return True

    def create_net(self, net, overwrite: bool = False):
        """Check and compile ``net`` so that ``run_net(name)`` runs it; every blob it reads
        before writing must exist already (Caffe2 makes each op at this point, and an op
        whose input is missing fails). Type errors wait for the run, as in Caffe2."""
        if isinstance(net, (bytes, bytearray, memoryview)):
            net = _bytes_net(net)
        name = net_name(net)  # (a NetDef's own name, even if its Net is named apart)
        net = as_net(net)
        if not hasattr(net, "_ops"):
            raise NotANetError(f"create_net needs a core.Net, got {type(net).__name__}", user_location(),
                               "pass the Net object (run_net/RunNet take its name)")
        if self._nets is None:
            self._nets = {}
        if name in self._nets and not overwrite:  # (the same net again too: Caffe2 refuses both)
            raise WorkspaceError(f"a net named {name!r} was already created in this workspace", user_location(),
                           "pass overwrite=True to replace it, or give the new net another name")
        missing = [b for b in _read_first(net) if not self.has_blob(b)]
        if missing:
            raise DSLError(f"net {name!r} reads {', '.join(map(repr, missing))}, not in the workspace",
                           user_location(), "feed them (FeedBlob) or run what makes them before creating the net")
        try:
            self.session().compile(_bare_group(net))
        except DSLTypeError:
            # Caffe2 finds operand types and shapes that do not fit when the net runs, not when
            # it is made (its inputs may be fed again before then): run_net compiles it again,
            # so the same located error comes at the run, before any op of the net runs.
            pass
        for op in net._ops:  # (Caffe2 makes each op's outputs as it makes the op: empty blobs)
            for out in op.outputs:
                if not self.has_blob(out):
                    self.create_blob(out)
        self._nets[name] = net
        return _CreatedNet(self, name)

    def run_net(self, name, num_iter: int = 1) -> bool:
        """Run a net made with ``create_net`` ``num_iter`` times."""
        net = (self._nets or {}).get(name if type(name) is str else net_name(name))
        if net is None:
            raise DSLError(f"no net named {net_name(name)!r} was created in this workspace", user_location(),
                           "create it first: workspace.CreateNet(net)")
        session, group = self.session(), _bare_group(net)
        if not session._open:
            session = self._sessions[(None, ())] = _new_session(self, None)
        for _ in range(num_iter):
            session._run(group)  # (session.run's checks hold for a created net: run it directly)
        return True

    def benchmark_net(self, name, warmup_runs: int, main_runs: int, run_individual: bool) -> list[float]:
        """Caffe2's ``BenchmarkNet``: run the created net ``name`` ``warmup_runs`` times, then
        time ``main_runs`` runs; with ``run_individual``, time each op alone the same way (as
        its own one-op net, in this workspace: an op that updates a blob updates it again).
        Prints Caffe2's report on stdout; returns [ms per run, ms per run of op 0, op 1, ...]
        (zeros for the ops without ``run_individual``)."""
        net = (self._nets or {}).get(name if type(name) is str else net_name(name))
        if net is None:
            raise DSLError(f"no net named {net_name(name)!r} was created in this workspace", user_location(),
                           "create it first: workspace.CreateNet(net)")
        warmup_runs, main_runs = max(int(warmup_runs), 0), int(main_runs)
        if main_runs < 1:
            raise DSLError(f"BenchmarkNet needs at least one main run, got {main_runs}", user_location(),
                           "pass main_runs >= 1")
        print("Starting benchmark.")
        print("Running warmup runs.")
        self.run_net(name, warmup_runs)
        print("Main runs.")
        ms = _timed_ms(lambda: self.run_net(name, main_runs)) / main_runs
        print(f"Main run finished. Milliseconds per iter: {ms:g}. Iters per second: {1000 / ms if ms else 0:g}")
        ops = list(net.Proto().op)
        per_op = [0.0] * len(ops)
        if run_individual:
            session = self.session()
            for i, op in enumerate(ops):
                group = _bare_group(operator_net([op]))
                for _ in range(warmup_runs):
                    session._run(group)
                per_op[i] = _timed_ms(lambda: [session._run(group) for _ in range(main_runs)]) / main_runs
                print(f"Operator #{i} ({op.output[0] if op.output else ''}, {op.type}) {per_op[i]:g} ms/iter")
            by_type: dict[str, list] = {}
            for op, t in zip(ops, per_op):
                row = by_type.setdefault(op.type, [0.0, 0])
                row[0] += t
                row[1] += 1
            total = sum(per_op)
            print("Time per operator type:")
            for kind, (t, n) in sorted(by_type.items(), key=lambda kv: -kv[1][0]):
                print(f"{t:>15g} ms. {100 * t / total if total else 0:>10g}%. {kind} ({n} ops)")  # ("1 ops": Caffe2's words)
            print(f"{total:>15g} ms in Total")
        return [ms] + per_op

    @property
    def nets(self) -> dict:
        """{name: handle} of the nets created here (``ws.nets[name].run()``), as Caffe2's."""
        return {name: _CreatedNet(self, name) for name in sorted(self._nets or ())}


class _CreatedNet:
    """A created net, by name (what Caffe2's ``ws.create_net`` and ``ws.nets[name]`` give)."""

    def __init__(self, ws, name):
        self.ws, self.name = ws, name

    def run(self, num_iter: int = 1) -> bool:
        return self.ws.run_net(self.name, num_iter)

    def __repr__(self):
        return f"<created net {self.name!r}>"


def _new_session(ws, backend, **options):
    # Timed as compiling: the first session of a process loads the session module and its
    # backend (half a second of imports, numba's more), which a hypothesis example's deadline
    # must not count as running the op (as the plan's compile, which the session times itself).
    with compile_clock.compiling():
        from dslc.driver.session import LocalSession  # (session.py builds on this module: the current workspace)
        return LocalSession(ws, backend=backend, **options)


def net_name(net) -> str:
    if isinstance(net, str):
        return net
    if isinstance(net, caffe2_pb2.NetDef):
        return net.name
    if isinstance(net, _NamedNet):
        return net._given_name
    return net.Name() if hasattr(net, "Name") else str(net)


_message_nets: dict = {}  # NetDef bytes -> the Net made from it (its compiled plan is reused)
HEAVY = 1 << 22  # a NetDef of at least this many bytes is a model's weights, not a net run often


def as_net(net, what: str = "the net"):
    """``net``, or the Net a NetDef message (or its serialized bytes) describes (the same Net
    for the same message). A net of a model's weights (``HEAVY`` bytes or more, or a
    message with a fill of more than a few thousand values) is read at the speed of its
    bytes (dslc/trace/netdef_wire.py) and made afresh each time: kept, its weights would
    stay in memory after the run."""
    if isinstance(net, (bytes, bytearray, memoryview)):
        net = _bytes_net(net, what)
    if not isinstance(net, caffe2_pb2.NetDef):
        return net
    if any(map(is_bulky, net.op)):
        return Net(net)
    key = net.SerializeToString(deterministic=True)
    got = _message_nets.get(key)
    if got is None:
        if len(_message_nets) >= _OP_NETS_KEPT:
            _message_nets.pop(next(iter(_message_nets)))
        got = _message_nets[key] = Net(net)
    return got


def _bytes_net(data, what: str = "the net"):
    """The NetDef message of serialized bytes, or for a model's weights the Net itself (made
    without a message holding the weights; its Proto() is named as the bytes' NetDef is)."""
    if len(data) < HEAVY:
        return parsed(caffe2_pb2.NetDef, data, what)
    msg, bulk = netdef_wire.split(data, user_location(), what)
    return _NamedNet(msg, _bulk=bulk)


class _NamedNet(Net):
    """A Net made from a NetDef of a model's weights, known by the NetDef's own name (as
    the message it stands for would be)."""

    def __init__(self, msg, _bulk):
        super().__init__(msg, _bulk=_bulk)
        self._given_name = msg.name


def _read_first(net) -> list[str]:
    """The blobs ``net``'s ops read before any op of it writes them, in order."""
    made, out = set(), {}
    for op in net._ops:
        out.update((b, None) for b in op.inputs if b not in made)
        made.update(op.outputs)
    return list(out)


_bare_groups: dict[int, tuple] = {}  # id(runnable) -> (runnable, its group); keeps both alive


def _bare_group(runnable):
    """The TaskGroup a workspace runs ``runnable`` as: a GLOBAL task without Caffe2's dummy output."""
    got = _bare_groups.get(id(runnable))
    if got is not None and got[0] is runnable:  # (a created net run again: before any import)
        return got[1]
    if isinstance(runnable, TaskGroup):
        return runnable
    if got is None or got[0] is not runnable:
        group = wrap_runnable(runnable, WorkspaceType.GLOBAL, BareTask)
        got = _bare_groups[id(runnable)] = (runnable, group)
    return got[1]


_op_nets: dict = {}  # (ops' bytes) -> the Net running them, so a repeated op reuses its compiled plan
_OP_NETS_KEPT = 512


def operator_net(operators):
    key = tuple(op.SerializeToString(deterministic=True) for op in operators)
    net = _op_nets.get(key)
    if net is None:
        msg = caffe2_pb2.NetDef(name="operator")
        msg.op.extend(operators)
        net = Net(msg)
        if len(_op_nets) >= _OP_NETS_KEPT:
            _op_nets.pop(next(iter(_op_nets)))
        _op_nets[key] = net
    return net


def _timed_ms(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


_runtime_kinds: dict = {}


def parsed(cls, data, what: str):
    """A message from the bytes a caller passed (a located error for bytes that are none)."""
    return parse_message(cls, data, what, user_location())


def raises_runtime_error(fn):
    """Caffe2's workspace calls raise RuntimeError for whatever goes wrong in an op or net.
    A DSLError that is not one (an op's type error found while compiling, an unknown
    operator...) leaves these calls as its own class and RuntimeError both, so either
    ``except`` catches it."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DSLError as e:
            if not isinstance(e, RuntimeError):
                kind = type(e)
                both = _runtime_kinds.get(kind)
                try:
                    if both is None:
                        both = _runtime_kinds[kind] = type(kind.__name__, (kind, RuntimeError),
                                                           {"__module__": kind.__module__,
                                                            "__qualname__": kind.__qualname__})
                    e.__class__ = both
                except TypeError:  # (a class whose layout cannot take the second base: left as it is)
                    pass
            raise
    return call


CURRENT = [Workspace()]
_named = {"default": CURRENT[0]}  # Caffe2's named workspaces (SwitchWorkspace)
_current_name = ["default"]


def current() -> _rt.Workspace:
    return CURRENT[0]


@contextlib.contextmanager
def current_as(ws: _rt.Workspace):
    """Make ``ws`` the current workspace inside the block, then restore the previous one."""
    saved = CURRENT[0]
    if saved is ws:  # (already current: nothing to restore, so a reset meanwhile in another thread stays)
        yield ws
        return
    CURRENT[0] = ws
    try:
        yield ws
    finally:
        CURRENT[0] = saved


def switch(name, create_if_missing: bool = False) -> None:
    """Make workspace ``name`` current; each keeps its blobs and created nets."""
    name = str(name)
    if name not in _named:
        if not create_if_missing:
            raise WorkspaceError(f"no workspace named {name!r}", user_location(),
                                 "pass create_if_missing=True to make it")
        _named[name] = Workspace()
    CURRENT[0] = _named[name]
    _current_name[0] = name


def reset(root_folder=None) -> None:
    """A fresh, empty current workspace (blobs and created nets go); ``root_folder``: where
    its relative db names and its ops' log files are (default "."), made if missing."""
    ws = Workspace()
    if root_folder:
        ws.root_folder = str(root_folder)
        os.makedirs(ws.root_folder, exist_ok=True)
    CURRENT[0] = _named[_current_name[0]] = ws


class BackgroundPlan:
    """``RunPlanInBackground``'s handle: whether the run is done, and whether it succeeded."""

    def __init__(self, plan):
        self._ok, self._error = None, None
        ws = current()

        def run():
            try:
                with current_as(ws):
                    ws.run(plan)
                self._ok = True
            except Exception as e:  # (kept: is_succeeded() says False, error() gives it)
                self._ok, self._error = False, e
        self._thread = threading.Thread(target=run, daemon=True, name="dslc-background-plan")
        self._thread.start()

    def is_done(self) -> bool:
        return not self._thread.is_alive()

    def is_succeeded(self) -> bool:
        self._thread.join()
        return bool(self._ok)

    def error(self):
        return self._error
