"""recurrent.retrieve_step_blobs: every step's blobs of a RecurrentNetwork in the workspace
under Caffe2's names, with Caffe2's values.

Caffe2's figures: the same net and inputs on the real Caffe2 (torch 1.10.2's caffe2,
/tmp/caffe2-venv): ``RunNet`` T times as recurrent_network_test's test_extract does, then
retrieve_step_blobs(net, "extractTest") and each blob fetched with ``.tolist()``.
"""
from __future__ import annotations

import numpy as np
import pytest

from dslc import recurrent, workspace
from dslc.ir.diagnostics import DSLError
from dslc.model_helper import ModelHelper
from dslc.session import LocalSession

T, N, D = 3, 2, 2

# Caffe2's step blobs: input_t = input[t], output_t_prev = the state before step t,
# step/Mul = input_t * output_t_prev, the executor's timestep blob (int32 [t])
CAFFE2 = {
    "extractTest_input_t0": [[[0.25, 0.5], [0.75, 1.0]]],
    "extractTest_output_t_prev0": [[[2.0, 2.0], [2.0, 2.0]]],
    "extractTest_step/Mul0": [[[0.5, 1.0], [1.5, 2.0]]],
    "extractTest_timestep_rnnexec_t00": [0],
    "extractTest_input_t1": [[[1.25, 1.5], [1.75, 2.0]]],
    "extractTest_output_t_prev1": [[[0.5, 1.0], [1.5, 2.0]]],
    "extractTest_step/Mul1": [[[0.625, 1.5], [2.625, 4.0]]],
    "extractTest_timestep_rnnexec_t11": [1],
    "extractTest_input_t2": [[[2.25, 2.5], [2.75, 3.0]]],
    "extractTest_output_t_prev2": [[[0.625, 1.5], [2.625, 4.0]]],
    "extractTest_step/Mul2": [[[1.40625, 3.75], [7.21875, 12.0]]],
    "extractTest_timestep_rnnexec_t22": [2],
}


def _mul_rnn(weighted=False):
    """recurrent_network_test's net: output_t = input_t * output_t_prev (times w if weighted)."""
    model = ModelHelper(name="external")
    input_blob, initial_input_blob = model.net.AddExternalInputs("input", "initial_input")
    step = ModelHelper(name="step", param_model=model)
    input_t, output_t_prev = step.net.AddExternalInput("input_t", "output_t_prev")
    output_t = step.net.Mul([input_t, output_t_prev])
    if weighted:
        output_t = step.net.Mul([output_t, "w"], "scaled")
    step.net.AddExternalOutput(output_t)
    recurrent.recurrent_net(net=model.net, cell_net=step.net, inputs=[(input_t, input_blob)],
                            initial_cell_inputs=[(output_t_prev, initial_input_blob)],
                            links={output_t_prev: output_t}, scope="test_rnn_sum_mull")
    workspace.FeedBlob("input", (np.arange(T * N * D).reshape(T, N, D) + 1).astype(np.float32) / 4)
    workspace.FeedBlob("initial_input", np.full((1, N, D), 2.0, np.float32))
    return model


def test_every_steps_blobs_are_caffe2s(backend):
    model = _mul_rnn()
    with LocalSession(workspace.C.Workspace.current, backend=backend) as s:
        s.run(model.net)
    got = recurrent.retrieve_step_blobs(model.net, "extractTest")
    assert all(isinstance(b, bytes) for b in got) and sorted(b.decode() for b in got) == sorted(CAFFE2)  # Caffe2
    for name, want in CAFFE2.items():
        value = workspace.FetchBlob(name)
        assert value.dtype == (np.int32 if "timestep" in name else np.float32), name  # Caffe2's
        np.testing.assert_allclose(value, want, rtol=1e-6, err_msg=name)
    assert workspace.FetchBlob("extractTest_1").tolist() == got  # (Caffe2's list blob, one per op)


def test_a_weight_changed_since_the_run_is_a_located_error():
    model = _mul_rnn(weighted=True)
    workspace.FeedBlob("w", np.float32([0.5]))
    workspace.RunNetOnce(model.net)
    workspace.FeedBlob("w", np.float32([0.25]))  # (an optimizer's update, say: the steps ran with 0.5)
    with pytest.raises(DSLError, match="inputs or weights changed since the run") as e:
        recurrent.retrieve_step_blobs(model.net, "extractTest")
    assert e.value.loc.file.endswith("test_retrieve_step_blobs.py")
    workspace.FeedBlob("w", np.float32([0.5]))
    got = recurrent.retrieve_step_blobs(model.net, "extractTest")
    np.testing.assert_allclose(workspace.FetchBlob("extractTest_scaled2"), workspace.FetchBlob("scaled_last"))
    assert b"extractTest_scaled0" in got


def test_before_any_run_it_says_what_is_missing():
    model = _mul_rnn()
    with pytest.raises(DSLError, match="'test_rnn_sum_mull/output_t_prev_states' is not in the workspace"):
        recurrent.retrieve_step_blobs(model.net, "rnn")
