"""Caffe2's indexes: a dictionary from raw ids (ints or strings) to dense ids 1, 2, ...,
held in a blob (``!index``), growing as IndexGet meets new keys until frozen; 0 is the id
of every key a frozen index lacks (and stays free).

    %i = LongIndexCreate {max_elements = 1000} : !index
    %ids = IndexGet(%i, %keys) : i64[?]             new keys get the next ids
    %i2 = IndexFreeze(%i) : !index                  from now on, unknown keys get 0
    %n = IndexSize(%i2) : i64                       the next id (entries + 1)
    %keys2 = IndexStore(%i2) : i64[?]               the keys in id order
    %i3 = IndexLoad(%i2, %keys2) {skip_first_entry = 0} : !index

Ops on one index keep their order (its effect), as the other resources' do.
"""
from __future__ import annotations

from ..gradients import no_gradient
from ..opdef import Effect, declare, type_error
from ..types import ANY, I64, INT_DTYPES, HandleType, TensorType
from .infer import tensors

INDEX = HandleType("index")
_KEYS = {"IntIndexCreate": "i32", "LongIndexCreate": "i64", "StringIndexCreate": "str"}
W_INDEX = (Effect("index", "write"),)


def _handle(op: str, t) -> None:
    if t != ANY and t != INDEX:
        type_error(f"{op} input 0 must be an index, got {t}",
                   "pass the blob that IntIndexCreate, LongIndexCreate or StringIndexCreate wrote")


def _keys(op: str, t) -> None:
    if t.dtype is not None and t.dtype not in INT_DTYPES and t.dtype != "str":
        type_error(f"{op} keys must be integers or strings, got {t}", "pass int32, int64 or string keys")


def _create(name):
    def infer(types, attrs, n):
        if int(attrs["max_elements"]) < 1:
            type_error(f"{name} max_elements must be >= 1, got {attrs['max_elements']}")
        return [INDEX]
    return infer


def _get(types, attrs, n):
    _handle("IndexGet", types[0])
    (keys,) = tensors("IndexGet", types[1:])
    _keys("IndexGet", keys)
    return [TensorType("i64", keys.shape)]


def _freeze(types, attrs, n):
    _handle("IndexFreeze", types[0])
    return [INDEX]


def _load(types, attrs, n):
    _handle("IndexLoad", types[0])
    (items,) = tensors("IndexLoad", types[1:])
    _keys("IndexLoad", items)
    return [INDEX]


def _store(types, attrs, n):
    _handle("IndexStore", types[0])
    return [ANY]  # (the keys' dtype is the index's: known when it runs)


def _size(types, attrs, n):
    _handle("IndexSize", types[0])
    return [I64]


for _name, _dtype in _KEYS.items():
    declare(_name, 0, _create(_name), attrs={"max_elements": (1 << 31) - 1}, effects=(Effect("index", "alloc"),),
            doc=f"a new index of {_dtype} keys (max_elements counts the reserved id 0)")
declare("IndexGet", 2, _get, effects=W_INDEX,
        doc="(index, KEYS) -> each key's id, int64, KEYS' shape; a new key takes the next id unless "
            "the index is frozen (then 0); more keys than max_elements allows is an error")
declare("IndexFreeze", 1, _freeze, effects=W_INDEX, doc="the index, frozen: unknown keys get id 0")
declare("IndexLoad", 2, _load, attrs={"skip_first_entry": 0}, effects=W_INDEX,
        doc="(index, ITEMS) -> the index with ITEMS added in order (skip_first_entry: all but "
            "the first, the key of id 0)")
declare("IndexStore", 1, _store, effects=(Effect("index", "read"),),
        doc="the index's keys, in id order (id 1 first)")
declare("IndexSize", 1, _size, effects=(Effect("index", "read"),), doc="the next id: entries + 1, int64")
no_gradient(*_KEYS, "IndexGet", "IndexFreeze", "IndexLoad", "IndexStore", "IndexSize")
