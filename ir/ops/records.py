"""Record operators: text-file readers, and packing a dataset's rows into one blob.

A text-file reader is a handle (``!textfile``) read a batch of rows at a time; each
read yields one 1-D tensor per field, typed by the reader's ``field_types``. A packed
record (``!records``) holds one entry per top-level row of a dataset, each the slices
of every field for that row (``pack_to_single_shared_ptr``: one entry for all rows)::

    %r = CreateTextFileReader {filename = "a.tsv", field_types = [4, 1], num_passes = 1} : !textfile
    %s, %f = TextFileReaderRead(%r) {batch_size = 2} : any, any
    %p = PackRecords(%len, %val) {fields = ["a:lengths", "a:values"]} : !records
    %len2, %val2 = UnPackRecords(%p) {fields = ["a:lengths", "a:values"]} : any, any
"""
from __future__ import annotations

from ..opdef import REQUIRED, SIZED_BY_VALUES, Effect, declare, type_error
from ..types import ANY, CAFFE2_DTYPE_CODES, HandleType, TensorType
from .infer import tensors

TEXTFILE = HandleType("textfile")
RECORDS = HandleType("records")

# The dtypes a text field may have (strings, and numbers written as text).
TEXT_DTYPES = ("str", "f32", "f64", "i32", "i64", "bool")


def text_dtypes(attrs) -> list[str]:
    """Our dtype per field of a reader's ``field_types`` codes; an error for unreadable ones."""
    codes = attrs["field_types"]
    if not codes:
        type_error("CreateTextFileReader needs field_types, one core.DataType per column",
                   "pass field_types=[core.DataType.STRING, core.DataType.FLOAT, ...]")
    out = []
    for code in codes:
        dt = CAFFE2_DTYPE_CODES.get(code) if isinstance(code, int) else None
        if dt not in TEXT_DTYPES:
            type_error(f"CreateTextFileReader cannot read a column of type {code!r}",
                       "text columns are STRING, FLOAT, DOUBLE, INT32, INT64 or BOOL")
        out.append(dt)
    return out


def _create_reader(types, attrs, n):
    if not attrs["filename"]:
        type_error("CreateTextFileReader needs a filename", "pass filename='data.tsv'")
    if int(attrs["num_passes"]) < 0:
        type_error(f"CreateTextFileReader num_passes must be >= 0, got {attrs['num_passes']}")
    text_dtypes(attrs)
    return [TEXTFILE]


declare("CreateTextFileReader", 0, _create_reader,
        attrs={"filename": REQUIRED, "num_passes": 1, "field_types": []},
        effects=(Effect("textfile", "alloc"),),
        doc="a reader of the tab-separated file `filename`, one column per entry of field_types "
            "(core.DataType codes), read num_passes times")


def _handle(op: str, t, want, what: str, maker: str) -> None:
    if t != ANY and t != want:
        type_error(f"{op} input 0 must be {what}, got {t}", f"pass the blob {maker} wrote")


def _read_text(types, attrs, n):
    _handle("TextFileReaderRead", types[0], TEXTFILE, "a text file reader", "CreateTextFileReader")
    if int(attrs["batch_size"]) < 1:
        type_error(f"TextFileReaderRead batch_size must be >= 1, got {attrs['batch_size']}")
    # (the column types live in the reader, known when it is made: the kernel checks the count)
    return [ANY] * n


declare("TextFileReaderRead", 1, _read_text, results=(1, None), attrs={"batch_size": 1},
        effects=(Effect("textfile", "write"),), traits={SIZED_BY_VALUES},
        doc="the next batch_size rows of the file, one 1-D tensor per column; empty tensors "
            "once every pass is read")


def _fields(op: str, attrs, count: int) -> None:
    fields = attrs["fields"]
    if len(fields) != count or not all(isinstance(f, str) for f in fields):
        type_error(f"{op} has {count} field blobs but fields names {len(fields)}",
                   "pass fields=record.field_names(), one name per blob")


def _pack(types, attrs, n):
    for t in tensors("PackRecords", types):
        if t.shape == ():
            type_error(f"PackRecords packs rows of tensors, got a scalar {t}",
                       "dataset fields are tensors with one entry per row")
    _fields("PackRecords", attrs, len(types))
    return [RECORDS]


declare("PackRecords", (1, None), _pack, attrs={"fields": [], "pack_to_single_shared_ptr": 0},
        doc="one entry per top-level row of the dataset (operands, named by fields), holding that "
            "row's slice of every field; pack_to_single_shared_ptr: one entry holding all rows")


def _unpack(types, attrs, n):
    _handle("UnPackRecords", types[0], RECORDS, "packed records", "PackRecords")
    _fields("UnPackRecords", attrs, n)
    protos = tensors("UnPackRecords", types[1:])
    if protos and len(protos) != n:
        type_error(f"UnPackRecords has {len(protos)} prototype blobs for {n} outputs",
                   "give one prototype per field, or none")
    if not protos:
        return [ANY] * n
    return [TensorType(t.dtype, None if t.shape is None else (None,) + t.shape[1:]) for t in protos]


declare("UnPackRecords", (1, None), _unpack, results=(1, None), attrs={"fields": []},
        doc="the fields of packed records, each the rows' slices concatenated; the optional "
            "prototype operands give dtypes and shapes when there are no rows")
