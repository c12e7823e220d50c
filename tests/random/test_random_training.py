"""Random training programs (tests/random/programs_training.py) on every backend:

* recurrent layers and stacks (LSTM, BasicRNN, residual MultiRNNCells) whose parameters are
  set by Caffe2's names: the output sequence matches a numpy stepping of the layers, and the
  gradients of every parameter, of the input and of the initial states match central
  finite differences of it;
* optimizers with their options (sparse_dedup_aggregator, weight_decay, rowWise, smart
  decay, RAdam, momentum, learning-rate policies) over a table read with repeated ids, a
  1-D table and an FC: the first run's gradients match finite differences of the loss, and
  the parameters after a few runs match a numpy reference of each update rule.

CI runs a fixed, derandomized set (DSLC_TRAINING_EXAMPLES, default 2 per backend and
test); the nightly run (bench/nightly_random.py) sets DSLC_HYPOTHESIS_EXAMPLES=N.
"""
from __future__ import annotations

import os

import numpy as np
from hypothesis import assume, given, note

import programs as P
import programs_training as TR
from dslc import workspace
from dslc.session import LocalSession


def _settings():
    return P.hypothesis_settings(int(os.environ.get("DSLC_TRAINING_EXAMPLES", "2")))


@_settings()
@given(stack=TR.stacks())
def test_stacked_cells_set_by_caffe2s_names_match_numpy(backend, stack):
    P.fresh()
    note(TR.render_stack(stack))
    params, inputs = TR.stack_values(stack)
    assume(TR.stack_kinks(stack, params, inputs) > 1e-3)
    model, out = TR.build_stack(stack)
    names = TR.caffe2_names(stack)
    assert sorted(str(p) for p in model.params) == sorted(names.values()), "the parameters' names are not Caffe2's"
    shape = (stack.T, stack.N, stack.dims[-1])
    r = np.random.default_rng(stack.seed + 1).uniform(-1, 1, shape)
    workspace.FeedBlob("R", r.astype(np.float32))
    loss = model.net.SumElements(model.net.Mul([out, "R"], "projected"), "loss")
    grads = model.AddGradientOperators([loss])
    for k, v in inputs.items():
        workspace.FeedBlob(k, v)
    with LocalSession(backend=backend) as session:
        session.run(model.param_init_net)
        for key, v in params.items():  # (by Caffe2's names: a weight under another name stays random)
            workspace.FeedBlob(names[key], v)
        session.run(model.net)
    want = TR.stack_output(stack, params, inputs)
    np.testing.assert_allclose(workspace.FetchBlob(out), want, rtol=1e-5, atol=1e-6)

    def f(ps, ins):
        return float((TR.stack_output(stack, ps, ins) * r).sum())

    h = 1e-6
    wide = {**{("param",) + key: v for key, v in params.items()},
            **{("input", k): v for k, v in inputs.items() if k != "lengths"}}
    for key, v in wide.items():
        base = v.astype(np.float64)
        num = np.zeros(base.shape)
        for idx in np.ndindex(base.shape):
            vals = []
            for sign in (1, -1):
                moved = base.copy()
                moved[idx] += sign * h
                ps = {**params, **({key[1:]: moved} if key[0] == "param" else {})}
                ins = {**inputs, **({key[1]: moved} if key[0] == "input" else {})}
                vals.append(f(ps, ins))
            num[idx] = (vals[0] - vals[1]) / (2 * h)
        blob = names[key[1:]] if key[0] == "param" else key[1]
        got = workspace.FetchBlob(str(grads[blob]))
        scale = max(1.0, float(np.abs(num).max(initial=0.0)))
        np.testing.assert_allclose(got, num, rtol=1e-3, atol=2e-4 * scale, err_msg=f"d loss / d {blob}")


@_settings()
@given(training=TR.trainings())
def test_optimizer_updates_match_numpy(backend, training):
    P.fresh()
    note(TR.render_training(training))
    vals = TR.training_values(training)
    model, grads = TR.build_training(training)
    for k in ("x", "target"):
        workspace.FeedBlob(k, vals[k])
    workspace.FeedBlob("ids", np.array(training.ids, np.int32))
    if not training.dense:
        workspace.FeedBlob("w", vals["w"])
        workspace.FeedBlob("b", vals["b"])
    want, first_grads = TR.train_reference(training)
    numeric = TR.numeric_grads(training)
    with LocalSession(backend=backend) as session:
        session.run(model.param_init_net)
        for step in range(training.steps):
            session.run(model.net)
            if step == 0:
                for name in TR.params_of(training):
                    g = grads[name]
                    got = (workspace.FetchBlob(str(g)) if not isinstance(g, tuple) else
                           tuple(workspace.FetchBlob(str(b)) for b in g))
                    np.testing.assert_allclose(TR.dense_grad(training, name, got), numeric[name], rtol=1e-4,
                                               atol=1e-5, err_msg=f"d loss / d {name}")
                    np.testing.assert_allclose(TR.dense_grad(training, name, got),
                                               TR.dense_grad(training, name, (np.array(training.ids),
                                                                              first_grads[name]))
                                               if name in ("tbl", "t1") else first_grads[name],
                                               rtol=1e-4, atol=1e-5, err_msg=f"the reference's d loss / d {name}")
    for name in TR.params_of(training):
        np.testing.assert_allclose(workspace.FetchBlob(name), want[name], rtol=2e-4, atol=2e-5,
                                   err_msg=f"{name} after {training.steps} steps")
