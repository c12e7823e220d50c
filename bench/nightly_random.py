"""The nightly-style run of our own generators, with a larger budget than CI's.

Runs the random-program tests (tests/random/test_random_*.py: every backend, both
pipelines, the IR text, tensor gradients against finite differences, convolutions in groups
and every legacy_pad mode, transposed convolutions and pooling against their values by
definition, lookups at negative and edge ids, If/While nets nested every way, recurrent
stacks set by Caffe2's parameter names and optimizer options against numpy) with
DSLC_HYPOTHESIS_EXAMPLES random examples each (not derandomized: each night draws new
ones), and the IR mutation fuzzer (tests/random/test_ir_fuzz.py) with DSLC_FUZZ_MUTANTS mutants from a new seed. Prints, per test, how many examples ran and
whether one failed (hypothesis then prints the shrunk program, and stores it in .hypothesis/
so the next run tries it first).

Usage: python bench/nightly_random.py [--examples 500] [--mutants 5000] [--seed N]
Exit status: 0 when everything passed, 1 otherwise.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = ["-m", "random", "tests"]  # tests/random/ (the generators' tests, the IR fuzzer) and the like elsewhere


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", type=int, default=500, help="hypothesis examples per test")
    ap.add_argument("--mutants", type=int, default=5000, help="IR mutants for the fuzzer")
    ap.add_argument("--seed", type=int, default=None, help="the fuzzer's seed (default: random)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    env = dict(os.environ, DSLC_HYPOTHESIS_EXAMPLES=str(args.examples),
               DSLC_FUZZ_MUTANTS=str(args.mutants), DSLC_FUZZ_SEED=str(seed))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest",
                           "--hypothesis-show-statistics", *TESTS], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    out = done.stdout
    print(f"examples per test: {args.examples}; fuzzer: {args.mutants} mutants, seed {seed}; "
          f"{time.perf_counter() - start:.0f} s")
    for name, passing, failing in statistics(out):
        print(f"  {name}: {passing} examples passed, {failing} failed")
    results = [ln for ln in out.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    print(results[-1] if results else done.stderr.strip()[-500:])
    if done.returncode != 0:
        print(out[-20000:])
    return 0 if done.returncode == 0 else 1


def statistics(out: str) -> list:
    """(test, passing, failing) from hypothesis's statistics, summed over its phases (each
    phase says "- N passing, M failing, ..."; older releases said "N passing examples")."""
    rows = []
    for block in re.split(r"^(?=\S+::test_\S+:$)", out, flags=re.MULTILINE):
        head = re.match(r"(\S+::(test_\S+)):$", block, re.MULTILINE)
        if head is None:
            continue
        counts = re.findall(r"- (\d+) passing(?: examples)?, (\d+) failing", block)
        rows.append((head.group(2), sum(int(p) for p, _ in counts), sum(int(f) for _, f in counts)))
    return rows


if __name__ == "__main__":
    sys.exit(main())
