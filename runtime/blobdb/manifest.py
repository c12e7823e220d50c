"""A checkpoint's manifest (its index of blob names, kinds, dtypes, shapes, places and
checksums) as columns, for the db types that keep one as JSON rows (``dbfile``,
``dblmdb``, ``dbleveldb``): a checkpoint may hold thousands of small blobs, and a
dict per blob, built and taken apart again, costs more than reading them.

    {"format": 2, "chunk": 1048576,
     "blobs": [{"name": ..., "kind": ..., "dtype": ..., "shape": [...],
                ("record": ..., "offset": ...,) "length": ..., "xxh3": ...}, ...]}
"""
from __future__ import annotations

import json
import operator

import numpy as np

from .base import MissingBlobError


def parse(raw) -> dict:
    """A manifest's JSON document; ValueError if it is not a JSON object (a nesting deeper
    than Python's stack included: the file is any program's word)."""
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise ValueError("its JSON nests too deep") from None
    if not isinstance(doc, dict):
        raise ValueError(f"it is a JSON {type(doc).__name__}, not an object")
    return doc


class Index:
    """A manifest's blob rows as columns, in their order: ``names``, ``kinds``, ``dtypes``,
    ``shapes`` (lists), ``length`` (int64) and ``digest`` (uint64, the row's ``field``);
    with ``placed``, also ``record`` and ``offset`` (int64). Raises KeyError, TypeError,
    ValueError or OverflowError for rows that do not have them."""

    __slots__ = ("names", "kinds", "dtypes", "shapes", "record", "offset", "length", "digest")

    def __init__(self, rows: list, field: str, placed: bool = False):
        if not isinstance(rows, list):
            raise TypeError(f"its blob list is a {type(rows).__name__}")
        keys = ("name", "length", field) + (("record", "offset") if placed else ())
        cols = list(zip(*map(operator.itemgetter(*keys), rows))) or [()] * len(keys)
        self.names = list(map(str, cols[0]))
        if len(set(self.names)) != len(self.names):  # (which one would Load read?)
            seen: set = set()
            twice = next(n for n in self.names if n in seen or seen.add(n))
            raise ValueError(f"blob {twice!r} is stored twice")
        self.length = np.array(cols[1], dtype=np.int64)
        self.digest = np.array(cols[2], dtype=np.uint64)
        self.record, self.offset = (np.array(c, dtype=np.int64) for c in cols[3:]) if placed else (None, None)
        try:
            meta = list(zip(*map(operator.itemgetter("kind", "dtype", "shape"), rows))) or [()] * 3
        except KeyError:  # (a format-1 writer may have left one out)
            meta = [[b.get(k, d) for b in rows] for k, d in (("kind", ""), ("dtype", ""), ("shape", ()))]
        self.kinds, self.dtypes, self.shapes = (list(c) for c in meta)

    def select(self, what: str, names) -> tuple:
        """(the names wanted, deduplicated, all if None; their positions here, an intp array).
        ``what`` names the checkpoint in the error for a name it lacks."""
        by_name = dict(zip(self.names, range(len(self.names))))
        wanted = list(by_name) if names is None else list(dict.fromkeys(names))
        try:
            pick = [by_name[n] for n in wanted]
        except KeyError:
            missing = next(n for n in wanted if n not in by_name)
            shown = sorted(by_name)
            listed = ", ".join(repr(n) for n in shown[:8]) + (" ..." if len(shown) > 8 else "")
            raise MissingBlobError(f"{what} has no blob {missing!r}",
                                   hint=f"pass allow_incomplete=True to skip blobs it lacks; it holds "
                                        f"{len(shown)} blobs: {listed}") from None
        return wanted, np.array(pick, dtype=np.intp)

    def take(self, pick) -> tuple:
        """(names, kinds, dtypes, shapes, lengths) of the blobs at ``pick``, as lists."""
        sel = pick.tolist()
        return ([self.names[i] for i in sel], [self.kinds[i] for i in sel], [self.dtypes[i] for i in sel],
                [self.shapes[i] for i in sel], self.length[pick].tolist())


def rows_text(head: dict, names: list, encs: list, columns: list) -> str:
    """The manifest's JSON, as ``json.dumps`` gives it, one blob row at a time (without a
    dict per blob): ``head``'s items, then "blobs", each row's name, kind, dtype and
    shape from ``encs`` (blobcodec.Encoded), then ``columns`` [(key, ints per blob)]."""
    quote = json.encoder.encode_basestring_ascii
    row = '{"name": %s, "kind": %s, "dtype": %s, "shape": [%s]' + "".join(
        f', "{k}": %d' for k, _ in columns) + "}"
    rows = [row % (quote(n), quote(e.kind), quote(e.dtype), ", ".join(map(str, e.shape)), *ints)
            for n, e, *ints in zip(names, encs, *(v for _, v in columns))]
    return json.dumps(head)[:-1] + (", " if head else "") + '"blobs": [' + ", ".join(rows) + "]}"
