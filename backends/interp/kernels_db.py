"""Interp kernels for Save, Load and DBExists, over the runtime's blob databases.

The op attributes say where (``db``, ``db_type``, ``absolute_path``) and under which
keys; ``runtime/blobdb`` does the storing, so these stay small. A Load
returns its values only after every one of them was read and verified, so a
failed Load changes no blob.
"""
from __future__ import annotations

import os

import numpy as np

from dslc.runtime import blobcodec, blobdb
from dslc.ir.diagnostics import DSLError
from dslc.ir.ops.db import save_keys, stripped

from .kernels import kernel


def _path(db: str, absolute: bool, ws=None) -> str:
    """Caffe2 reads a relative db name from the workspace's root folder ("." unless
    ResetWorkspace named one: the working directory)."""
    if absolute:
        return db
    root = ws.root() if ws is not None else "."
    return os.path.join(os.getcwd() if root == "." else root, db)


@kernel("DBExists", per_instance=True)
def _db_exists(op, cfg):
    a = op.attrs

    def make(inst):
        path = _path(a["db_name"], bool(a["absolute_path"]), inst.ws)
        return lambda: np.bool_(blobdb.get(a["db_type"]).exists(path))
    return make


@kernel("Save", per_instance=True)
def _save(op, cfg):
    a = op.attrs
    keys = save_keys(a)  # (distinct: the declaration checked them)

    def make(inst):
        path = _path(a["db"], bool(a["absolute_path"]), inst.ws)

        def save(*values):
            db = blobdb.get(a["db_type"])
            extra = {"chunk_size": a["chunk_size"], "options": a["options"]} \
                if getattr(db, "takes_save_options", False) else {}
            # encoded lazily, so a huge checkpoint is never held twice in memory
            db.write(path, ((k, blobcodec.encode(n, v)) for k, n, v in zip(keys, a["input_names"], values)),
                     **extra)
        return save
    return make


@kernel("Load", per_instance=True)
def _load(op, cfg):
    from dslc.ir.ops.dbinput import DBREADER
    a = op.attrs
    # Caffe2's Load([reader], ...): the db a CreateDB reader opened, named at run time
    from_reader = len(op.operands) == 1 and op.operands[0].type == DBREADER
    outs = list(a["output_names"])
    wanted = list(a["source_blob_names"]) or outs  # names as they were stored (before prefixes)
    renames = bool(a["strip_prefix"] or a["add_prefix"])
    partial = bool(a["allow_incomplete"])

    def blob_name(key: str) -> str:
        return a["add_prefix"] + stripped(key, a["strip_prefix"])

    def read_all(paths, reader=None) -> dict:
        """name -> value for every wanted name found, over all the dbs."""
        db = blobdb.get(a["db_type"] if reader is None else reader.db_type)
        paths_now = paths if reader is None else [reader.path]
        found: dict = {}
        for path in paths_now:
            if a["load_all"] or renames or partial or len(paths_now) > 1:
                keys = {blob_name(k): k for k in db.keys(path)}
                pick = list(keys) if a["load_all"] else [w for w in wanted if w in keys]
            else:
                keys, pick = {w: w for w in wanted}, wanted
            dup = next((w for w in pick if w in found), None)
            if dup is not None:
                raise DSLError(f"blob {dup!r} is in more than one of the checkpoints {paths_now}",
                               hint="load each blob from one checkpoint only")
            got = db.read(path, [keys[w] for w in pick])
            found.update((w, got[keys[w]]) for w in pick)
        if not partial and not a["load_all"]:
            lost = [w for w in wanted if w not in found]
            if lost:
                raise blobdb.MissingBlobError(f"no checkpoint of {paths_now} has blob {lost[0]!r}",
                                              hint="pass allow_incomplete=True to skip blobs it lacks")
        return found

    def make(inst):
        paths = [] if from_reader else [_path(p, bool(a["absolute_path"]), inst.ws)
                                        for p in (list(a["dbs"]) or [a["db"]])]

        def load(*kept):
            reader = kept[0] if from_reader else None
            kept = () if from_reader else kept
            found = read_all(paths, reader)
            if a["load_all"]:  # (every blob by its stored name; the outputs' values returned)
                for name, value in found.items():
                    if name not in outs:
                        inst.ws.cell(name).v = value
                if not outs:
                    return None
                lost = [o for o in outs if o not in found]
                if lost:
                    raise blobdb.MissingBlobError(f"no checkpoint of {paths or [reader.path]} has blob {lost[0]!r}")
                return found[outs[0]] if len(outs) == 1 else tuple(found[o] for o in outs)
            # allow_incomplete: a blob the checkpoint lacks keeps its value (the operands)
            values = [found[w] if w in found else old for w, old in zip(wanted, kept or [None] * len(wanted))]
            return None if not values else values[0] if len(values) == 1 else tuple(values)
        return load
    return make


# --- reading training records (CreateDB, TensorProtosDBInput)
@kernel("CreateDB")
def _create_db(op, cfg):
    from dslc.runtime.blobdb.dbreader import KeyValueReader
    a = op.attrs
    path = _path(a["db"], os.path.isabs(a["db"]))
    if a["db_type"] in ("lmdb", "leveldb", "minidb"):  # (record by record, for TensorProtosDBInput;
        return lambda: KeyValueReader(path, a["db_type"])  # a Load of a minidb reads its path)
    blobdb.get(a["db_type"])  # (an unknown type fails here, naming the known ones)
    return lambda: DBHandle(path, a["db_type"])


class DBHandle:
    """What CreateDB gives for a db of blobs only (dslcdb...): its path and type, for a Load to read."""

    handle_kind = "dbreader"

    def __init__(self, path, db_type):
        self.path, self.db_type = path, db_type


@kernel("TensorProtosDBInput")
def _tensor_protos_input(op, cfg):
    from dslc.runtime.blobdb.dbreader import read_tensor_protos
    size, n = int(op.attrs["batch_size"]), len(op.results)

    def read(reader):
        out = read_tensor_protos(reader, size, n)
        return tuple(out) if n > 1 else out[0]
    return read
