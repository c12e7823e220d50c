"""The current workspace, and Caffe2-style helpers on it (FeedBlob, FetchBlob, RunPlan).

There is one current workspace per process, as in Caffe2. ``LocalSession()`` runs
in it by default, and makes its own root current while it runs, so Python ops
that call ``FetchBlob`` read the workspace of the session running them.
"""
from __future__ import annotations

import contextlib
import functools
import os
import types

import numpy as np

from dslc.driver import db_api
from dslc.runtime import workspace as _rt
from dslc.runtime import values as _values
from dslc.ir.diagnostics import DSLError, DSLTypeError
from dslc.proto import caffe2_pb2
from dslc.trace.tracing import user_location


class Blob(_rt.Cell):
    """A blob of a user's workspace: Caffe2 code reads ``ws.blobs[name].fetch()`` and ``.feed(v)``."""

    __slots__ = ()

    def fetch(self):
        """The value as numpy (a 0-d array for a scalar)."""
        return _value_of(self, self.name)

    def feed(self, value, device_option=None) -> bool:
        self.v = _fed(value, self.name)
        return True

    def serialize(self, name=None) -> bytes:
        """This blob's value as Caffe2's BlobProto bytes (under ``name``)."""
        from dslc.runtime import blobproto
        return blobproto.serialize(str(name if name is not None else self.name), self.fetch())

    def deserialize(self, serialized) -> None:
        """Set this blob to the value of BlobProto bytes (``serialize``'s)."""
        from dslc.runtime import blobproto
        self.feed(blobproto.deserialize(serialized)[1])

    def tensor(self):
        """The value, to read and write in place (Caffe2's ``blob.tensor().data``)."""
        return _Tensor(self)


class _Tensor:
    """``blob.tensor()``: ``data`` is the blob's own array (writes change the blob)."""

    def __init__(self, blob):
        self.blob = blob

    @property
    def data(self):
        v = self.blob.v
        if not isinstance(v, np.ndarray) or not v.flags.writeable:
            v = self.blob.v = np.array(self.blob.fetch())
        return v

    def init(self, dims, dtype):
        from dslc.ir.ops.infer import dtype_from_code
        dt = dtype_from_code("Tensor.init", dtype)
        if dt == "str":
            raise RuntimeError("string tensors cannot be initialized from Python")
        from dslc.ir.types import NUMPY_DTYPES
        self.blob.v = np.zeros(tuple(dims), dtype=NUMPY_DTYPES[dt])


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

    cell_type = Blob
    current = _Current()
    _sessions: dict | None = None  # (backend, options) -> the session running nets here
    _nets: dict | None = None  # created nets by name

    def run(self, runnable, backend: str | None = None, **options) -> bool:
        """Run a Net, step or Plan once (or a created net, by name); True when it finished.
        ``backend`` and ``options``: the backend to run it on (default: DSLC_BACKEND, else interp)."""
        if isinstance(runnable, str):
            return self.run_net(runnable)
        if isinstance(runnable, caffe2_pb2.OperatorDef):  # (Caffe2's ws.run(op): one operator)
            from dslc.trace import devices
            if backend is None and runnable.HasField("device_option"):
                backend, options = devices.backend_of(runnable.device_option)
            runnable = _operator_net([runnable])
        runnable = _as_net(runnable)
        self.session(backend, **options).run(_bare_group(runnable))
        if not isinstance(runnable, str) and not hasattr(runnable, "_ops"):  # (a plan's nets: made here too)
            from dslc.trace.steps import iter_nets
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
        return _fetch(self, name)

    def feed_blob(self, name, value):
        v = _fed(value, name)  # (before the cell: a value refused makes no blob)
        self.cell(str(name)).v = v
        return True

    def create_net(self, net, overwrite: bool = False):
        """Check and compile ``net`` so that ``run_net(name)`` runs it; every blob it reads
        before writing must exist already (Caffe2 makes each op at this point, and an op
        whose input is missing fails). Type errors wait for the run, as in Caffe2."""
        if isinstance(net, (bytes, bytearray)):
            net = _parsed(caffe2_pb2.NetDef, net, "the net")
        name = _net_name(net)  # (a NetDef's own name, even if its Net is named apart)
        net = _as_net(net)
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
        net = (self._nets or {}).get(name if type(name) is str else _net_name(name))
        if net is None:
            raise DSLError(f"no net named {_net_name(name)!r} was created in this workspace", user_location(),
                           "create it first: workspace.CreateNet(net)")
        session, group = self.session(), _bare_group(net)
        if not session._open:
            session = self._sessions[(None, ())] = _new_session(self, None)
        for _ in range(num_iter):
            session._run(group)  # (session.run's checks hold for a created net: run it directly)
        return True

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
    from dslc.session import LocalSession
    return LocalSession(ws, backend=backend, **options)


def _net_name(net) -> str:
    if isinstance(net, str):
        return net
    if isinstance(net, caffe2_pb2.NetDef):
        return net.name
    return net.Name() if hasattr(net, "Name") else str(net)


_message_nets: dict = {}  # NetDef bytes -> the Net made from it (its compiled plan is reused)


def _as_net(net):
    """``net``, or the Net a NetDef message (or its serialized bytes) describes (the same Net
    for the same message)."""
    if isinstance(net, (bytes, bytearray)):
        net = _parsed(caffe2_pb2.NetDef, net, "the net")
    if not isinstance(net, caffe2_pb2.NetDef):
        return net
    from dslc import core
    key = net.SerializeToString(deterministic=True)
    got = _message_nets.get(key)
    if got is None:
        if len(_message_nets) >= _OP_NETS_KEPT:
            _message_nets.pop(next(iter(_message_nets)))
        got = _message_nets[key] = core.Net(net)
    return got


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
    from dslc.session import Session
    from dslc.task import BareTask, TaskGroup, WorkspaceType
    if isinstance(runnable, TaskGroup):
        return runnable
    if got is None or got[0] is not runnable:
        group = Session.wrap(runnable, WorkspaceType.GLOBAL, BareTask)
        got = _bare_groups[id(runnable)] = (runnable, group)
    return got[1]


def RegisteredOperators() -> list[str]:
    """The operator names nets can record (``net.<Op>``)."""
    from dslc import core
    from dslc.ir.opdef import OPS
    return sorted(n for n in {d.name for d in OPS} | core.ALIASES if core.is_operator(n))


def registered_dbs() -> list[str]:
    """The ``db_type`` names Save, Load and the checkpoint managers accept."""
    from dslc.runtime import blobdb
    return blobdb.names()


# Caffe2's C extension module, as far as its Python users reach into it.
C = types.SimpleNamespace(Workspace=Workspace, registered_dbs=registered_dbs, has_mkldnn=False,
                          use_mkldnn=False, create_db=db_api.create_db, Mode=db_api.Mode)
has_gpu_support = has_cuda_support = has_hip_support = False
GpuDeviceType = 1  # Caffe2's CUDA device type code (no device other than the CPU is used)
_current = [Workspace()]
_named = {"default": _current[0]}  # Caffe2's named workspaces (SwitchWorkspace)
_current_name = ["default"]


class BlobError(DSLError, RuntimeError):
    """A fetch of a blob the workspace lacks or that holds nothing (Caffe2 raises RuntimeError)."""


class WorkspaceError(DSLError, RuntimeError):
    """A workspace that does not exist (SwitchWorkspace without create_if_missing)."""


class NotANetError(DSLError, TypeError):
    """Something that is not a net where a net is needed (create_net of a string...)."""


def GetBlobSizeBytes(name) -> int:
    """The bytes blob ``name``'s value takes: its elements' size, and each string's length."""
    v = _fetch(current(), name)
    if isinstance(v, (bytes, str)):
        return len(v)
    arr = np.asarray(v)
    if arr.dtype.kind in "OSU":  # (a string tensor: a pointer per element, then the text)
        texts = [x if isinstance(x, (bytes, str)) else str(x) for x in arr.reshape(-1)]
        return arr.size * 8 + sum(len(t) for t in texts)
    return int(arr.nbytes)


class _BackgroundPlan:
    """``RunPlanInBackground``'s handle: whether the run is done, and whether it succeeded."""

    def __init__(self, plan):
        import threading
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


def RunPlanInBackground(plan) -> _BackgroundPlan:
    """Run ``plan`` on another thread in the current workspace; poll the handle's is_done()."""
    return _BackgroundPlan(plan)


_runtime_kinds: dict = {}


def _parsed(cls, data, what: str):
    """A message from the bytes a caller passed (a located error for bytes that are none)."""
    from dslc.trace.netdef import parse_message
    return parse_message(cls, data, what, user_location())


def _raises_runtime_error(fn):
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


def current() -> _rt.Workspace:
    return _current[0]


def GlobalInit(args=None) -> bool:
    """Caffe2 initializes its C++ runtime from command-line flags; dslc has nothing to set up."""
    return True


def CurrentWorkspace() -> str:
    """The name of the current workspace ("default" at first)."""
    return _current_name[0]


def Workspaces() -> list[str]:
    return sorted(_named)


def SwitchWorkspace(name, create_if_missing: bool = False) -> None:
    """Make workspace ``name`` current; each keeps its blobs and created nets."""
    name = str(name)
    if name not in _named:
        if not create_if_missing:
            raise WorkspaceError(f"no workspace named {name!r}", user_location(),
                                 "pass create_if_missing=True to make it")
        _named[name] = Workspace()
    _current[0] = _named[name]
    _current_name[0] = name
    return None  # (Caffe2's returns nothing)


def RootFolder() -> str:
    """Where the current workspace's relative db names are ("." : the working directory)."""
    return current().root_folder


def NumGpuDevices() -> int:
    return 0  # (dslc runs every operator on the CPU)


def GetCuDNNVersion() -> int:
    return 0  # (no cuDNN: the value Caffe2's CPU build reports)


def GetCUDAVersion() -> int:
    return 0


NumCudaDevices = NumGpuDevices


def Predictor(init_net, predict_net):
    """A model served from a workspace of its own (dslc/predictor/runner.py)."""
    from dslc.predictor.runner import Predictor as _Predictor
    return _Predictor(init_net, predict_net)


def ApplyTransform(transform_key, net):
    """The NetDef ``net`` rewritten by the transform named ``transform_key`` (dslc/driver/transforms.py)."""
    from dslc.driver import transforms
    return transforms.apply(transform_key, net)


def ApplyTransformIfFaster(transform_key, net, init_net, **kwargs):
    """The transformed NetDef if it runs faster by ``improvement_threshold`` (default 1.01),
    timed here after ``init_net``; else the original."""
    from dslc.driver import transforms
    return transforms.apply_if_faster(transform_key, net, init_net, **kwargs)


def StringifyProto(obj) -> str:
    """A message's bytes, or a string as it is (what Caffe2's C++ calls take)."""
    return obj if isinstance(obj, (str, bytes)) else obj.SerializeToString()


_op_nets: dict = {}  # (ops' bytes) -> the Net running them, so a repeated op reuses its compiled plan
_OP_NETS_KEPT = 512


@_raises_runtime_error
def RunOperatorOnce(operator) -> bool:
    """Run one OperatorDef (``core.CreateOperator(...)``, or its serialized bytes) in the current
    workspace, on the backend its device option names (devices.BackendOption; default
    DSLC_BACKEND, else interp)."""
    if isinstance(operator, (bytes, bytearray)):
        operator = _parsed(caffe2_pb2.OperatorDef, operator, "the operator")
    return RunOperatorsOnce([operator])


@_raises_runtime_error
def RunOperatorsOnce(operators) -> bool:
    from dslc.trace import devices
    operators = list(operators)
    if not operators:
        return True
    net = _operator_net(operators)
    backend, options = devices.backend_of(operators[0].device_option
                                          if operators[0].HasField("device_option") else None)
    return current().run(net, backend, **options)


def RunOperatorMultiple(operator, num_runs) -> bool:
    for _ in range(int(num_runs)):
        RunOperatorOnce(operator)
    return True


def _operator_net(operators):
    from dslc import core
    key = tuple(op.SerializeToString(deterministic=True) for op in operators)
    net = _op_nets.get(key)
    if net is None:
        msg = core.caffe2_pb2.NetDef(name="operator")
        msg.op.extend(operators)
        net = core.Net(msg)
        if len(_op_nets) >= _OP_NETS_KEPT:
            _op_nets.pop(next(iter(_op_nets)))
        _op_nets[key] = net
    return net


@contextlib.contextmanager
def current_as(ws: _rt.Workspace):
    """Make ``ws`` the current workspace inside the block, then restore the previous one."""
    saved = _current[0]
    if saved is ws:  # (already current: nothing to restore, so a reset meanwhile in another thread stays)
        yield ws
        return
    _current[0] = ws
    try:
        yield ws
    finally:
        _current[0] = saved


def ResetWorkspace(root_folder=None) -> bool:
    """Start over with a fresh, empty current workspace (blobs and created nets go);
    ``root_folder``: where its relative db names and its ops' log files are (default "."),
    made if missing, as Caffe2's is."""
    ws = Workspace()
    if root_folder:
        ws.root_folder = str(root_folder)
        os.makedirs(ws.root_folder, exist_ok=True)
    _current[0] = _named[_current_name[0]] = ws
    return True


def FeedBlob(name, value, device_option=None) -> bool:
    """Store ``value`` as blob ``name``; jobs read it. A numpy array, or anything numpy
    reads as one (a ``torch.Tensor``, a buffer, a Python scalar or list), becomes a tensor;
    ``str`` and ``bytes`` a string."""
    v = _fed(value, name)  # (before the cell: a value refused makes no blob)
    current().cell(str(name)).v = v
    return True


class FeedError(DSLError, TypeError, RuntimeError):
    """A value FeedBlob cannot store as a tensor (Caffe2 raises a RuntimeError for the
    values it refuses; a TypeError is what Python code expects)."""


def _fed(value, name):
    """``value`` in the runtime's form, or a FeedError at the user's line."""
    try:
        return _rt.to_value(value)
    except _rt.FeedError as e:
        raise FeedError(f"cannot feed blob {str(name)!r}: {e}", user_location(),
                        "feed a numpy array (a torch tensor: t.detach().numpy(), in a dtype numpy has)") from None


def CreateBlob(name) -> bool:
    """Make blob ``name`` in the current workspace, holding nothing yet (Caffe2's empty blob)."""
    current().create_blob(str(name))
    return True


def FetchBlobs(names) -> list:
    """The values of several blobs, in order (``FetchBlob`` of each)."""
    return [FetchBlob(n) for n in names]


def _fetch(ws: _rt.Workspace, name):
    """The value of ``name`` as numpy (a 0-d array for scalars); a located error if it has none."""
    cell = ws.lookup(str(name))
    if cell is None:
        raise BlobError(f"no blob named {str(name)!r} in the workspace", user_location(),
                       "feed it with FeedBlob or run the task that writes it first")
    return _value_of(cell, name)


def _value_of(cell, name):
    if cell.v is None:
        raise BlobError(f"blob {str(name)!r} exists but holds no value yet", user_location(),
                       "run the task that writes it first")
    v = cell.v
    # a copy, as Caffe2's: the caller may write to it, and the workspace's value (perhaps a
    # read-only constant, perhaps updated in place by a later run) stays its own; strings
    # as bytes, as Caffe2's
    return _rt.to_user(np.array(v) if isinstance(v, (np.ndarray, np.generic)) else v)


def FetchBlob(name):
    return _fetch(current(), name)


def SerializeBlob(name) -> bytes:
    """Blob ``name``'s value as Caffe2's BlobProto bytes."""
    from dslc.runtime import blobproto
    return blobproto.serialize(str(name), _fetch(current(), name))


def DeserializeBlob(name, serialized) -> bool:
    """Set blob ``name`` to the value of BlobProto bytes (``SerializeBlob``'s)."""
    from dslc.runtime import blobproto
    try:
        value = blobproto.deserialize(serialized)[1]
    except DSLError as e:
        e.loc = e.loc or user_location()  # (bytes from anywhere: the error is the caller's line)
        raise
    current().feed(str(name), value)
    return True


def HasBlob(name) -> bool:
    return current().has_blob(str(name))


def Blobs() -> list[str]:
    return current().names()


@_raises_runtime_error
def CreateNet(net, overwrite: bool = False, input_blobs=None) -> bool:
    """Compile ``net`` in the current workspace to run it by name (``RunNet``)."""
    ws = current()
    for b in input_blobs or ():
        ws.create_blob(str(b))
    ws.create_net(net, overwrite)
    return True


@_raises_runtime_error
def RunNet(name, num_iter: int = 1, allow_fail: bool = False) -> bool:
    """Run the created net ``name`` (or Net) ``num_iter`` times."""
    return current().run_net(name, num_iter)


def GetNetName(net) -> str:
    """The name a net is created and run under: a Net's, a NetDef's, or the string itself."""
    return _net_name(net)


@_raises_runtime_error
def RunNetOnce(net) -> bool:
    """Run a Net (or a NetDef message) once in the current workspace."""
    return current().run(_as_net(net))


@_raises_runtime_error
def RunPlan(plan_or_step) -> bool:
    """Run a Plan or ExecutionStep, or a PlanDef message (or its serialized bytes)."""
    if isinstance(plan_or_step, (bytes, bytearray)):
        plan_or_step = _parsed(caffe2_pb2.PlanDef, plan_or_step, "the plan")
    if isinstance(plan_or_step, caffe2_pb2.PlanDef):
        from dslc.trace.plan_proto import plan_from_message
        plan_or_step = plan_from_message(plan_or_step)
    return current().run(plan_or_step)


def InferShapesAndTypes(nets, blob_dimensions=None, nets_proto=False, blob_types=None):
    """``(shapes, types)`` of the blobs ``nets`` (core.Net objects, run in order) write and
    of those they start from, keyed by blob name: dims as a list, and Caffe2's dtype code
    (``caffe2_pb2.TensorProto.FLOAT``...). They start from the current workspace's blobs,
    or, given ``blob_dimensions`` (name -> dims), from those blobs only, typed by
    ``blob_types`` (name -> code; float where missing). Blobs of unknown shape are left out.
    """
    from dslc.driver import shapes
    if nets_proto:
        raise DSLError("InferShapesAndTypes(nets_proto=True): dslc has no NetDef protos to read",
                       user_location(), "pass the core.Net objects with nets_proto=False")
    if blob_dimensions is None:
        if blob_types is not None:
            raise DSLError("InferShapesAndTypes: blob_types needs blob_dimensions", user_location(),
                           "give the dims of the same blobs (blob_dimensions={name: [dims]})")
        known, created = _values.blob_types(current())
    else:
        known, created = shapes.types_from_map(blob_dimensions, blob_types), frozenset()
    return shapes.infer_shapes_and_types(nets, known, created)


class _CurrentBlobs:
    """``workspace.blobs``: the current workspace's blobs as a mapping of name -> value."""

    def __getitem__(self, name):
        return FetchBlob(name)

    def __setitem__(self, name, value):
        FeedBlob(name, value)

    def __contains__(self, name):
        return HasBlob(name)

    def __iter__(self):
        return iter(Blobs())

    def __len__(self):
        return len(Blobs())


blobs = _CurrentBlobs()


# Caffe2's immediate mode (dslc/driver/immediate.py holds it)
from dslc.driver import immediate as _immediate  # noqa: E402
from dslc.driver.immediate import (FeedImmediate, FetchImmediate, ImmediateBlobs, IsImmediate,  # noqa: E402,F401
                            RunOperatorImmediate, StartImmediate, StopImmediate)


def __getattr__(name):
    if name == "_immediate_root_folder":  # (Caffe2's module variable, read by its tests)
        return _immediate.root_folder()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
