"""The distributed tests' fixtures: one local Ray cluster per pytest run (ray_fixtures.py)."""
from ray_fixtures import ray_cluster, ray_session, shared_ray_session  # noqa: F401
