"""Tasks, task groups, nodes and task outputs (Caffe2's ``task`` module).

A Task is a step plus its phases: task init/exit (once per run) and instance
init/exit (around each of ``num_instances`` concurrent copies of the body). The
phases are collected from ``ops.task_init()``-style blocks wherever they were
opened in the task's body, as Caffe2 does.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dslc.trace.context import DefaultManaged, Managed
from dslc.trace.blobref import BlobReference
from dslc.trace.net import Net
from dslc.trace.oprecord import DataType
from dslc.trace.records import from_blob_list
from dslc.trace.steps import ExecutionStep, Plan, execution_step, to_execution_step
from dslc.ir.diagnostics import UNKNOWN_LOC, DSLError, TraceError
from dslc.trace.builder_base import NetBuilder
from dslc.trace.tracing import user_location


class WorkspaceType:
    """PRIVATE: the task runs in a fresh child workspace; GLOBAL: in the node's workspace."""

    PRIVATE = "private"
    GLOBAL = "global"


class Cluster(DefaultManaged):
    """The nodes used so far, in first-use order, with their keyword arguments."""

    def __init__(self):
        self._nodes = []
        self._node_kwargs = {}

    def add_node(self, node):
        if str(node) not in self._nodes:
            self._nodes.append(str(node))
        self._node_kwargs[str(node)] = dict(self._node_kwargs.get(str(node), {}), **node.kwargs())

    def nodes(self):
        return self._nodes

    def node_kwargs(self):
        return self._node_kwargs

    def __repr__(self):
        return f"Cluster(nodes={self._nodes}, node_kwargs={self._node_kwargs})"


class Node(DefaultManaged):
    """A place tasks run: only its name matters (LocalSession runs every node locally)."""

    def __init__(self, node="local", **kwargs):
        self._name = str(node)
        self._kwargs = kwargs
        Cluster.current().add_node(self)

    def __str__(self):
        return self._name

    def __repr__(self):
        return f"Node(name={self._name}, kwargs={self._kwargs})"

    def kwargs(self):
        return self._kwargs


class SetupNets:
    """A generic setup object: ``init_nets`` run before, ``exit_nets`` after."""

    def __init__(self, init_nets=None, exit_nets=None):
        self.init_nets = init_nets
        self.exit_nets = exit_nets

    def setup(self, init_net):
        return self.init_nets

    def exit(self, exit_net):
        return self.exit_nets

    def __repr__(self):
        return f"SetupNets(init_nets={self.init_nets}, exit_nets={self.exit_nets})"


def get_setup_nets(key, steps_or_nets, target):
    """The init and exit nets/steps of the setup objects attached under ``key`` (each used once)."""
    return _setup_nets_of(key, _attached((key,), steps_or_nets)[key], target)


def _attached(keys, steps_or_nets) -> dict:
    """{key: the objects attached under it to ``steps_or_nets``, in order} for each of
    ``keys``, with one walk of each step's nets."""
    found = {k: [] for k in keys}
    for s in steps_or_nets:
        if hasattr(s, "attributes_by_key"):
            for k, objs in s.attributes_by_key(keys).items():
                found[k] += objs
        elif hasattr(s, "get_attributes"):
            for k in keys:
                found[k] += s.get_attributes(k)
    return found


def _setup_nets_of(key, objs, target):
    """``get_setup_nets`` for the setup objects ``objs`` found under ``key``."""
    init_net, exit_net = Net(key + "/init"), Net(key + "/exit")
    init_nets, exit_nets = [], []
    for obj in objs:
        if getattr(obj, "_setup_used", False):
            continue
        if getattr(obj, "_setup_target", target) is not target:
            continue
        for method, out, net in (("setup", init_nets, init_net), ("exit", exit_nets, exit_net)):
            if hasattr(obj, method):
                got = getattr(obj, method)(net)
                if isinstance(got, (list, tuple)):
                    out += got
                elif isinstance(got, (Net, ExecutionStep)):
                    out.append(got)
                elif got is not None:
                    raise TraceError(f"a setup object returned {type(got).__name__}; "
                                     "expected a Net, a step or a list of them")
                obj._setup_used = True
    if init_net._ops:
        init_nets.insert(0, init_net)
    if exit_net._ops:
        exit_nets.insert(0, exit_net)
    return init_nets, exit_nets


class TaskGroupError(TraceError, AssertionError):
    """A task that cannot join its TaskGroup (Caffe2 asserts there, so this is also an AssertionError).

    Found when the group is first used (run, lowered, printed or analyzed), located at the task."""


class TaskGroup(Managed):
    """Tasks that run concurrently; PRIVATE by default when you make the group yourself."""

    LOCAL_SETUP = "local_setup"

    def __init__(self, workspace_type=None):
        self._workspace_type = workspace_type
        self._tasks: list[Task] = []
        self._tasks_to_add: list[Task] = []
        self._already_used = False
        self._report_steps: list = []
        self._report_nets: dict = {}
        self._remote_nets: list = []

    def add(self, task):
        """Add ``task`` now: workspace types must agree; the task's step is frozen.

        A task without a type takes the group's (PRIVATE if the group has none); a
        group without a type takes its first task's.
        """
        if self._already_used:
            raise TaskGroupError(f"task {task.name} cannot be added to a TaskGroup that was already used",
                                 user_location(), "a group is fixed once it ran; put the task in a new TaskGroup")
        wt = task._workspace_type
        if self._workspace_type is not None and wt is not None and wt != self._workspace_type:
            raise TaskGroupError(f"a {wt} task ({task.name}) cannot join a {self._workspace_type} TaskGroup",
                                 task._loc, "give every task of a group the same workspace_type")
        if wt is None:
            task._workspace_type = self._workspace_type or WorkspaceType.PRIVATE
        if self._workspace_type is None:
            self._workspace_type = task._workspace_type
        task._notify_used()
        self._tasks.append(task)

    def tasks(self):
        """The group's tasks, adding pending ones first; the group counts as used afterwards."""
        while self._tasks_to_add:
            self.add(self._tasks_to_add[0])
            self._tasks_to_add.pop(0)  # only once added, so a failed add leaves it pending
        self._already_used = True
        return self._tasks

    def num_registered_tasks(self):
        return len(self._tasks_to_add) + len(self._tasks)

    def used_nodes(self):
        used = []
        for t in self._tasks + self._tasks_to_add:
            if t.node not in used:
                used.append(t.node)
        return used

    def report_step(self, step=None, node=None, interval_ms=1000):
        step = to_execution_step(step)
        step.RunEveryMillis(interval_ms)
        self._report_steps.append((str(node or Node.current()), step))

    def report_net(self, net=None, node=None, report_interval=5):
        node = str(node or Node.current())
        if node not in self._report_nets:
            self._report_nets[node] = (net or Net(f"{node}/reporter"), report_interval)
        elif net is not None:
            raise TraceError(f"node {node} already has a report net", user_location())
        return self._report_nets[node][0]

    def report_steps(self):
        steps = list(self._report_steps)
        for node, (net, interval) in self._report_nets.items():
            s = execution_step(f"{node}:report", net)
            s.RunEveryMillis(int(interval * 1000))
            steps.append((node, s))
        return steps

    def workspace_type(self):
        return self._workspace_type

    def add_remote_net(self, net):
        self._remote_nets.append(net)

    def remote_nets(self):
        return self._remote_nets

    def __repr__(self):
        return (f"TaskGroup(tasks={self._tasks + self._tasks_to_add}, "
                f"workspace_type={self._workspace_type}, remote_nets={self._remote_nets})")


class TaskOutput:
    """A blob (or list, or record) a task exports; ``fetch()`` after the run gives its value."""

    def __init__(self, names):
        self._schema = None
        if not isinstance(names, (str, BlobReference, list, tuple)) and hasattr(names, "field_blobs"):
            self._schema = names
            names = names.field_blobs()
        self._is_scalar = not isinstance(names, (list, tuple))
        self.names = [names] if self._is_scalar else list(names)
        self.loc = user_location()  # where a failed fetch is reported (final_output's line)
        for n in self.names:
            if not isinstance(n, (str, BlobReference)):
                raise TraceError(f"a task output is a blob (a BlobReference or a blob name), a list of them "
                                 f"or a record, got {type(n).__name__} {n!r}", self.loc,
                                 "to output a value, write it to a blob first, e.g. final_output(ops.Const(5))")
        self._values = None
        self._fetch_func = None

    def set(self, values, _fetch_func=None):
        if len(values) != len(self.names):
            raise TraceError(f"TaskOutput got {len(values)} values for {len(self.names)} names")
        self._values = values
        self._fetch_func = _fetch_func

    def _shape(self, vals):
        if self._schema is not None:
            return from_blob_list(self._schema, vals)
        return vals[0] if self._is_scalar else vals

    def get(self):
        if self._values is None:
            raise TraceError("this output has no value yet", user_location(), "run its task first")
        return self._shape(self._values)

    def fetch(self):
        if self._fetch_func is None:
            raise TraceError("this output cannot be fetched yet", user_location(),
                             "run its task with session.run(...) first")
        try:
            return self._shape([self._fetch_func(v) for v in self._values])
        except DSLError as e:  # e.g. nothing stored it: say so at the line that made the output
            if e.loc is None or e.loc == UNKNOWN_LOC:
                e.loc = self.loc
            raise

    def __repr__(self):
        return f"TaskOutput(names={self.names}, values={self._values})"


class TaskOutputList:
    """The outputs of one task, in order."""

    def __init__(self, outputs=None):
        self.outputs = outputs or []

    def names(self):
        return [n for o in self.outputs for n in o.names]

    def set_values(self, values, _fetch_func=None):
        offset = 0
        for o in self.outputs:
            o.set(values[offset:offset + len(o.names)], _fetch_func)
            offset += len(o.names)

    def __repr__(self):
        return f"TaskOutputList(outputs={self.outputs})"


@dataclass
class TaskPhases:
    """A task's phases, in run order (``Task.get_step()`` fills these in)."""

    init: list = field(default_factory=list)
    instance_init: list = field(default_factory=list)
    reporters: list = field(default_factory=list)
    body: ExecutionStep | None = None
    instance_exit: list = field(default_factory=list)
    exit: list = field(default_factory=list)


class TaskStep(ExecutionStep):
    """What ``Task.get_step()`` returns: a step that knows its task's phases."""

    def __init__(self, task, phases: TaskPhases):
        super().__init__(task.name)
        self.task = task
        self.phases = phases
        self.num_instances = task._num_instances or 1
        self._kind = "substeps"
        instance = (phases.instance_init + phases.reporters +
                    ([phases.body] if phases.body is not None else []) + phases.instance_exit)
        if self.num_instances > 1:
            # Nested in another step, the task runs as Caffe2 shapes it: each instance in
            # a workspace of its own, all of them at once. (A task run directly is
            # lowered from its phases, not from these items.)
            one = execution_step(f"{task.name}:instance", instance, create_workspace=True)
            instance = [execution_step(f"{task.name}:parallel", [one],
                                            num_concurrent_instances=self.num_instances)]
        self._items = phases.init + instance + phases.exit
        self._used = True


class Task(Managed):
    """A unit of work on a node: a step, its setup phases, its outputs, its instance count."""

    TASK_SETUP = "task_setup"
    TASK_INSTANCE_SETUP = "task_instance_setup"
    REPORT_STEP = "report_step"
    bare = False  # True: no dummy output when it has none (see BareTask)
    _global_names_used: set = set()

    def __init__(self, step=None, outputs=None, workspace_type=None, group=None, node=None, name=None,
                 num_instances=None):
        self._loc = user_location()
        if not name and isinstance(step, ExecutionStep):
            name = step.Name()
        if not name:
            name = "task"
        if node is not None and not isinstance(node, Node):
            node = Node(node)
        self.node = str(Node.current(node))
        self.group = TaskGroup.current(group, required=False)
        self.name = Task._next_name(self.node, self.group, name)
        if num_instances is not None and (isinstance(num_instances, bool) or not isinstance(num_instances, int)
                                          or num_instances < 1):
            raise TraceError(f"num_instances must be an int >= 1 (how many copies of the task run "
                             f"concurrently), got {num_instances!r}", self._loc,
                             "leave it out (or give 1) to run the task once")
        self._num_instances = num_instances
        self._workspace_type = workspace_type
        self._step = None
        self._step_with_setup = None
        self._outputs: list[TaskOutput] = []
        self._already_used = False
        if self.group is not None:
            self.group._tasks_to_add.append(self)
        if step is not None:
            self.set_step(step)
        if outputs is not None:
            self.add_outputs(outputs)

    @staticmethod
    def _next_name(node, group, name):
        base = f"{node}/{name}"
        used = Task._global_names_used if group is None else {t.name for t in group._tasks_to_add}
        cur, i = base, 0
        while cur in used:
            i += 1
            cur = f"{base}:{i}"
        return cur

    def __enter__(self):
        if self._step is not None:
            raise TraceError("this Task already has a step", user_location())
        outer = Task.current(required=False)
        if outer is not None:  # its ops would run in another workspace than the outer task's blobs
            raise TraceError(f"a Task cannot be opened inside another Task ({outer.name!r}, opened at "
                             f"{outer._loc})", user_location(),
                             "close the outer Task first: put both in one TaskGroup, one after the other, "
                             "or use ops.loop / ops.If / nets for structure inside one task")
        super().__enter__()
        if self.group is not None and self in self.group._tasks_to_add:
            self.group._tasks_to_add.remove(self)
        self._builder = NetBuilder(_fullname=self.name)
        self._builder._loc = self._loc
        self._builder.__enter__()
        return self

    def __exit__(self, etype, *args):
        try:
            self._builder.__exit__(etype, *args)
        finally:
            super().__exit__(etype, *args)
        if etype is None:
            self.set_step(self._builder)
            if self.group is not None:
                self.group._tasks_to_add.append(self)
        self._builder = None
        return False

    def set_step(self, step):
        if self._already_used:
            raise TraceError("a Task cannot change after it ran", user_location())
        self._step = to_execution_step(step)

    def workspace_type(self):
        return self._workspace_type

    def num_instances(self):
        return self._num_instances

    def _assert_not_used(self):
        if self._already_used:
            raise TraceError(f"outputs cannot be added to task {self.name} after it ran", user_location())

    def add_output(self, output):
        self._assert_not_used()
        if not isinstance(output, TaskOutput):
            output = TaskOutput(output)
        self._outputs.append(output)
        return output

    def add_outputs(self, outputs):
        self._assert_not_used()
        if isinstance(outputs, (list, tuple)):
            return [self.add_output(o) for o in outputs]
        return self.add_output(outputs)

    def outputs(self):
        return self._outputs

    def output_names(self):
        return [str(n) for o in self._outputs for n in o.names]

    def output_list(self):
        return TaskOutputList(self._outputs)

    def _notify_used(self):
        self.get_step()
        self._already_used = True

    def get_step(self) -> TaskStep:
        """The task's phases, collected once (adds the dummy output of output-less tasks)."""
        if self._step_with_setup is not None:
            return self._step_with_setup
        phases = TaskPhases()
        if self._step is not None:
            # one walk of the step's nets finds the reporters and both kinds of setup objects
            setup_keys = (Task.TASK_SETUP, Task.TASK_INSTANCE_SETUP)
            found = self._step.attributes_by_key((Task.REPORT_STEP,) + setup_keys)
            reporters = [s for s in found[Task.REPORT_STEP] if not getattr(s, "_report_step_used", False)]
            for s in reporters:
                s._report_step_used = True
                if not s._run_every_ms:
                    s.RunEveryMillis(1000)
            roots = [self._step] + reporters
            for k, objs in _attached(setup_keys, reporters).items():
                found[k] += objs
            phases.init, phases.exit = _setup_nets_of(Task.TASK_SETUP, found[Task.TASK_SETUP], self)
            if found[Task.TASK_SETUP]:  # setup code ran: it may have attached more objects
                found = _attached(setup_keys, roots)
            phases.instance_init, phases.instance_exit = _setup_nets_of(
                Task.TASK_INSTANCE_SETUP, found[Task.TASK_INSTANCE_SETUP], self)
            phases.reporters = reporters
            phases.body = self._step
            if not self._outputs and not self.bare:
                out_net = Net(f"{self.name}:output")
                self.add_output(out_net.ConstantFill([], 1, dtype=DataType.INT32, value=0))
                phases.exit.append(out_net)
        self._step_with_setup = TaskStep(self, phases)
        return self._step_with_setup

    def __repr__(self):
        return f"Task(name={self.name}, node={self.node}, outputs={self._outputs})"


class BareTask(Task):
    """A task the workspace functions run a net or plan in: Caffe2 runs those without a
    task, so no dummy output blob is made when it has no outputs."""

    bare = True


def final_output(blob_or_record):
    """Export a blob from the current Task (or a new step-less one): fetchable after the run."""
    task = Task.current(required=False)
    if task is None:  # (as Caffe2: a step-less task of its own, in the current group)
        task = Task()
        task.made_by_final_output = True
    return task.add_output(blob_or_record)


def wrap_runnable(runnable, workspace_type, task_type=Task) -> TaskGroup:
    """A new TaskGroup running ``runnable`` (GLOBAL unless ``workspace_type`` says otherwise)
    in a ``task_type`` task (unless it is a Task itself)."""
    if isinstance(runnable, TaskGroup):
        if workspace_type is not None and runnable.workspace_type() not in (None, workspace_type):
            raise TraceError(f"this TaskGroup is {runnable.workspace_type()}, not {workspace_type}",
                             user_location(), "drop workspace_type, or make the group with that type")
        if workspace_type is not None and runnable.workspace_type() is None:
            runnable._workspace_type = workspace_type
        return runnable
    if isinstance(runnable, (list, tuple, dict, set)):
        raise TraceError(f"cannot run a {type(runnable).__name__}", user_location(),
                         "put the nets in a Task or an execution_step first")
    group = TaskGroup(workspace_type=workspace_type or WorkspaceType.GLOBAL)
    if isinstance(runnable, Task):
        group.add(runnable)
    elif isinstance(runnable, ExecutionStep):
        task_type(step=runnable, group=group)
    elif isinstance(runnable, Plan):
        steps = runnable.Steps()
        task_type(step=steps[0] if len(steps) == 1 else execution_step(runnable.Name(), steps), group=group)
    elif isinstance(runnable, (Net, NetBuilder)):
        task_type(step=execution_step("runnable", runnable), group=group)
    elif type(runnable).__name__ == "Job":
        raise TraceError("a Job is run by a JobRunner", user_location(), "use JobRunner(job)(session)")
    else:
        raise TraceError(f"cannot run a {type(runnable).__name__}", user_location(),
                         "run a Task, TaskGroup, Net, ExecutionStep or Plan")
    return group


__all__ = ["Cluster", "Node", "SetupNets", "Task", "TaskGroup", "TaskOutput", "TaskOutputList",
           "WorkspaceType", "final_output", "get_setup_nets", "BlobReference"]
