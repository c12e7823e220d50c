"""Blob-database operators: Save, Load, DBExists (checkpoints are made of these).

Save and Load need their blobs' names, not only their values, so they declare
``input_names`` / ``output_names``: the lowering fills those with the recorded blob
names. Load's outputs are its results (the values it read). With ``allow_incomplete``
its operands are the outputs' current values, which blobs the checkpoint lacks keep.

    Save(x, y) {db = "/ck/n.3", input_names = ["x", "y"]}      writes x and y to /ck/n.3
    %x, %y = Load {db = "/ck/n.3", output_names = ["x", "y"]}  reads them back
"""
from __future__ import annotations

from ..opdef import REQUIRED, Effect, declare, type_error
from ..types import ANY, BOOL

W_DB = (Effect("db", "write"),)
R_DB = (Effect("db", "read"),)

# Where the database is, and which kind (blobdb's types; "" is the default format).
_WHERE = {"db_type": "", "absolute_path": 0}


def _names(op: str, attr: str, names, count: int) -> None:
    if len(names) != count:
        type_error(f"{op} has {count} blobs but {len(names)} {attr}",
                   f"give {attr} one entry per blob")


def stripped(name: str, prefix: str) -> str:
    """``name`` after the first occurrence of ``prefix`` (Caffe2's strip_prefix rule)."""
    at = name.find(prefix) if prefix else -1
    return name[at + len(prefix):] if at >= 0 else name


def save_keys(attrs) -> list[str]:
    """The keys Save stores its inputs under: the overrides, else the names less strip_prefix."""
    return list(attrs["blob_name_overrides"]) or [stripped(n, attrs["strip_prefix"]) for n in attrs["input_names"]]


def _save(types, attrs, n):
    _names("Save", "input_names", attrs["input_names"], len(types))
    if attrs["blob_name_overrides"]:
        _names("Save", "blob_name_overrides", attrs["blob_name_overrides"], len(types))
        if attrs["strip_prefix"]:  # (which would name the blob? Caffe2 refuses the pair too)
            type_error("Save takes strip_prefix or blob_name_overrides, not both",
                       "drop strip_prefix: the overrides already give every key")
    if not attrs["db"]:
        type_error("Save needs a db name", "pass db='path/to/checkpoint'")
    seen: set = set()
    dup = next((k for k in save_keys(attrs) if k in seen or seen.add(k)), None)
    if dup is not None:
        type_error(f"Save would store two blobs under the key {dup!r}",
                   "give each blob its own key (check strip_prefix and blob_name_overrides)")
    return []


def _load(types, attrs, n):
    _names("Load", "output_names", attrs["output_names"], n)
    seen: set = set()
    dup = next((o for o in attrs["output_names"] if o in seen or seen.add(o)), None)
    if dup is not None:
        type_error(f"Load lists the output {dup!r} twice", "name each blob to load once")
    from .dbinput import DBREADER
    reader = len(types) == 1 and types[0] == DBREADER  # (Caffe2's Load([reader], ...): the db it reads)
    if types and not reader and (len(types) != n or not attrs["allow_incomplete"]):
        type_error(f"Load takes no inputs (it has {len(types)})",
                   "list the blobs to load as its outputs: ops.Load([], [names...], db=...)")
    if attrs["source_blob_names"]:
        _names("Load", "source_blob_names", attrs["source_blob_names"], n)
    if not attrs["db"] and not attrs["dbs"] and not reader:
        type_error("Load needs a db name", "pass db='path/to/checkpoint' (or dbs=[...], or a CreateDB reader)")
    return [ANY] * n


def _db_exists(types, attrs, n):
    if not attrs["db_name"]:
        type_error("DBExists needs db_name", "pass db_name='path/to/checkpoint'")
    return [BOOL]


declare("Save", (0, None), _save, results=(0, 0), effects=W_DB,
        attrs={"db": REQUIRED, **_WHERE, "input_names": [], "strip_prefix": "",
               "blob_name_overrides": [], "chunk_size": -1, "options": "", "db_options": None},
        doc="write the inputs as one new checkpoint `db` (key: the blob name, an override, or the "
            "name without strip_prefix); atomic: a failed save leaves the old one; minidb only: "
            "chunk_size (elements per record; -1: 1,000,000, 0: one) and options (SerializationOptions)")
declare("Load", (0, None), _load, results=(0, None), effects=R_DB,
        attrs={"db": "", "dbs": [], **_WHERE, "output_names": [], "source_blob_names": [],
               "allow_incomplete": 0, "load_all": 0, "keep_device": 0, "strip_prefix": "",
               "add_prefix": ""},
        doc="read blobs from checkpoint `db` (or each of `dbs`) into the outputs, every checksum "
            "verified first; a missing blob is an error unless allow_incomplete; load_all: every blob "
            "of the checkpoint, under its stored name (the outputs among them)")
declare("DBExists", 0, _db_exists, effects=R_DB,
        attrs={"db_name": REQUIRED, **_WHERE},
        doc="bool scalar: is there a complete checkpoint `db_name` of `db_type`")
