"""The local Ray cluster the distributed tests share (one per test session).

Two raylets on this host stand in for two machines: the head offers the custom
resource ``host_a``, the second ``host_b``. Everything listens on 127.0.0.1; HOME lives
under the session's tmp path and Ray's temp dir where ``dslc run --cluster ray`` puts
its own (a new directory in /tmp, removed at the end), so that what another user of the
machine could reach there is tested as it is; the cluster is stopped by the PIDs it
started. Without Ray installed the tests that use it are skipped.
"""
from __future__ import annotations

import sys

import pytest

RESOURCES_A = {"host_a": 100}
RESOURCES_B = {"host_b": 100}


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    pytest.importorskip("ray")
    from dslc.backends.ray.cluster import LocalCluster, short_temp_dir

    base = tmp_path_factory.mktemp("ray")
    (base / "home").mkdir()
    cluster = LocalCluster(short_temp_dir("dslc-raytest-"), num_cpus=2, resources=RESOURCES_A,
                           second_raylet=RESOURCES_B, home=str(base / "home"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        cluster.remove_temp_dir()


@pytest.fixture(scope="session")
def shared_ray_session(ray_cluster):
    """One RaySession for the test session: node processes are reused by node name (a Ray
    worker process takes seconds to start on a loaded machine)."""
    from ray import cloudpickle

    from dslc.distributed import RaySession
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # no node can import tests/
    with RaySession(node_setup=compile_everything) as s:
        yield s


def compile_everything():
    """In each node's process, as conftest does here: numba compiles every island it can."""
    from dslc.backends.numba import islands
    islands.MIN_WORK = 0


@pytest.fixture(params=["interp", "numba"])
def ray_session(request, shared_ray_session):
    """The shared RaySession on one backend, with empty node workspaces for each test."""
    s = shared_ray_session
    s.backend_name = request.param
    s.reset()
    yield s
    s.reset()
