"""Lowering a task group into a module: group -> tasks -> phases -> structured ops.

Blob types are found by a small fixpoint: a load's type is the join of every type
stored to that blob anywhere in the module (and of the value already in the
workspace); the module is lowered again until the loads agree.
"""
from __future__ import annotations

import functools
from collections import Counter

from dslc.ir import Module, Region, Symbol, make_op, verify
from dslc.ir.diagnostics import UNKNOWN_LOC, TraceError, VerifyError
from dslc.ir.types import ANY, join_into
from dslc.trace.steps import ExecutionStep
from dslc.trace.task import Task, TaskGroup, get_setup_nets

from .blocks import Block
from .nodes import warn_cross_node_writes
from .private import check_private_reads
from .queues import check_starved_dequeues
from .records import read_counts
from .steps import lower_seq, lower_step, lower_step_parts

MAX_ROUNDS = 6


class LowerContext:
    """What the lowering of one module shares: blob types, loop indices, If chains."""

    def __init__(self, assumed: dict, count_reads=Counter, protected=frozenset(), assumed_written=None,
                 created=frozenset()):
        self.assumed = assumed          # blob -> type to give its loads
        self.created = created          # blobs the workspace holds created but empty (read_state)
        self.assumed_written = assumed_written or {}  # blob -> type of what the module stores
        self._count_reads = count_reads  # () -> reads per blob (see read_counts)
        self._read_counts = None
        self.protected = protected      # task outputs: blobs whose final value is fetched
        self.stored: dict = {}          # blob -> join of the types stored to it so far
        self.loads: list = []           # (blob, load result, loc, after a store in this run)
        self.iter_names: dict = {}      # loop index blob -> the loop's location
        self.if_ran: dict = {}          # If chain -> SSA value "an earlier branch ran"
        self.opaque_writes = False      # a Python op with the workspace may write any blob
        self.ephemeral: set = set()     # blobs kept as SSA values only (If-chain conditions)
        self.branch_locals: dict = {}   # blob -> the block it is local to (IfNet, WhileNet, Do)
        self.stored_inside: dict = {}   # structured op -> the blobs stored in it (Block.forget)
        self.step_depth = 0             # execution steps being lowered, one inside the next
        self._tags = 0

    @property
    def read_counts(self) -> Counter:
        """How many times each blob is read in the whole group; counted when first asked
        (only If chains with Elif condition nets ask: most lowerings never walk for it)."""
        if self._read_counts is None:
            self._read_counts = self._count_reads()
        return self._read_counts

    def blob_type(self, name: str):
        """The type a load of ``name`` here gets.

        Once this run has stored to the blob (earlier in program order), a load sees
        what the run wrote, not what an earlier run left in the workspace.
        """
        if name in self.stored:
            t = self.assumed_written.get(name)
            return t if t is not None else self.stored[name]
        t = self.assumed.get(name)
        return t if t is not None else ANY

    def note_store(self, name: str, t) -> None:
        join_into(self.stored, name, t)

    def fresh_tag(self, kind: str) -> str:
        self._tags += 1
        return f"{kind}{self._tags}"


def lower_group(group: TaskGroup, source: str = "", existing: dict | None = None,
                check_reads: bool = True, created=frozenset()) -> Module:
    """The verified module for one run of ``group``.

    ``existing`` maps blobs already in the session's workspace to their types;
    ``created`` names those it holds empty (made by ``CreateBlob``, never written).
    ``check_reads``: a blob read that nothing writes is an error (net_printer.analyze
    turns that off to report such reads its own way).
    """
    existing = dict(existing or {})
    assumed = dict(existing)
    tasks = group.tasks()
    setup = _group_setup(group, tasks)
    counts = functools.cache(lambda: read_counts(_all_items(tasks, setup)))  # (shared by the rounds)
    protected = frozenset(n for t in tasks for n in t.output_names())
    written: dict = {}
    for _ in range(MAX_ROUNDS):
        ctx = LowerContext(assumed, counts, protected, written, frozenset(created))
        module = _lower(ctx, group, tasks, setup, source)
        final = dict(existing)
        for name, t in ctx.stored.items():
            join_into(final, name, t)
        want = {id(v): (ctx.stored if after else final).get(name, v.type)
                for name, v, _, after in ctx.loads}
        if all(v.type == want[id(v)] for _, v, _, _ in ctx.loads):
            break
        assumed, written = final, dict(ctx.stored)
    if check_reads:
        _check_reads(ctx, final)
        if not ctx.opaque_writes:
            check_private_reads(module, existing)
            check_starved_dequeues(module)
    # (a blob made empty by CreateBlob exists too: a private task's write reaches it, as in Caffe2)
    module.body.ops[0].attrs["existing"] = _existing_used(module, set(existing) | set(created))
    # lowering only makes ops (setting no more than the group's declared `existing` after)
    verify(module, built=True)
    warn_cross_node_writes(module)
    return module


def _existing_used(module: Module, existing: set) -> list:
    """The blobs of ``existing`` that the module loads or stores, sorted, as symbols."""
    if not existing:
        return []  # nothing to look for: skip the walk over every op
    used = {op.attrs["blob"] for op in module.walk() if op.name in ("load", "store", "flag")}
    return [Symbol(n) for n in sorted(used & set(existing))]


def _all_items(tasks, setup) -> list:
    """Every recorded item the group runs: all phases of all tasks, and the node setup."""
    items = list(setup[0]) + list(setup[1])
    for t in tasks:
        p = t.get_step().phases
        items += p.init + p.instance_init + p.reporters + ([p.body] if p.body else []) + \
            p.instance_exit + p.exit
    return items


def _group_setup(group: TaskGroup, tasks):
    """The node-level init/exit nets, collected once per group (setup objects are used once)."""
    if getattr(group, "_dslc_setup", None) is None:
        steps = [t.get_step() for t in tasks] + [s for _, s in group.report_steps()]
        group._dslc_setup = get_setup_nets(TaskGroup.LOCAL_SETUP, steps, group)
    return group._dslc_setup


def _check_reads(ctx: LowerContext, final: dict) -> None:
    if ctx.opaque_writes:
        return
    for name, _, loc, _ in ctx.loads:
        if name not in final and name not in ctx.created:  # (a created blob: the op reads it at run time)
            raise VerifyError(f"blob {name!r} is read here, but nothing writes it", loc,
                              "write it earlier in the job, or feed it into the workspace before running")


def _lower(ctx: LowerContext, group: TaskGroup, tasks, setup, source: str) -> Module:
    module = make_op("module", attrs={"source": source}, regions=[Region()])
    init, exit_ = setup
    node = tasks[0].node if tasks else "local"
    g = make_op("group", attrs={"node": node}, regions=[Region(), Region(), Region()])
    module.regions[0].append(g)
    for region, items in ((g.regions[0], init), (g.regions[2], exit_)):
        blk = Block(ctx, region)
        lower_seq(blk, items, in_loop=False)
        blk.flush()
    body = g.regions[1]
    reporters = group.report_steps()
    if reporters:
        regions = [Region()] + [Region() for _ in reporters]
        rep = make_op("reporting", attrs={"intervals_ms": [int(s._run_every_ms) for _, s in reporters]},
                      regions=regions)
        body.append(rep)
        for region, (_, step) in zip(regions[1:], reporters):
            blk = Block(ctx, region)
            lower_step_parts(blk, step, step._items)
            blk.flush()
        body = regions[0]
    for task in tasks:
        body.append(lower_task(ctx, task))
    return Module(module)


def lower_task(ctx: LowerContext, task: Task):
    step = task.get_step()
    p = step.phases
    attrs = {"name": task.name, "instances": step.num_instances,
             "workspace": task.workspace_type() or "private", "node": task.node,
             "outputs": [Symbol(n) for n in task.output_names()]}
    op = make_op("task", attrs=attrs, regions=[Region() for _ in range(5)], loc=task._loc or UNKNOWN_LOC)
    body_items = [] if p.body is None else [p.body]
    for region, items in zip(op.regions, (p.init, p.instance_init, body_items, p.instance_exit, p.exit)):
        blk = Block(ctx, region)
        try:
            if items is body_items and p.reporters:
                _lower_with_reporters(blk, p.body, p.reporters)
            else:
                lower_seq(blk, items, in_loop=False)
        except TraceError as e:
            if e.loc is None:
                e.loc = task._loc
            raise
        blk.flush()
    return op


def _lower_with_reporters(blk: Block, body, reporters) -> None:
    wrapper = ExecutionStep(f"{body.Name()}:body")
    wrapper._loc = body._loc
    for r in reporters:
        wrapper._items.append(r)
    wrapper._items.append(body)
    wrapper._kind = "substeps"
    lower_step(blk, wrapper)
