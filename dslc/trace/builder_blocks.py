"""The nested blocks of a NetBuilder: ``ops.loop``, ``ops.If``/``Elif``/``Else``,
``ops.stop_guard``, task and node phases (``task_init`` ...), reporters, and the
control-op nets ``ops.IfNet`` / ``ops.WhileNet``. Each is a NetBuilder whose ``kind``
tells the lowering which structured IR op it becomes.
"""
from __future__ import annotations

from dslc.trace.builder_base import NetBuilder
from dslc.trace.blobref import BlobReference
from dslc.trace.control_ops import add_if_op, add_while_op
from dslc.trace.net import Net
from dslc.trace.steps import to_execution_step
from dslc.trace.task import Task, TaskGroup
from dslc.ir.diagnostics import TraceError
from dslc.trace.tracing import user_location


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
            return to_execution_step(self)

    def exit(self, net):
        if self.type == _SetupBuilder.EXIT:
            return to_execution_step(self)


class _ReporterBuilder(NetBuilder):
    """``ops.task_reporter``/``ops.local_reporter``: a block run every ``interval_ms`` beside the body."""

    def __init__(self, interval_ms, net=None, name=None):
        super().__init__(name)
        self._net = net
        self.interval_ms = interval_ms

    def __exit__(self, etype, *args):
        super().__exit__(etype, *args)
        if etype is None:
            step = to_execution_step(self)
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

    def _emit_control(self, net) -> None:
        """Append this block to ``net`` as an If op (control-op mode; see NetBuilder.get)."""
        then_net = self._control_net(Net(f"{net.Name()}/then"))
        else_net = None if self.else_branch is None else self.else_branch._control_net(Net(f"{net.Name()}/else"))
        add_if_op(net, self.cond, self.outer_scope, then_net, else_net, loc=self._loc)


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

    def _emit_control(self, net) -> None:
        """Append this block to ``net`` as a While op (control-op mode; see NetBuilder.get)."""
        body = self._control_net(Net(f"{net.Name()}/body"))
        cond = self.condition._control_net(Net(f"{net.Name()}/condition"))
        add_while_op(net, self.condition.cond, self.outer_scope, body, cond, loc=self._loc)


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
