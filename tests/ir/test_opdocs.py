"""docs/ir.md is generated from the op table and must match it (so it cannot drift)."""
from __future__ import annotations

from dslc.driver import opdocs
from dslc.ir import OPS
import paths

IR_MD = paths.ROOT / "docs" / "ir.md"


def test_ir_md_matches_the_op_table():
    assert IR_MD.exists(), "docs/ir.md is missing: run python -m dslc.driver.opdocs"
    assert IR_MD.read_text(encoding="utf-8") == opdocs.render(), \
        "docs/ir.md is stale: run python -m dslc.driver.opdocs from the repository root"


def test_every_op_has_a_row_and_a_doc_line():
    rows = {line.split("|")[1].strip().strip("`") for line in opdocs.render().splitlines()
            if line.startswith("| `")}
    for d in OPS:
        assert d.name in rows
        assert d.doc.strip(), f"{d.name} has no doc line"
        assert d.module.startswith("dslc.ir.ops."), f"{d.name} was declared outside ir/ops"


def test_rows_show_arity_attributes_and_effects():
    rows = {line.split("|")[1].strip().strip("`"): line for line in opdocs.render().splitlines()
            if line.startswith("| `")}
    assert rows["Add"].startswith("| `Add` | 2 | 1 | `broadcast = 0`, `axis = -1` |")
    assert "| 1+ | 1 |" in rows["Sum"]
    assert "`value` (required)" in rows["Const"]
    assert "| write counter |" in rows["CountUp"]
    assert "`then`, `else`" in rows["if"]
    assert "y = \\|x\\|" in rows["Abs"]  # a | in a doc line must not split the table cell


def test_check_mode(tmp_path):
    out = tmp_path / "ir.md"
    assert opdocs.main(["--check", "-o", str(out)]) == 1   # missing
    assert opdocs.main(["-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == opdocs.render()
    assert opdocs.main(["--check", "-o", str(out)]) == 0
    out.write_text("stale\n", encoding="utf-8")
    assert opdocs.main(["--check", "-o", str(out)]) == 1
