"""The distributed backend: each Node of a job in its own process of a Ray cluster.

Not a backend of the registry (it runs no module itself): ``worker.NodeWorker`` is
the Ray actor that holds one node's root workspace and runs that node's part of a
module on a registry backend (interp or numba), ``split`` says which part of a
module is whose, ``queues`` carries queues between nodes, and ``cluster`` starts,
joins and stops clusters. The driver is ``dslc.distributed.RaySession``. Importing
this package needs no Ray; using it does (``pip install 'dslc[ray]'``).
"""
