"""data_workers: fetched rows cut into batches, queued, and dequeued by the model's net."""
from __future__ import annotations

import numpy as np

from dslc import data_workers, workspace
from dslc.model_helper import ModelHelper


def fetch(worker_id, batch_size):
    """A chunk of 1..9 rows; row j of worker w is w * 1000 + a running count, in data and label."""
    n = np.random.randint(1, 10)
    start = fetch.counts.setdefault(worker_id, 0)
    fetch.counts[worker_id] = start + n
    rows = worker_id * 1000 + np.arange(start, start + n, dtype=np.float32)
    return [np.repeat(rows[:, None], 3, axis=1), rows.astype(np.int64)]


fetch.counts = {}


def test_batches_of_the_fetched_rows_reach_the_net():
    workspace.ResetWorkspace()
    model = ModelHelper(name="dw")
    coordinator = data_workers.init_data_input_workers(model, ["data", "label"], fetch, 8, num_worker_threads=2,
                                                       input_source_name="dw_test")
    assert model.net.Proto().op[0].type == "DequeueBlobs"
    coordinator.start()
    workspace.RunNetOnce(model.param_init_net)
    workspace.CreateNet(model.net)
    seen = []
    for _ in range(20):
        workspace.RunNet(model.net.Proto().name)
        data, label = workspace.FetchBlob("data"), workspace.FetchBlob("label")
        assert data.shape == (8, 3) and label.shape == (8,)
        np.testing.assert_array_equal(data[:, 0], label)  # rows stay together
        np.testing.assert_array_equal(data[:, 2], label)
        seen.extend(label.tolist())
    assert len(seen) == len(set(seen)) == 160  # no row twice
    for worker in {int(v) // 1000 for v in seen}:  # each worker's rows arrive in order
        mine = [v for v in seen if int(v) // 1000 == worker]
        assert mine == sorted(mine)
    coordinator.stop_coordinator("dw_test")
    assert coordinator._coordinators == []
