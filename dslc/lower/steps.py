"""Lowering steps and builder blocks into structured control flow.

    ops.loop(n)             -> %exit = for(%n, %n) { ^(%i, %e): ...; break_if(%stop, %i); yield %e }
                               (then iter = %exit; a count the body rewrites is re-read:
                               %exit = loop(0) { ^(%i): break_if(%i >= n, %i); ...; yield %i + 1 })
    ops.loop() + stop_if    -> loop { ...; break_if(%c); ... }
    If / Elif / Else        -> if(%c) then {...}; if(%ran or not %c2) else {...}; ...
    stop_if in a one-shot block (If branch, guard, task body) -> the rest of the block
                               goes into `if(%c) else {...}`
    execution_step(should_stop_blob=b) -> loop { item; break_if(flag @b); ... }
    concurrent substeps     -> parallel {...} {...}
"""
from __future__ import annotations

from collections import Counter

from dslc.trace.net import Net
from dslc.trace.oprecord import FILL_ALIASES, DataType
from dslc.trace.steps import ExecutionStep
from dslc.ir import Region, Symbol
from dslc.ir.core import MAX_NESTING
from dslc.ir.diagnostics import DSLTypeError, TraceError
from dslc.ir.escape import brief
from dslc.ir.opdef import OPS
from dslc.ir.types import I64, INT_DTYPES, TensorType
from dslc.trace.builder_base import NetBuilder, StopIf

from .blocks import Block, Scope
from .ops import check_known, lower_op
from .records import names_read, names_written


class _WriteConst:
    """An internal item: set a blob to a constant (a stop guard's closing 'not stopped')."""

    def __init__(self, name, value, loc):
        self.name, self.value, self.loc = name, value, loc


class _StopCheck:
    """An internal item: the stop-blob check Caffe2 makes after each net or substep."""

    def __init__(self, blob, loc):
        self.blob, self.loc = blob, loc


def lower_seq(blk: Block, items, in_loop: bool) -> None:
    """Lower items in order; a stop check breaks the loop, or skips the rest of a block."""
    i = 0
    while i < len(items):
        item = items[i]
        end = _nestable_chain(blk, items, i) if isinstance(item, NetBuilder) else None
        if end is not None:
            _nested_chain(blk, items[i:end])
            i = end
            continue
        i += 1
        if isinstance(item, (StopIf, _StopCheck)):
            if isinstance(item, StopIf):
                cond = blk.read(item.cond, item.loc)
            else:
                cond = blk.read_flag(item.blob, item.loc)
            blk.flush()
            if in_loop:
                blk.create("break_if", [cond, *blk.break_values], loc=item.loc)
                continue
            op, _, rest = _if(blk, cond, item.loc)
            lower_seq(rest, items[i:], False)
            rest.flush()
            blk.forget(op)
            return
        lower_item(blk, item)


def lower_item(blk: Block, item) -> None:
    if isinstance(item, Net):
        ops = item._ops
        check_known(ops, item.Name())
        for rec in ops:
            lower_op(blk, rec)
    elif isinstance(item, ExecutionStep):
        lower_step(blk, item)
    elif isinstance(item, _Parallel):
        lower_parallel(blk, item)
    elif isinstance(item, _WriteConst):
        blk.write(item.name, blk.const(item.value, item.loc), item.loc)
    elif isinstance(item, NetBuilder):
        _BLOCKS[item.kind](blk, item)
    else:
        raise TraceError(f"cannot run a {type(item).__name__} as part of a step")


def _if(blk: Block, cond, loc):
    """An ``if`` op on ``cond``, and the blocks of its then and else regions."""
    blk.flush()
    op = blk.create("if", [cond], loc=loc, result_types=[], regions=[Region(), Region()])
    return op, blk.child(op.regions[0], inherit=True), blk.child(op.regions[1], inherit=True)


def _finish(*blocks: Block) -> None:
    for b in blocks:
        b.flush()


# ----------------------------------------------------------------------------- builder blocks


def lower_block(blk: Block, nb: NetBuilder) -> None:
    """A plain builder: its children in order, run once."""
    lower_seq(blk, nb._children, in_loop=False)


def lower_loop(blk: Block, loop) -> None:
    """``ops.loop``: until stopped, or counted; a counted loop leaves its exit index in ``iter``.

    Caffe2 keeps the counter in a blob, so after the loop ``loop.iter()`` holds the
    number of completed iterations: the count, or the index at which a stop fired
    (that iteration's increment is skipped).
    """
    loc = loop._loc
    blk.flush()
    if loop.count is None:
        op = blk.create("loop", [], loc=loc, result_types=[], regions=[Region()])
        body = blk.child(op.regions[0], inherit=False)
        lower_seq(body, loop._children, in_loop=True)
        _finish(body)
        body.create("yield", [], loc=loc)
        blk.forget(op)
        return
    count = _loop_count(blk, loop)
    if count is None:
        op = _lower_recounted_loop(blk, loop)
    else:
        op = _lower_counted_loop(blk, loop, count)
    blk.forget(op)
    blk.write(str(loop._iter), op.results[0], loc)


def _loop_count(blk: Block, loop):
    """The count as an i64 value read once before the loop, or None if it must be re-read."""
    loc = loop._loc
    if isinstance(loop.count, int):
        return blk.const(loop.count, loc)
    name = str(loop.count)
    if name in names_written(loop._children):
        return None  # the body changes it: Caffe2 compares against its current value
    count = _as_i64(blk, blk.read(name, loc), loc)
    return count if count.type == I64 else None  # known only at run time: the general form


def _as_i64(blk: Block, count, loc):
    """An integer count as i64 (the type of the index it is compared with)."""
    t = count.type
    if isinstance(t, TensorType) and t.dtype is not None and t.dtype != "i64":
        if t.dtype not in INT_DTYPES:
            raise DSLTypeError(f"a loop count must be an integer, got {t}", loc,
                               "pass an int or an int64 blob to ops.loop(...)")
        return blk.b.value("Cast", [count], {"to": DataType.INT64}, loc=loc)
    return count


def _lower_counted_loop(blk: Block, loop, count):
    """``for(%n, %n) {^(%i, %exit): ... break_if(%stop, %i) ... yield %exit}``: result = exit index."""
    loc = loop._loc
    op = blk.create("for", [count, count], loc=loc, result_types=[I64], regions=[Region()])
    i = op.regions[0].add_arg(I64, "i")
    exit_index = op.regions[0].add_arg(I64, "n")
    body = blk.child(op.regions[0], inherit=False, iters={**blk.iters, str(loop._iter): i})
    body.break_values = (i,)
    lower_seq(body, loop._children, in_loop=True)
    _finish(body)
    body.create("yield", [exit_index], loc=loc)
    return op


def _lower_recounted_loop(blk: Block, loop):
    """A loop whose count may change inside it: re-read the count at every iteration."""
    loc = loop._loc
    zero = blk.const(0, loc)
    op = blk.create("loop", [zero], loc=loc, result_types=[I64], regions=[Region()])
    i = op.regions[0].add_arg(I64, "i")
    body = blk.child(op.regions[0], inherit=False, iters={**blk.iters, str(loop._iter): i})
    body.break_values = (i,)
    n = _as_i64(body, body.read(str(loop.count), loc), loc)
    done = body.b.value("GE", [i, n], loc=loc)
    body.create("break_if", [done, i], loc=loc)
    lower_seq(body, loop._children, in_loop=True)
    _finish(body)
    one = body.const(1, loc)
    body.create("yield", [body.b.value("Add", [i, one], loc=loc)], loc=loc)
    return op


def lower_if(blk: Block, item) -> None:
    """One branch of an If chain; ``ran`` (did an earlier branch run?) is an SSA value."""
    loc, chain, ran = item._loc, item.chain, blk.ctx.if_ran.get(id(item.chain))
    if item.branch == "if":
        cond = blk.read(item.cond, loc)
        op, region, _ = _if(blk, cond, loc)
        ran = cond
    elif ran is None:
        raise TraceError(f"{item.branch.title()} without its If", loc)
    elif item.branch == "elif":
        cond = blk.read(item.cond, loc)
        skip = blk.b.value("Or", [ran, blk.b.value("Not", [cond], loc=loc)], loc=loc)
        op, _, region = _if(blk, skip, loc)
        ran = blk.b.value("Or", [ran, cond], loc=loc)
    else:
        op, _, region = _if(blk, ran, loc)
    blk.ctx.if_ran[id(chain)] = ran
    lower_seq(region, item._children, in_loop=False)
    _finish(region)
    blk.forget(op)


def _kind(item) -> str | None:
    """A builder block's kind (``"if"``, ``"loop"``...), None for anything else.

    Nets are not asked: ``net.kind`` would be taken for an operator name and fail
    slowly, with a spelling suggestion.
    """
    return item.kind if isinstance(item, NetBuilder) else None


def _member(item, chain) -> bool:
    return _kind(item) == "if" and item.chain is chain and item.branch != "if"


def _nestable_chain(blk: Block, items, i: int):
    """The end of the If/Elif/Else chain starting at ``items[i]``, if it may be nested.

    Caffe2 computes each Elif's condition after the earlier branch ran, in the parent's
    net. When those condition nets are pure, read nothing the earlier branches write,
    and make only blobs nothing else reads, computing them in the else branch changes
    nothing, and the chain lowers as ``if c1 {A} else { c2; if c2 {B} else {C} }``.
    """
    first = items[i]
    if _kind(first) != "if" or first.branch != "if":
        return None
    j, members, nets = i + 1, [first], []
    while j < len(items):
        if isinstance(items[j], Net) and j + 1 < len(items) and _member(items[j + 1], first.chain):
            nets.append(items[j])
            j += 1
        elif _member(items[j], first.chain):
            members.append(items[j])
            j += 1
        else:
            break
    if len(members) < 2 or not all(_pure_net(n) for n in nets):
        return None
    nets = [n for n in nets if n._ops]  # (the net recorded between an If and its Else is empty)
    if not nets:
        return j  # no Elif condition ops (If/Else): nothing to move into a branch
    written = names_written(members)
    reads = Counter(name for n in nets for op in n._ops for name in op.inputs)
    reads.update(m.cond for m in members if m.cond is not None)
    for n in nets:
        for op in n._ops:
            if written & set(op.inputs):
                return None
            for out in op.outputs:
                if not out.startswith(n.Name() + "/") or out in blk.ctx.protected or \
                        blk.ctx.read_counts[out] > reads[out]:
                    return None
    # nothing outside the chain reads them: keep them SSA values, never stored (a blob
    # written in only some branches costs a loop nest a carried value updated in branches)
    blk.ctx.ephemeral.update(out for n in nets for op in n._ops for out in op.outputs)
    return j


def _pure_net(net: Net) -> bool:
    return all(op.type in FILL_ALIASES or (op.type in OPS and OPS[op.type].is_pure) for op in net._ops)


def _nested_chain(blk: Block, items) -> None:
    """Lower a chain whose Elif conditions may be computed inside the else branches."""
    item, rest = items[0], items[1:]
    if isinstance(item, Net):
        lower_item(blk, item)
        item, rest = rest[0], rest[1:]
    if item.branch == "else":
        lower_seq(blk, item._children, in_loop=False)
        return
    cond = blk.read(item.cond, item._loc)
    op, then, other = _if(blk, cond, item._loc)
    lower_seq(then, item._children, in_loop=False)
    _finish(then)
    if rest:
        _nested_chain(other, rest)
        _finish(other)
    blk.forget(op)


def lower_guard(blk: Block, guard) -> None:
    """``stop_guard``: has_stopped is True until the body reaches its end."""
    flag = str(guard._stopped)
    blk.write(flag, blk.const(True, guard._loc), guard._loc)
    lower_seq(blk, list(guard._children) + [_WriteConst(flag, False, guard._loc)], in_loop=False)


def lower_ifnet(blk: Block, item) -> None:
    loc = item._loc
    cond = blk.read(item.cond, loc)
    op, then, other = _if(blk, cond, loc)
    for region, branch in ((then, item), (other, item.else_branch)):
        if branch is None:
            continue
        region.scope = _scope(blk, branch.outer_scope, "if", loc)
        lower_seq(region, branch._children, in_loop=False)
        _finish(region)
    blk.forget(op)


def _scope(blk: Block, outer, kind: str, loc) -> Scope:
    """The name scope of one IfNet/WhileNet region, nested in the enclosing one."""
    return Scope(outer, blk.ctx.fresh_tag(kind), blk.scope, blk.ctx.branch_locals, loc)


def lower_whilenet(blk: Block, item) -> None:
    loc = item._loc
    blk.flush()
    op = blk.create("loop", [], loc=loc, result_types=[], regions=[Region()])
    body = blk.child(op.regions[0], inherit=False)
    body.scope = _scope(blk, item.condition.outer_scope, "cond", loc)
    lower_seq(body, item.condition._children, in_loop=False)
    cond = body.read(item.condition.cond, loc)
    body.flush()
    body.create("break_if", [body.b.value("Not", [cond], loc=loc)], loc=loc)
    body.scope = _scope(blk, item.outer_scope, "while", loc)
    lower_seq(body, item._children, in_loop=False)
    _finish(body)
    body.create("yield", [], loc=loc)
    blk.forget(op)


_BLOCKS = {"block": lower_block, "loop": lower_loop, "if": lower_if, "guard": lower_guard,
           "ifnet": lower_ifnet, "whilenet": lower_whilenet}


# ----------------------------------------------------------------------------- execution steps
#
# A step's flags nest like this (outermost first), as in Caffe2's executor:
#   reporters (run_every_ms substeps)  -> reporting {body} {reporter}...
#   create_workspace                   -> scope {...}   (one workspace per execution)
#   num_iter / should_stop_blob        -> for / loop, stop checked after each item
#   concurrency                        -> parallel {item} {item}...  (joined each iteration)


def lower_step(blk: Block, step: ExecutionStep) -> None:
    """A raw execution step (or a NetBuilder turned into one)."""
    ctx = blk.ctx
    if ctx.step_depth >= MAX_NESTING:  # (a plan from a file may nest its steps without end)
        raise TraceError(f"execution steps nest more than {MAX_NESTING} deep (step {brief(step.Name())!r})",
                         step._loc, "flatten the plan: no job nests its steps this deep")
    ctx.step_depth += 1
    try:
        _lower_step(blk, step)
    finally:
        ctx.step_depth -= 1


def _lower_step(blk: Block, step: ExecutionStep) -> None:
    items = [i for i in step._items if not _is_reporter(i)]
    reporters = [i for i in step._items if _is_reporter(i)]
    if step._report_net is not None:
        rs = ExecutionStep(f"{step.Name()}:report", step._report_net)
        rs.RunEveryMillis(int((step._report_interval or 1) * 1000))
        reporters.append(rs)
    if not reporters:
        return lower_step_parts(blk, step, items)
    regions = [_isolated(blk, [step], lambda b: lower_step_parts(b, step, items))]
    regions += [_isolated(blk, [r], lambda b, r=r: lower_step_parts(b, r, r._items)) for r in reporters]
    op = blk.create("reporting", [], {"intervals_ms": [int(r._run_every_ms) for r in reporters]},
                    loc=step._loc, regions=regions)
    blk.forget(op)


def _is_reporter(item) -> bool:
    return isinstance(item, ExecutionStep) and bool(item._run_every_ms)


def lower_step_parts(blk: Block, step: ExecutionStep, items) -> None:
    """``step`` run with ``items`` as its body (its reporters already split off)."""
    if not step._create_workspace:
        return _iterated(blk, step, items)
    region = _isolated(blk, [step], lambda b: _iterated(b, step, items))
    blk.forget(blk.create("scope", [], loc=step._loc, regions=[region]))


class _Parallel:
    """An internal item: a step's items run concurrently, ``instances`` times each."""

    def __init__(self, step, items, instances):
        self.step, self.items, self.instances = step, items, instances


def _iterated(blk: Block, step: ExecutionStep, items) -> None:
    """The step's iterations: num_iter times, or until its stop blob is true (checked after
    each net or substep, or after the join when they run concurrently)."""
    loc, stop = step._loc, step._should_stop_blob
    n = step._num_concurrent_instances or 1
    # Caffe2 runs a step's nets in order whatever its concurrency flags: only substeps
    # (and builder blocks, which are substeps) go on threads.
    if step.HasSubsteps() and (n > 1 or (step._concurrent_substeps and len(items) > 1)):
        items = [_Parallel(step, items, n)]
    if stop is not None:
        checked = [x for it in items for x in (it, _StopCheck(stop, loc))]
        if step._only_once:
            return lower_seq(blk, checked, in_loop=False)
        return _loop(blk, checked, loc)
    if step._only_once:
        raise TraceError(f"step {step.Name()!r} has only_once but no should_stop_blob", loc,
                         "only_once limits a step that runs until its stop blob is true; "
                         "drop it or give the step a should_stop_blob")
    if step._num_iter not in (None, 1):
        if step._num_iter < 0:
            raise TraceError(f"step {step.Name()!r} has a negative num_iter ({step._num_iter})", loc,
                             "use num_iter=0 to skip the step")
        return _counted(blk, step._num_iter, items, loc)
    lower_seq(blk, items, in_loop=False)


def _loop(blk: Block, items, loc) -> None:
    blk.flush()
    op = blk.create("loop", [], loc=loc, result_types=[], regions=[Region()])
    body = blk.child(op.regions[0], inherit=False)
    lower_seq(body, items, in_loop=True)
    _finish(body)
    body.create("yield", [], loc=loc)
    blk.forget(op)


def _counted(blk: Block, n: int, items, loc) -> None:
    blk.flush()
    op = blk.create("for", [blk.const(n, loc)], loc=loc, result_types=[], regions=[Region()])
    op.regions[0].add_arg(I64, "i")
    body = blk.child(op.regions[0], inherit=False)
    lower_seq(body, items, in_loop=True)
    _finish(body)
    body.create("yield", [], loc=loc)
    blk.forget(op)


def lower_parallel(blk: Block, par: _Parallel) -> None:
    parts = [[it] for it in par.items] if par.step.HasSubsteps() else [par.items]
    regions = [_isolated(blk, part, lambda b, part=part: lower_seq(b, part, in_loop=False))
               for part in parts]
    blk.forget(blk.create("parallel", [], {"instances": par.instances}, loc=par.step._loc,
                          regions=regions))


def _isolated(blk: Block, items, fill) -> Region:
    """A region that runs on its own thread or workspace: it sees blobs, not outer SSA values."""
    needed = names_read(items)
    loc = getattr(items[0], "_loc", None) if items else None
    for name, v in blk.iters.items():
        if name in needed:  # a loop index read inside: pass it through its blob
            blk.create("store", [v], {"blob": Symbol(name)}, loc=loc)
            blk.ctx.note_store(name, v.type)
    blk.flush()
    region = Region()
    inner = Block(blk.ctx, region, scope=blk.scope)
    inner.depth = blk.depth + 1  # (a region all the same: it counts toward the nesting bound)
    fill(inner)
    inner.flush()
    return region
