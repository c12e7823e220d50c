"""Reference Adagrad and the sparse-Adagrad check (``caffe2.python.operator_test.adagrad_test_helper``).

``ref_adagrad`` is Adagrad's update in numpy, the figure every Adagrad operator test compares
against::

    g'    = grad + weight_decay * param      (weight_decay scaled by halflife / count when counted)
    mom'  = decay * mom + g'^2               (row_wise: + mean(g'^2), one moment per row)
    lr_e  = lr / (sqrt(mom') + epsilon)
    param'= param + lr_e * g'

``adagrad_sparse_test_helper`` draws a random subset of rows, runs ``SparseAdagrad`` (or
``RowWiseSparseAdagrad``) on them and checks it against ``ref_adagrad`` applied row by row.
"""
from __future__ import annotations

import numpy as np

from dslc import core

__all__ = ["adagrad_sparse_test_helper", "ref_adagrad"]


def ref_adagrad(param_in, mom_in, grad, lr, epsilon, using_fp16=False, output_effective_lr=False,
                output_effective_lr_and_update=False, decay=1.0, row_wise=False, weight_decay=0.0,
                counter_halflife=-1, count=None):
    """(param', mom') and, when asked, the effective learning rate and the update, in the
    input precision (fp16 inputs are updated in float32 and rounded back)."""
    out_type = np.float16 if using_fp16 else np.float32
    param = param_in.astype(np.float32) if using_fp16 else param_in
    mom = mom_in.astype(np.float32) if using_fp16 else mom_in
    if count and count > 0 and counter_halflife > 0:
        weight_decay = weight_decay * counter_halflife / count
    g = grad + weight_decay * param
    squared = np.square(g)
    mom_new = decay * mom + (np.mean(squared) if row_wise else squared)
    effective_lr = lr / (np.sqrt(mom_new) + epsilon)
    update = effective_lr * g
    results = [param + update, mom_new]
    if output_effective_lr or output_effective_lr_and_update:
        results.append(effective_lr)
    if output_effective_lr_and_update:
        results.append(update)
    return tuple(np.asarray(r).astype(out_type) for r in results)


def adagrad_sparse_test_helper(parent_test, inputs, lr, epsilon, engine, ref_adagrad, gc, dc, row_wise=False,
                               weight_decay=0.0, counter_halflife=-1):
    """Check the sparse Adagrad op on a random subset of ``grad``'s rows against
    ``ref_adagrad`` applied to each selected row (``parent_test.assertReferenceChecks``)."""
    param, momentum, grad = inputs
    if row_wise:
        momentum = momentum.reshape(momentum.shape[0], -1)[:, 0]  # one moment per row
    momentum = np.abs(momentum)
    lr = np.array([lr], dtype=np.float32)
    count = None if counter_halflife == -1 else np.random.rand(param.shape[0])

    if grad.size == 0:
        indices = np.zeros((0,), dtype=np.int64)
    else:
        rows = grad.shape[0]
        indices = np.random.choice(np.arange(rows), size=np.random.randint(rows), replace=False)
    grad = grad[indices]

    names = ["param", "momentum", "indices", "grad", "lr"] + ([] if count is None else ["count"])
    op = core.CreateOperator("RowWiseSparseAdagrad" if row_wise else "SparseAdagrad", names,
                             ["param", "momentum"], epsilon=epsilon, weight_decay=weight_decay,
                             counter_halflife=counter_halflife, engine=engine, device_option=gc)

    def ref_sparse(param, momentum, indices, grad, lr, count=None, ref_using_fp16=False):
        param_out, momentum_out = np.copy(param), np.copy(momentum)
        for i, row in enumerate(indices):
            param_out[row], momentum_out[row] = ref_adagrad(
                param[row], momentum[row], grad[i], lr, epsilon, weight_decay=weight_decay,
                counter_halflife=counter_halflife, count=None if count is None else count[row])
        return param_out, momentum_out

    # dslc has no GPU device, so the fp16-embedding variant Caffe2 adds on GPUs never runs.
    parent_test.assertReferenceChecks(
        gc, op, [param.astype(np.float32), momentum.astype(np.float32), indices, grad, lr, count, False],
        ref_sparse)
