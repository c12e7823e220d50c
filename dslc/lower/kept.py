"""What a Load with ``allow_incomplete`` gives the blobs its checkpoint lacks: their values.

Such a Load reads those blobs, so the IR says so: its operands are the outputs'
current values, each an optional ``load`` (unset blobs stay unset) unless the block
already holds it as an SSA value. Passes then see the read, and keep what it needs.

    ops.Load([], ["w"], allow_incomplete=True)
        ->  %w0 = load @"w" {optional = true} : any
            %w = Load(%w0) {allow_incomplete = true, output_names = ["w"], ...}
"""
from __future__ import annotations

from dslc.ir import Symbol
from dslc.ir.types import ANY


def kept_values(blk, rec) -> list:
    values = []
    for name in rec.outputs:
        key = blk.key(name, True, rec.loc)  # the slot the Load's result will be written to
        v = blk.lookup(key)
        if v is None:
            v = blk.b.value("load", attrs={"blob": Symbol(key), "optional": 1}, result_types=[ANY],
                            loc=rec.loc)
        values.append(v)
    return values
