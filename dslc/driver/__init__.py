"""The driver: what runs a traced program. The command line (``cli``, ``cli_parser``,
``cli_output``), job files (``jobfile``), the workspace's runner and its helpers (DB API
``db_api``, shape inference ``shapes``, net ``transforms``, ``immediate`` mode), the
distributed session (``distributed``), progress reports (``progress``) and operator docs
(``opdocs``). The only front-end layer that imports ``dslc.backends`` (through its registry).
"""
