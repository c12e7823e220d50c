"""Source locations and the error types every layer raises.

Errors are values with a location, never bare strings: the CLI prints them as
``file:line: error: message`` followed by a hint on what to do.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .escape import LINE_LIMIT, cut, printable

_NEWLINES = re.compile(r"\s*\n\s*")


@dataclass(frozen=True, slots=True)
class Location:
    """A point in the user's source: the file and line of the call that made an op."""

    file: str
    line: int

    def __str__(self) -> str:
        """``file:line``, or just ``file`` when the line is not known (0)."""
        return f"{self.file}:{self.line}" if self.line > 0 else self.file


UNKNOWN_LOC = Location("<unknown>", 0)


def one_line(text: str) -> str:
    """``text`` as one printable line of at most ``LINE_LIMIT`` characters."""
    text = cut(str(text), 4 * LINE_LIMIT)  # (before escaping: bounded work on a huge message)
    return cut(printable(_NEWLINES.sub(" ", text)), LINE_LIMIT)


class DSLError(Exception):
    """A user-facing error: what went wrong, where, and what to do about it."""

    kind = "error"

    def __init__(self, message: str, loc: Location | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.hint = hint

    def one_line(self) -> str:
        """``file:line: error: message; hint`` on a single line of at most ``LINE_LIMIT``
        characters (a message may quote an input of any size: its middle is left out)."""
        where = f"{self.loc}: " if self.loc and self.loc != UNKNOWN_LOC else ""
        hint = f"; {self.hint}" if self.hint else ""
        # a message quoting an exception may span lines; the CLI promises one
        return one_line(f"{where}{self.kind}: {self.message}{hint}")

    def __str__(self) -> str:
        return self.one_line()

    def __reduce__(self):
        # errors travel between processes (a node of a cluster raises, the driver reports):
        # rebuild with every field, not by calling __init__ again on the final message
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls, args, state):
    e = cls.__new__(cls)
    Exception.__init__(e, *args)
    e.__dict__.update(state)
    return e


class TraceError(DSLError):
    """The DSL was used in a way that cannot be recorded (e.g. ``Elif`` after ``Else``)."""


class UnknownOperatorError(TraceError, AttributeError):
    """An operator name that is not declared in the op table."""


class VerifyError(DSLError):
    """The IR breaks an invariant: wrong arity, incompatible types, bad structure."""


class DSLTypeError(VerifyError):
    """Operand types an operator cannot accept."""


class ProgramTypeError(DSLTypeError):
    """Types of the user's program that cannot agree, found by a pass's type inference
    (a blob stored with two shapes, say): the user's error, at their line. The one kind
    of error a pass may raise on the user's behalf; any other is ``PassError``."""


class PassError(Exception):
    """A pass failed or left invalid IR: dslc's bug, never the user's (exit 1).

    Not a ``DSLError``: the CLI reports it as an internal error, naming the pass and
    the op the broken invariant is about.
    """

    def __init__(self, pass_name: str, error: BaseException, loc: Location | None = None):
        what = error.one_line() if isinstance(error, DSLError) else f"{type(error).__name__}: {error}"
        super().__init__(f"the pass {pass_name} broke the IR: {what}")
        self.pass_name = pass_name
        self.error = error
        self.loc = loc


class ExecutionError(DSLError, RuntimeError):
    """A failure while running a job: names the task and the op's line."""

    kind = "runtime error"

    def __init__(self, message, loc=None, hint=None, task: str | None = None):
        if task:
            message = f"in task '{task}': {message}"
        super().__init__(message, loc, hint)
        self.task = task


class NodeLostError(ExecutionError):
    """A node of a cluster stopped answering (its process died) while running a job."""

    def __init__(self, node: str, hint: str | None = None):
        super().__init__(f"node {node!r} was lost: its process died", None,
                         hint or "restart the job (a JobRunner with a checkpoint manager resumes by itself)")
        self.node = node


class JobFileError(DSLError):
    """A job file that cannot be loaded: missing, syntax error, no entry point."""


class UnusedArgumentWarning(UserWarning):
    """An operator was given an argument it does not read (kept in the IR, ignored)."""


_warned: set = set()


def warn_unused_args(op_name: str, names, loc: Location | None, misspelling=None) -> None:
    """Warn, once per op, argument and line, that ``op_name`` ignores the arguments ``names``.

    Caffe2 ignores an argument an operator does not read; so does dslc, but says so
    at the user's line (a misspelled argument would otherwise go unnoticed), naming the
    declared argument ``misspelling(name)`` gives, if any.
    """
    import warnings

    for name in names:
        key = (op_name, name, loc)
        if key in _warned:
            continue
        _warned.add(key)
        close = misspelling(name) if misspelling is not None else None
        typo = f"; did you mean {close!r}?" if close else ""
        msg = (f"{op_name} does not read the argument {name!r}; it is kept and ignored, "
               f"as Caffe2 ignores it (remove it to silence this){typo}")
        if loc and loc.line > 0:  # reported at the user's line
            warnings.warn_explicit(msg, UnusedArgumentWarning, loc.file, loc.line)
        else:
            warnings.warn(msg, UnusedArgumentWarning, stacklevel=2)
