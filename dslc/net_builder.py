"""``ops`` and ``NetBuilder``: record nets, loops, conditionals and phases as what they are.

A builder's children are Nets, ExecutionSteps, nested blocks (``_Loop``,
``_RunIf``, ``_StopGuard``, ``_RunIfNet``, ``_RunWhileNet``) and ``StopIf`` markers,
in program order. The lowering turns each kind into structured IR; nothing here
is pre-lowered into stop-blob tricks. Blob and net names are still taken the way
Caffe2 takes them, so auto-generated names match.
"""
from __future__ import annotations

from dslc import core, names
from dslc.context import Managed
from dslc.core import BlobReference, ExecutionStep, Net
from dslc.ir.diagnostics import TraceError
from dslc.tracing import user_location


class NoBuilderError(TraceError, AttributeError):
    """``ops.X`` used where no NetBuilder (or Task) is open."""


class StopIf:
    """A stop check recorded in a builder body: leave the block (or loop) if ``cond``."""

    __slots__ = ("cond", "loc", "stop_blob")

    def __init__(self, cond, loc, stop_blob):
        self.cond, self.loc, self.stop_blob = str(cond), loc, stop_blob

    def __repr__(self):
        return f"StopIf({self.cond})"


_NO_NAMES = frozenset()


class NetBuilder(Managed):
    """Records ops into nets inside a ``with`` block; nested blocks become children."""

    kind = "block"
    # Every builder starts with these (class-level: blocks are made by the thousand).
    _frozen = False
    _current_net = None
    _init_scope_cache = None

    def __init__(self, name=None, initial_scope=None, _stop_blob_required=False, _stop_blob=None,
                 _fullname=None, _use_control_ops=False, _loc=None, _parent=None):
        # (_parent: the current builder, when the subclass looked it up already)
        parent = _parent or NetBuilder.current(required=False)
        if _fullname and name:
            raise TraceError("NetBuilder takes name or _fullname, not both", user_location(),
                             "pass name= (joined to the parent builder's name) or _fullname= (used as is)")
        parent_name = parent.name if parent else None
        # (without a name, no join: this runs for every block)
        joined = "/".join(n for n in (parent_name, name) if n) if name else parent_name or ""
        self.name = _fullname or joined
        self._loc = _loc or user_location()  # subclasses that located the call already pass it
        self._children: list = []
        self._stop_blob = _stop_blob
        self._stop_blob_required = _stop_blob_required
        self._use_control_ops = _use_control_ops
        # The lexical scope (names IfNet/WhileNet branches may read from outside) is
        # worked out only when a control-op builder asks: computing it for every
        # builder made tracing quadratic.
        self._scope_parent = parent
        self._scope_cut = len(parent._children) if parent is not None else 0
        self._initial_scope = {str(b) for b in initial_scope} if initial_scope else _NO_NAMES

    def __str__(self):
        return self.name or "Un-named NetBuilder"

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r}, {len(self._children)} children)"

    # --- recording
    def _assert_mutable(self):
        if self._frozen:
            raise TraceError(f"builder {self} is closed; ops can no longer be added to it",
                             user_location(), "record ops inside its `with` block")

    def current_net(self, name=None, _innermost=False) -> Net:
        """The net ops are recorded into now; a new one (named ``name``) if there is none or a name is given.

        ``_innermost``: the caller knows this builder is the innermost open one, whose
        name starts a new net's name (Net() would look it up again).
        """
        net = self._current_net
        if net is None or name is not None or self._frozen:  # one test for the common case: runs per op
            if self._frozen:
                self._assert_mutable()
            net = self.add(Net(name, _prefix=(self.name or "") if _innermost else None))
        return net

    def add(self, child):
        if self._frozen:
            self._assert_mutable()
        if self._use_control_ops and not (isinstance(child, Net) or
                                          (isinstance(child, NetBuilder) and child._use_control_ops)):
            raise TraceError(f"{type(child).__name__} cannot be used inside ops.IfNet/ops.WhileNet",
                             user_location(), "only ops and nested IfNet/WhileNet blocks are allowed there")
        self._children.append(child)
        self._current_net = child if isinstance(child, Net) else None
        return child

    def stop_if(self, blob, loc=None):
        loc = loc or user_location()
        if self._use_control_ops:
            raise TraceError("ops.stop()/ops.stop_if() cannot be used inside ops.IfNet/ops.WhileNet", loc,
                             "use ops.If(...) / ops.loop() for blocks that can stop, or end a "
                             "WhileNet through its Condition")
        if not isinstance(blob, (BlobReference, str)):
            raise TraceError(f"ops.stop_if needs a bool blob, got {type(blob).__name__}", loc,
                             "compute the condition with an op, e.g. ops.GE([x, ops.Const(5)])")
        if self._stop_blob is None:
            net = self.current_net()
            self._stop_blob = BlobReference(net._reserve("stop_blob"), net)
            if self._children and self._children[0] is not net:
                names.unique_net_name(self.name, "stop_blob_init")
        self._children.append(StopIf(blob, loc, str(self._stop_blob)))
        self._current_net = None

    @property
    def _init_lexical_scope(self) -> set:
        """The parent's scope when this builder was made, plus ``initial_scope``."""
        if self._init_scope_cache is None:
            p = self._scope_parent
            self._init_scope_cache = (p._scope_upto(self._scope_cut) if p is not None else set()) | \
                self._initial_scope
        return self._init_scope_cache

    def _scope_upto(self, k: int) -> set:
        """Names available after this builder's first ``k`` children."""
        scope = set(self._init_lexical_scope)
        for child in self._children[:k]:
            if isinstance(child, Net):
                scope |= child.UsedBlobNames()
            elif isinstance(child, NetBuilder) and child._use_control_ops:
                scope |= child._lexical_scope
        return scope

    @property
    def _lexical_scope(self) -> set:
        return self._scope_upto(len(self._children))

    def _update_lexical_scope(self):
        """Kept for Caffe2-style callers: the scope is always computed on demand."""

    # --- closing
    def freeze(self):
        if self._frozen:
            return  # its child builders were frozen with it, and none can be added since
        self._frozen = True
        for child in self._children:
            if isinstance(child, NetBuilder):
                child.freeze()

    def get(self):
        self.freeze()
        return self._children

    def has_stop(self) -> bool:
        return any(isinstance(c, StopIf) for c in self._children)

    def _on_exit(self):
        """Checks and bookkeeping when the block closes normally."""
        if self._stop_blob_required and not self.has_stop():
            raise TraceError("ops.loop() without a count never ends", self._loc,
                             "call ops.stop() or ops.stop_if(cond) inside it, or give it a count")

    def __exit__(self, etype, *args):
        try:
            if etype is None:
                self._on_exit()
        finally:
            super().__exit__(etype, *args)
            self.freeze()
        return False

    def as_step(self, default_name=None) -> ExecutionStep:
        """This builder as a step (``core.to_execution_step``)."""
        self.freeze()
        step = ExecutionStep(self.name or default_name)
        step._loc = self._loc
        if self.kind != "block":
            step._add_item(self)
        elif self._children and all(isinstance(c, Net) for c in self._children):
            for c in self._children:
                step.AddNet(c)
        else:
            for c in self._children:
                if not (isinstance(c, ExecutionStep) and c.is_empty()):
                    step._add_item(c)
        return step


class _RunOnce(NetBuilder):
    """A block that runs at most once; a stop inside it skips the rest of the block."""

    def _on_exit(self):
        super()._on_exit()
        if self._stop_blob is not None:
            self.current_net()._reserve("ConstantFill", 0)  # Caffe2's closing ops.stop()


_I64_MAX = 2 ** 63 - 1


class _Loop(NetBuilder):
    """``ops.loop(n)``: n times (an int, or an int blob read at every iteration), or until stopped."""

    kind = "loop"

    def __init__(self, iters=None, name=None, _loc=None, _parent=None):
        loc = _loc or user_location()
        if isinstance(iters, bool) or not (iters is None or isinstance(iters, (int, BlobReference))):
            raise TraceError(f"ops.loop needs an int or an int blob, got {type(iters).__name__}", loc,
                             "pass a Python int, an int64 blob, or nothing (then stop it with ops.stop_if)")
        if isinstance(iters, int) and iters < 0:
            raise TraceError(f"ops.loop count must be >= 0, got {iters}", loc,
                             "a loop cannot run a negative number of times")
        if isinstance(iters, int) and iters > _I64_MAX:
            raise TraceError(f"ops.loop count {iters} does not fit in an int64 (at most {_I64_MAX})", loc,
                             "loop counts are int64; use a smaller count, or no count and ops.stop_if")
        parent = _parent or NetBuilder.current()
        super().__init__(name, _stop_blob_required=iters is None, _loc=loc, _parent=parent)
        self._count = iters
        self._iter = None
        if iters is not None:
            net = parent.current_net(_innermost=True)
            net._reserve("GivenTensorInt64Fill", 0)  # the increment
            self._iter = BlobReference(net._reserve("GivenTensorInt64Fill", 0), net)
            if not isinstance(iters, BlobReference):
                net._reserve("GivenTensorInt64Fill", 0)

    def iter(self) -> BlobReference:
        """The iteration counter (0, 1, ... n-1) as a blob usable inside the loop."""
        if self._count is None:
            raise TraceError("loop.iter() needs a loop with a count", user_location(),
                             "give the loop a count: ops.loop(n)")
        return self._iter

    def __enter__(self):
        super().__enter__()
        if self._count is not None:
            net = self.current_net(_innermost=True)
            net._reserve("GE")
            self._stop_blob = BlobReference(net._reserve("stop_blob"), net)
            self._current_net = None
        return self

    def _on_exit(self):
        super()._on_exit()
        if self._count is not None:
            self.current_net()

    @property
    def count(self):
        return self._count


class _IfChain:
    """What the branches of one If/Elif/Else chain share."""

    __slots__ = ("parent", "has_else")

    def __init__(self, parent):
        self.parent = parent
        self.has_else = False


class _RunIf(_RunOnce):
    """One branch of ``ops.If(c)`` / ``.Elif(c)`` / ``.Else()``: the first true branch runs."""

    kind = "if"

    def __init__(self, cond=None, name=None, _chain=None, _branch="if", _loc=None, _parent=None):
        loc = _loc or user_location()
        if _branch != "else" and not isinstance(cond, (BlobReference, str)):
            raise TraceError(f"ops.{'If' if _branch == 'if' else 'Elif'} needs a bool blob, "
                             f"got {type(cond).__name__}", loc,
                             "compute the condition with an op, e.g. ops.GE([x, ops.Const(5)])")
        parent = _parent or NetBuilder.current()
        super().__init__(name, _loc=loc, _parent=parent)
        self.cond = None if cond is None else str(cond)
        self.branch = _branch
        self.chain = _chain or _IfChain(parent)
        net = parent.current_net(_innermost=True)
        if _branch == "if":
            net._reserve("Not")
            net._reserve("ConstantFill", 0)  # Caffe2's already_ran flag
        elif _branch == "elif":
            net._reserve("Not")
            net._reserve("Or")

    def __enter__(self):
        super().__enter__()
        net = self.current_net(_innermost=True)
        self._stop_blob = BlobReference(net._reserve("stop_blob"), net)
        self._current_net = None
        self.current_net(_innermost=True)  # Caffe2 marks the chain as taken in the branch's second net
        return self

    def _next(self, branch, cond, name):
        loc = user_location(3)  # (from the caller of Elif or Else)
        what = "Elif" if branch == "elif" else "Else"
        if self.branch == "else" or self.chain.has_else:
            raise TraceError(f"{what} cannot follow Else", loc,
                             "an If chain ends at its Else; start a new ops.If(...) instead")
        if NetBuilder.current(required=False) is not self.chain.parent:
            raise TraceError(f"{what} must be in the same block as its If", loc,
                             f"call .{what}() right after the If's `with` block, at the same indentation")
        if not self._frozen:
            raise TraceError(f"{what} must come after the If block closed", loc,
                             f"close the `with ops.If(...)` block first, then open `with c.{what}(...)`")
        nxt = _RunIf(cond, name=name or self.name, _chain=self.chain, _branch=branch, _loc=loc,
                     _parent=self.chain.parent)
        if branch == "else":
            self.chain.has_else = True
        return self.chain.parent.add(nxt)

    def Elif(self, cond, name=None):
        return self._next("elif", cond, name)

    def Else(self, name=None):
        return self._next("else", None, name)


class _StopGuard(_RunOnce):
    """``ops.stop_guard()``: ``has_stopped()`` tells whether a stop ended the block early."""

    kind = "guard"

    def __init__(self, has_stopped_blob=None, name=None):
        super().__init__(name)
        self._stopped = has_stopped_blob
        self._ran = False

    def __enter__(self):
        super().__enter__()
        if self._stopped is None:
            net = self.current_net()
            self._stopped = BlobReference(net._reserve("ConstantFill", 0), net)
        self._stopped = BlobReference(str(self._stopped), None)
        return self

    def _on_exit(self):
        self._ran = True
        self.current_net()
        super()._on_exit()

    def has_stopped(self) -> BlobReference:
        if not self._ran:
            raise TraceError("has_stopped() is known only after the stop_guard block closed", user_location(),
                             "call guard.has_stopped() after the `with ops.stop_guard() as guard:` block")
        return self._stopped


class _SetupBuilder(NetBuilder):
    """A ``task_init``/``task_exit``/... block: collected by the enclosing Task or TaskGroup."""

    INIT = "init"
    EXIT = "exit"
    kind = "block"

    def __init__(self, type, name=None):
        super().__init__(name)
        self.type = type

    def setup(self, net):
        if self.type == _SetupBuilder.INIT:
            return core.to_execution_step(self)

    def exit(self, net):
        if self.type == _SetupBuilder.EXIT:
            return core.to_execution_step(self)


class _ReporterBuilder(NetBuilder):
    """``ops.task_reporter``/``ops.local_reporter``: a block run every ``interval_ms`` beside the body."""

    def __init__(self, interval_ms, net=None, name=None):
        super().__init__(name)
        self._net = net
        self.interval_ms = interval_ms

    def __exit__(self, etype, *args):
        super().__exit__(etype, *args)
        if etype is None:
            from dslc.task import Task, TaskGroup
            step = core.to_execution_step(self)
            step.RunEveryMillis(self.interval_ms)
            if self._net is not None:
                self._net.add_attribute(Task.REPORT_STEP, step)
            else:
                TaskGroup.current().report_step(step, interval_ms=self.interval_ms)
        return False


# ----------------------------------------------------------------------------- control-op builders


class _ControlBuilder(NetBuilder):
    """Base of IfNet/WhileNet blocks: a branch's new blobs stay local to it."""

    def __init__(self, name=None):
        super().__init__(name, _use_control_ops=True)
        self.outer_scope = frozenset(self._init_lexical_scope)

    def _on_exit(self):
        self._update_lexical_scope()


class _RunIfNet(_ControlBuilder):
    """``ops.IfNet(cond)``: then-branch here, ``ops.Else()`` right after adds the else branch."""

    kind = "ifnet"

    def __init__(self, cond, name=None):
        if not isinstance(cond, (BlobReference, str)):
            raise TraceError(f"ops.IfNet needs a bool blob, got {type(cond).__name__}", user_location(),
                             "compute the condition with an op, e.g. ops.GE([x, ops.Const(5)])")
        super().__init__(name)
        self.cond = str(cond)
        self.else_branch = None

    def _extra_regions(self):
        return [self.else_branch] if self.else_branch is not None else []


class _RunElseNet(_ControlBuilder):
    kind = "elsenet"

    def __init__(self, name=None):
        parent = NetBuilder.current()
        last = parent._children[-1] if parent._children else None
        if not isinstance(last, _RunIfNet) or last.else_branch is not None:
            raise TraceError("ops.Else() must directly follow an ops.IfNet block", user_location(),
                             "for ops.If chains use c.Else() on the object ops.If returned")
        super().__init__(name)
        self.outer_scope = last.outer_scope
        self._if = last

    def __exit__(self, etype, *args):
        super().__exit__(etype, *args)
        if etype is None:
            self._if.else_branch = self
        return False


class _RunWhileNet(_ControlBuilder):
    """``ops.WhileNet()``: an ``ops.Condition()`` block first, then the body."""

    kind = "whilenet"

    def __init__(self, name=None):
        super().__init__(name)
        self.condition = None

    def _on_exit(self):
        if self.condition is None:
            raise TraceError("ops.WhileNet() needs an ops.Condition() block", self._loc,
                             "start the body with `with ops.Condition():` computing the loop condition")
        super()._on_exit()

    def _extra_regions(self):
        return [self.condition] if self.condition is not None else []


class _RunWhileCondition(_ControlBuilder):
    kind = "condition"

    def __init__(self, name=None):
        parent = NetBuilder.current()
        if not isinstance(parent, _RunWhileNet):
            raise TraceError("ops.Condition() must be directly inside ops.WhileNet()", user_location(),
                             "open it as the first block of `with ops.WhileNet():`")
        if parent.condition is not None or parent._children:
            raise TraceError("ops.Condition() must come first in ops.WhileNet(), and only once", user_location(),
                             "move the Condition block before the body's ops, and merge repeated ones")
        super().__init__(name)
        self._while = parent

    def __exit__(self, etype, *args):
        super().__exit__(etype, *args)
        if etype is None:
            ops_ = [op for n in self._children if isinstance(n, Net) for op in n._ops]
            if not ops_ or len(ops_[-1].outputs) != 1:
                raise TraceError("the last op of ops.Condition() must have exactly one output (the condition)",
                                 self._loc, "end the Condition block with the comparison, e.g. "
                                 "ops.LT([x, ops.Const(7)])")
            self.cond = ops_[-1].outputs[0]
            self._while.condition = self
            self._while._children.clear()
            self._while._current_net = None
        return False


# ----------------------------------------------------------------------------- ops


class Operations:
    """``ops``: record into the current NetBuilder (``ops.Add(...)``, ``ops.loop(...)``...)."""

    def net(self, net=None, name=None):
        """Add ``net`` (a Net or step) as the next child; or return the current net."""
        if net is not None and name is not None:
            raise TraceError("ops.net takes a net or a name, not both", user_location(),
                             "ops.net(net) adds an existing net; ops.net(name=...) starts a new one")
        builder = _builder()
        if net is not None:
            if not isinstance(net, (Net, ExecutionStep)):
                raise TraceError(f"ops.net needs a Net or an ExecutionStep, got {type(net).__name__}",
                                 user_location(), "wrap other things with core.execution_step(name, ...)")
            if isinstance(net, ExecutionStep):
                if builder._use_control_ops:
                    raise TraceError("steps cannot be added inside ops.IfNet/ops.WhileNet", user_location(),
                                     "add the step outside the IfNet/WhileNet block, or add its nets")
                net._used = True
            builder.add(net)
            return net
        return builder.current_net(name, _innermost=True)

    def __getattr__(self, name):
        """``ops.<name>``: the current net's ``<name>`` (for operators, from then on a class attribute)."""
        if name.startswith("__"):
            raise AttributeError(name)
        found = getattr(_builder().current_net(), name)
        if core.is_operator(name) or hasattr(Net, name):  # an operator, or a method such as Const
            setattr(Operations, name, _OfCurrentNet(name))
        return found

    def stop(self):
        """Leave the innermost block (break out of a loop, skip the rest of an If branch)."""
        self.stop_if(self.Const(True))

    def stop_if(self, blob):
        _builder().stop_if(blob, user_location())

    def loop(self, iters=None, name=None):
        """``with ops.loop(n) as loop:`` runs n times (``loop.iter()`` is 0..n-1); no n: until stopped."""
        builder = _ordinary_builder("ops.loop")
        return builder.add(_Loop(iters, name=name, _loc=user_location(2), _parent=builder))

    def stop_guard(self, has_stopped_blob=None, name=None):
        builder = _ordinary_builder("ops.stop_guard")
        return builder.add(_StopGuard(has_stopped_blob=has_stopped_blob, name=name))

    def If(self, cond, name=None):
        """``with ops.If(c) as c:`` ... ``with c.Elif(c2) as c:`` ... ``with c.Else():``."""
        builder = _ordinary_builder("ops.If")
        return builder.add(_RunIf(cond, name=name, _loc=user_location(2), _parent=builder))

    def IfNet(self, cond, name=None):
        return _builder().add(_RunIfNet(cond, name=name))

    def Else(self, name=None):
        return _RunElseNet(name=name)

    def WhileNet(self, name=None):
        return _builder().add(_RunWhileNet(name=name))

    def Condition(self, name=None):
        return _RunWhileCondition(name=name)

    def _setup(self, key, kind, what):
        from dslc.task import Task
        if key != "local_setup" and Task.current(required=False) is None:
            raise TraceError(f"ops.{what}() is only valid inside a Task", user_location(),
                             f"open it inside `with Task():` (a {what} block outside a task would never run)")
        setup = _SetupBuilder(kind)
        setup._loc = user_location(2)
        _builder().current_net().add_attribute(key, setup)
        return setup

    def task_init(self):
        """Ops in this block run once per task run, before the body (and its instances)."""
        return self._setup("task_setup", _SetupBuilder.INIT, "task_init")

    def task_exit(self):
        """Ops in this block run once per task run, after the body."""
        return self._setup("task_setup", _SetupBuilder.EXIT, "task_exit")

    def task_instance_init(self):
        """Ops in this block run in each instance, before the body; their blobs are per instance."""
        return self._setup("task_instance_setup", _SetupBuilder.INIT, "task_instance_init")

    def task_instance_exit(self):
        """Ops in this block run in each instance, after the body."""
        return self._setup("task_instance_setup", _SetupBuilder.EXIT, "task_instance_exit")

    def local_init(self):
        """Ops in this block run once per node, before the task group's tasks."""
        return self._setup("local_setup", _SetupBuilder.INIT, "local_init")

    def local_exit(self):
        return self._setup("local_setup", _SetupBuilder.EXIT, "local_exit")

    def task_reporter(self, interval_ms=1000, name=None):
        """A block run every ``interval_ms`` while the task body runs, and once after it."""
        return _ReporterBuilder(interval_ms, net=self.net(), name=name)

    def local_reporter(self, interval_ms=1000, name=None):
        """A block run every ``interval_ms`` on the node while the task group runs."""
        return _ReporterBuilder(interval_ms, name=name)

    def task_group(self):
        raise TraceError("ops.task_group() is not supported", user_location(),
                         "create a TaskGroup() outside the builder and add Tasks to it")


class _OfCurrentNet(core.GetattrShortcut):
    """``ops.<Op>``: the current net's ``<Op>``, looked up at each access (as Operations.__getattr__)."""

    __slots__ = ("records",)

    def __init__(self, name: str):
        super().__init__(name)
        # Whether a plain Net records ``name`` through an _OpRecorder (not a method such as Const):
        # then the recording function is made here, without looking the name up on the net.
        self.records = isinstance(vars(Net).get(name), core._OpRecorder)

    def __get__(self, ops_, owner=None):
        if ops_ is None:
            return self
        if type(ops_) is not Operations and self.overridden(ops_):
            return self.overridden(ops_)(ops_, self.name)
        builder = NetBuilder.current(required=False) or _builder()  # (_builder raises the error)
        net = builder._current_net
        if net is None or builder._frozen:  # current_net(), inlined for its common case
            net = builder.current_net(_innermost=True)
        if self.records and type(net) is Net:
            return net._recorder(self.name)
        return getattr(net, self.name)


def _builder() -> NetBuilder:
    nb = NetBuilder.current(required=False)
    if nb is None:
        raise NoBuilderError("no active NetBuilder: ops can only be recorded inside a Task or NetBuilder",
                             user_location(2), "wrap the code in `with Task():` or `with NetBuilder():`")
    return nb


def _ordinary_builder(what: str) -> NetBuilder:
    nb = _builder()
    if nb._use_control_ops:
        raise TraceError(f"{what} cannot be used inside ops.IfNet/ops.WhileNet", user_location(2),
                         "use ops.IfNet / ops.WhileNet there")
    return nb


_OfCurrentNet.owner = Operations
ops = Operations()

__all__ = ["NetBuilder", "ops", "StopIf"]
