"""Caffe2's own tests on dslc: how many of those that pass on the real Caffe2 pass here.

Caffe2's Python tests ship in its site-packages (``caffe2/python/...``). This script copies a
fixed list of them from a Caffe2 install into a fresh temporary folder outside any checkout,
renames their imports (``caffe2.python`` -> ``dslc``, ``caffe2.proto`` -> ``dslc.proto``, the
``operator_test`` helper modules they import from each other -> local copies), runs each file
alone with pytest under limits of CPU time (per file and per test, so a loaded machine slows the
count without failing tests) and of wall time (for a test that blocks), and writes one JSON of
outcomes per test. The tests are never copied into the repository.

    # the reference: the files as shipped, on the real Caffe2
    python bench/caffe2_tests.py run --caffe2-python /tmp/caffe2-venv/bin/python --on-caffe2 --out c2.json
    # dslc (the python that runs this script, unless --python), interp or numba
    python bench/caffe2_tests.py run --caffe2-python /tmp/caffe2-venv/bin/python --out interp.json
    python bench/caffe2_tests.py run --caffe2-python ... --backend numba --out numba.json
    # counts over the tests that pass on Caffe2, per file; the tests that changed between two runs
    python bench/caffe2_tests.py compare c2.json interp.json [later.json]

``--tier 1`` (the job layer) or ``--tier 2`` (model and operator layer, the default) picks the
file list; ``--only f1 f2`` a subset. Caffe2's "dev" hypothesis profile (10 examples, 10 s
deadline) applies unless ``--max-examples N`` caps examples (and turns deadlines, health checks,
shrinking and explaining off: outcomes only; ``--deadlines`` keeps the deadlines, to count
the tests a deadline fails).
Never part of CI: it takes an hour per tier on two cores.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

# tier 1: the job layer (tasks, plans, readers, checkpoints, net building)
TIER1 = """core_test net_builder_test control_test dataio_test checkpoint_test session_test
net_printer_test schema_test context_test task_test pipeline_test""".split()
# the job layer's operator tests (datasets, record queues, text readers): issue 15's harness counted them
TIER1_OPERATORS = """dataset_ops_test record_queue_test text_file_reader_test""".split()
# tier 2: models, gradients, optimizers, workspace, Python ops, layers, and operator tests
TIER2_MODEL = """brew_test core_gradients_test gradient_check_test hypothesis_test model_helper_test
optimizer_test python_op_test regularizer_test scope_test workspace_test utils_test db_test
memonger_test data_workers_test parallel_workers_test toy_regression_test control_ops_grad_test
data_parallel_model_test layers_test functional_test tt_core_test
lengths_reducer_rowwise_8bit_ops_test""".split()
TIER2_OPERATORS = """elementwise_ops_test elementwise_op_broadcast_test elementwise_logical_ops_test
elementwise_linear_op_test activation_ops_test fc_operator_test matmul_op_test reduce_ops_test
reduction_ops_test softmax_ops_test cross_entropy_ops_test concat_split_op_test reshape_ops_test
gather_ops_test segment_ops_test momentum_sgd_test adagrad_test adam_test conv_test pooling_test
spatial_bn_op_test dropout_op_test filler_ops_test utility_ops_test transpose_op_test loss_ops_test
clip_op_test cast_op_test one_hot_ops_test recurrent_network_test load_save_test counter_ops_test
learning_rate_op_test flatten_op_test instance_norm_test pad_test""".split()
# operator_test modules the tests import from one another (copied, never run themselves)
HELPERS = ["operator_test/adagrad_test_helper.py"]


def files_of(tier: int) -> list[str]:
    if tier == 1:
        return [f"{m}.py" for m in TIER1] + [f"operator_test/{m}.py" for m in TIER1_OPERATORS]
    return [f"{m}.py" for m in TIER2_MODEL] + [f"operator_test/{m}.py" for m in TIER2_OPERATORS]


def to_dslc(text: str) -> str:
    text = re.sub(r"\bcaffe2\.python\.operator_test\.(\w+)", r"\1", text)
    text = re.sub(r"\bcaffe2\.python\b", "dslc", text)
    return re.sub(r"\bcaffe2\.proto\b", "dslc.proto", text)


# The conftest written beside the copies: the options Caffe2's serialized-test helper adds,
# a per-test alarm, a cap on examples, and each outcome appended to $C2T_RESULTS as JSON.
CONFTEST = r'''
import json, os, signal, time
import pytest

_RESULTS = os.environ.get("C2T_RESULTS")
_LIMIT = float(os.environ.get("C2T_TEST_TIMEOUT", "120"))  # CPU seconds of this process per test
_WALL = float(os.environ.get("C2T_TEST_WALL", "600"))  # wall seconds (a test blocked, using no CPU)
_MAX = os.environ.get("C2T_MAX_EXAMPLES")
_DEADLINES = os.environ.get("C2T_DEADLINES") == "1"  # keep each test's deadline when capping examples
_state = {}


def _write(rec):
    if _RESULTS:
        with open(_RESULTS, "a") as f:
            f.write(json.dumps(rec) + "\n")


def pytest_addoption(parser):
    parser.addoption("-G", "--generate-serialized", action="store_true", dest="generate")
    parser.addoption("-O", "--output", default=None, dest="output")
    parser.addoption("-D", "--disable-serialized-check", action="store_true", dest="disable")
    parser.addoption("-C", "--disable-gen-coverage", action="store_true", dest="disable_coverage")


def pytest_configure(config):
    try:
        import caffe2.python.serialized_test.serialized_test_util as serial
    except Exception:
        return
    ctx = getattr(serial, "_output_context", None)
    if ctx is not None:
        ctx.should_generate_output = config.getoption("generate", default=False)
        ctx.output_dir = config.getoption("output", default=None) or getattr(serial, "DATA_DIR", "")
        ctx.disable_serialized_check = config.getoption("disable", default=False)
        ctx.disable_gen_coverage = config.getoption("disable_coverage", default=False)


class TestTimeout(BaseException):
    """Raised by the alarm (a BaseException, so hypothesis does not shrink on it)."""


def _alarm(signum, frame):
    if signum == signal.SIGPROF:
        raise TestTimeout(f"used more than {_LIMIT:.0f} s of CPU")
    raise TestTimeout(f"ran past {_WALL:.0f} s (wall clock)")


def _cap(fn, n):
    from hypothesis import HealthCheck, Phase, settings
    seen = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        fn = getattr(fn, "__func__", fn)
        s = fn.__dict__.get("_hypothesis_internal_use_settings") if hasattr(fn, "__dict__") else None
        if s is not None:
            # (the health checks that time data generation fail on a loaded machine, not on the code;
            # no shrink or explain phase: a count needs pass or fail, and shrinking reruns the test
            # hundreds of times, under a tracer when explaining: adam_test's numpy-2 failure in its
            # reference spent over an hour there)
            fn._hypothesis_internal_use_settings = settings(s, max_examples=min(s.max_examples, n),
                                                            deadline=s.deadline if _DEADLINES else None,
                                                            suppress_health_check=list(HealthCheck),
                                                            phases=[Phase.explicit, Phase.reuse, Phase.generate])
        fn = getattr(fn, "__wrapped__", None)


def pytest_collection_modifyitems(session, config, items):
    for it in items:
        _write({"event": "collected", "id": it.nodeid})
        if _MAX:
            _cap(getattr(it, "obj", None), int(_MAX))


def pytest_collectreport(report):
    if report.failed:
        _write({"event": "collect_error", "id": report.nodeid, "error": str(report.longrepr)[-4000:]})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _write({"event": "start", "id": item.nodeid})
    old = signal.signal(signal.SIGALRM, _alarm), signal.signal(signal.SIGPROF, _alarm)
    signal.setitimer(signal.ITIMER_PROF, _LIMIT)
    signal.setitimer(signal.ITIMER_REAL, _WALL)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old[0])
        signal.signal(signal.SIGPROF, old[1])


def pytest_runtest_logreport(report):
    st = _state.setdefault(report.nodeid, {"outcome": "passed", "error": "", "duration": 0.0})
    st["duration"] += report.duration
    if report.failed:
        st["outcome"] = "failed" if report.when == "call" else "error-" + report.when
        st["error"] = (st["error"] + "\n" + str(report.longrepr))[-4000:]
    elif report.skipped and st["outcome"] == "passed":
        st["outcome"] = "skipped"
        st["error"] = str(report.longrepr)[-500:]
    if report.when == "teardown":
        _write({"event": "result", "id": report.nodeid, **st})
'''


def site_packages(caffe2_python: str) -> str:
    out = subprocess.run([caffe2_python, "-c", "import caffe2.python, os; print(os.path.dirname(caffe2.python.__file__))"],
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"{caffe2_python} cannot import caffe2.python: {out.stderr.strip()[-500:]}")
    return out.stdout.strip()


def prepare(folder: str, source: str, files: list[str], on_caffe2: bool) -> None:
    convert = (lambda t: t) if on_caffe2 else to_dslc
    for rel in files + HELPERS:
        with open(os.path.join(source, rel)) as f:
            text = f.read()
        with open(os.path.join(folder, os.path.basename(rel)), "w") as f:
            f.write(convert(text))
    with open(os.path.join(folder, "conftest.py"), "w") as f:
        f.write(convert(CONFTEST))
    with open(os.path.join(folder, "pytest.ini"), "w") as f:
        f.write("[pytest]\naddopts = -p no:cacheprovider -p no:xdist --tb=native\n")


def cpu_limit(seconds: int):
    """A preexec_fn: the file's processes get ``seconds`` of CPU each (SIGXCPU ends one past it)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 15))
    return limit


def collate(jsonl: str) -> dict:
    tests = {}
    if not os.path.exists(jsonl):
        return tests
    for line in open(jsonl):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        event, tid = r.pop("event"), r.pop("id", None)
        if event == "collected":
            tests.setdefault(tid, {"outcome": "not-run", "error": "", "duration": 0.0})
        elif event == "start":
            tests[tid] = {"outcome": "killed", "error": "the file's timeout or a crash ended it here", "duration": 0.0}
        elif event == "result":
            tests[tid] = r
        elif event == "collect_error":
            tests[tid + "::<collect>"] = {"outcome": "collect-error", "error": r["error"], "duration": 0.0}
    return tests


def run(args) -> None:
    source = site_packages(args.caffe2_python)
    python = args.caffe2_python if args.on_caffe2 else (args.python or sys.executable)
    files = files_of(args.tier)
    if args.only:
        files = [f for f in files if os.path.basename(f) in args.only or os.path.basename(f)[:-3] in args.only]
    folder = tempfile.mkdtemp(prefix="caffe2-tests-")
    prepare(folder, source, files, args.on_caffe2)
    jsonl = os.path.join(folder, "results.jsonl")
    env = dict(os.environ, C2T_RESULTS=jsonl, C2T_TEST_TIMEOUT=str(args.test_timeout), C2T_TEST_WALL=str(args.test_wall),
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    if args.backend:
        env["DSLC_BACKEND"] = args.backend
    if args.max_examples:
        env["C2T_MAX_EXAMPLES"] = str(args.max_examples)
    if args.deadlines:
        env["C2T_DEADLINES"] = "1"
    meta = {"python": python, "on_caffe2": args.on_caffe2, "backend": args.backend or "interp", "tier": args.tier,
            "max_examples": args.max_examples, "deadlines": args.deadlines or not args.max_examples, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    per_file = {}
    for rel in files:
        name = os.path.basename(rel)
        t0 = time.time()
        p = subprocess.run(["timeout", "-k", "15", str(args.file_wall), python, "-m", "pytest", name],
                           cwd=folder, env=env, capture_output=True, text=True, preexec_fn=cpu_limit(args.file_timeout))
        per_file[name] = {"rc": p.returncode, "seconds": round(time.time() - t0, 1), "tail": (p.stdout + p.stderr)[-2000:]}
        tests = collate(jsonl)
        mine = [v for k, v in tests.items() if k.split("::")[0] == name]
        print(f"{time.strftime('%H:%M:%S')} {name}: {sum(v['outcome'] == 'passed' for v in mine)}/{len(mine)} passed "
              f"({per_file[name]['seconds']} s)", flush=True)
        with open(args.out + ".tmp", "w") as f:
            json.dump({"meta": meta, "files": per_file, "tests": tests}, f, indent=1, sort_keys=True)
        os.replace(args.out + ".tmp", args.out)
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)


def passed(run_: dict) -> set:
    return {k for k, v in run_["tests"].items() if v["outcome"] == "passed"}


def compare(args) -> None:
    runs = []
    for path in [args.caffe2] + args.runs:
        with open(path) as f:
            runs.append(json.load(f))
    ref = passed(runs[0])
    print(f"Caffe2 ({args.caffe2}): {len(ref)} pass")
    got = [passed(r) & ref for r in runs[1:]]
    for path, g in zip(args.runs, got):
        print(f"{path}: {len(g)} of {len(ref)}")
    print(f"\n{'file':45s} {'caffe2':>6s} " + " ".join(f"{'run' + str(i + 1):>5s}" for i in range(len(got))))
    for name in sorted({k.split("::")[0] for k in ref}):
        n = sum(k.split("::")[0] == name for k in ref)
        print(f"{name:45s} {n:6d} " + " ".join(f"{sum(k.split('::')[0] == name for k in g):5d}" for g in got))
    last = runs[-1]["tests"]
    missing = sorted(ref - got[-1])
    print(f"\n{len(missing)} pass on Caffe2 and not in {args.runs[-1]}:")
    for k in missing:
        t = last.get(k, {"outcome": "absent", "error": ""})
        lines = [ln for ln in t["error"].strip().splitlines() if ln.strip()]
        print(f"  {k}: {t['outcome']}: {lines[-1][:args.width] if lines else ''}")
    if len(got) > 1:
        lost = sorted(got[-2] - got[-1])
        print(f"\n{len(lost)} passed in {args.runs[-2]} and not in {args.runs[-1]}: " + " ".join(lost))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the tests, write outcomes as JSON")
    r.add_argument("--caffe2-python", required=True, help="a python that imports the real caffe2 (its tests are read there)")
    r.add_argument("--python", help="the python that runs dslc (default: this one)")
    r.add_argument("--on-caffe2", action="store_true", help="run the files as shipped on the real Caffe2")
    r.add_argument("--out", required=True)
    r.add_argument("--tier", type=int, choices=(1, 2), default=2)
    r.add_argument("--only", nargs="*", help="file names (conv_test or conv_test.py)")
    r.add_argument("--backend", help="DSLC_BACKEND (default interp)")
    r.add_argument("--max-examples", type=int, help="cap hypothesis examples (deadlines off)")
    r.add_argument("--deadlines", action="store_true",
                   help="with --max-examples, keep each test's hypothesis deadline (Caffe2's profile: 10 s)")
    r.add_argument("--test-timeout", type=float, default=120, help="CPU seconds per test")
    r.add_argument("--test-wall", type=float, default=600, help="wall seconds per test")
    r.add_argument("--file-timeout", type=int, default=1800, help="CPU seconds per file")
    r.add_argument("--file-wall", type=float, default=7200, help="wall seconds per file")
    r.add_argument("--keep", action="store_true", help="keep the temporary folder of copies")
    c = sub.add_parser("compare", help="counts over the tests that pass on Caffe2")
    c.add_argument("caffe2", help="the run on Caffe2")
    c.add_argument("runs", nargs="+", help="dslc runs; the last is listed in detail")
    c.add_argument("--width", type=int, default=160)
    args = ap.parse_args(argv)
    run(args) if args.cmd == "run" else compare(args)


if __name__ == "__main__":
    main()
