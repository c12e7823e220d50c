"""Generate the operator reference, ``docs/ir.md``, from the op table.

    python -m dslc.driver.opdocs            # (re)write docs/ir.md
    python -m dslc.driver.opdocs --check    # exit 1 if docs/ir.md differs from the table

Every op is one row: name, operand and result counts, attributes with their
defaults, traits (and whether it may fail), effects, regions and the one-line semantics from its ``doc``.
Ops are grouped by the ``ir/ops`` module that declares them. ``tests/ir/test_opdocs.py``
fails when the committed file is stale, so the reference cannot drift.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from dslc.ir import OPS
from dslc.ir.opdef import REQUIRED, TRAIT_DOCS, OpDef
from dslc.ir.printer import format_attr
from dslc.ir.diagnostics import DSLError

DEFAULT_PATH = Path("docs") / "ir.md"
# Modules in reading order; any other module that declares ops follows, in table order.
MODULE_ORDER = ("dslc.ir.ops.tensor", "dslc.ir.ops.effects", "dslc.ir.ops.structure")
HEADER = ("op", "operands", "results", "attributes", "traits", "effects", "regions", "semantics")


def render() -> str:
    """The whole of docs/ir.md, as the current op table describes it."""
    groups = _by_module()
    lines = [
        "# IR operator reference",
        "",
        "Generated from the op table (`ir/ops/`) by `python -m dslc.driver.opdocs`; do not edit by hand.",
        f"{sum(map(len, groups.values()))} operators in {len(groups)} modules.",
        "",
        "Counts: `2` exactly two, `0..1` zero or one, `1+` one or more. An attribute without a",
        "default is *required*; a *symbol* attribute prints as `@\"name\"` right after the op name.",
        "Effects are `mode resource`: ops touching one resource stay in order.",
        "",
        "| trait | meaning |",
        "|---|---|",
    ]
    lines += [f"| {t} | {_cell(doc)} |" for t, doc in TRAIT_DOCS.items()]
    for module, defs in groups.items():
        lines += ["", f"## `{module}`", "", _summary(module), ""]
        lines.append("| " + " | ".join(HEADER) + " |")
        lines.append("|" + "---|" * len(HEADER))
        lines += [_row(d) for d in defs]
    return "\n".join(lines) + "\n"


def render_ops(names) -> str:
    """The reference's rows of the ops ``names`` (under the table header); an unknown name
    is a DSLError suggesting close ones."""
    rows = []
    for name in names:
        d = OPS.get(name)
        if d is None:
            close = OPS.suggest(name)
            raise DSLError(f"no operator {name!r} in the op table",
                           hint=f"did you mean {' or '.join(close)}?" if close
                           else f"`dslc ops` lists all {sum(1 for _ in OPS)} operators")
        rows.append(_row(d))
    return "\n".join(["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER), *rows]) + "\n"


def _by_module() -> dict[str, list[OpDef]]:
    groups: dict[str, list[OpDef]] = {m: [] for m in MODULE_ORDER}
    for d in OPS:
        groups.setdefault(d.module or "(unknown module)", []).append(d)
    return {m: defs for m, defs in groups.items() if defs}


def _summary(module: str) -> str:
    """The first paragraph of the module's docstring, on one line."""
    try:
        doc = importlib.import_module(module).__doc__ or ""
    except ImportError:
        doc = ""
    para = doc.strip().split("\n\n")[0]
    return " ".join(para.split()) or "(no module docstring)"


def _row(d: OpDef) -> str:
    cells = [f"`{d.name}`", _count(d.operands), _count(d.results), _attrs(d),
             ", ".join(sorted(d.traits) + _may_fail(d)) or "-",
             ", ".join(f"{e.mode} {e.resource}" for e in d.effects) or "-",
             _regions(d.regions), d.doc or "(undocumented)"]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _may_fail(d: OpDef) -> list[str]:
    """``may fail`` and when (the first line of the predicate's docstring), or nothing."""
    if d.may_fail is None:
        return []
    when = (d.may_fail.__doc__ or "").strip().split("\n")[0]
    return [f"may fail ({when.rstrip('.')})" if when else "may fail"]


def _count(span: tuple[int, int | None]) -> str:
    lo, hi = span
    if hi is None:
        return f"{lo}+"
    return str(lo) if lo == hi else f"{lo}..{hi}"


def _attrs(d: OpDef) -> str:
    parts = []
    for name, default in d.attrs.items():
        notes = (["required"] if default is REQUIRED else []) + (["symbol"] if name == d.symbol else [])
        text = f"`{name}`" if default is REQUIRED else f"`{name} = {format_attr(default)}`"
        parts.append(text + (f" ({', '.join(notes)})" if notes else ""))
    return ", ".join(parts) or "-"


def _regions(names: tuple[str, ...]) -> str:
    if names == ("*",):
        return "one or more"
    return ", ".join(f"`{n}`" for n in names) or "-"


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dslc.driver.opdocs", description=__doc__.split("\n")[0])
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_PATH,
                        help="where to write (default: docs/ir.md)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the file is missing or stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
        if current != text:
            print(f"{args.output} is stale: run python -m dslc.driver.opdocs", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output} ({sum(1 for _ in OPS)} operators)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
