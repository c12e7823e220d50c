"""The test-support modules Caffe2's public tests import from ``caffe2.python``:
``optimizer_test_util``, ``operator_test.adagrad_test_helper`` and ``functional``.

Each is checked on figures computed here independently (the linear model's known weights,
numpy's Adagrad step, numpy's relu/concat/split), and each base is shown to fail on a
broken optimizer, so a base that checked nothing would fail these tests.
"""
import unittest

import numpy as np
import pytest

from dslc import core, optimizer, workspace
from dslc.functional import Functional
from dslc.operator_test import adagrad_test_helper as agh
from dslc.optimizer_test_util import LRModificationTestBase, OptimizerTestBase
from dslc.test_util import TestCase


class _Sgd(OptimizerTestBase, LRModificationTestBase, TestCase):
    __test__ = False  # run by the tests below, one method at a time (testSparse alone takes a minute)
    lr = 0.1

    def build_optimizer(self, model, **kwargs):
        self._skip_gpu = False
        return optimizer.build_sgd(model, base_learning_rate=self.lr, **kwargs)

    def check_optimizer(self, opt):
        self.checked = True


def _run(case_cls, name):
    result = unittest.TestResult()
    case = case_cls(name)
    case.run(result)
    return case, result


@pytest.mark.parametrize("name", ["testDense", "test_global_norm_based_gradient_clipping", "test_lr_injection"])
def test_sgd_passes_the_optimizer_bases(name):
    case, result = _run(_Sgd, name)
    assert not result.failures and not result.errors, (result.failures, result.errors)
    if name == "testDense":
        assert case.checked  # check_optimizer ran after training (the weights were checked before it)


def test_dense_check_fails_when_the_optimizer_does_not_learn():
    class NoLearning(_Sgd):
        lr = 0.0
    _, result = _run(NoLearning, "testDense")
    assert len(result.failures) == 1 and "Not equal to tolerance" in result.failures[0][1]


def test_clipping_ratio_is_clip_over_global_norm():
    case = _Sgd("test_global_norm_based_gradient_clipping")
    case.setUp()
    model, _, data, label = case._createDense()
    case.build_optimizer(model, max_gradient_norm=1.0)
    workspace.FeedBlob("data", data[3])
    workspace.FeedBlob("label", label[3])
    workspace.RunNetOnce(model.param_init_net)
    workspace.RunNetOnce(model.net)
    # by hand: the fc's gradients on one example with weights and bias 0 (ConstantFill)
    x, y = data[3].astype(np.float64), float(label[3][0])
    dy = -y  # d(0.5 (w.x + b - y)^2)/d(out) at w = b = 0, averaged over one example
    norm = np.sqrt(np.sum((dy * x) ** 2) + dy ** 2)
    assert case._gradient_ratio_reference(model, ["fc_w", "fc_b"], 1.0) == pytest.approx(1.0 / max(1.0, norm), rel=1e-5)
    case.tearDown()


def test_ref_adagrad_is_adagrads_step():
    p, m, g = np.array([1.0, -2.0], np.float32), np.array([0.5, 0.0], np.float32), np.array([0.2, 0.4], np.float32)
    new_p, new_m, lr_e, upd = agh.ref_adagrad(p, m, g, 0.1, 1e-5, output_effective_lr_and_update=True)
    want_m = m + g * g
    want_lr = 0.1 / (np.sqrt(want_m) + 1e-5)
    np.testing.assert_allclose(new_m, want_m, rtol=1e-6)
    np.testing.assert_allclose(lr_e, want_lr, rtol=1e-6)
    np.testing.assert_allclose(upd, want_lr * g, rtol=1e-6)
    np.testing.assert_allclose(new_p, p + want_lr * g, rtol=1e-6)
    assert all(a.dtype == np.float32 for a in (new_p, new_m, lr_e, upd))
    # row-wise: one moment per row, from the mean of the squares
    _, rm = agh.ref_adagrad(p, np.float32(0.5), g, 0.1, 1e-5, row_wise=True)
    assert rm == pytest.approx(0.5 + np.mean(g * g))
    fp, fm = agh.ref_adagrad(p.astype(np.float16), m.astype(np.float16), g, 0.1, 1e-5, using_fp16=True)
    assert fp.dtype == np.float16 and fm.dtype == np.float16


class _Checks:
    """The part of a hypothesis TestCase the sparse helper uses."""

    def __init__(self):
        self.calls = []

    def assertReferenceChecks(self, gc, op, inputs, reference):
        workspace.ResetWorkspace()
        for name, value in zip(op.input, inputs):
            workspace.FeedBlob(name, value)
        workspace.RunOperatorOnce(op)
        want = reference(*inputs)
        for name, w in zip(op.output, want):
            np.testing.assert_allclose(workspace.FetchBlob(name), w, rtol=1e-5, atol=1e-6)
        self.calls.append(op.type)


@pytest.mark.parametrize("row_wise", [False, True])
def test_sparse_adagrad_helper_checks_the_op(row_wise):
    np.random.seed(0)
    param = np.random.rand(6, 3).astype(np.float32)
    checks = _Checks()
    agh.adagrad_sparse_test_helper(checks, [param, np.random.rand(6, 3).astype(np.float32),
                                            np.random.rand(6, 3).astype(np.float32)],
                                   0.1, 1e-4, "", agh.ref_adagrad if not row_wise else
                                   (lambda *a, **k: agh.ref_adagrad(*a, row_wise=True, **k)),
                                   core.DeviceOption(0), [], row_wise=row_wise)
    assert checks.calls == ["RowWiseSparseAdagrad" if row_wise else "SparseAdagrad"]
    # empty gradients: int64 indices, nothing changes (Caffe2's helper used np.int, gone in numpy 2)
    agh.adagrad_sparse_test_helper(checks, [param, np.ones((6, 3), np.float32), np.zeros((0, 3), np.float32)],
                                   0.1, 1e-4, "", agh.ref_adagrad, core.DeviceOption(0), [])


def test_functional_runs_one_op_and_names_its_outputs():
    workspace.ResetWorkspace()
    workspace.FeedBlob("keep", np.ones(1, np.float32))
    x = np.array([[-1.5, 2.0], [3.0, -4.0]], np.float32)
    y = Functional.Relu(x)
    np.testing.assert_array_equal(y[0], np.maximum(x, 0))
    np.testing.assert_array_equal(y["output_0"], np.maximum(x, 0))
    joined, sizes = Functional.Concat(x, x[:, :1], axis=1)
    np.testing.assert_array_equal(joined, np.concatenate([x, x[:, :1]], axis=1))
    np.testing.assert_array_equal(sizes, [2, 1])
    parts = Functional.Split(x, axis=0, split=np.array([1, 1], np.int32), num_output=2)
    np.testing.assert_array_equal(parts[1], x[1:])
    assert workspace.Blobs() == ["keep"]  # the caller's workspace is left alone


def test_functional_errors_say_what_to_do():
    x = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="num_output"):
        Functional.Split(x, axis=0, split=np.array([1, 1], np.int32))
    with pytest.raises(ValueError, match="takes 1"):
        Functional.Relu(x, x)
    with pytest.raises(ValueError, match="unknown operator 'NoSuchOp'"):
        Functional.NoSuchOp(x)


def test_plan_create_from_proto_rebuilds_the_plan():
    from dslc import core
    workspace.ResetWorkspace()
    init, body = core.Net("init"), core.Net("body")
    init.ConstantFill([], "x", shape=[1], value=1.0)
    body.Add(["x", "x"], "x")
    plan = core.Plan("p")
    plan.AddStep(core.execution_step("init", init))
    plan.AddStep(core.execution_step("loop", body, num_iter=3))
    again = core.Plan.create_from_proto(plan.Proto())
    assert [s.Name() for s in again.Steps()] == ["init", "loop"]
    # rebuilt nets take fresh names (init_1 ...), as Caffe2's Net(NetDef) does; their ops are the same
    assert [n.Name()[:4] for n in again.Nets()] == ["init", "body"]
    assert [list(n.Proto().op) for n in again.Nets()] == [list(init.Proto().op), list(body.Proto().op)]
    assert again.Proto().execution_step[1].num_iter == 3
    workspace.RunPlan(again)
    assert workspace.FetchBlob("x")[0] == 8.0  # 1 doubled three times
    with pytest.raises(TypeError, match="PlanDef"):
        core.Plan.create_from_proto(init.Proto())


def test_workspace_guard_switches_and_comes_back():
    workspace.ResetWorkspace()
    workspace.FeedBlob("a", np.ones(1, np.float32))
    before = workspace.CurrentWorkspace()
    with pytest.raises(RuntimeError, match="inside"):
        with workspace.WorkspaceGuard("guarded"):
            assert workspace.CurrentWorkspace() == "guarded" and not workspace.HasBlob("a")
            workspace.FeedBlob("b", np.ones(1, np.float32))
            raise RuntimeError("inside")
    assert workspace.CurrentWorkspace() == before and workspace.HasBlob("a") and not workspace.HasBlob("b")
    with workspace.WorkspaceGuard("guarded"):
        assert workspace.HasBlob("b")  # the named workspace kept its blobs
