"""Caffe2's indexes (IntIndexCreate & co.): the ids, sizes, stores and loads the real
Caffe2 (torch 1.10.2's) gives for the same calls, on both backends."""
from __future__ import annotations

import numpy as np
import pytest

from dslc import core, workspace
from dslc import hypothesis_test_util as hu


def _run(do, *args, **kwargs):
    workspace.RunOperatorOnce(core.CreateOperator(*args, device_option=do, **kwargs))


@pytest.mark.parametrize("do", hu.device_options, ids=["interp", "numba"])
def test_an_index_grows_freezes_stores_and_loads_as_caffe2s(do):
    workspace.ResetWorkspace()
    _run(do, "LongIndexCreate", [], ["idx"], max_elements=4)
    workspace.FeedBlob("k", np.array([10, 20, 10, 30], np.int64))
    _run(do, "IndexGet", ["idx", "k"], ["ids"])
    assert workspace.FetchBlob("ids").tolist() == [1, 2, 1, 3]
    _run(do, "IndexSize", ["idx"], ["n"])
    assert int(workspace.FetchBlob("n")) == 4  # (the next id: 3 keys and id 0)
    workspace.FeedBlob("k2", np.array([40], np.int64))
    with pytest.raises(RuntimeError, match="max_elements=4"):  # (Caffe2: "Dict max size reached")
        _run(do, "IndexGet", ["idx", "k2"], ["ids2"])
    _run(do, "IndexFreeze", ["idx"], ["idx"])
    workspace.FeedBlob("k3", np.array([70, 10], np.int64))
    _run(do, "IndexGet", ["idx", "k3"], ["ids3"])
    assert workspace.FetchBlob("ids3").tolist() == [0, 1]
    _run(do, "IndexStore", ["idx"], ["items"])
    assert workspace.FetchBlob("items").tolist() == [10, 20, 30]
    _run(do, "LongIndexCreate", [], ["idx2"])
    workspace.FeedBlob("items2", np.array([0, 7, 8, 9], np.int64))
    _run(do, "IndexLoad", ["idx2", "items2"], ["idx2"], skip_first_entry=1)
    workspace.FeedBlob("k4", np.array([9, 7, 5], np.int64))
    _run(do, "IndexGet", ["idx2", "k4"], ["ids4"])
    assert workspace.FetchBlob("ids4").tolist() == [3, 1, 4]
    _run(do, "IndexStore", ["idx2"], ["items3"])
    assert workspace.FetchBlob("items3").tolist() == [7, 8, 9, 5]
    _run(do, "StringIndexCreate", [], ["sidx"])
    workspace.FeedBlob("sk", np.array(["a", "b", "a"], dtype=object))
    _run(do, "IndexGet", ["sidx", "sk"], ["sids"])
    assert workspace.FetchBlob("sids").tolist() == [1, 2, 1]
    _run(do, "IntIndexCreate", [], ["iidx"])
    workspace.FeedBlob("ik", np.array([[5, 6], [5, 7]], np.int32))
    _run(do, "IndexGet", ["iidx", "ik"], ["iids"])
    assert workspace.FetchBlob("iids").tolist() == [[1, 2], [1, 3]]
