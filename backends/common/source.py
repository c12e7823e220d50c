"""The Python names a job gives its blobs, read back from the job's own source lines.

Auto-generated blob names (``local/task/GivenTensorInt64Fill:0``) say little; the line
that made the op usually says more::

    total = ops.Const(0)                  # line 18 -> the op's output is "total"
    ops.Add([total, val], [total])        # line 32 -> the output list names it "total"
    instances, calls = ops.Python(f)([], 2)   # -> "instances", "calls"

``names_at(loc)`` returns those names for the statement at ``loc`` (explicit output
lists first, else assignment targets), or None. It only reads files, never runs them;
a file that cannot be read or parsed simply gives no names.
"""
from __future__ import annotations

import ast


class SourceNames:
    """Statement names per (file, line), each file parsed once."""

    def __init__(self):
        self._files: dict[str, dict[int, tuple[list[str], int]]] = {}

    def names_at(self, loc) -> list[str] | None:
        got = self._at(loc)
        return got[0] if got else None

    def called_at(self, loc) -> tuple[str | None, int]:
        """(the statement's outermost op call, how many calls of that name it makes):
        ``x = ops.Add([a, ops.Const(1)])`` -> ("Add", 1); ``q = pipe(...)`` -> (None, 0)."""
        got = self._at(loc)
        return (got[1], got[2]) if got else (None, 0)

    def _at(self, loc):
        if loc is None or loc.line <= 0 or loc.file.startswith("<"):
            return None
        table = self._files.get(loc.file)
        if table is None:
            table = self._files[loc.file] = _scan(loc.file)
        return table.get(loc.line)


def _scan(path: str) -> dict[int, tuple[list[str], int]]:
    # read the file itself: linecache would serve an older job.py from another directory
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return {}
    table: dict[int, tuple[list[str], str | None, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.Expr, ast.AnnAssign, ast.Return)):
            names = _statement_names(node)
            if names:
                outer = _op_call(node.value)
                same = sum(_callee(n) == outer for n in ast.walk(node) if isinstance(n, ast.Call))
                # every line of a multi-line statement: the recorded line is the call's
                for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                    table.setdefault(line, (names, outer, same))
    return table


def _callee(call) -> str | None:
    """``ops.Add(...)`` -> "Add"; ``ops.Python(f)(...)`` -> "Python"; ``f(...)`` -> None."""
    func = call.func
    if isinstance(func, ast.Call):
        func = func.func
    return func.attr if isinstance(func, ast.Attribute) else None


def _op_call(value) -> str | None:
    """The op the statement's value comes from, through wrappers of one call such as
    ``final_output(ops.RetrieveCount(c))``; None for anything else (``pipe(reader, ...)``
    makes many ops, none of them the statement's)."""
    while isinstance(value, ast.Call):
        name = _callee(value)
        if name is not None:
            return name
        if len(value.args) != 1 or value.keywords:
            return None
        value = value.args[0]
    return None


def _statement_names(node) -> list[str] | None:
    value = getattr(node, "value", None)
    explicit = _output_list(value)
    if explicit:
        return explicit
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        return _targets(node.targets[0])
    if isinstance(node, ast.AnnAssign):
        return _targets(node.target)
    return None


def _output_list(value) -> list[str] | None:
    """The names in a call's output argument: ``ops.Add([a, b], [c])`` -> ["c"]."""
    call = value
    # net.Op(ins, outs) or ops.Python(f)(ins, outs); a plain f(a, b) is the job's own helper
    if not isinstance(call, ast.Call) or not isinstance(call.func, (ast.Attribute, ast.Call)):
        return None
    outs = call.args[1] if len(call.args) >= 2 else None
    for kw in call.keywords:
        if kw.arg in ("outputs", "blob_out"):
            outs = kw.value
    if outs is None:
        return None
    items = outs.elts if isinstance(outs, (ast.List, ast.Tuple)) else [outs]
    names = [_dotted(x) for x in items]
    return names if names and all(names) else None


def _targets(t) -> list[str] | None:
    items = t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]
    names = [_dotted(x) for x in items]
    return names if names and all(names) else None


def _dotted(node) -> str | None:
    """``x`` or ``rec.val`` as text; anything else (a literal, a call, a subscript) is None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None
