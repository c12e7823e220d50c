"""Check the control-op program evaluator (tests/random/programs_control.py) against the real Caffe2.

tests/random/test_random_control.py holds dslc to what that evaluator computes; this script
holds the evaluator to what Caffe2 does: it draws N programs and runs each on Caffe2's
own If/While/Do operators (``NetBuilder(_use_control_ops=True)`` and ``workspace.RunNetOnce``,
or a plain ``NetBuilder()`` as a plan's step), comparing every output blob and that the
branch-local blobs are gone afterwards.

It needs the reference Caffe2 (../shared/tools/caffe2-ref: torch 1.10.2's caffe2.python in
its own venv) and is never part of CI:

    /tmp/caffe2-venv/bin/python bench/caffe2_control_check.py [--examples 300] [--seed N]

Exit status 0 when every program agreed; otherwise it prints the first that did not.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "random"))

import programs_control as C  # noqa: E402


def run_on_caffe2(p):
    from caffe2.python import core, net_builder, workspace
    workspace.ResetWorkspace()
    for name, value in C.inputs(p).items():
        workspace.FeedBlob(name, value)
    built = C.build(p, net_builder)
    if p.control_ops:
        workspace.RunNetOnce(built)
    else:
        plan = core.Plan("control")
        plan.AddStep(core.to_execution_step(built))
        workspace.RunPlan(plan)
    got = {n: int(workspace.FetchBlob(n)) for n in C.outputs(p)}
    present = [n for n in C.evaluate(p)[1] if workspace.HasBlob(n)]
    return got, present


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from hypothesis import HealthCheck, given, seed, settings

    stats = {"programs": 0, "ifs": 0, "whiles": 0, "deepest": 0}

    @seed(args.seed)
    @settings(max_examples=args.examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(C.programs())
    def check(p):
        want, absent = C.evaluate(p)
        got, present = run_on_caffe2(p)
        stats["programs"] += 1
        text = C.render(p)
        stats["ifs"] += text.count("IfNet")
        stats["whiles"] += text.count("WhileNet")
        assert got == want and not present, \
            f"\n{text}\nCaffe2: {got}, still there: {present}\nevaluator: {want}, absent: {absent}"

    try:
        check()
    except AssertionError as e:
        print(f"DISAGREE after {stats['programs']} programs: {e}")
        return 1
    print(f"{stats['programs']} programs agreed with Caffe2 ({stats['ifs']} IfNets, {stats['whiles']} WhileNets)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
