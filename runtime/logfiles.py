"""The files ``Print(to_file=1)`` and ``Summarize(to_file=1)`` write, in Caffe2's form.

Each op writes ``<root folder>/<blob>.log`` (Print) or ``<blob>.summary`` (Summarize) in
the workspace's root folder (``ResetWorkspace(root)``; "." is the working directory), a
``/`` of a name scope written ``#``. An op empties its file the first time it writes, then
adds a line per run, as Caffe2's op does from its creation on::

    Tensor accuracy of type float. Dims: (1,): 0.9375       (accuracy.log)
    -0.0832 0.0911 0.0004 0.0472                          (conv1_w.summary: min max mean std)

Numbers are written as C++ streams write them (six significant digits).
"""
from __future__ import annotations

import os
import threading

import numpy as np

# Caffe2's names for its tensor element types, as its TypeMeta gives them on Linux
_TYPE_NAMES = {"float32": "float", "float64": "double", "int32": "int", "int64": "long int",
               "bool": "bool", "uint8": "unsigned char", "int8": "signed char", "int16": "short int",
               "uint16": "unsigned short int", "float16": "c10::Half", "object": "std::basic_string<char>"}
PRINT_LIMIT = 1000  # the values a Print writes when its ``limit`` is 0, as Caffe2's


def path(root: str, blob: str, extension: str) -> str:
    """Where the log of ``blob`` goes in workspace root folder ``root``."""
    folder = os.getcwd() if root == "." else root
    return os.path.join(folder, blob.replace("/", "#") + extension)


def _number(v) -> str:
    if isinstance(v, (bytes, np.bytes_)):
        return bytes(v).decode("utf-8", "replace")
    if isinstance(v, (str, np.str_)):
        return str(v)
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    if isinstance(v, (float, np.floating)):
        return f"{float(v):g}"
    return str(v)


def tensor_line(name: str, x, limit: int) -> str:
    """Print's line: the tensor's name, type, dims and its first ``limit`` values
    (PRINT_LIMIT when 0)."""
    arr = np.asarray(x)
    kind = _TYPE_NAMES.get(arr.dtype.name, arr.dtype.name)
    dims = "".join(f"{d}," for d in arr.shape)
    flat = arr.reshape(-1)[:limit if limit > 0 else PRINT_LIMIT]
    return f"Tensor {name} of type {kind}. Dims: ({dims}): {','.join(_number(v) for v in flat)}\n"


def summary_line(stats) -> str:
    """Summarize's line: min, max, mean and standard deviation."""
    return " ".join(_number(v) for v in np.asarray(stats).reshape(-1)) + "\n"


class LogFiles:
    """The files one compiled op writes: each emptied at its first line, then appended to.
    (An op runs once per task instance; instances of one op write one file, as the
    nets of Caffe2's instances would.)"""

    def __init__(self):
        self._started: set = set()
        self._lock = threading.Lock()

    def write(self, file: str, line: str) -> None:
        with self._lock:
            mode = "a" if file in self._started else "w"
            with open(file, mode, encoding="utf-8") as f:
                f.write(line)
            self._started.add(file)
