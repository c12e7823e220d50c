"""The numba backend's embedding kernels (backends/numba/kernels_embedding.py): bags of a
table's rows, their gradients, Concat, Split and SquaredL2Distance compiled into islands.

Values are checked against plain numpy written here (rows added one by one in float32,
as the interpreter adds them); errors against the interpreter's own messages; and an
embedding model's training step must compile into one function whose losses and tables
are the interpreter's.
"""
import numpy as np
import pytest

from dslc import brew, core, optimizer, workspace
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper
from dslc.session import LocalSession

ROWS, DIM = 50, 6
LENGTHS = np.array([3, 0, 1, 4], np.int32)  # (an empty bag too)


def _feeds(ws):
    rng = np.random.default_rng(5)
    data = rng.normal(size=(ROWS, DIM)).astype(np.float32)
    ids = np.array([7, 7, 0, 49, 3, 3, 12, 21], np.int64)  # (a row read twice in one bag)
    weights = rng.normal(size=ids.size).astype(np.float32)
    dy = rng.normal(size=(LENGTHS.size, DIM)).astype(np.float32)
    for name, value in (("data", data), ("ids", ids), ("lengths", LENGTHS), ("weights", weights), ("dy", dy)):
        ws.feed_blob(name, value)
    return data, ids, weights, dy


def _bags(data, ids, weights=None, mean=False):
    """Each bag's rows added in order in float32 (then times float32(1 / length))."""
    out, k = np.zeros((LENGTHS.size, DIM), np.float32), 0
    for s, n in enumerate(LENGTHS):
        for t in range(n):
            row = data[ids[k]] * weights[k] if weights is not None else data[ids[k]]
            out[s] = row if t == 0 else out[s] + row
            k += 1
        if mean and n:
            out[s] = out[s] * np.float32(1.0 / n)
    return out


def _compiled(s, net):
    summary = s.compile(net).program.summary()
    return summary["ops compiled"], summary["ops interpreted, and why"]


def test_bags_and_their_gradients_compile_and_match_numpy():
    ws = workspace.Workspace()
    data, ids, weights, dy = _feeds(ws)
    net = core.Net("bags")
    net.SparseLengthsSum(["data", "ids", "lengths"], "sls")
    net.SparseLengthsMean(["data", "ids", "lengths"], "slm")
    net.SparseLengthsWeightedSum(["data", "weights", "ids", "lengths"], "slws")
    net.LengthsSumGradient(["dy", "lengths"], "g_sum")
    net.LengthsMeanGradient(["dy", "lengths"], "g_mean")
    net.LengthsWeightedSumGradient(["weights", "dy", "lengths"], "g_weighted")
    s = LocalSession(ws, backend="numba")
    s.run(net)
    compiled, why = _compiled(s, net)
    assert compiled == 6, why
    np.testing.assert_array_equal(ws.fetch_blob("sls"), _bags(data, ids))
    np.testing.assert_array_equal(ws.fetch_blob("slm"), _bags(data, ids, mean=True))
    np.testing.assert_array_equal(ws.fetch_blob("slws"), _bags(data, ids, weights))
    reps = np.repeat(np.arange(LENGTHS.size), LENGTHS)  # the bag of each id
    np.testing.assert_array_equal(ws.fetch_blob("g_sum"), dy[reps])
    scale = np.array([np.float32(1.0 / max(n, 1)) for n in LENGTHS], np.float32)
    np.testing.assert_array_equal(ws.fetch_blob("g_mean"), dy[reps] * scale[reps, None])
    np.testing.assert_array_equal(ws.fetch_blob("g_weighted"), dy[reps] * weights[:, None])


def test_concat_split_and_squared_l2_compile_and_match_numpy():
    ws = workspace.Workspace()
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(4, 5)).astype(np.float32)
    ws.feed_blob("a", a)
    ws.feed_blob("b", b)
    net = core.Net("shapes")
    net.Concat(["a", "b"], ["cat", "cat_dims"], axis=1)
    net.Concat(["a", "a"], ["rows"], axis=0)
    net.Split(["cat", "cat_dims"], ["p", "q"], axis=1)
    net.Split(["cat"], ["u", "v", "w"], axis=1, split=[2, 2, 4])
    net.Split(["rows"], ["top", "bottom"], axis=0)
    net.SquaredL2Distance(["a", "p"], "zero")
    net.SquaredL2Distance(["cat", "cat"], "none")
    net.Concat(["b", "a"], ["ba"], axis=1)
    net.SquaredL2Distance(["cat", "ba"], "d")
    net.ConstantFill(["d"], "dd", value=0.5)
    net.SquaredL2DistanceGradient(["cat", "ba", "dd"], ["g_cat", "g_ba"])
    s = LocalSession(ws, backend="numba")
    s.run(net)
    compiled, why = _compiled(s, net)
    # all but the distance to a part of a runtime-sized Split (a dim the types leave open)
    assert compiled == 10, why
    assert {k for k in why if not k.startswith(("load", "store"))} == {"SquaredL2Distance: types numba cannot hold"}
    cat, ba = np.concatenate([a, b], 1), np.concatenate([b, a], 1)
    np.testing.assert_array_equal(ws.fetch_blob("cat"), cat)
    assert ws.fetch_blob("cat_dims").tolist() == [3, 5] and ws.fetch_blob("cat_dims").dtype == np.int32
    np.testing.assert_array_equal(ws.fetch_blob("rows"), np.concatenate([a, a], 0))
    np.testing.assert_array_equal(ws.fetch_blob("p"), a)
    np.testing.assert_array_equal(ws.fetch_blob("q"), b)
    for name, part in zip("uvw", (cat[:, :2], cat[:, 2:4], cat[:, 4:])):
        np.testing.assert_array_equal(ws.fetch_blob(name), part)
    np.testing.assert_array_equal(ws.fetch_blob("top"), a)
    np.testing.assert_array_equal(ws.fetch_blob("zero"), np.zeros(4, np.float32))
    diff = cat - ba
    np.testing.assert_allclose(ws.fetch_blob("d"), 0.5 * (diff.astype(np.float64) ** 2).sum(1), rtol=1e-6)
    np.testing.assert_array_equal(ws.fetch_blob("g_cat"), diff * np.float32(0.5))
    np.testing.assert_array_equal(ws.fetch_blob("g_ba"), -diff * np.float32(0.5))


def test_gather_and_reduce_sum_compile_and_match_numpy():
    ws = workspace.Workspace()
    data, _, _, _ = _feeds(ws)
    ids = np.array([[4, -1, 4], [0, 49, 7]], np.int32)  # (a negative id counts from the end)
    ws.feed_blob("bag_ids", ids)
    dy = np.random.default_rng(3).normal(size=(2, DIM)).astype(np.float32)
    ws.feed_blob("bag_dy", dy)
    net = core.Net("gather")
    net.Gather(["data", "bag_ids"], "rows")
    net.ReduceSum(["rows"], "bags", axes=[1], keepdims=0)
    net.ReduceSum(["rows"], "kept", axes=[1], keepdims=1)
    net.ReduceSumGradient(["bag_dy", "rows"], "spread", axes=[1], keepdims=0)
    s = LocalSession(ws, backend="numba")
    s.run(net)
    compiled, why = _compiled(s, net)
    assert compiled == 4, why
    rows = data[ids % ROWS]
    np.testing.assert_array_equal(ws.fetch_blob("rows"), rows)
    want = (rows[:, 0] + rows[:, 1]) + rows[:, 2]  # (added in order, in float32)
    np.testing.assert_array_equal(ws.fetch_blob("bags"), want)
    np.testing.assert_array_equal(ws.fetch_blob("kept"), want[:, None, :])
    np.testing.assert_array_equal(ws.fetch_blob("spread"), np.repeat(dy[:, None, :], 3, axis=1))


BAD = {  # a failing op, its inputs, and a part of the interpreter's message
    "index outside the table": (lambda n: n.SparseLengthsSum(["data", "bad_ids", "lengths"], "y"),
                                {"bad_ids": np.array([1, 2, 50, 3, 0, 0, 0, 0], np.int64)}, "outside DATA's 50 rows"),
    "lengths not adding up": (lambda n: n.SparseLengthsMean(["data", "ids", "short"], "y"),
                              {"short": np.array([3, 1], np.int32)}, "LENGTHS add up to 4"),
    # (weights of a length known only at run time: 4 from LengthsToWeights for 8 ids)
    "weights not one per id": (lambda n: n.SparseLengthsWeightedSum(["data", n.LengthsToWeights("short"), "ids",
                                                                     "lengths"], "y"),
                               {"short": np.array([3, 1], np.int32)}, "WEIGHTS has shape [4], but there are 8 ids"),
    "a negative length": (lambda n: n.LengthsSumGradient(["dy", "neg"], "y"),
                          {"neg": np.array([2, -1, 1, 0], np.int32)}, "LengthsSumGradient failed"),
    "a gathered id outside the table": (lambda n: n.Gather(["data", "far"], "y"),
                                        {"far": np.array([[1, 2], [3, -51]], np.int64)}, "Gather: id -51 is outside DATA's 50 rows"),
    "split sizes": (lambda n: n.Split(["dy", "sizes"], ["y", "z"], axis=1),
                    {"sizes": np.array([2, 5], np.int32)}, "do not cut an axis of 6 into 2 parts"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_failing_check_reports_the_interpreters_error_at_the_op(case):
    build, feeds, part = BAD[case]
    messages = {}
    for backend in ("interp", "numba"):
        ws = workspace.Workspace()
        _feeds(ws)
        for name, value in feeds.items():
            ws.feed_blob(name, value)
        net = core.Net("bad")
        net.Copy(["dy"], "before")  # (so the failing op is not the island's first)
        build(net)
        line = build.__code__.co_firstlineno
        s = LocalSession(ws, backend=backend)
        with pytest.raises(DSLError) as e:
            s.run(net)
        if backend == "numba":
            assert _compiled(s, net)[0] >= 1
        assert part in e.value.message, e.value.message
        assert e.value.loc is not None and e.value.loc.file.endswith("test_numba_embedding.py")
        assert e.value.loc.line == line
        messages[backend] = e.value.message
    assert messages["numba"] == messages["interp"]


def _embedding_model(ws, tables=3, rows=1000, dim=8, batch=16, bag=4, gather=False):
    rng = np.random.default_rng(0)
    model = ModelHelper(name="emb")
    pooled = []
    ws.feed_blob("lengths", np.full(batch, bag, np.int32))
    for t in range(tables):
        w = model.param_init_net.UniformFill([], f"emb{t}", shape=[rows, dim], min=-0.1, max=0.1)
        model.AddParameter(w)
        ids = rng.integers(0, rows, size=(batch, bag)).astype(np.int64)
        if gather:  # (a bag as Gather and ReduceSum: the same sums)
            ws.feed_blob(f"ids{t}", ids)
            picked = model.net.Gather([w, f"ids{t}"], f"rows{t}")
            pooled.append(model.net.ReduceSum(picked, f"pool{t}", axes=[1], keepdims=0))
        else:
            ws.feed_blob(f"ids{t}", ids.reshape(-1))
            pooled.append(model.net.SparseLengthsSum([w, f"ids{t}", "lengths"], f"pool{t}"))
    ws.feed_blob("label", rng.normal(size=(batch, 1)).astype(np.float32))
    cat, _ = model.net.Concat(pooled, ["cat", "cat_dims"], axis=1)
    y = brew.fc(model, cat, "y", dim_in=tables * dim, dim_out=1)
    loss = model.net.AveragedLoss(model.net.SquaredL2Distance([y, "label"], "d"), "loss")
    model.AddGradientOperators([loss])
    optimizer.build_sgd(model, 0.5)
    return model


@pytest.mark.parametrize("gather", [False, True], ids=["SparseLengthsSum", "Gather"])
def test_an_embedding_step_is_one_function_with_the_interpreters_answers(gather):
    got = {}
    for backend in ("interp", "numba"):
        ws = workspace.Workspace()
        model = _embedding_model(ws, gather=gather)
        s = LocalSession(ws, backend=backend)
        s.run(model.param_init_net)
        losses = []
        for _ in range(4):
            s.run(model.net)
            losses.append(float(ws.fetch_blob("loss")))
        got[backend] = losses, [ws.fetch_blob(f"emb{t}") for t in range(3)], ws.fetch_blob("y_w")
    np.testing.assert_allclose(got["numba"][0], got["interp"][0], rtol=1e-6)
    for g, w in zip(got["numba"][1] + [got["numba"][2]], got["interp"][1] + [got["interp"][2]]):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    assert got["interp"][0][-1] < got["interp"][0][0]  # (it trains)
    summary = s.compile(model.net).program.summary()
    # forward, backward, Iter and LearningRate in one function (3 bags, Concat, FC, the
    # distance, the loss, its seed, their 3 gradients, Split, 3 bag gradients, Iter and
    # LearningRate: 17 ops; with Gather and ReduceSum, 3 more: a Gather's gradient is the
    # ReduceSumGradient's output itself); then the sparse updates write the tables in place,
    # and the dense updates (a second function here, where every threshold is 0); no threads
    regions = summary["regions compiled"]
    first = "from Gather" if gather else "from SparseLengthsSum"
    ops = "20 top-level ops" if gather else "17 top-level ops"
    assert len(regions) == 2 and regions[0].startswith(first) and ops in regions[0], regions
    assert regions[1].startswith("from WeightedSum"), regions
    why = summary["ops interpreted, and why"]
    assert why.pop("ScatterWeightedSum: no numba kernel") == 3, why
    assert set(why) <= {"load: workspace access", "store: workspace access"}, why
