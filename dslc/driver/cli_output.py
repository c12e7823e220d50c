"""What the ``dslc`` commands print and write: values, JSON, summaries, artifacts, pictures."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np

from dslc.ir.diagnostics import DSLError, UNKNOWN_LOC
from dslc.ir.escape import cut, printable, printable_lines
from dslc import __version__
from dslc.ir import print_module
from dslc.ir.printer import stamped
from dslc.ir.pyrefs import check_portable

GRAPH_FORMATS = {".dot": "dot", ".gv": "dot", ".svg": "svg", ".png": "png"}


# ----------------------------------------------------------------------------- values


def text(v) -> str:
    """A fetched value as ``dslc run`` prints it: scalars bare, arrays as lists (control
    characters in strings escaped: they reach a terminal)."""
    return printable_lines(_text(v))


def _text(v) -> str:
    if isinstance(v, np.ndarray) and v.ndim == 0:
        return str(v[()])
    if isinstance(v, list):
        return "[" + ", ".join(_text(x) for x in v) + "]"
    return np.array2string(v, separator=", ") if isinstance(v, np.ndarray) else str(v)


def jsonable(v):
    if isinstance(v, np.ndarray):
        return v.tolist() if v.dtype != object else [str(x) for x in v.reshape(-1)]
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, list):
        return [jsonable(x) for x in v]
    return v if isinstance(v, (int, float, str, bool, type(None))) else str(v)


def emit_json(obj, stream=None) -> None:
    (stream or sys.stdout).write(json.dumps(obj) + "\n")


def error_json(e: DSLError, code: int) -> dict:
    loc = e.loc if e.loc is not None and e.loc != UNKNOWN_LOC else None
    return {"error": {"kind": e.kind, "message": cut(e.message), "hint": e.hint and cut(e.hint),
                      "file": loc.file if loc else None, "line": loc.line if loc else None},
            "exit_code": code}


def internal_json(e: Exception) -> dict:
    return {"error": {"kind": "internal error", "message": cut(f"{type(e).__name__}: {e}"),
                      "hint": "this is a bug in dslc: rerun with --debug for the traceback",
                      "file": None, "line": None}, "exit_code": 1}


# ----------------------------------------------------------------------------- files


def write(path: str | None, content: str) -> None:
    """``content`` into ``path``, or to stdout when there is no path."""
    if not path:
        sys.stdout.write(content)
        return
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(content)
    except OSError as e:
        raise DSLError(f"cannot write {path!r}: {e.strerror}",
                       hint="check that its directory exists and is writable") from None


def write_artifacts(directory: str, compiled) -> list[str]:
    """``dslc compile -o DIR``: each module's optimized IR and its program's own artifacts.

    The first module writes ``DIR/job.dslir`` and its artifacts into DIR; module k > 1
    (a job returning several runnables) writes ``DIR/job_k.dslir`` and ``DIR/job_k/``.
    """
    written = []
    for k, (module, program) in enumerate(compiled, 1):
        check_portable(module, os.path.join(directory, ("job" if k == 1 else f"job_{k}") + ".dslir"))
        stem = "job" if k == 1 else f"job_{k}"
        where = directory if k == 1 else os.path.join(directory, stem)
        try:
            os.makedirs(where, exist_ok=True)
        except OSError as e:
            raise DSLError(f"cannot create the directory {where!r}: {e.strerror}",
                           hint="pick an output directory you can write to") from None
        path = os.path.join(directory, stem + ".dslir")
        write(path, stamped(print_module(module), __version__))
        written.append(path)
        writer = getattr(program, "write_artifacts", None)
        if writer is not None:
            written += list(writer(where))
    return written


# ----------------------------------------------------------------------------- compile summaries


def describe_program(module, program) -> dict:
    """The facts ``dslc compile`` reports for one compiled module (see dslc.backends)."""
    ops = sum(1 for _ in module.walk()) - 1
    tasks = sum(1 for op in module.walk() if op.name == "task")
    summary = getattr(program, "summary", None)
    listing = getattr(program, "listing", None)
    return {"tasks": tasks, "ops": ops, "summary": dict(summary()) if summary else {},
            "listing": listing() if listing else None}


def summary_lines(summary: dict) -> list[str]:
    """A backend's summary as indented lines: a list or dict value one item per line
    (a dict's as ``count  what``), never Python's repr of it."""
    lines = []
    for k, v in summary.items():  # (items name the input's files and ops: printable)
        if isinstance(v, dict):
            lines.append(f"  {k}: {'none' if not v else ''}".rstrip())
            lines += [f"    {n:>5}  {printable(what)}" for what, n in v.items()]
        elif isinstance(v, (list, tuple)):
            lines.append(f"  {k}: {len(v) if v else 'none'}")
            lines += [f"    {printable(item)}" for item in v]
        else:
            lines.append(f"  {k}: {printable(v)}")
    return lines


def summary_line(job: str, backend: str, report: dict, passes: int) -> str:
    tasks = report["tasks"]
    return (f"compiled {printable(job)} for {backend}: {tasks} task{'s' if tasks != 1 else ''}, "
            f"{report['ops']} ops after {passes} pass{'es' if passes != 1 else ''}")


# ----------------------------------------------------------------------------- pictures


def graph_format(path: str | None) -> str:
    if not path:
        return "dot"
    ext = os.path.splitext(path)[1].lower()
    fmt = GRAPH_FORMATS.get(ext)
    if fmt is None:
        raise DSLError(f"cannot tell the picture format of {path!r}",
                       hint="end the file name with .svg, .png or .dot")
    return fmt


def render_dot(dot_text: str, path: str, fmt: str) -> None:
    """Write DOT text as ``fmt`` to ``path``; .dot needs nothing, other formats need ``dot``."""
    if fmt == "dot":
        return write(path, dot_text)
    exe = shutil.which("dot")
    if exe is None:
        raise DSLError(f"cannot draw {path}: graphviz's `dot` program is not installed",
                       hint="install graphviz (apt-get install graphviz), or write DOT with -o FILE.dot")
    try:
        proc = subprocess.run([exe, f"-T{fmt}", "-o", path], input=dot_text.encode("utf-8"),
                              capture_output=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise DSLError(f"graphviz took too long to draw {path}",
                       hint="draw one task with --net NAME, or write DOT with -o FILE.dot") from None
    if proc.returncode != 0:
        why = " ".join(proc.stderr.decode("utf-8", "replace").split()) or f"exit code {proc.returncode}"
        if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise DSLError(f"cannot write {path!r}: its directory does not exist",
                           hint="create the directory first, or pick another path")
        raise DSLError(f"graphviz could not draw {path}: {why}",
                       hint="write DOT with -o FILE.dot to look at the input")
