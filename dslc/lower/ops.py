"""Lowering one recorded op: Caffe2 spellings to declared ops, blob names to SSA values."""
from __future__ import annotations

import numpy as np

from dslc.trace.oprecord import FILL_ALIASES, OpRecord, is_operator
from dslc.ir.budget import foldable
from dslc.ir.diagnostics import DSLError, UnknownOperatorError, VerifyError, warn_unused_args
from dslc.ir.escape import brief
from dslc.ir.opdef import ELEMENTWISE, MODEL_SCOPE_SWITCHES, OPS, misspelling_of, type_error
from dslc.ir.ops.infer import dtype_from_code
from dslc.ir.ops.tensor import fill_value
from dslc.ir.types import ANY, NUMPY_DTYPES

from .blocks import Block, is_sync
from .control import CONTROL_OPS, lower_control
from .kept import kept_values


_LISTED = 20  # unknown operators named one by one in the error (the rest are counted)


def check_known(records, net_name: str) -> None:
    """Raise one UnknownOperatorError naming every op of ``records`` (a net's ops, in order)
    whose type dslc does not have, each with its index in the net and its name, so that
    a converted model's gaps show in one run. ``error.unknown`` lists (index, type, name)."""
    unknown = [(i, rec) for i, rec in enumerate(records)
               if not (is_operator(rec.type) or rec.type in CONTROL_OPS)]
    if not unknown:
        return
    types = sorted({rec.type for _, rec in unknown})
    listed = ", ".join(f"#{i} {rec.type}" + (f" ({rec.extra['name']!r})" if rec.extra.get("name") else "")
                       for i, rec in unknown[:_LISTED])
    more = f", and {len(unknown) - _LISTED} more" if len(unknown) > _LISTED else ""
    which = f"{len(unknown)} ops of types dslc does not have" if len(unknown) > 1 else "an op of a type dslc does not have"
    e = UnknownOperatorError(f"net {net_name!r} has {which} ({', '.join(types)}): {listed}{more}",
                             unknown[0][1].loc, "`dslc ops` lists the operators dslc has; "
                             "replace these ops, or run the net where they are defined")
    e.unknown = [(i, rec.type, rec.extra.get("name", "")) for i, rec in unknown]
    raise e


def lower_op(blk: Block, rec: OpRecord) -> None:
    """Append the IR for ``rec`` to ``blk``: reads, the op, then its outputs as writes."""
    if rec.type in OPS.aliases:  # (another of Caffe2's names for a declared op)
        rec = OpRecord(OPS.aliases[rec.type], rec.inputs, rec.outputs, rec.args, rec.loc, rec.extra)
    try:
        if "axis_str" in rec.args:
            rec = _semantic_axis(rec)
        plain = _PLAIN.get(rec.type)
        if plain is None:
            plain = _is_plain(rec.type)
        if plain:
            loc = rec.loc
            read = blk.read
            inputs = [read(n, loc) for n in rec.inputs]
            # the Builder directly (not Block.create): most recorded ops pass here
            op = blk.b.create(rec.type, inputs, rec.args, None, len(rec.outputs), (), loc)
            if any(o in rec.inputs for o in rec.outputs):
                _same_shape_in_place(rec, inputs, op.results)
            _write(blk, rec, op.results)
        else:
            _lower_special(blk, rec)
    except DSLError as e:
        if e.loc is None:
            e.loc = rec.loc
        raise


def _semantic_axis(rec: OpRecord) -> OpRecord:
    """Caffe2's ``broadcast=1, axis_str="C"``: the axis is where that letter stands in the op's
    ``order`` (default NCHW), so ``axis_str="C"`` is axis 1 in NCHW and 3 in NHWC. Without
    broadcast=1 Caffe2 ignores it (numpy broadcasting); with ``axis`` too it refuses the op."""
    args = dict(rec.args)
    name = args.pop("axis_str")
    if not args.get("broadcast"):
        return OpRecord(rec.type, rec.inputs, rec.outputs, args, rec.loc, rec.extra)
    order = args.get("order", "NCHW")
    order = order.decode() if isinstance(order, bytes) else str(order)
    name = name.decode() if isinstance(name, bytes) else str(name)
    if args.get("axis", -1) != -1:
        raise VerifyError(f"{rec.type} takes axis or axis_str, not both (axis={args['axis']}, axis_str={name!r})",
                          rec.loc, "drop one of the two")
    if len(name) != 1 or name not in order:
        raise VerifyError(f"{rec.type}: axis_str={name!r} is not one letter of the order {order!r}",
                          rec.loc, f"use one of {', '.join(repr(c) for c in order)}")
    args["axis"] = order.index(name)
    return OpRecord(rec.type, rec.inputs, rec.outputs, args, rec.loc, rec.extra)


# Op types with their own lowering below (constants, blobs named in attributes...)
_SPECIAL = frozenset(FILL_ALIASES) | {"ConstantFill", "Load", "Print", "Summarize", "TimerBegin", "Python",
                                      "RecurrentNetwork", "RecurrentNetworkGradient"} | CONTROL_OPS
_PLAIN: dict = {}  # op type -> whether lower_op's plain path applies (declarations do not change)


def _is_plain(op_type: str) -> bool:
    """A declared op that lowers as: read its inputs, make the op, write its outputs."""
    opdef = OPS.get(op_type)
    got = _PLAIN[op_type] = opdef is not None and op_type not in _SPECIAL and not is_sync(opdef) \
        and "input_names" not in opdef.attrs and "output_names" not in opdef.attrs and not opdef.unset_ok
    return got


def _lower_special(blk: Block, rec: OpRecord) -> None:
    """``lower_op`` for the op types that need more than the plain path."""
    if rec.type in FILL_ALIASES:
        return _write(blk, rec, [blk.const(_given_fill(rec), rec.loc)])
    if rec.type == "ConstantFill" and not rec.inputs:
        value = _constant_fill(rec)
        if value is not None:
            return _write(blk, rec, [blk.const(value, rec.loc)])
    if rec.type in ("RecurrentNetwork", "RecurrentNetworkGradient"):  # (nets in arguments: a loop)
        from .recurrent import lower_recurrent
        return lower_recurrent(blk, rec)
    if rec.type in CONTROL_OPS:
        return lower_control(blk, rec, lower_op)
    opdef = OPS.get(rec.type)
    if opdef is None:  # (a net records only known ops; an OperatorDef message may name any)
        raise UnknownOperatorError(f"unknown operator {rec.type!r}: dslc has no {rec.type} op", rec.loc,
                                   "`dslc ops` lists the operators dslc has")
    inputs = [(blk.read_state if i in opdef.unset_ok else blk.read)(n, rec.loc)
              for i, n in enumerate(rec.inputs)]
    if rec.type == "Load" and rec.args.get("allow_incomplete") and not rec.inputs:
        inputs = kept_values(blk, rec)  # what the outputs keep if the checkpoint lacks them
    attrs = dict(rec.args)
    if rec.type in ("Print", "Summarize") and rec.inputs:  # (their files are named after the blob)
        attrs.setdefault("blob", rec.inputs[0])
    for attr, names in (("input_names", rec.inputs), ("output_names", rec.outputs)):
        if attr in opdef.attrs:  # ops that work on blobs by name (Save, Load) are told the names
            attrs.setdefault(attr, list(names))
    if rec.type == "TimerBegin" and rec.outputs and not attrs.get("counter_name"):
        attrs["counter_name"] = rec.outputs[0]  # Caffe2 names the timer after its blob
    sync = is_sync(opdef)
    if sync:
        blk.flush()
        if rec.type == "Python" and rec.args.get("pass_workspace"):
            blk.forget()
    # an op declaring output_names but no results writes those blobs itself, by name
    # (AtomicAppend appends to them under its mutex): they get no SSA values
    by_name = opdef.results == (0, 0) and "output_names" in opdef.attrs
    if by_name:
        attrs.setdefault("output_names", list(rec.outputs))
    op = blk.create(rec.type, inputs, attrs, loc=rec.loc, n_results=0 if by_name else len(rec.outputs))
    if sync:
        blk.forget()
    if by_name:
        for name in rec.outputs:
            blk.ctx.note_store(name, ANY)  # its new type is known only when it runs
        return
    if rec.type == "Python" and rec.args.get("pass_workspace"):
        blk.ctx.opaque_writes = True
    _write(blk, rec, op.results)


def _same_shape_in_place(rec: OpRecord, inputs, results) -> None:
    """An elementwise op written over an operand in place keeps that operand's size, as
    Caffe2's binary ops require (they refuse ``Add(x, b) -> x`` with b broadcasting x up):
    a gradient reads the operand's shape from its name (Add's SumReduceLike)."""
    opdef = OPS.get(rec.type)
    if opdef is None or ELEMENTWISE not in opdef.traits:
        return
    for name, r in zip(rec.outputs, results):
        for k, (given, v) in enumerate(zip(rec.inputs, inputs)):
            if given != name:
                continue
            was, now = getattr(v.type, "shape", None), getattr(r.type, "shape", None)
            # (as many elements, another shape: a scalar total grown to [1] in a loop, which
            # Caffe2 refuses too, is let be: its gradient has the right values)
            if was is not None and now is not None and None not in was + now and _count(was) != _count(now):
                type_error(f"{rec.type} writes its output over its input {k} ({name!r}) in place, but "
                           f"broadcasting makes the output {list(now)} where {name!r} is {list(was)}",
                           f"give {rec.type}'s output a new name")


def _count(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _write(blk: Block, rec: OpRecord, values) -> None:
    for name, v in zip(rec.outputs, values):
        blk.write(name, v, rec.loc)


def _given_fill(rec: OpRecord) -> np.ndarray:
    """The constant a GivenTensor*Fill records: ``values`` in ``shape``.

    Its numpy dtype comes from the op's spelling; GivenTensorFill also takes ``dtype``.
    """
    if rec.inputs:
        raise VerifyError(f"{rec.type} with an input (shape from a tensor) is not supported", rec.loc,
                          "give the shape as shape=[...]")
    args = rec.args
    if args.get("extra_shape"):
        raise VerifyError(f"{rec.type} extra_shape needs an input (it extends the input's shape)",
                          rec.loc, "put every dim in shape=[...]")
    ignored = sorted(args.keys() - _FILL_ARGS - MODEL_SCOPE_SWITCHES)
    if ignored:  # (Caffe2 runs the fill and ignores them)
        warn_unused_args(rec.type, ignored, rec.loc, lambda k: misspelling_of(k, sorted(_FILL_ARGS)))
    values, shape, code = args.get("values", []), args.get("shape"), args.get("dtype")
    dtype = FILL_ALIASES[rec.type]
    if code is not None and rec.type == "GivenTensorFill":
        dtype = NUMPY_DTYPES[dtype_from_code(rec.type, code)]
    arr = np.asarray(values, dtype=dtype)
    if dtype is np.object_:
        _check_strings(rec, arr)
    shape = list(arr.shape if shape is None else shape)
    try:
        return arr.reshape(shape)
    except ValueError:
        raise VerifyError(f"{rec.type}: {arr.size} values do not fill shape {brief(shape)}", rec.loc,
                          "give as many values as the shape has elements") from None


_FILL_ARGS = frozenset({"dtype", "extra_shape", "shape", "values"})  # what _given_fill takes


def _check_strings(rec: OpRecord, arr: np.ndarray) -> None:
    """A string fill holds only strings (``Const(None)`` or a huge int would land here)."""
    bad = [v for v in arr.reshape(-1) if not isinstance(v, (str, bytes))]
    if bad:
        bad = bad[0]
        raise VerifyError(f"{rec.type} values must be strings, got {bad!r} ({type(bad).__name__})",
                          rec.loc, "give Const a str, a number that fits int64, a float, or a bool")


def _constant_fill(rec: OpRecord) -> np.ndarray | None:
    """The constant an input-less ConstantFill makes (its type comes from the op table),
    or None when it is larger than a constant may be (ir/budget.py): then it stays an
    op, and fills its tensor when the program runs."""
    opdef = OPS["ConstantFill"]
    attrs = opdef.full_attrs(rec.args)
    (t,) = opdef.infer([], attrs, 1)
    if not foldable(t.shape):
        return None
    if len(attrs) > len(opdef.attrs):  # folded to a constant below: warn here, where the op goes
        warn_unused_args(rec.type, opdef.unused_attrs(attrs), rec.loc, opdef.misspelling)
    value = fill_value(attrs, t.dtype)
    try:
        return np.full(t.shape, value, dtype=NUMPY_DTYPES[t.dtype])
    except (TypeError, ValueError) as e:
        raise VerifyError(f"ConstantFill cannot fill {t} with {value!r}: {e}", rec.loc,
                          "give a value of the tensor's dtype") from None
