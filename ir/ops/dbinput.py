"""Reading training data from a key-value database of serialized TensorProtos (Caffe2's
CreateDB and TensorProtosDBInput, as its MNIST tutorial feeds a model):

    %r = CreateDB {db = "train.lmdb", db_type = "lmdb"} : !dbreader
    %x, %y = TensorProtosDBInput(%r) {batch_size = 64} : any, any

Each record's value is a ``TensorProtos`` message; output k stacks the k-th tensor of
``batch_size`` consecutive records. The reader goes round to the first record after
the last, as Caffe2's does. Types are known only when the records are read.
"""
from __future__ import annotations

from ..gradients import no_gradient
from ..opdef import Effect, declare, type_error
from ..types import ANY, HandleType

DBREADER = HandleType("dbreader")
R_READER = (Effect("dbreader", "write"),)  # (reading advances the reader)


def _create_db(types, attrs, n):
    if not attrs["db"]:
        type_error("CreateDB needs db= (the database's path)", "pass db='path/to/train.lmdb', db_type='lmdb'")
    return [DBREADER]


declare("CreateDB", 0, _create_db, attrs={"db": "", "db_type": "lmdb", "num_shards": 1, "shard_id": 0},
        effects=(Effect("dbreader", "alloc"),),
        doc="a reader of the key-value database `db` (lmdb, or leveldb with plyvel), at its first record")


def _tensor_protos_input(types, attrs, n):
    if types and types[0] not in (ANY, DBREADER):
        type_error(f"TensorProtosDBInput's input must be a reader, got {types[0]}",
                   "pass the blob CreateDB wrote")
    if int(attrs["batch_size"]) < 1:
        type_error("TensorProtosDBInput needs batch_size >= 1", "pass batch_size=N")
    return [ANY] * n


declare("TensorProtosDBInput", 1, _tensor_protos_input, results=(1, None),
        attrs={"batch_size": 1, "shape": None}, effects=R_READER,
        doc="the next batch_size records' TensorProtos, output k stacking each record's k-th tensor")

no_gradient("CreateDB", "TensorProtosDBInput")  # (data read from a database: no gradient flows back)
