"""Shape-generic compiles: a created net fed other sizes compiles once more with the dims
that changed unknown (``?``), and every later size reuses that compile (dslc/driver/variants.py).

Each run's answer is checked against numpy; the compiles are counted by the session
(``LocalSession.compiles``: one per lowering of the net).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from dslc import core, workspace
from dslc.driver import runner
from dslc.driver.variants import MAX_VARIANTS
from dslc.ir.diagnostics import DSLTypeError
from dslc.ir.printer import print_module


@pytest.fixture
def on(backend, monkeypatch):
    """RunNet's session runs on ``backend`` (created nets use the default backend)."""
    monkeypatch.setenv("DSLC_BACKEND", backend)
    return backend


def _session():
    return runner.current().session()


def _bags(table, ids, lengths):
    """SparseLengthsSum by hand: each bag's rows added (in float64)."""
    out, at = np.zeros((len(lengths), table.shape[1])), 0
    for b, n in enumerate(lengths):
        for i in ids[at:at + n]:
            out[b] += table[i]
        at += n
    return out


def _feed_bags(rng, n_ids, bags=8, rows=50):
    lengths = rng.multinomial(n_ids, np.ones(bags) / bags).astype(np.int32)
    ids = rng.integers(0, rows, n_ids).astype(np.int64)
    workspace.FeedBlob("ids", ids)
    workspace.FeedBlob("lengths", lengths)
    return ids, lengths


def test_sls_over_a_thousand_random_sizes_compiles_twice(on):
    rng = np.random.default_rng(0)
    table = rng.standard_normal((50, 4)).astype(np.float32)
    workspace.FeedBlob("table", table)
    _feed_bags(rng, 40)
    net = core.Net("sls")
    net.SparseLengthsSum(["table", "ids", "lengths"], "out")
    workspace.CreateNet(net)
    for k in range(1000):
        ids, lengths = _feed_bags(rng, int(rng.integers(1, 80)))
        workspace.RunNet("sls")
        if k % 97 == 0 or k == 999:  # (numpy's answer, by hand, for a sample of the calls)
            np.testing.assert_allclose(workspace.FetchBlob("out"), _bags(table, ids, lengths), rtol=1e-5, atol=1e-5)
    # the sizes of the first run, then one compile with the id count unknown for all the rest
    assert _session().compiles == 2


def test_the_recompile_leaves_only_the_changed_dim_unknown(on):
    workspace.FeedBlob("table", np.ones((10, 4), np.float32))
    workspace.FeedBlob("ids", np.arange(5, dtype=np.int64))
    workspace.FeedBlob("lengths", np.array([2, 3], np.int32))
    net = core.Net("sls")
    net.SparseLengthsSum(["table", "ids", "lengths"], "out")
    workspace.CreateNet(net)
    workspace.RunNet("sls")
    workspace.FeedBlob("ids", np.arange(7, dtype=np.int64))
    workspace.FeedBlob("lengths", np.array([3, 4], np.int32))
    workspace.RunNet("sls")
    np.testing.assert_array_equal(workspace.FetchBlob("out"), [[3] * 4, [4] * 4])
    s = _session()
    (got,) = s._compiled.values()
    loads = [line.strip() for line in print_module(got.module, with_locs=False).splitlines() if "load" in line]
    assert loads == ['%table = load @"table" : f32[10,4]', '%ids = load @"ids" : i64[?]',
                     '%lengths = load @"lengths" : i32[2]']
    assert s.compiles == 2


def test_a_new_dtype_is_a_variant_of_its_own_and_an_old_one_is_reused(on):
    workspace.FeedBlob("x", np.array([1, -2, 3], np.float32))
    net = core.Net("relu")
    net.Relu(["x"], "y")
    workspace.CreateNet(net)
    runs = [np.array([1, -2, 3], np.float32), np.array([-1, 2, -3, 4], np.float32),  # f32[3], then f32[?]
            np.array([5, -6], np.float64),                                              # f64[2]: new dtype
            np.array([-7, 8, 9, -1, 2], np.float32),                                     # f32[?] again
            np.array([[1, -1]], np.float32)]                                             # rank 2: new variant
    for x in runs:
        workspace.FeedBlob("x", x)
        workspace.RunNet("relu")
        y = workspace.FetchBlob("y")
        assert y.dtype == x.dtype
        np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert _session().compiles == 4  # f32[3], f32[?], f64[2], f32[1,2]; the fourth run compiled nothing


def test_a_runnable_keeps_a_bounded_number_of_variants(on):
    workspace.FeedBlob("x", np.ones(2, np.float32))  # (the compile CreateNet makes: rank 1's)
    net = core.Net("neg")
    net.Negative(["x"], "y")
    workspace.CreateNet(net)
    for rank in range(1, 13):  # every rank a variant of its own
        x = np.arange(2 ** rank, dtype=np.float32).reshape((2,) * rank)
        workspace.FeedBlob("x", x)
        workspace.RunNet("neg")
        np.testing.assert_array_equal(workspace.FetchBlob("y"), -x)
    s = _session()
    assert s.compiles == 12
    (kept,) = s._variants.values()
    assert len(kept) == MAX_VARIANTS


def test_a_shape_check_left_to_the_run_gives_the_compiles_located_error(on):
    workspace.FeedBlob("x", np.ones(3, np.float32))
    workspace.FeedBlob("y", np.ones(3, np.float32))
    net = core.Net("add")
    net.Add(["x", "y"], "z")  # (this line is in the error)
    net.Relu(["z"], "r")
    workspace.CreateNet(net)
    workspace.RunNet("add")
    workspace.FeedBlob("x", np.ones(4, np.float32))
    workspace.FeedBlob("y", np.ones(4, np.float32))
    workspace.RunNet("add")  # compiled with x and y f32[?]
    np.testing.assert_array_equal(workspace.FetchBlob("r"), [2, 2, 2, 2])
    workspace.FeedBlob("x", np.ones(5, np.float32))  # x and y still f32[?]: the compile fits
    with pytest.raises(DSLTypeError) as run_time:
        workspace.RunNet("add")
    # what a compile for these sizes says: a fresh workspace, the same net created for them
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", np.ones(5, np.float32))
    workspace.FeedBlob("y", np.ones(4, np.float32))
    workspace.CreateNet(net)
    with pytest.raises(DSLTypeError) as compile_time:
        workspace.RunNet("add")
    assert str(run_time.value) == str(compile_time.value)
    assert "Add cannot broadcast shapes [5] and [4]" in str(run_time.value)
    lines = open(__file__).read().splitlines()
    add_line = 1 + next(i for i, text in enumerate(lines) if text.strip().startswith('net.Add(["x", "y"], "z")'))
    assert run_time.value.loc.line == compile_time.value.loc.line == add_line
    assert os.path.samefile(run_time.value.loc.file, __file__)


def test_a_net_that_cannot_take_an_unknown_dim_is_compiled_per_size_without_trying_again(on, monkeypatch):
    from dslc.driver import session as session_module

    real, widened = session_module.lower_group, []

    def lower_group(group, source, existing, **kw):  # (as an op whose rule needs every dim known)
        if any(None in (getattr(t, "shape", None) or ()) for t in existing.values()):
            widened.append(1)
            raise DSLTypeError("needs every dim known")
        return real(group, source, existing, **kw)

    monkeypatch.setattr(session_module, "lower_group", lower_group)
    workspace.FeedBlob("table", np.arange(40, dtype=np.float32).reshape(10, 4))
    workspace.FeedBlob("ids", np.arange(5, dtype=np.int64))
    workspace.FeedBlob("lengths", np.array([5], np.int32))
    net = core.Net("sls")
    net.SparseLengthsSum(["table", "ids", "lengths"], "out")
    workspace.CreateNet(net)
    table = workspace.FetchBlob("table")
    for n in (5, 7, 9, 3, 10):
        workspace.FeedBlob("ids", np.arange(n, dtype=np.int64)[::-1].copy())
        workspace.FeedBlob("lengths", np.array([n], np.int32))
        workspace.RunNet("sls")
        np.testing.assert_array_equal(workspace.FetchBlob("out"), [table[:n].sum(axis=0)])
    assert len(widened) == 1  # tried once, at the first new size
    # CreateNet's; at 7 the widened try and the compile for 7; then one per new size (9, 3, 10)
    assert _session().compiles == 6


@pytest.mark.own_pipeline  # (runs the default pipeline itself)
def test_unknown_dims_flow_through_inference_and_the_passes_and_stop_fusion():
    from dslc.ir import parse
    from dslc.ir.passes import DEFAULT_PIPELINE, PassManager
    from dslc.ir.types import TensorType
    from dslc.lower import lower_group
    from dslc.session import LocalSession

    net = core.Net("n")
    net.Gather(["table", "ids"], "rows")
    net.Relu(["rows"], "r")
    net.Negative(["r"], "nr")
    net.Mul(["x", "x"], "xx")
    net.Relu(["xx"], "y")
    existing = {"table": TensorType("f32", (10, 4)), "ids": TensorType("i64", (None,)),
                "x": TensorType("f32", (3,))}
    module = lower_group(LocalSession.as_group(net), "", existing)
    PassManager(DEFAULT_PIPELINE).run(module)
    text = print_module(module, with_locs=False)
    # the rows of a [10,4] table picked by ids of unknown count: [?,4] through Relu and
    # Negative, left unfused; the static [3] chain fused
    body = text.split("body {", 2)[2].split("} exit")[0]
    assert [line.strip() for line in body.strip().splitlines()] == [
        '%table = load @"table" : f32[10,4]',
        '%ids = load @"ids" : i64[?]',
        '%rows = Gather(%table, %ids) : f32[?,4]',
        '%r = Relu(%rows) : f32[?,4]',
        '%nr = Negative(%r) : f32[?,4]',
        '%x = load @"x" : f32[3]',
        '%xx, %y = fused(%x) : f32[3], f32[3] {',
        '^(%x_1: f32[3]):',
        '%xx_1 = Mul(%x_1, %x_1) : f32[3]',
        '%y_1 = Relu(%xx_1) : f32[3]',
        'yield(%xx_1, %y_1)',
        '}',
        'store @"rows"(%rows)',
        'store @"r"(%r)',
        'store @"nr"(%nr)',
        'store @"xx"(%xx)',
        'store @"y"(%y)',
    ]
    assert print_module(parse(print_module(module))) == print_module(module)  # (parse verifies)
