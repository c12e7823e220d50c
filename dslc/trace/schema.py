"""Records: named, nested groups of blobs (Caffe2's ``schema`` module, the parts pipelines use).

A record is a tree of Fields whose leaves (``Scalar``) each hold one blob, or one
array before it becomes a blob. Flattening a record gives its leaves in order:
``field_names()`` (nested names joined with ``:``), ``field_types()`` and
``field_blobs()``. Readers, writers and queues pass records around as those
flat blob lists and rebuild them with ``from_blob_list``::

    rec = Struct(('label', np.arange(3)), ('pair', Struct(('a', np.int32))))
    rec.field_names()       -> ['label', 'pair:a']
    rec.label()             -> the array (or blob) of the 'label' leaf
    List(np.int64).field_names() -> ['lengths', 'values']

Records are immutable once built (``Struct`` refuses attribute assignment).
"""
from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np

from dslc.trace.blobref import BlobReference
from dslc.ir.diagnostics import TraceError
from dslc.trace.tracing import user_location

FIELD_SEPARATOR = ":"


class SchemaError(TraceError, ValueError):
    """A record built or used in a way its schema does not allow."""


class SchemaTypeError(SchemaError, TypeError):
    """A schema operation on fields of the wrong kind: a TypeError, as Caffe2 raises there
    (and still a SchemaError, so one ``except`` catches every schema error)."""


def _fail(message: str, hint: str | None = None, error=SchemaError):
    raise error(message, user_location(), hint)


def _join(prefix: str, suffix: str) -> str:
    return FIELD_SEPARATOR.join(p for p in (prefix, suffix) if p)


Metadata = namedtuple("Metadata", ["categorical_limit", "expected_value", "feature_specs"])
Metadata.__new__.__defaults__ = (None, None, None)
# What a field's features are (Metadata.feature_specs): their type, names and ids, whether the
# request alone carries them, the hash size wanted, a name -> index map.
FeatureSpec = namedtuple("FeatureSpec", ["feature_type", "feature_names", "feature_ids", "feature_is_request_only",
                                         "desired_hash_size", "feature_to_index"])
FeatureSpec.__new__.__defaults__ = (None,) * 6


def _normalize(value, keep_blobs=True) -> "Field":
    """A Field for a child: a Field (cloned), a type (an empty Scalar of it), or a value."""
    if isinstance(value, Field):
        return value.clone(keep_blobs=keep_blobs)
    if isinstance(value, (type, np.dtype)) or (isinstance(value, tuple) and len(value) == 2
                                                and isinstance(value[0], (type, np.dtype))):
        return Scalar(dtype=value)
    return Scalar(blob=value)


class Field:
    """A node of a record; its leaves (Scalars) are the record's blobs, in order."""

    def __init__(self, children):
        self._parent = (None, 0)
        self._field_offsets = [0]
        for child in children:
            self._field_offsets.append(self._field_offsets[-1] + len(child.field_names()))

    def field_names(self) -> list:
        raise NotImplementedError

    def field_types(self) -> list:
        return [s.dtype for s in self.all_scalars()]

    def field_metadata(self) -> list:
        return [s.metadata for s in self.all_scalars()]

    def field_blobs(self) -> list:
        return [s.get() for s in self.all_scalars()]

    def all_scalars(self) -> list:
        raise NotImplementedError

    def has_blobs(self) -> bool:
        return all(s.has_blobs() for s in self.all_scalars())

    def clone(self, keep_blobs=True) -> "Field":
        raise NotImplementedError

    def clone_schema(self) -> "Field":
        return self.clone(keep_blobs=False)

    def _set_parent(self, parent, index):
        self._parent = (parent, index)

    def _base_id(self, child=None) -> int:
        parent, index = self._parent
        pos = 0 if child is None else self._field_offsets[child]
        return pos + (parent._base_id(index) if parent is not None else 0)

    def slice(self):
        """The positions of this field's leaves in its root record's flat lists."""
        start = self._base_id()
        return slice(start, start + len(self.field_names()))

    def __eq__(self, other):
        return isinstance(other, Field) and self.field_names() == other.field_names() and \
            self.field_types() == other.field_types()

    __hash__ = object.__hash__

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(self.field_names())})"


class Scalar(Field):
    """A leaf: one tensor, given as a dtype, a blob, or array data (dtype np.void if unknown)."""

    def __init__(self, dtype=None, blob=None, metadata=None):
        self._metadata = None
        self.set(dtype, blob, metadata, unsafe=True)
        super().__init__([])

    def field_names(self):
        return [""]

    def field_type(self):
        return self.dtype

    def all_scalars(self):
        return [self]

    def has_blobs(self):
        return self._blob is not None

    def get(self):
        """The blob (or array) this leaf holds."""
        if self._blob is None:
            _fail("this record field has no blob yet",
                  "make the record's blobs first, e.g. with NewRecord(net, schema)")
        return self._blob

    __call__ = get

    @property
    def metadata(self):
        return self._metadata

    def set_metadata(self, value):
        if not isinstance(value, Metadata):
            _fail(f"metadata must be a schema.Metadata, got {type(value).__name__}")
        self._metadata = value

    def clone(self, keep_blobs=True):
        return Scalar(self._original_dtype, self._blob if keep_blobs else None, self._metadata)

    def set_value(self, blob, throw_on_type_mismatch=False, unsafe=False):
        """Replace the blob, keeping the declared dtype."""
        if throw_on_type_mismatch and self.dtype.base != np.void:
            if not isinstance(blob, np.ndarray) or blob.dtype.base != self.dtype.base:
                _fail(f"expected a {self.dtype.base} array, got {blob!r}")
        self.set(self._original_dtype, blob, unsafe=True)

    def set(self, dtype=None, blob=None, metadata=None, unsafe=False):
        if isinstance(blob, str) and not isinstance(blob, BlobReference):
            _fail("a plain string is ambiguous as a record field's blob",
                  "pass BlobReference(name) for a blob, or np.array(text) for string data")
        self._original_dtype = dtype
        if isinstance(dtype, tuple) and dtype and dtype[0] is np.void:
            _fail(f"a Scalar of untyped (np.void) entries cannot have a shape: {dtype}",
                  "give the entries a dtype, e.g. (np.float32, shape), or None for untyped",
                  SchemaTypeError)
        if isinstance(dtype, tuple) and len(dtype) == 2 and dtype[1] == 1:
            dtype = (dtype[0], (1,))  # numpy would drop a shape of 1
        if dtype is not None:
            dtype = np.dtype(dtype)
        if blob is not None and not isinstance(blob, BlobReference):
            keep_shape = isinstance(blob, np.ndarray)
            if dtype is not None and dtype.base != np.void:
                blob = np.array(blob, dtype=dtype.base)
                if blob.size == 0 and not keep_shape:
                    blob = blob.reshape((0,) + dtype.shape)
            elif not isinstance(blob, np.ndarray):
                _fail(f"a record field's data must be a numpy array, got {type(blob).__name__}",
                      "wrap it: np.array(...)")
            if blob.ndim == 0 and not keep_shape:
                blob = blob.reshape((1,))
            if blob.ndim > 1 and dtype is not None and dtype.base != np.void:
                dtype = np.dtype((dtype.base, blob.shape[1:]))
        self.dtype = dtype if dtype is not None else np.dtype(np.void)
        self._blob = blob
        if metadata is not None:
            self.set_metadata(metadata)

    def set_type(self, dtype):
        self._original_dtype = dtype
        self.dtype = np.dtype(dtype) if dtype is not None else np.dtype(np.void)

    def id(self) -> int:
        """This leaf's position in its root record's flat lists."""
        return self._base_id()

    def __repr__(self):
        return f"Scalar({self.dtype}, {self._blob!r})"


def _leaf(what: str, given, dtype) -> Scalar:
    """A list's own leaf: a Scalar given (cloned), else one of ``dtype`` holding ``given``."""
    if isinstance(given, Field):
        if not isinstance(given, Scalar):
            _fail(f"a list's {what} must be a Scalar, got a {type(given).__name__}")
        return _normalize(given)
    return Scalar(dtype, given)


class List(Field):
    """A variable-length list: a ``lengths`` leaf (int32) plus the ``values`` field."""

    def __init__(self, values, lengths_blob=None):
        self.lengths = _leaf("lengths", lengths_blob, np.int32)
        self._items = _normalize(values)
        self.lengths._set_parent(self, 0)
        self._items._set_parent(self, 1)
        super().__init__([self.lengths, self._items])

    def _extra(self) -> dict:
        """Leaves after the values (ListWithEvicted's), by name."""
        return {}

    def field_names(self):
        return ["lengths"] + [_join("values", v) for v in self._items.field_names()] + list(self._extra())

    def all_scalars(self):
        extra = [s for f in self._extra().values() for s in f.all_scalars()]
        return self.lengths.all_scalars() + self._items.all_scalars() + extra

    def clone(self, keep_blobs=True):
        extra = [_normalize(f, keep_blobs) for f in self._extra().values()]
        return type(self)(_normalize(self._items, keep_blobs), _normalize(self.lengths, keep_blobs), *extra)

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        if item.startswith("_"):
            extra = self._extra()
            if item in extra:
                return extra[item]
            raise AttributeError(item)
        if isinstance(self._items, Struct):
            return getattr(self._items, item)
        if item in ("value", "items"):
            return self._items
        raise AttributeError(f"the list has no field {item!r}")

    def __getitem__(self, item):
        head, _, rest = item.partition(FIELD_SEPARATOR)
        if head == "lengths" and not rest:
            return self.lengths
        if head == "values":
            return self._items[rest] if rest else self._items
        extra = self._extra()
        if head in extra and not rest:
            return extra[head]
        raise KeyError(f"the list has no field {item!r}")


class ListWithEvicted(List):
    """A List with one more int64 leaf, ``_evicted_values`` (ids an LRU hash evicted)."""

    def __init__(self, values, lengths_blob=None, evicted_values=None):
        self._evicted_values = _leaf("evicted values", evicted_values, np.int64)
        super().__init__(values, lengths_blob)
        # (the offsets Field.__init__ made cover lengths and values; the last leaf follows)
        self._evicted_values._set_parent(self, 2)
        self._field_offsets.append(self._field_offsets[-1] + 1)

    def _extra(self):
        return {"_evicted_values": self._evicted_values}


class Struct(Field):
    """Named children in order; ``a:b`` names make nested Structs (same-named Structs merge)."""

    def __init__(self, *fields):
        children = OrderedDict()
        for entry in fields:
            if not isinstance(entry, tuple) or len(entry) != 2:
                _fail(f"a Struct field must be a (name, field) pair, got {entry!r}")
            name, value = entry
            if not name:
                _fail("a Struct field name cannot be empty")
            if name == "lengths":
                _fail("a Struct cannot have a field named 'lengths' (it marks list lengths)",
                      "use schema.List(...) for a list, or pick another name")
            field = _normalize(value)
            if FIELD_SEPARATOR in name:
                head, rest = name.split(FIELD_SEPARATOR, 1)
                name, field = head, Struct((rest, field))
            if name in children:
                if not (isinstance(field, Struct) and isinstance(children[name], Struct)):
                    _fail(f"duplicate field name {name!r} in a Struct",
                          "only two Structs of one name merge")  # (a ValueError, as in Caffe2)
                field = children[name] + field
            children[name] = field
        object.__setattr__(self, "fields", children)
        for i, field in enumerate(children.values()):
            field._set_parent(self, i)
        super().__init__(children.values())
        object.__setattr__(self, "_frozen", True)

    def get_children(self):
        return list(self.fields.items())

    def field_names(self):
        return [_join(name, f) for name, field in self.fields.items() for f in field.field_names()]

    def all_scalars(self):
        return [s for field in self.fields.values() for s in field.all_scalars()]

    def clone(self, keep_blobs=True):
        return type(self)(*[(k, _normalize(v, keep_blobs)) for k, v in self.fields.items()])

    def _nested(self, name: str):
        head, _, rest = name.partition(FIELD_SEPARATOR)
        field = self.fields.get(head)
        if field is None or not rest:
            return field
        try:
            return field[rest]
        except (KeyError, TypeError):
            return None

    def __contains__(self, name):
        return self._nested(name) is not None

    def __len__(self):
        return len(self.fields)

    def __getitem__(self, item):
        if isinstance(item, (list, tuple)):
            keys = list(self.fields)
            return Struct(*[(keys[k] if isinstance(k, int) else k, self[k]) for k in item])
        if isinstance(item, int):
            return list(self.fields.values())[item]
        field = self._nested(item)
        if field is None:
            raise KeyError(f"record has no field {item!r}")
        return field

    def get(self, item, default_value):
        return getattr(self, item, default_value)

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        try:
            return self.__dict__["fields"][item]
        except KeyError:
            raise AttributeError(f"record has no field {item!r}") from None

    def __setattr__(self, key, value):
        if getattr(self, "_frozen", False) and not key.startswith("_"):
            _fail("a Struct cannot change after it is built", "build a new Struct (s1 + s2 merges two)",
                  SchemaTypeError)
        object.__setattr__(self, key, value)

    def __add__(self, other):
        if not isinstance(other, Struct):
            return NotImplemented
        children = OrderedDict(self.get_children())
        for name, right in other.get_children():
            left = children.get(name)
            if left is None:
                children[name] = right
            elif isinstance(left, Struct) and isinstance(right, Struct):
                children[name] = left + right
            else:
                _fail(f"cannot merge the two fields named {name!r}: both must be Structs, got a "
                      f"{type(left).__name__} and a {type(right).__name__}",
                      "rename one of them, or remove it first (s1 - s2)", SchemaTypeError)
        return Struct(*children.items())

    def __sub__(self, other):
        """The fields of ``self`` not in ``other``, recursively; Structs left empty are dropped.

        Struct(('a', x), ('b', Struct(('c', y), ('d', z)))) - Struct(('b', Struct(('c', y))))
            == Struct(('a', x), ('b', Struct(('d', z))))
        """
        if not isinstance(other, Struct):
            return NotImplemented
        children = OrderedDict(self.get_children())
        for name, right in other.get_children():
            left = children.get(name)
            if left is None:
                continue
            if type(left) is not type(right):
                _fail(f"cannot remove field {name!r}: it is a {type(left).__name__} here and a "
                      f"{type(right).__name__} in the Struct subtracted",
                      "subtract a Struct whose common fields have the same kinds", SchemaTypeError)
            rest = left - right if isinstance(left, Struct) else None
            if rest is not None and rest.get_children():
                children[name] = rest
            else:
                del children[name]
        return Struct(*children.items())


def Map(keys, values, keys_name="keys", values_name="values", lengths_blob=None):
    """A List of (key, value) Structs."""
    return List(Struct((keys_name, keys), (values_name, values)), lengths_blob=lengths_blob)


def MapWithEvicted(keys, values, keys_name="keys", values_name="values", lengths_blob=None, evicted_values=None):
    """A Map whose list also carries the ids evicted from an LRU hash (``_evicted_values``)."""
    return ListWithEvicted(Struct((keys_name, keys), (values_name, values)), lengths_blob=lengths_blob,
                           evicted_values=evicted_values)


def is_schema_subset(schema, original_schema) -> bool:
    """Whether every field name of ``schema`` is one of ``original_schema``'s (names only)."""
    return set(schema.field_names()) <= set(original_schema.field_names())


def equal_schemas(schema, original_schema, check_field_names=True, check_field_types=True,
                  check_field_metas=False) -> bool:
    """Whether two records agree on field names, types and (asked for) metadata."""
    if not isinstance(schema, Field) or not isinstance(original_schema, Field):
        _fail("equal_schemas compares two records (schema.Field)", error=SchemaTypeError)
    return not ((check_field_names and schema.field_names() != original_schema.field_names())
                or (check_field_types and schema.field_types() != original_schema.field_types())
                or (check_field_metas and schema.field_metadata() != original_schema.field_metadata()))


def attach_metadata_to_scalars(field, metadata) -> None:
    for scalar in field.all_scalars():
        scalar.set_metadata(metadata)


def NamedTuple(name_prefix, *fields):
    return Struct(*[(f"{name_prefix}_{i}", f) for i, f in enumerate(fields)])


def Tuple(*fields):
    """A Struct with fields ``field_0``, ``field_1`` ..."""
    return NamedTuple("field", *fields)


def RawTuple(num_fields, name_prefix="field"):
    """A Tuple of ``num_fields`` untyped leaves."""
    return NamedTuple(name_prefix, *([np.void] * int(num_fields)))


__all__ = ["FIELD_SEPARATOR", "Field", "Scalar", "List", "Struct", "Map", "NamedTuple", "Tuple",
           "RawTuple", "Metadata", "ListWithEvicted", "FeatureSpec", "MapWithEvicted", "is_schema_subset",
           "equal_schemas", "attach_metadata_to_scalars"]
