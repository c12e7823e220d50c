"""Collecting samples of a stream of tensors, and trimming a dataset.

A tensor vector (``!tensorvector``) is a growing list of tensors: ``CollectTensor``
keeps a uniform sample of at most ``num_to_collect`` of the records it sees
(reservoir sampling; the inputs after the vectors are one record, collected all or
none, at one index in every vector). ``LastNWindowCollector`` keeps the last
``num_to_collect`` rows it saw in a ring buffer whose next slot is ``next``.
``TrimDataset`` cuts a dataset to the largest multiple of ``multiple_of`` rows::

    %v = CreateTensorVector : !tensorvector
    %v2 = CollectTensor(%v, %x) {num_to_collect = 100} : !tensorvector
    %all = ConcatTensorVector(%v2) : f32[?,2]
    %last, %next = LastNWindowCollector(%last0, %next0, %x) {num_to_collect = 7} : f32[?,2], i32
"""
from __future__ import annotations

from ..opdef import PURE, Effect, declare, type_error
from ..types import ANY, I32, I64, HandleType, TensorType
from .infer import tensors

TENSORVECTOR = HandleType("tensorvector")
_VECTOR = (Effect("tensorvector", "write"),)


def _positive(op: str, attrs, name: str) -> None:
    if int(attrs[name]) < 1:
        type_error(f"{op} {name} must be >= 1, got {attrs[name]}", f"pass {name}=1 or more")


def _vectors(op: str, types) -> None:
    for i, t in enumerate(types):
        if t != ANY and t != TENSORVECTOR:
            type_error(f"{op} input {i} must be a tensor vector, got {t}",
                       "pass a blob CreateTensorVector wrote")


declare("CreateTensorVector", 0, lambda t, a, n: [TENSORVECTOR], effects=(Effect("tensorvector", "alloc"),),
        doc="a new, empty vector of tensors")


def _size(types, attrs, n):
    _vectors("TensorVectorSize", types)
    return [I32]


declare("TensorVectorSize", 1, _size, effects=(Effect("tensorvector", "read"),),
        doc="int32 scalar: how many tensors the vector holds")


def _concat_vector(types, attrs, n):
    _vectors("ConcatTensorVector", types)
    return [ANY]


declare("ConcatTensorVector", 1, _concat_vector, effects=(Effect("tensorvector", "read"),),
        doc="the vector's tensors concatenated along their first dim")


def _collect(types, attrs, n):
    _positive("CollectTensor", attrs, "num_to_collect")
    if len(types) != 2 * n:
        type_error(f"CollectTensor takes k tensor vectors and k tensors and writes the k vectors; got "
                   f"{len(types)} inputs and {n} outputs",
                   "call CollectTensor(vectors + tensors, vectors)")
    _vectors("CollectTensor", types[:n])
    tensors("CollectTensor", types[n:])
    return [TENSORVECTOR] * n


declare("CollectTensor", (2, None), _collect, results=(1, None), attrs={"num_to_collect": -1},
        effects=_VECTOR + (Effect("random", "write"),),
        doc="add the record (the tensors after the k vectors) to the vectors as reservoir sampling "
            "does: each of the records seen so far is kept with chance num_to_collect / seen")


def _always(op) -> bool:
    """always: the data are checked when it runs (row shapes, a consistent dataset, next)"""
    return True


def _last_n(types, attrs, n):
    _positive("LastNWindowCollector", attrs, "num_to_collect")
    if len(types) < 3:
        type_error(f"LastNWindowCollector takes (window, next, data[, mutex][, num_visited]), got "
                   f"{len(types)} inputs", "pass the window blob, the next-slot blob and the data")
    window, nxt, data = tensors("LastNWindowCollector", types[:3])
    if data.shape == ():
        type_error("LastNWindowCollector collects rows: its data must have a first dim, got a scalar",
                   "pass a tensor of rows")
    if nxt.dtype is not None and nxt.dtype != "i32":
        type_error(f"LastNWindowCollector next must be an int32 scalar, got {nxt}",
                   "feed it as np.array(0, dtype=np.int32)")
    rows = TensorType(data.dtype, None if data.shape is None else (None,) + data.shape[1:])
    return [rows, I32, I64][:n]


def _last_n_bounds(types, attrs, n):
    """the window holds at most num_to_collect rows"""
    data = types[2]
    if not isinstance(data, TensorType) or data.shape is None:
        return [None] * n
    return [(int(attrs["num_to_collect"]),) + data.shape[1:]] + [None] * (n - 1)


declare("LastNWindowCollector", (3, 5), _last_n, results=(2, 3), attrs={"num_to_collect": -1},
        traits={PURE}, may_fail=_always, unset_ok=(0,), bounds=_last_n_bounds,
        doc="append the data's rows to the window (operand 0) as a ring buffer of num_to_collect "
            "rows, next (operand 1) its next slot; a third result counts the rows seen; the window "
            "may start as an empty blob")


def _trim(types, attrs, n):
    ts = tensors("TrimDataset", types)
    if n != len(ts) or len(attrs["fields"]) != len(ts):
        type_error(f"TrimDataset has {len(ts)} blobs, {n} outputs and {len(attrs['fields'])} fields",
                   "call TrimDataset(dataset_blobs, dataset_blobs, fields=field_names)")
    _positive("TrimDataset", attrs, "multiple_of")
    return [TensorType(t.dtype, None if t.shape is None else (None,) + t.shape[1:]) for t in ts]


declare("TrimDataset", (1, None), _trim, results=(1, None), attrs={"fields": [], "multiple_of": 1},
        traits={PURE}, may_fail=_always,
        doc="the dataset (operands, named by fields) cut to its first rows, as many as the largest "
            "multiple of multiple_of")


# --- ReservoirSampling: a uniform sample of the rows seen, at most one per object id
MAP = HandleType("map")
declare("CreateMap", 0, lambda t, a, n: [MAP], attrs={"key_dtype": 2, "value_dtype": 2, "valued_dtype": None},
        effects=(Effect("map", "alloc"),),
        doc="a new, empty map (key_dtype to value_dtype, TensorProto codes): ReservoirSampling's object -> slot")


def _reservoir(types, attrs, n):
    _positive("ReservoirSampling", attrs, "num_to_collect")
    if (len(types), n) not in ((4, 2), (7, 4)):
        type_error(f"ReservoirSampling takes (reservoir, num_visited, data, mutex) -> 2 outputs, or those and "
                   f"(object_id, object_to_pos, pos_to_object) -> 4; got {len(types)} inputs, {n} outputs",
                   "pass all three bookkeeping blobs to deduplicate by object id")
    data = types[2]
    if isinstance(data, TensorType) and data.shape == ():
        type_error("ReservoirSampling collects rows: its data must have a first dim, got a scalar")
    if n == 4:
        (ids,) = tensors("ReservoirSampling", [types[4]])
        if ids.dtype is not None and ids.dtype != "i64":
            type_error(f"ReservoirSampling's object ids must be int64, got {ids.dtype}")
        if types[5] != ANY and types[5] != MAP:
            type_error(f"ReservoirSampling input 5 must be a map, got {types[5]}", "pass a blob CreateMap wrote")
    rows = data if not isinstance(data, TensorType) else \
        TensorType(data.dtype, None if data.shape is None else (None,) + data.shape[1:])
    return [rows, types[1], MAP, TensorType("i64", (None,))][:n]


declare("ReservoirSampling", (4, 7), _reservoir, results=(2, 4), attrs={"num_to_collect": -1},
        effects=(Effect("map", "write"), Effect("random", "write")), may_fail=_always, unset_ok=(0,),
        doc="keep a uniform sample of at most num_to_collect of the rows (or packed records) seen in the "
            "reservoir (operand 0; empty: start over), num_visited counting them; with object ids, a map and "
            "a slot -> id tensor, an object already kept (or seen earlier in the batch) is not counted again")
