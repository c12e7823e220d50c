"""The driver's options: how every session of this process compiles and runs.

The CLI sets them once (``dslc run``, ``compile`` and ``exec`` alike: ``--backend``,
``--passes``, ``--print-ir-after``, ``--dump-dir``, ``--time-passes``, ``--profile``) and
every ``LocalSession`` dslc creates reads them for what it is not told explicitly: the one a
job file runs in, and the implicit ones behind ``workspace.RunNet`` and friends.

    options.current().backend          # None: $DSLC_BACKEND, else interp
    with options.using(DriverOptions(backend="numba")): ...
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

from dslc import __version__, backends
from dslc.ir import print_module
from dslc.ir.diagnostics import DSLError
from dslc.ir.printer import stamped
from dslc.runtime.profile import OpProfile


@dataclass
class DriverOptions:
    """What the sessions of a run share. ``None`` leaves a choice to the environment
    (``DSLC_BACKEND``, ``DSLC_PIPELINE``, ``DSLC_DEBUG``) and then to dslc's default."""

    backend: str | None = None
    passes: object = None           # "default", "none", "a,b" or a list; None: $DSLC_PIPELINE, else default
    print_after: object = None      # None, "all" or a set of pass names
    ir_out: object = None           # the stream the IR printed after passes goes to (default stderr)
    verify_each: bool | None = None
    dump_dir: str | None = None     # each compiled module's IR (.dslir) and plan (.plan) go here
    time_passes: bool = False
    profile: bool = False
    pass_times: list = field(default_factory=list)  # (pass, seconds) of every pipeline run so far
    profiler: OpProfile | None = None  # with ``profile``: what every session's backend times its ops into
    _dumped: int = 0

    def __post_init__(self):
        if self.profile and self.profiler is None:
            self.profiler = OpProfile()

    def record_passes(self, times) -> None:
        self.pass_times.extend(times)

    def dump(self, module, source: str) -> list[str]:
        """Write ``module`` (optimized) to the dump directory as ``NNN-<source>.dslir`` and its
        plan as ``.plan``; the paths written."""
        if not self.dump_dir:
            return []
        os.makedirs(self.dump_dir, exist_ok=True)
        self._dumped += 1
        task = next((str(op.attrs["name"]) for op in module.walk() if op.name == "task"), "")
        stem = os.path.join(self.dump_dir, f"{self._dumped:03d}-{_stem(source or task)}")
        with open(stem + ".dslir", "w", encoding="utf-8") as f:
            f.write(stamped(print_module(module), __version__))
        written = [stem + ".dslir"]
        try:
            plan = backends.get("text")().compile(module)
        except Exception:  # (a plan is a courtesy: the IR was written)
            return written
        with open(stem + ".plan", "w", encoding="utf-8") as f:
            f.write(plan.text)
        return written + [stem + ".plan"]


def _stem(source: str) -> str:
    base = os.path.basename(source or "module")
    base = (base[:-3] if base.endswith(".py") else base) or "module"
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in base)[:60]


_CURRENT = [DriverOptions()]


def current() -> DriverOptions:
    return _CURRENT[0]


def use(options: DriverOptions) -> None:
    """Make ``options`` this process's driver options (the CLI, once per command)."""
    _CURRENT[0] = options


@contextlib.contextmanager
def using(options: DriverOptions):
    saved = _CURRENT[0]
    _CURRENT[0] = options
    try:
        yield options
    finally:
        _CURRENT[0] = saved


def default_backend() -> str:
    """The backend of sessions that name none: ``--backend``, else ``DSLC_BACKEND``, else
    interp (an unknown name fails here, as a located ``unknown backend`` error)."""
    name = current().backend
    if name:
        backends.get(name)
        return name
    name = os.environ.get("DSLC_BACKEND", "").strip() or "interp"
    try:
        backends.get(name)
    except DSLError as e:
        raise DSLError(f"DSLC_BACKEND={name!r}: {e.message}", e.loc, e.hint) from None
    return name


def timing_table(times) -> str:
    """Time per pass summed over every pipeline run (the passes in their first order), with a
    unit that shows them: ms below ten seconds in all, else s."""
    total = sum(t for _, t in times)
    per: dict[str, list] = {}
    for name, t in times:
        per.setdefault(name, [0.0, 0])
        per[name][0] += t
        per[name][1] += 1
    scale, unit = (1e3, "ms") if total < 10 else (1.0, "s")
    runs = max((n for _, n in per.values()), default=0)
    lines = [f"  pass timing: {runs} pipeline run{'s' if runs != 1 else ''}",
             f"  {'time (' + unit + ')':>11}    share   runs  pass",
             f"  {'-' * 11}  -------  -----  ----"]
    for name, (t, n) in per.items():
        share = 100 * t / total if total else 0.0
        lines.append(f"  {t * scale:11.3f}  {share:6.1f}%  {n:5d}  {name}")
    lines.append(f"  {total * scale:11.3f}   100.0%  {'':5}  total")
    return "\n".join(lines) + "\n"
