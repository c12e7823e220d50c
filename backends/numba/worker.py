"""The compile worker: ``python -m dslc.backends.numba.worker DIRECTORY [PARENT_PID]``.

Started by ``hot.Worker`` with the kernel directory its parent uses. Each line it reads
is a JSON request from that parent: a generated module's text (dslc's own, as the parent
would run it itself), a function's name in it, and the argument types as data
(``compiled.decode_type``: no pickle, nothing imported by name). It compiles the function,
which the kernel cache stores in DIRECTORY, and answers one JSON line. When its parent
has gone (stdin closed), it finishes what it read and exits: the next run loads those;
but for at most ``DSLC_NUMBA_WORKER_GRACE`` seconds (120) after the parent has gone: a
compile that runs on (numba's time grows faster than a region's size) is not left burning
a core for an hour after the job that asked for it died.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

from dslc.ir import settings

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


def watch_parent(parent: int, grace: float, exit=os._exit, poll: float = 1.0) -> None:
    """Wait until this process's parent is no longer ``parent`` (it died: the process was
    handed to another), then ``grace`` seconds more for what is being compiled, then exit."""
    while os.getppid() == parent:
        time.sleep(poll)
    time.sleep(grace)
    exit(0)


def main(argv) -> int:
    if len(argv) not in (2, 3) or not (len(argv) == 2 or argv[2].isdigit()):
        print("usage: python -m dslc.backends.numba.worker KERNEL_DIRECTORY [PARENT_PID]", file=sys.stderr)
        return 2
    # (the parent's pid as it gave it: one that died while this process was starting is gone already)
    parent = int(argv[2]) if len(argv) == 3 else os.getppid()
    try:
        grace = settings.count("DSLC_NUMBA_WORKER_GRACE", 120)
    except settings.SettingError:
        grace = 120  # (the parent's CLI refuses a bad value before it starts a worker)
    threading.Thread(target=watch_parent, args=(parent, grace), daemon=True).start()
    cache.use_directory(Path(argv[1]))
    serve(sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
