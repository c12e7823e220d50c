"""``NetBuilder``: records ops into nets inside a ``with`` block, in program order.

A builder's children are Nets, ExecutionSteps, nested blocks (builder_blocks.py) and
``StopIf`` markers. The lowering turns each kind into structured IR.
"""
from __future__ import annotations

from dslc.trace import names
from dslc.trace.context import Managed
from dslc.trace.blobref import BlobReference
from dslc.trace.net import Net, set_builder_prefix
from dslc.trace.steps import ExecutionStep
from dslc.ir.diagnostics import TraceError
from dslc.trace.tracing import user_location


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
        """Names available after this builder's first ``k`` children: those of its nets.

        An IfNet/WhileNet child adds none (as in Caffe2, whose closed control-op builder
        keeps only the scope it started with): a blob first written inside it is local
        to it, and stays local to a later block that writes the same name.
        """
        scope = set(self._init_lexical_scope)
        for child in self._children[:k]:
            if isinstance(child, Net):
                scope |= child.UsedBlobNames()
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
        """The children: nets, steps and blocks. In Caffe2's control-op mode
        (``_use_control_ops=True``), one net: each IfNet/WhileNet block an If/While op in it."""
        self.freeze()
        if self._use_control_ops and self.kind == "block":
            return [self._control_net(Net(self.name or "control_ops"))]
        return self._children

    def _control_net(self, net: Net) -> Net:
        """``net`` with this builder's ops appended, each control-op block (``_emit_control``
        of IfNet/WhileNet) as its op."""
        for child in self._children:
            if isinstance(child, Net):
                net._extend_ops(child)
            else:
                child._emit_control(net)
        return net

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


def _innermost_name() -> str:
    """The name of the innermost open NetBuilder ("" if none): a new net's name starts with it."""
    nb = NetBuilder.current(required=False)
    return (nb.name or "") if nb is not None else ""


set_builder_prefix(_innermost_name)
