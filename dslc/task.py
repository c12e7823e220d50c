"""Caffe2's ``task``: ``Task``, ``TaskGroup``, ``Node``, ``Cluster``, task outputs and
setup nets, what a job's work is recorded as. The tracer's (dslc/trace/task.py)."""
# ruff: noqa: F401  (the imports are re-exports)
from dslc import autodiff  # (nets recorded here can record their gradients)
from dslc.trace.task import (BareTask, BlobReference, Cluster, Node, SetupNets, Task, TaskGroup, TaskGroupError,
                             TaskOutput, TaskOutputList, TaskPhases, TaskStep, WorkspaceType, final_output,
                             get_setup_nets)

__all__ = ["Cluster", "Node", "SetupNets", "Task", "TaskGroup", "TaskOutput", "TaskOutputList",
           "WorkspaceType", "final_output", "get_setup_nets", "BlobReference"]
