"""The race both compiling backends run against the interpreter (backends/common/race.py):
the samples, the verdict and its lines. The backends' own scheduling of the runs is tested
beside them (tests/backends/numba/test_trial.py, tests/backends/xla/test_xla.py)."""
from __future__ import annotations

import pytest

from dslc.backends.common.race import Race, median, noting, summary
from dslc.runtime.profile import OpProfile


@pytest.mark.parametrize("xs,want", [([3.0], 3.0), ([5.0, 1.0, 3.0], 3.0), ([4.0, 1.0, 3.0, 2.0], 2.5),
                                     ([0.25, 0.25], 0.25)])
def test_the_median_is_the_middle_sample_or_the_mean_of_the_middle_two(xs, want):
    assert median(xs) == want  # (by hand: sorted, the middle one; of an even count, the two middle ones' mean)


def test_the_first_compiled_run_is_not_counted_unless_alone():
    r = Race("r", 2)
    r.compiled.extend([9.0, 1.0, 3.0])  # the first (9.0, setting up) left out: median of 1 and 3
    assert r.compiled_done() and r.compiled_seconds() == 2.0
    alone = Race("r", 1)
    alone.compiled.append(4.0)
    assert not alone.compiled_done() and alone.compiled_seconds() == 4.0


@pytest.mark.parametrize("interp,kept", [([0.5, 0.5], "interpreter"), ([2.0, 2.0], "compiled"),
                                          ([1.0, 3.0], "compiled")])  # (2.0 each: a tie keeps the compiled code)
def test_the_compiled_code_is_kept_unless_its_median_is_slower(interp, kept):
    r = Race("a region", 2)
    r.compiled.extend([100.0, 2.0, 2.0])
    r.interp.extend(interp)
    assert r.interp_done() and r.judge() == kept and r.kept == kept


def test_the_verdicts_line_names_both_medians_and_what_was_kept():
    told = []
    r = Race("FC at job.py:3", 2, engine="xla", report=told.append)
    r.compiled.extend([1.0, 0.002, 0.004])
    r.interp.extend([0.001, 0.001])
    r.judge()
    assert told == []  # (reported only when told: outside the backend's locks)
    r.tell()
    assert told == [r]
    assert r.describe() == ("FC at job.py:3: xla 3.000 ms, interpreted 1.000 ms per run: "
                            "fell back to the interpreter")


def test_a_profile_hears_each_verdict_once():
    profile = OpProfile()
    r = Race("Relu at job.py:4", 1, report=noting(profile))
    r.compiled.extend([1.0, 0.001])
    r.interp.append(0.002)
    r.judge()
    r.tell()
    assert profile.notes == ["Relu at job.py:4: compiled 1.000 ms, interpreted 2.000 ms per run: kept compiled"]
    assert noting(None) is None


def test_the_summary_lists_fallbacks_first_then_what_is_pending():
    def race(label, compiled, interp, runs=1):
        r = Race(label, runs)
        r.compiled.extend(compiled)
        r.interp.extend(interp)
        if interp:
            r.judge()
        return r

    kept = race("a", [1.0, 0.001], [0.002])
    fell = race("b", [1.0, 0.003], [0.002])
    pending = race("c", [1.0], [])
    untimed = race("d", [], [], runs=0)  # (a race of no runs: the backend's setting turned it off)
    lines = summary([kept, fell, pending, untimed], "DSLC_X_TRIAL_RUNS")
    assert lines[0].startswith("b: ") and lines[0].endswith("fell back to the interpreter")
    assert lines[1].startswith("a: ") and lines[1].endswith("kept compiled")
    assert lines[2].startswith("1 region(s) not decided yet: each runs 1 times") and "DSLC_X_TRIAL_RUNS=0" in lines[2]
    assert len(lines) == 3
    assert summary([untimed], "DSLC_X_TRIAL_RUNS") == []
