"""Reading a key-value database record by record (CreateDB / TensorProtosDBInput).

The records are Caffe2's: keys in order, each value a serialized ``TensorProtos``. Only
protobuf parsing happens here (nothing is unpickled or imported), and a tensor's data
must hold exactly the elements its dims name.
"""
from __future__ import annotations

import threading

import numpy as np

from dslc.ir.diagnostics import DSLError

_DTYPES = {1: ("float_data", np.float32), 2: ("int32_data", np.int32), 10: ("int64_data", np.int64),
           13: ("double_data", np.float64), 3: ("byte_data", np.uint8), 5: ("int32_data", np.bool_),
           6: ("int32_data", np.uint8), 7: ("int32_data", np.int8), 8: ("int32_data", np.uint16),
           9: ("int32_data", np.int16)}


class DBReaderError(DSLError):
    """A database that cannot be opened, or a record that is not a TensorProtos."""


class KeyValueReader:
    """The records of one database, read in key order, going round after the last."""

    handle_kind = "dbreader"

    def __init__(self, path: str, db_type: str):
        self.path, self.db_type = path, db_type
        self._lock = threading.Lock()
        if db_type == "lmdb":
            import lmdb
            try:
                self._env = lmdb.open(path, readonly=True, lock=False, subdir=True, readahead=False)
            except lmdb.Error as e:
                raise DBReaderError(f"cannot open the lmdb database {path!r}: {e}",
                                    hint="check db= names a directory made by lmdb") from None
            self._txn = self._env.begin()
            self._cursor = self._txn.cursor()
            self._first = self._cursor.first
            self._next = self._cursor.next
            self._value = self._cursor.value
        elif db_type == "leveldb":
            try:
                import plyvel
            except ImportError:
                raise DBReaderError("db_type 'leveldb' needs plyvel", hint="pip install 'dslc[leveldb]'") from None
            self._db = plyvel.DB(path, create_if_missing=False)
            self._iter = None
        else:
            raise DBReaderError(f"CreateDB cannot read db_type {db_type!r}", hint="use 'lmdb' or 'leveldb'")
        self._at_start = False

    def next_value(self) -> bytes:
        with self._lock:
            if self.db_type == "lmdb":
                if not self._at_start and self._next():
                    return bytes(self._value())
                if not self._first():
                    raise DBReaderError(f"the database {self.path!r} has no records")
                self._at_start = False
                return bytes(self._value())
            if self._iter is None or self._at_start:
                self._iter, self._at_start = self._db.iterator(include_key=False), False
            for value in self._iter:
                return value
            self._iter = self._db.iterator(include_key=False)
            for value in self._iter:
                return value
            raise DBReaderError(f"the database {self.path!r} has no records")

    def reset(self):
        with self._lock:
            self._at_start = True


def read_tensor_protos(reader: KeyValueReader, batch_size: int, n_outputs: int) -> list:
    """``batch_size`` records' tensors, stacked per position."""
    from dslc.proto import caffe2_pb2
    columns = [[] for _ in range(n_outputs)]
    for _ in range(batch_size):
        value = reader.next_value()
        try:
            protos = caffe2_pb2.TensorProtos.FromString(value)
        except Exception:
            raise DBReaderError(f"a record of {reader.path!r} is not a serialized TensorProtos") from None
        if len(protos.protos) < n_outputs:
            raise DBReaderError(f"a record of {reader.path!r} holds {len(protos.protos)} tensors, "
                                f"{n_outputs} outputs were asked for")
        for k in range(n_outputs):
            columns[k].append(_tensor(protos.protos[k], reader.path))
    return [np.stack(c) for c in columns]


def _tensor(t, path):
    field, dtype = _DTYPES.get(t.data_type, (None, None))
    if field is None:
        raise DBReaderError(f"a tensor of {path!r} has data type {t.data_type}, which dslc does not read")
    dims = tuple(int(d) for d in t.dims)
    data = np.frombuffer(t.byte_data, dtype=np.uint8) if field == "byte_data" else \
        np.asarray(getattr(t, field), dtype=dtype)
    if data.size != int(np.prod(dims, dtype=np.int64)):
        raise DBReaderError(f"a tensor of {path!r} has dims {list(dims)} but {data.size} values")
    return data.astype(dtype, copy=False).reshape(dims)
