"""Whose fault an exception is: the user's code (their job file or script, the libraries it
calls) or dslc itself; and the user's traceback, as ``python script.py`` would print it.

    raised_inside_dslc(e)      True: a dslc bug (an internal error); False: the user's
    user_traceback(e, path)    the traceback text from ``path``'s first frame on, each run of
                               frames inside dslc shown as one "[N frames inside dslc]" line

An exception is dslc's when the innermost frame that is neither a library's (numpy, the
standard library) nor the interpreter's is one of dslc's files, with one exception: a
``TypeError`` raised while calling a function with the arguments a dslc wrapper passes on
from the user (``brew.fc(model, ..., dim_outt=2)`` reaches ``fc`` through brew's
``helper(*args, **kwargs)``) is the user's: the wrapper forwards what the user wrote.
"""
from __future__ import annotations

import contextlib
import difflib
import inspect
import os
import re
import sysconfig
import traceback

from dslc.trace import tracing

_LIBRARY_DIRS = tuple(os.path.join(os.path.abspath(p), "") for p in
                      {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})
# CPython's messages for arguments that do not fit a function's signature
_CONTEXTLIB = os.path.abspath(contextlib.__file__)
_BINDING = re.compile(r"^(?P<name>[\w.<>]+)\(\) (got an unexpected keyword argument '(?P<kw>\w+)'|"
                      r"missing \d+ required|takes \d+|takes from \d+|got multiple values|got some positional-only)")


def is_library(filename: str) -> bool:
    """Installed or standard-library code, or code with no file (``<frozen ...>``)."""
    return filename.startswith("<") or os.path.abspath(filename).startswith(_LIBRARY_DIRS)


def _tbs(e: BaseException) -> list:
    """The traceback entries of ``e``, outermost first."""
    out, tb = [], e.__traceback__
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


def raised_inside_dslc(e: BaseException, skip: str = "") -> bool:
    """Whether ``e`` is a failure of dslc itself rather than of the user's code (see the
    module's docstring); frames of the file ``skip`` (the caller's own) do not count."""
    skip = os.path.abspath(skip) if skip else ""
    for tb in reversed(_tbs(e)):
        filename = tb.tb_frame.f_code.co_filename
        if skip and os.path.abspath(filename) == skip:
            continue
        if tracing.is_own_file(filename):
            return not forwarded_arguments(e, tb.tb_frame)
        if not is_library(filename):
            return False
    return False


def forwarded_arguments(e: BaseException, frame) -> bool:
    """Whether ``e`` is a call's ``TypeError`` for arguments that ``frame``, a function taking
    ``*args`` or ``**kwargs``, passed on from its caller; then a note names the parameter a
    mistyped keyword probably meant."""
    if not isinstance(e, TypeError):
        return False
    m = _BINDING.match(str(e))
    if m is None or not frame.f_code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return False
    if m.group("kw"):
        _note_close_keyword(e, frame, m.group("name").rsplit(".", 1)[-1], m.group("kw"))
    elif "missing" in str(e):
        _note_close_given(e, frame, re.findall(r"'(\w+)'", str(e)))
    return True


def _note_close_given(e: BaseException, frame, missing: list) -> None:
    """A required parameter is missing while the wrapper passed on a keyword close to its name
    (the callee takes ``**kwargs``, so the typo itself was accepted)."""
    given = [k for v in frame.f_locals.values() if isinstance(v, dict) for k in v if isinstance(k, str)]
    for name in missing:
        close = difflib.get_close_matches(name, given, 1)
        if close and close[0] != name and hasattr(e, "add_note") and not getattr(e, "__notes__", None):
            e.add_note(f"did you mean {name}= where you wrote {close[0]}=?")
            return


def _note_close_keyword(e: BaseException, frame, name: str, keyword: str) -> None:
    for value in frame.f_locals.values():  # (the function called: a local of the wrapper)
        if callable(value) and getattr(value, "__name__", None) == name:
            try:
                params = list(inspect.signature(value).parameters)
            except (TypeError, ValueError):
                return
            close = difflib.get_close_matches(keyword, params, 1)
            if close and hasattr(e, "add_note") and not getattr(e, "__notes__", None):
                e.add_note(f"did you mean {close[0]}? {name}() takes: {', '.join(params)}")
            return


def innermost_user_line(e: BaseException) -> tuple[str, int] | None:
    """(file, line) of the innermost frame of ``e`` in the user's code."""
    for tb in reversed(_tbs(e)):
        filename = tb.tb_frame.f_code.co_filename
        if not tracing.is_own_file(filename) and not is_library(filename):
            return filename, tb.tb_lineno
    return None


class _Hidden(traceback.FrameSummary):
    """Stands for a run of frames inside dslc (``dslc_hidden`` of them)."""


class _Trimmed(traceback.StackSummary):
    """A stack whose runs of dslc frames print as one line each."""

    def format_frame_summary(self, frame_summary):
        hidden = getattr(frame_summary, "dslc_hidden", 0)
        if hidden:
            return f"  [{hidden} frame{'s' if hidden > 1 else ''} inside dslc]\n"
        return super().format_frame_summary(frame_summary)


def _trim(stack, path: str) -> _Trimmed:
    frames = list(stack)
    path = os.path.abspath(path)
    starts = [i for i, f in enumerate(frames) if os.path.abspath(f.filename) == path]
    if starts:  # (runpy's and dslc's frames above the script's first are not the user's)
        frames = frames[starts[0]:]
    out: list = []
    for f in frames:
        if tracing.is_own_file(f.filename) or (out and getattr(out[-1], "dslc_hidden", 0)
                                               and f.filename == _CONTEXTLIB):
            if out and getattr(out[-1], "dslc_hidden", 0):
                out[-1].dslc_hidden += 1
            else:
                marker = _Hidden(f.filename, f.lineno, f.name, line="")
                marker.dslc_hidden = 1
                out.append(marker)
        else:
            out.append(f)
    trimmed = _Trimmed()
    trimmed.extend(out)
    return trimmed


def user_traceback(e: BaseException, path: str, outer: BaseException | None = None) -> str:
    """The traceback of ``e`` as ``python path`` prints it, chained exceptions included, with
    the frames above the script's and each run of frames inside dslc left out. ``outer``: the
    exception ``e`` was re-raised as inside dslc (a Python op's error): its frames, the script's
    call into dslc, come first, so the traceback runs from the script's line to the raise."""
    te = traceback.TracebackException.from_exception(e)
    if outer is not None:
        calls = traceback.TracebackException.from_exception(outer).stack
        te.stack = traceback.StackSummary.from_list(list(calls) + list(te.stack))
    seen = set()
    todo = [te]
    while todo:
        t = todo.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        t.stack = _trim(t.stack, path)
        todo += [c for c in (t.__cause__, t.__context__) if c is not None]
    return "".join(te.format())
