"""The compile worker: ``python -m dslc.backends.numba.worker DIRECTORY``.

Started by ``hot.Worker`` with the kernel directory its parent uses. Each line it reads
is a JSON request from that parent: a generated module's text (dslc's own, as the parent
would run it itself), a function's name in it, and the argument types as data
(``compiled.decode_type``: no pickle, nothing imported by name). It compiles the function,
which the kernel cache stores in DIRECTORY, and answers one JSON line. When its parent
has gone (stdin closed), it finishes what it read and exits: the next run loads those.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from . import cache
from .compiled import decode_type


def serve(lines, out) -> None:
    for line in lines:
        t = time.perf_counter()
        try:
            req = json.loads(line)
            mod = cache.module_for(req["source"])
            fn = getattr(mod, req["name"])
            fn.compile(tuple(decode_type(d) for d in req["sig"]))
            answer = {"id": req.get("id"), "ok": True}
        except Exception as e:  # noqa: BLE001  (the parent compiles it itself and reports what fails)
            answer = {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
        answer["seconds"] = round(time.perf_counter() - t, 3)
        try:
            out.write(json.dumps(answer) + "\n")
            out.flush()
        except (OSError, ValueError):
            pass  # (the parent has gone: keep filling the cache with what it asked for)


def main(argv) -> int:
    if len(argv) != 2:
        print("usage: python -m dslc.backends.numba.worker KERNEL_DIRECTORY", file=sys.stderr)
        return 2
    cache.use_directory(Path(argv[1]))
    serve(sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
