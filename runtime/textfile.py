"""Reading tab-separated text files in batches (CreateTextFileReader / TextFileReaderRead).

A row is one line; its fields are separated by tabs and typed by the reader's
dtypes (``ir/ops/records.py`` says which a text column may have). The
file is read ``num_passes`` times in all, then every read returns empty arrays.
Reads are serialized by a lock, so threads sharing the reader get disjoint rows.
"""
from __future__ import annotations

import threading

import numpy as np

from dslc.ir.budget import check_bytes
from dslc.ir.types import NUMPY_DTYPES

CHUNK = 4 << 20  # bytes of rows read before they become arrays (and the batch is checked)
_STR_OBJECT = 56  # what CPython's str object of a short text takes besides its characters


class TextFileError(ValueError):
    """A line of the file that does not fit the reader's fields (the kernel adds a hint)."""


def _parse(dtype: str, text: str):
    if dtype == "str":
        return text
    if dtype == "bool":
        if text.strip() not in ("0", "1", "true", "false", "True", "False"):
            raise ValueError(text)
        return text.strip() in ("1", "true", "True")
    if dtype in ("i32", "i64"):
        return int(text)
    return float(text)


class TextFileReader:
    """One open text file, read ``num_passes`` times, a batch of rows at a time."""

    handle_kind = "textfile"

    def __init__(self, path: str, num_passes: int, dtypes: list[str]):
        self.path, self.passes_left, self.dtypes = path, int(num_passes), list(dtypes)
        self.lock = threading.Lock()
        self._file = None
        self.rows_read = 0  # over all passes, for error messages

    def _next_line(self) -> str | None:
        """The next non-final line of the current pass, opening the next pass as needed."""
        while True:
            if self._file is None:
                if self.passes_left <= 0:
                    return None
                self.passes_left -= 1
                self._file = open(self.path, encoding="utf-8", newline="\n")
            line = self._file.readline()
            if line:
                return line[:-1] if line.endswith("\n") else line
            self._file.close()
            self._file = None

    def _row(self, line: str) -> list:
        cols = line.split("\t")
        row_no = self.rows_read + 1
        if len(cols) != len(self.dtypes):
            raise TextFileError(f"{self.path}: row {row_no} has {len(cols)} tab-separated fields, "
                                f"the reader expects {len(self.dtypes)}")
        try:
            return [_parse(dt, c) for dt, c in zip(self.dtypes, cols)]
        except ValueError:
            bad = next(i for i, (dt, c) in enumerate(zip(self.dtypes, cols)) if not _ok(dt, c))
            raise TextFileError(f"{self.path}: row {row_no}, field {bad}: {cols[bad]!r} is not a "
                                f"{self.dtypes[bad]}") from None

    def read(self, batch_size: int) -> list:
        """Up to ``batch_size`` rows, one array per field (empty once every pass is read).

        Rows become arrays about ``CHUNK`` bytes at a time (as Python objects they take
        several times more), and the batch so far is checked against the memory budget
        after each chunk: a huge batch_size over many passes of a small file is refused
        before it outgrows the budget. A string field counts its text and a str object."""
        parts, rows, done, size, chunk = [], [], 0, 0, 0
        fixed = sum(np.dtype(NUMPY_DTYPES[dt]).itemsize + (_STR_OBJECT if dt == "str" else 0)
                    for dt in self.dtypes)
        texts = "str" in self.dtypes
        with self.lock:
            while done + len(rows) < batch_size:
                line = self._next_line()
                if line is None:
                    break
                rows.append(self._row(line))
                self.rows_read += 1
                chunk += fixed + (len(line) if texts else 0)
                if chunk >= CHUNK:
                    done, size, chunk = done + len(rows), size + chunk, 0
                    check_bytes("TextFileReaderRead", size, f"a batch of {done} rows or more")
                    parts.append(self._arrays(rows))
                    rows = []
        parts.append(self._arrays(rows))
        if len(parts) == 1:
            return parts[0]
        return [np.concatenate([p[i] for p in parts]) for i in range(len(self.dtypes))]

    def _arrays(self, rows: list) -> list:
        return [np.array([r[i] for r in rows], dtype=NUMPY_DTYPES[dt]) for i, dt in enumerate(self.dtypes)]

    def __repr__(self):
        return f"TextFileReader({self.path!r}, rows_read={self.rows_read})"


def _ok(dtype: str, text: str) -> bool:
    try:
        _parse(dtype, text)
        return True
    except ValueError:
        return False
