"""The nested-loop workload at n=2000 as a job file (hot enough for the numba backend to
compile). Expected: the four totals of bench/loops.py's loops_py(2000)."""
import sys
import os

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from loops import build  # noqa: E402


def build_job():
    task, outs = build(2000)
    return dict(zip(("total", "large", "small", "tiny"), outs))
