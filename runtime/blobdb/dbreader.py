"""Reading a key-value database record by record (CreateDB / TensorProtosDBInput).

The records are Caffe2's: keys in order, each value a serialized ``TensorProtos``. Only
protobuf parsing happens here (nothing is unpickled or imported), and a tensor's data
must hold exactly the elements its dims name.
"""
from __future__ import annotations

import math
import os
import threading

import numpy as np

from dslc.ir.diagnostics import DSLError
from dslc.ir.escape import brief
from dslc.ir.budget import check_size

from ..proto import caffe2 as caffe2_pb2
from . import dbminidb
from .base import DBError
from .lmdbfile import LmdbFile

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
        self._records = None  # the pass under way: an iterator of (key, value)
        if db_type == "lmdb":
            if not os.path.isdir(path):
                raise DBReaderError(f"cannot open the lmdb database {path!r}: it is not a directory",
                                    hint="check db= names a directory made by lmdb")
            try:
                self._db = LmdbFile(path)  # (pread, every page checked: a crafted file is no signal)
            except DBError as e:
                raise DBReaderError(e.message, hint=e.hint) from None
        elif db_type == "leveldb":
            try:
                import plyvel
            except ImportError:
                raise DBReaderError("db_type 'leveldb' needs plyvel", hint="pip install 'dslc[leveldb]'") from None
            try:
                self._db = plyvel.DB(path, create_if_missing=False, paranoid_checks=True)
            except plyvel.Error as e:
                raise DBReaderError(f"cannot open the leveldb database {path!r}: {brief(e)}",
                                    hint="check db= names a directory made by leveldb") from None
        elif db_type != "minidb":  # (a minidb is read in file order, when first asked for)
            raise DBReaderError(f"CreateDB cannot read db_type {db_type!r}", hint="use 'minidb', 'lmdb' or 'leveldb'")

    def _pass(self):
        """A new pass over the records, from the first: (key, value bytes)."""
        if self.db_type == "minidb":
            return self._minidb_records()
        if self.db_type == "lmdb":
            return ((k, self._db.read(v)) for k, v in self._db.records())
        return self._db.iterator(verify_checksums=True)

    def _minidb_records(self):
        with open(self.path, "rb") as f:
            for key, offset, length in dbminidb.records(self.path):  # (each checked against the file's size)
                f.seek(offset)
                yield key, f.read(length)

    def next_record(self) -> tuple:
        """(key, value) of the next record, going round after the last."""
        with self._lock:
            try:
                for _ in range(2):
                    if self._records is None:
                        self._records = self._pass()
                    for record in self._records:
                        return record
                    self._records = None
            except DBError as e:
                self._records = None
                raise DBReaderError(e.message, hint=e.hint) from None
            except Exception as e:  # (plyvel's errors: a damaged leveldb block)
                self._records = None
                raise DBReaderError(f"the database {self.path!r} is damaged: {brief(e)}") from None
            raise DBReaderError(f"the database {self.path!r} has no records")

    def next_value(self) -> bytes:
        return self.next_record()[1]

    def reset(self):
        with self._lock:
            self._records = None


def read_tensor_protos(reader: KeyValueReader, batch_size: int, n_outputs: int) -> list:
    """``batch_size`` records' tensors, stacked per position."""
    columns = [[] for _ in range(n_outputs)]
    for _ in range(batch_size):
        key, value = reader.next_record()
        where = f"record {brief(key)} of {reader.path!r}"
        try:
            protos = caffe2_pb2.TensorProtos.FromString(value)
        except Exception:
            raise DBReaderError(f"{where} is not a serialized TensorProtos") from None
        if len(protos.protos) < n_outputs:
            raise DBReaderError(f"{where} holds {len(protos.protos)} tensors, {n_outputs} outputs were asked for")
        for k in range(n_outputs):
            t = _tensor(protos.protos[k], where)
            if columns[k] and t.shape != columns[k][0].shape:
                raise DBReaderError(f"{where}: its tensor {k} has shape {brief(list(t.shape))}, the batch's "
                                    f"first record's has {brief(list(columns[k][0].shape))}",
                                    hint="a batch stacks records of one shape")
            if not columns[k]:  # (the whole batch, before it is made: batch_size is the op's word)
                check_size("TensorProtosDBInput", (batch_size, *t.shape), t.dtype)
            columns[k].append(t)
    return [np.stack(c) for c in columns]


def _tensor(t, where: str):
    field, dtype = _DTYPES.get(t.data_type, (None, None))
    if field is None:
        raise DBReaderError(f"{where}: a tensor has data type {t.data_type}, which dslc does not read")
    dims = tuple(int(d) for d in t.dims)
    held = len(getattr(t, field))  # (what the record holds, counted before any array is made)
    if min(dims, default=0) < 0 or held != math.prod(dims):
        raise DBReaderError(f"{where}: a tensor has dims {brief(list(dims))} but {held} values")
    data = np.frombuffer(t.byte_data, dtype=np.uint8) if field == "byte_data" else \
        np.asarray(getattr(t, field), dtype=dtype)
    return data.astype(dtype, copy=False).reshape(dims)
