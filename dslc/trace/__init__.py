"""The tracer: what a Caffe2-style program's calls record.

Op records (``oprecord``), blob references (``blobref``), the Net and its recording
(``net_record``, ``net``, ``netdef``, ``net_clone``, ``net_ssa``), execution steps and
plans and their messages (``steps``), the builders' blocks (``builder_base``,
``builder_blocks``), the user-location tracking every error uses (``tracing``), the
name registries (``names``) and device options (``devices``). The Caffe2-named modules
of ``dslc`` (``core``, ``net_builder`` ...) re-export these; lowering (``dslc.lower``)
reads what they recorded.
"""
