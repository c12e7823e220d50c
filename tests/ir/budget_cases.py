"""Hostile inputs for every op whose result size comes from values (the sized-by-values
trait, ir/opdef.py): each case is a few KB of input asking for a GiB or more. Run as a
script (``python tests/ir/budget_cases.py OUT.json [NAMES...]``) it runs each case on the
backend and pipeline its environment names (DSLC_BACKEND, DSLC_PIPELINE), under the
budget DSLC_MAX_TENSOR_BYTES, and writes per case the error it raised and how far the
process's peak resident memory rose while it ran (Linux: /proc/self/clear_refs resets
the peak). tests/ir/test_budget.py reads the file.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

G = 20000  # a side of a square of float32s: 1.6 GB
I64 = np.int64


def _text_file(tmp):
    path = os.path.join(tmp, "row.tsv")
    with open(path, "w") as f:
        f.write("\t".join(["x"] * 100) + "\n")
    return path


# An image made in the case's own net, from a shape fed as values: its type has no dims, so
# a window op's output shape is known only when it runs (a fed image's is known before
# running, and a type error refuses it there).
IMAGE = ("ConstantFill", ["xs"], ["x"], {"input_as_shape": 1, "value": 1.0}, "inline")
XS = np.array([1, 1, 4, 4], I64)

# op name -> (inputs: name -> array, arguments, extra ops run first: (type, inputs, outputs,
# args[, "inline": in the case's net, just before its op]))
CASES = {
    "ConstantFill": ({"shape": np.array([G, G], I64)}, {"input_as_shape": 1, "value": 1.0}, []),
    "GaussianFill": ({"shape": np.array([G, G], I64)}, {"input_as_shape": 1}, []),
    "UniformFill": ({"shape": np.array([G, G], I64)}, {"input_as_shape": 1}, []),
    "UniformIntFill": ({"shape": np.array([G, G], I64)}, {"input_as_shape": 1}, []),
    "Float16UniformFill": ({"shape": np.array([G, G], I64)}, {"input_as_shape": 1}, []),
    "XavierFill": ({"shape": np.array([G, G], I64)}, {"input_as_shape": 1}, []),
    "MSRAFill": ({"shape": np.array([G, G], I64)}, {"input_as_shape": 1}, []),
    "UniqueUniformFill": ({"shape": np.array([G, G], I64)},
                          {"input_as_shape": 1, "min": 0, "max": 2 ** 40, "dtype": 10}, []),
    "DiagonalFill": ({}, {"shape": [G, G], "value": 1.0}, []),
    "OneHot": ({"i": np.array([0], I64), "n": np.array([10 ** 9], I64)}, {}, []),
    "BatchOneHot": ({"x": np.zeros((G, 1), np.float32), "lens": np.array([G], np.int32),
                     "vals": np.arange(G, dtype=np.float32)}, {}, []),
    "BatchBucketOneHot": ({"x": np.zeros((G, 1), np.float32), "lens": np.array([G], np.int32),
                           "b": np.arange(G, dtype=np.float32)}, {}, []),
    "SegmentOneHot": ({"l": np.array([1], I64), "i": np.array([0], I64), "n": np.array([10 ** 9], I64)},
                      {}, []),
    "Range": ({"n": np.array(10 ** 9, I64)}, {}, []),
    "LengthsRangeFill": ({"l": np.array([10 ** 9], np.int32)}, {}, []),
    "LengthsSumGradient": ({"dy": np.ones((1, 4), np.float32), "l": np.array([10 ** 9], np.int32)}, {}, []),
    "LengthsMeanGradient": ({"dy": np.ones((1, 4), np.float32), "l": np.array([10 ** 9], np.int32)}, {}, []),
    "LengthsWeightedSumGradient": ({"w": np.ones(G, np.float32), "dy": np.ones((1, G), np.float32),
                                    "l": np.array([G], np.int32)}, {}, []),
    "SparseLengthsIndicesInGradientSumGradient": (
        {"dy": np.ones((1, 4), np.float32), "l": np.array([10 ** 9], np.int32), "i": np.array([0], I64)}, {}, []),
    "SparseLengthsIndicesInGradientMeanGradient": (
        {"dy": np.ones((1, 4), np.float32), "l": np.array([10 ** 9], np.int32), "i": np.array([0], I64)}, {}, []),
    "SparseLengthsIndicesInGradientWeightedSumGradient": (
        {"w": np.ones(G, np.float32), "dy": np.ones((1, G), np.float32), "l": np.array([G], np.int32),
         "i": np.zeros(G, I64)}, {}, []),
    "LengthsTile": ({"d": np.ones((1, 4), np.float32), "l": np.array([10 ** 9], np.int32)}, {}, []),
    "LengthsToSegmentIds": ({"l": np.array([10 ** 9], np.int32)}, {}, []),
    "LengthsToWeights": ({"l": np.array([10 ** 9], np.int32)}, {}, []),
    "SegmentIdsToLengths": ({"ids": np.array([0, 10 ** 10], I64)}, {}, []),
    "SegmentIdsToRanges": ({"ids": np.array([0, 10 ** 10], I64)}, {}, []),
    "UnsortedSegmentSum": ({"d": np.ones((2, 4), np.float32), "ids": np.array([0, 10 ** 9], I64)}, {}, []),
    "UnsortedSegmentMean": ({"d": np.ones((2, 4), np.float32), "ids": np.array([0, 10 ** 9], I64)}, {}, []),
    "SparseUnsortedSegmentSum": ({"d": np.ones((1, 4), np.float32), "i": np.array([0, 0], I64),
                                  "ids": np.array([0, 10 ** 9], I64)}, {}, []),
    "SparseUnsortedSegmentMean": ({"d": np.ones((1, 4), np.float32), "i": np.array([0, 0], I64),
                                   "ids": np.array([0, 10 ** 9], I64)}, {}, []),
    "LengthsGather": ({"items": np.ones(G, np.float32), "l": np.array([G], np.int32), "i": np.zeros(G, I64)},
                      {}, []),
    "ReduceFrontSumGradient": ({"dy": np.ones(1, np.float32), "shape": np.array([10 ** 5, 10 ** 5], I64)}, {}, []),
    "ReduceFrontMeanGradient": ({"dy": np.ones(1, np.float32), "shape": np.array([10 ** 5, 10 ** 5], I64)}, {}, []),
    "ReduceBackSumGradient": ({"dy": np.ones(1, np.float32), "shape": np.array([10 ** 5, 10 ** 5], I64)}, {}, []),
    "ReduceBackMeanGradient": ({"dy": np.ones(1, np.float32), "shape": np.array([10 ** 5, 10 ** 5], I64)}, {}, []),
    "SparseToDense": ({"i": np.array([10 ** 9], I64), "v": np.ones((1, 4), np.float32)}, {}, []),
    "TextFileReaderRead": ({}, {"batch_size": 10 ** 9},
                           [("CreateTextFileReader", [], ["reader"],
                             {"filename": "TEXT_FILE", "num_passes": 10 ** 9, "field_types": [4] * 100})]),
    "ReadRandomBatch": ({"l": np.array([G], np.int32), "v": np.ones(G, np.float32), "idx": np.zeros(G, I64)},
                        {"batch_size": G},
                        [("CreateTreeCursor", [], ["cursor"], {"fields": ["x:lengths", "x:values"]}),
                         ("ComputeOffset", ["cursor", "l", "v"], ["offsets"], {})]),
}
for _op, _args in [("Conv", {"kernel": 1, "pad": 20000}), ("ConvFused", {"kernel": 1, "pad": 20000, "relu": 1}),
                   ("ConvTranspose", {"kernel": 1, "stride": 20000}),
                   ("MaxPool", {"kernel": 1, "pad": 20000}), ("AveragePool", {"kernel": 1, "pad": 20000}),
                   ("LpPool", {"kernel": 1, "pad": 20000})]:  # (pads or strides: 6 GB from a 4x4 image)
    CASES[_op] = ({"xs": XS, "w": np.ones((1, 1, 1, 1), np.float32)}, _args, [IMAGE])
INPUTS_FIRST = {"TextFileReaderRead": ["reader"], "ReadRandomBatch": ["cursor", "idx", "offsets", "l", "v"],
                "Conv": ["x", "w"], "ConvFused": ["x", "w"], "ConvTranspose": ["x", "w"], "MaxPool": ["x"], "AveragePool": ["x"],
                "LpPool": ["x"]}


def _peak_kb() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1])
    return 0


def _rss_kb() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])
    return 0


def run_case(name: str, tmp: str) -> dict:
    from dslc import core, workspace
    from dslc.ir.diagnostics import DSLError

    inputs, args, setup = CASES[name]
    workspace.ResetWorkspace()
    for blob, value in inputs.items():
        workspace.FeedBlob(blob, value)
    net = core.Net("case")
    for op_type, ins, outs, a, *inline in setup:
        a = {k: (_text_file(tmp) if v == "TEXT_FILE" else v) for k, v in a.items()}
        if inline:
            net.Proto().op.append(core.CreateOperator(op_type, ins, outs, **a))
        else:
            workspace.RunOperatorOnce(core.CreateOperator(op_type, ins, outs, **a))
    names = INPUTS_FIRST.get(name, list(inputs))
    n_out = {"TextFileReaderRead": 100, "ReadRandomBatch": 2}.get(name, 1)
    net.Proto().op.append(core.CreateOperator(name, names, [f"y{k}" for k in range(n_out)], **args))
    rss = _rss_kb()
    with open("/proc/self/clear_refs", "w") as f:  # (resets VmHWM to the current RSS)
        f.write("5")
    try:
        workspace.RunNetOnce(net)
        error = None
    except DSLError as e:
        error = {"type": type(e).__name__, "line": e.one_line()}
    except Exception as e:  # (reported, so the test says what escaped)
        error = {"type": type(e).__name__, "line": str(e)[:300], "internal": True}
    return {"error": error, "rose_kb": _peak_kb() - rss}


def main(argv) -> int:
    import tempfile
    out, names = argv[0], argv[1:] or list(CASES)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            first = run_case(name, tmp)  # (imports, compiles what the backend compiles)
            results[name] = dict(run_case(name, tmp), first_rose_kb=first["rose_kb"])
    with open(out, "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
