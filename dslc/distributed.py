"""``RaySession``: a job's Nodes as processes of a Ray cluster (docs/distributed.md).

dslc's public name for the distributed session; the machinery is the driver's
(``dslc.driver.distributed``).
"""
from dslc.driver.distributed import ClusterUnavailable, RaySession  # noqa: F401
