"""Shared checks for optimizer builders (``caffe2.python.optimizer_test_util``).

Caffe2's ``optimizer_test`` mixes these two bases into ``unittest.TestCase`` classes; a
class supplies ``build_optimizer(model, **kwargs)`` (returning the optimizer it built)
and ``check_optimizer(optimizer)`` (its own look at the auxiliary blobs afterwards):

- ``OptimizerTestBase``: a linear model ``y = x . w`` on 0/1 features is trained for
  2000 steps, densely (through ``brew.fc``) and sparsely (``Gather`` of a parameter, so
  its gradient is a ``GradientSlice``), and must recover ``w = [2, 6, 5, 0, 1]``.
- ``LRModificationTestBase``: gradient clipping by global norm writes
  ``norm_clipped_grad_update/norm_ratio`` as ``clip / max(clip, ||g||)``; an injected
  learning rate (``optimizer.set_lr_injection``) reaches ``lr_multiplier``.

Neither base is a TestCase nor named ``Test*``, so a test runner collects only the
classes that mix them in. The training data are drawn from ``np.random.seed(123)`` in
the order Caffe2's version draws them, so a test converges here exactly when it does there.
"""
from __future__ import annotations

import unittest

import numpy as np

from dslc import brew, cnn, core, optimizer, workspace
from dslc.model_helper import ModelHelper
from dslc.modeling.initializers import Initializer, PseudoFP16Initializer

__all__ = ["LRModificationTestBase", "OptimizerTestBase"]

# The weights every test recovers, and how often the sparse test repeats each feature.
TRUE_WEIGHTS = (2, 6, 5, 0, 1)
SPARSE_REPEATS = 2
STEPS = 2000


def _true_weights() -> np.ndarray:
    return np.array(TRUE_WEIGHTS, dtype=np.float32)


def _feed_example(data, label, row) -> None:
    workspace.FeedBlob("data", data[row])
    workspace.FeedBlob("label", label[row])


class OptimizerTestBase:
    """Dense and sparse convergence checks for ``self.build_optimizer``.

    Abstract: mix into a ``TestCase`` that defines ``build_optimizer`` and
    ``check_optimizer`` (and sets ``self._skip_gpu`` there, as Caffe2's classes do).
    """

    def _createDense(self, dtype=core.DataType.FLOAT):
        """(model, true weights, data, label): 20 rows of 0/1 features, label = data . w.

        With ``dtype=FLOAT16`` the parameters are kept as fp16 copies of fp32 masters
        (PseudoFP16Initializer) and the fc output is converted back to float.
        """
        weights = _true_weights()
        np.random.seed(123)
        half = dtype != core.DataType.FLOAT
        data = np.random.randint(2, size=(20, weights.size)).astype(np.float16 if half else np.float32)
        label = np.dot(data, weights)[:, np.newaxis]

        init = PseudoFP16Initializer if half else Initializer
        model = ModelHelper(name="test", arg_scope={"order": "NCHW"})
        out = brew.fc(model, "data", "fc", weights.size, 1, ("ConstantFill", {}), ("ConstantFill", {}),
                      axis=0, WeightInitializer=init, BiasInitializer=init)
        if half:
            out = model.HalfToFloat(out, out + "_fp32")
        distance = model.SquaredL2Distance([out, "label"])
        loss = model.AveragedLoss(distance, "avg_loss")
        grads = model.AddGradientOperators([loss])
        self.assertIsInstance(grads["fc_w"], core.BlobReference)
        return model, weights, data, label

    def testDense(self):
        model, weights, data, label = self._createDense()
        opt = self.build_optimizer(model)
        _feed_example(data, label, 0)
        workspace.RunNetOnce(model.param_init_net)
        workspace.CreateNet(model.net, True)
        for _ in range(STEPS):
            _feed_example(data, label, np.random.randint(data.shape[0]))
            workspace.RunNet(model.net.Proto().name)
        np.testing.assert_allclose(weights[np.newaxis, :], workspace.FetchBlob("fc_w"), atol=1e-2)
        self.check_optimizer(opt)

    @unittest.skipIf(not workspace.has_gpu_support, "No gpu support")
    def testGPUDense(self, dtype=core.DataType.FLOAT):
        # dslc has no GPU device: like Caffe2's CPU build, this test is skipped. The body
        # builds the mixed-device model Caffe2's version builds, for a build that has one.
        with core.DeviceScope(core.DeviceOption(workspace.GpuDeviceType, 0)):
            model, _, data, label = self._createDense(dtype)
            fc = model.HalfToFloat("fc", "fc_fp32_for_host") if dtype == core.DataType.FLOAT16 else "fc"
            model.CopyGPUToCPU(fc, "fc_cpu")
            _feed_example(data, label, 0)
        brew.fc(model, "fc_cpu", "fc2", dim_in=1, dim_out=10, axis=0)
        self.build_optimizer(model)
        if self._skip_gpu:
            return
        workspace.RunNetOnce(model.param_init_net)
        workspace.CreateNet(model.net, True)
        workspace.RunNet(model.net.Proto().name)

    def testSparse(self):
        """Each weight is read through two feature indices, so an index can repeat in one
        gradient slice; the optimizer must sum the repeats, for int32 and int64 indices."""
        weights = _true_weights()
        np.random.seed(123)
        data = np.random.randint(2, size=(20, weights.size * SPARSE_REPEATS)).astype(np.float32)
        label = np.dot(data, np.repeat(weights, SPARSE_REPEATS))

        model = cnn.CNNModelHelper("NCHW", name="test")
        w = model.param_init_net.ConstantFill([], "w", shape=[weights.size], value=0.0)
        model.params.append(w)
        picked = model.net.Gather([w, "indices"], "gather")
        out = model.ReduceFrontSum(picked, "sum")
        distance = model.SquaredL2Distance([out, "label"])
        loss = model.AveragedLoss(distance, "avg_loss")
        grads = model.AddGradientOperators([loss])
        self.assertIsInstance(grads["w"], core.GradientSlice)
        opt = self.build_optimizer(model)

        workspace.CreateBlob("indices")
        workspace.CreateBlob("label")
        feature_of = np.repeat(np.arange(weights.size), SPARSE_REPEATS)
        for index_type in (np.int32, np.int64):
            workspace.RunNetOnce(model.param_init_net)
            workspace.CreateNet(model.net, True)
            for _ in range(STEPS):
                row = np.random.randint(data.shape[0])
                indices = feature_of[data[row] == 1]
                if indices.size == 0:
                    continue
                workspace.FeedBlob("indices", indices.astype(index_type))
                workspace.FeedBlob("label", np.array(label[row]).astype(np.float32))
                workspace.RunNet(model.net.Proto().name)
            np.testing.assert_allclose(weights, workspace.FetchBlob("w"), atol=1e-2)
        self.check_optimizer(opt)


class LRModificationTestBase:
    """Checks of what scales the learning rate: global-norm clipping and LR injection.

    Abstract: mix into a TestCase that also mixes in ``OptimizerTestBase`` (for
    ``_createDense``) and whose ``build_optimizer`` passes its kwargs to the builder.
    """

    def _gradient_ratio_reference(self, model, params, max_gradient_norm):
        """clip / max(clip, global norm) over the dense gradients of ``params``, from the
        gradient blobs the last run left in the workspace."""
        total = 0.0
        for param in params:
            grad = model.param_to_grad[param]
            if isinstance(grad, core.GradientSlice):
                grad = grad.values
            total += np.linalg.norm(workspace.FetchBlob(grad)) ** 2.0
        norm = np.sqrt(total)
        return max_gradient_norm / np.maximum(max_gradient_norm, norm)

    def test_global_norm_based_gradient_clipping(self):
        clip = 1.0
        model, _, data, label = self._createDense()
        opt = self.build_optimizer(model, max_gradient_norm=clip)
        dense = [p for p in model.GetParams(top_scope=True)
                 if p in model.param_to_grad and not isinstance(model.param_to_grad[p], core.GradientSlice)]
        _feed_example(data, label, 0)
        workspace.RunNetOnce(model.param_init_net)
        workspace.CreateNet(model.net, True)
        self.assertIsNotNone(opt._lr_multiplier)

        _feed_example(data, label, np.random.randint(data.shape[0]))
        workspace.RunNet(model.net.Proto().name)
        expected = self._gradient_ratio_reference(model, dense, clip)
        np.testing.assert_almost_equal(workspace.FetchBlob("norm_clipped_grad_update/norm_ratio"), expected)
        self.assertTrue(expected < 1.0, "Bad test, gradient not being scaled.")

    def test_lr_injection(self):
        model, _, data, label = self._createDense()
        opt = self.build_optimizer(model, max_gradient_norm=1, allow_lr_injection=True)
        _feed_example(data, label, 0)
        workspace.RunNetOnce(model.param_init_net)
        workspace.CreateNet(model.net, True)

        self.assertIsNotNone(opt._lr_multiplier)
        self.assertEqual(optimizer.get_lr_injection(), 1)
        optimizer.set_lr_injection(0)
        self.assertEqual(optimizer.get_lr_injection(), 0)
        # lr_multiplier is the injection times the clipping ratio: zero now.
        workspace.RunNet(model.net.Proto().name)
        self.assertEqual(workspace.FetchBlob("lr_multiplier"), 0)
