"""The operator-test harness Caffe2 users test their ops with (``hypothesis_test_util``).

A test draws inputs with the strategies here (``tensor``, ``tensors``, ``arrays`` ...)
and checks an operator made with ``core.CreateOperator`` three ways:

- ``assertReferenceChecks(gc, op, inputs, reference)``: the op's outputs against the
  user's numpy ``reference(*inputs)``;
- ``assertDeviceChecks(dc, op, inputs, outputs)``: the same outputs on every device;
- ``assertGradientChecks(gc, op, inputs, i, outputs)``: the gradient the op's declared
  gradient ops compute for input ``i`` against central finite differences.

The devices are dslc's backends: ``cpu_do`` runs on the interpreter (the reference
semantics) and ``numba_do`` on numba with every compilable region compiled, so
``gcs`` (``gc``: one device drawn per example, ``dc``: all of them) makes every check
run on both. There is no GPU: the GPU device lists are empty, as on Caffe2's CPU build.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import os
import struct
import sys
import threading
import time

import hypothesis
import hypothesis.extra.numpy
import hypothesis.strategies as st
import numpy as np

from dslc import core, device_checker, gradient_checker, test_util, workspace
from dslc.driver import compile_clock
from dslc.trace.devices import BackendOption
from dslc.proto import caffe2_pb2


def is_sandcastle() -> bool:
    return os.getenv("SANDCASTLE") == "1" or os.getenv("TW_JOB_USER") == "sandcastle"


def is_travis() -> bool:
    return "TRAVIS" in os.environ


def to_float32(x) -> float:
    """``x`` rounded to the nearest float32, as a Python float."""
    return struct.unpack("f", struct.pack("f", float(x)))[0]


def settings(*args, **kwargs):
    """hypothesis.settings, dropping the options current hypothesis no longer has."""
    kwargs.pop("min_satisfying_examples", None)
    if "timeout" in kwargs:
        kwargs.setdefault("deadline", kwargs["timeout"] * 1e3)
        kwargs.pop("timeout")
    return hypothesis.settings(*args, **kwargs)


def floats(*args, **kwargs):
    """float32 draws by default (bounds rounded to float32), as Caffe2's tests expect."""
    if "width" not in kwargs:
        kwargs["width"] = 32
        for bound in ("min_value", "max_value"):
            if kwargs.get(bound) is not None:
                kwargs[bound] = to_float32(kwargs[bound])
    return st.floats(*args, **kwargs)


_quiet = [hypothesis.HealthCheck.too_slow]
hypothesis.settings.register_profile("sandcastle", settings(
    derandomize=True, suppress_health_check=_quiet, database=None, max_examples=50, deadline=10000))
hypothesis.settings.register_profile("dev", settings(
    suppress_health_check=_quiet, database=None, max_examples=10, deadline=10000))
hypothesis.settings.register_profile("debug", settings(
    suppress_health_check=_quiet, database=None, max_examples=1000, deadline=50000))
# As Caffe2 does, op tests get the "dev" profile (10 examples, 10 s deadline) unless
# CAFFE2_HYPOTHESIS_PROFILE names another; a program that loaded a profile of its own keeps it.
if os.getenv("CAFFE2_HYPOTHESIS_PROFILE") or getattr(hypothesis.settings, "_current_profile", None) in (
        None, "default"):
    hypothesis.settings.load_profile("sandcastle" if is_sandcastle() else
                                     os.getenv("CAFFE2_HYPOTHESIS_PROFILE", "dev"))


# ----------------------------------------------------------------------------- compile time
# An example's deadline measures running it, not compiling it. On numba the first example
# of an op compiles its kernels (seconds, more than the 10 s deadline on a loaded machine),
# and hypothesis then fails the test for timings that differ between runs. Compile time is
# taken out of the example's measured time the way hypothesis takes out the time a stateful
# test spends in its rules: added to the example's run times that hypothesis subtracts
# (``_stateful_run_times``; older hypothesis: its draw times, also subtracted, though
# counted by the too_slow health check, which Caffe2's profiles turn off).
_EXEMPT_KEY = "dslc:compile"


def _exempt(seconds: float) -> None:
    """Do not count ``seconds`` against the deadline of the hypothesis example running now."""
    if not _numba_listened and "numba" in sys.modules:  # (a numba compile: its backend is in use)
        _listen_to_numba()
    try:
        data = hypothesis.control.current_build_context().data
    except Exception:  # (no example running: a plain test, or compiling outside hypothesis)
        return
    times = getattr(data, "_stateful_run_times", None)
    if times is None:
        times = getattr(data, "draw_times", None)
    if isinstance(times, dict):
        times[_EXEMPT_KEY] = times.get(_EXEMPT_KEY, 0.0) + seconds


def _listen_to_numba() -> None:
    """Report numba's compiles that happen outside a dslc compile (kernels numba compiles on
    their first call, at run time): the outermost of nested ones, each once."""
    global _numba_listened
    _numba_listened = True
    from numba.core import event  # (loaded already: the backend is in use)
    state = threading.local()

    class NumbaCompiles(event.Listener):
        def on_start(self, e):
            depth = getattr(state, "depth", 0)
            state.depth = depth + 1
            if depth == 0:
                state.start = None if compile_clock.inside() else time.perf_counter()

        def on_end(self, e):
            state.depth = getattr(state, "depth", 1) - 1
            if state.depth == 0 and getattr(state, "start", None) is not None:
                compile_clock.report(time.perf_counter() - state.start)
                state.start = None

    event.register("numba:compile", NumbaCompiles())


_numba_listened = False
compile_clock.listen(_exempt)


# ----------------------------------------------------------------------------- strategies

def dims(min_value=1, max_value=5):
    return st.integers(min_value=min_value, max_value=max_value)


def elements_of_type(dtype=np.float32, filter_=None):
    """Values in [-1, 1] for floats, non-negative ints, booleans."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        elems = floats(min_value=-1.0, max_value=1.0, width=dtype.itemsize * 8)
    elif dtype == np.int32:
        elems = st.integers(min_value=0, max_value=2 ** 31 - 1)
    elif dtype == np.int64:
        elems = st.integers(min_value=0, max_value=2 ** 63 - 1)
    elif dtype == np.bool_:
        elems = st.booleans()
    else:
        raise ValueError(f"no default elements for dtype {dtype}: pass elements=")
    return elems if filter_ is None else elems.filter(filter_)


def arrays(dims, dtype=np.float32, elements=None, unique=False):
    return hypothesis.extra.numpy.arrays(dtype, dims, elements=elements if elements is not None else elements_of_type(dtype),
                                         unique=unique)


def tensor(min_dim=1, max_dim=4, dtype=np.float32, elements=None, unique=False, **kwargs):
    """An array of ``min_dim`` to ``max_dim`` dimensions, each from ``dims(**kwargs)``."""
    shape = st.lists(dims(**kwargs), min_size=min_dim, max_size=max_dim)
    return shape.flatmap(lambda d: arrays(d, dtype, elements, unique=unique))


def tensor1d(min_len=1, max_len=64, dtype=np.float32, elements=None):
    return tensor(1, 1, dtype, elements, min_value=min_len, max_value=max_len)


def tensors(n, min_dim=1, max_dim=4, dtype=np.float32, elements=None, **kwargs):
    """``n`` arrays of one shape."""
    shape = st.lists(dims(**kwargs), min_size=min_dim, max_size=max_dim)
    return shape.flatmap(lambda d: st.lists(arrays(d, dtype, elements), min_size=n, max_size=n))


def tensors1d(n, min_len=1, max_len=64, dtype=np.float32, elements=None):
    return tensors(n, 1, 1, dtype, elements, min_value=min_len, max_value=max_len)


def segment_ids(size, is_sorted):
    """int32 segment ids for ``size`` rows: sorted from 0 with steps of 0 or 1, or any in [0, 2 size]."""
    if size == 0:
        return st.just(np.empty(0, dtype=np.int32))
    if is_sorted:
        steps = arrays([size], dtype=np.int32, elements=st.booleans())
        return steps.map(lambda x: np.cumsum(x, dtype=np.int32) - x[0])
    return arrays([size], dtype=np.int32, elements=st.integers(min_value=0, max_value=2 * size))


def lengths(size, min_segments=None, max_segments=None, **kwargs):
    """int32 segment lengths (zeros allowed) adding up to ``size``."""
    min_segments = min_segments or 0
    max_segments = size if max_segments is None else max_segments
    assert 0 <= min_segments <= max_segments
    if size == 0 and max_segments == 0:
        return st.just(np.empty(0, dtype=np.int32))
    assert max_segments > 0, "a non-empty tensor needs at least one segment"
    borders = st.integers(min_value=max(min_segments - 1, 0), max_value=max_segments - 1).flatmap(
        lambda k: hypothesis.extra.numpy.arrays(np.int32, k, elements=st.integers(0, size)))
    return borders.map(lambda b: np.diff(np.sort(np.concatenate([b, [0, size]]).astype(np.int32))))


def segmented_tensor(min_dim=1, max_dim=4, dtype=np.float32, is_sorted=True, elements=None,
                     segment_generator=segment_ids, allow_empty=False, **kwargs):
    """(data, segments of its rows)."""
    empty = st.booleans() if allow_empty else st.just(False)
    shape = st.tuples(empty, st.lists(dims(**kwargs), min_size=min_dim, max_size=max_dim)).map(
        lambda p: ([0] if p[0] else []) + p[1])
    return shape.flatmap(lambda d: st.tuples(arrays(d, dtype, elements),
                                             segment_generator(d[0], is_sorted=is_sorted)))


def lengths_tensor(min_segments=None, max_segments=None, *args, **kwargs):
    gen = functools.partial(lengths, min_segments=min_segments, max_segments=max_segments)
    return segmented_tensor(*args, segment_generator=gen, **kwargs)


def sparse_segmented_tensor(min_dim=1, max_dim=4, dtype=np.float32, is_sorted=True, elements=None,
                            allow_empty=False, segment_generator=segment_ids, itype=np.int64, **kwargs):
    """(data, indices into its rows, segments of the indices)."""
    empty = st.booleans() if allow_empty else st.just(False)
    shape = st.tuples(empty, st.lists(dims(**kwargs), min_size=min_dim, max_size=max_dim)).flatmap(
        lambda p: st.tuples(st.just(p[1]), st.just(0) if p[0] else st.integers(1, p[1][0])))
    return shape.flatmap(lambda d: st.tuples(
        arrays(d[0], dtype, elements),
        arrays(d[1], dtype=itype, elements=st.integers(min_value=0, max_value=d[0][0] - 1)),
        segment_generator(d[1], is_sorted=is_sorted)))


def sparse_lengths_tensor(**kwargs):
    return sparse_segmented_tensor(segment_generator=lengths, **kwargs)


# ----------------------------------------------------------------------------- devices

cpu_do = caffe2_pb2.DeviceOption()  # the interpreter
numba_do = BackendOption("numba", min_work=0, nn_min_work=0)  # numba, every region compiled
cuda_do = caffe2_pb2.DeviceOption(device_type=caffe2_pb2.CUDA)
hip_do = caffe2_pb2.DeviceOption(device_type=caffe2_pb2.HIP)
gpu_do = caffe2_pb2.DeviceOption(device_type=workspace.GpuDeviceType)
_cuda_do_list: list = []
_hip_do_list: list = []
_gpu_do_list: list = []
_device_options_no_hip = [cpu_do, numba_do]
device_options = _device_options_no_hip + _hip_do_list
expanded_device_options = list(device_options)


def device_checker_device_options():
    return st.just(device_options)


def gradient_checker_device_option():
    return st.sampled_from(device_options)


gcs = dict(gc=gradient_checker_device_option(), dc=device_checker_device_options())
gcs_cpu_only = dict(gc=st.sampled_from(device_options), dc=st.just(device_options))
gcs_cuda_only = dict(gc=st.sampled_from(_cuda_do_list), dc=st.just(_cuda_do_list))
gcs_gpu_only = dict(gc=st.sampled_from(_gpu_do_list), dc=st.just(_gpu_do_list))
gcs_no_hip = dict(gc=st.sampled_from(_device_options_no_hip), dc=st.just(_device_options_no_hip))


@contextlib.contextmanager
def temp_workspace(name=b"temp_ws"):
    """Run inside a fresh workspace ``name``, then drop it and switch back."""
    saved = workspace.CurrentWorkspace()
    workspace.SwitchWorkspace(name.decode() if isinstance(name, bytes) else name, True)
    try:
        yield
    finally:
        workspace.ResetWorkspace()
        workspace.SwitchWorkspace(saved)


def _on_device(op, device_option):
    op = copy.deepcopy(op)
    op.device_option.CopyFrom(device_option)
    return op


def _feed(op, inputs, device_option, input_device_options=None):
    if len(op.input) > len(inputs):
        raise ValueError(f"must supply an input for each input of the op: {list(op.input)} vs {len(inputs)}")
    placed = input_device_options or core.InferOpBlobDevicesAsDict(op)[0]
    for name, value in zip(op.input, inputs):
        workspace.FeedBlob(name, value, device_option=placed.get(name, device_option))


def runOpOnInput(device_option, op, inputs, input_device_options=None) -> list:
    """The outputs of ``op`` run once on ``inputs``, in a workspace of its own."""
    op = _on_device(op, device_option)
    with temp_workspace():
        _feed(op, inputs, device_option, input_device_options)
        workspace.RunOperatorOnce(op)
        return [workspace.FetchBlob(name) for name in op.output]


class HypothesisTestCase(test_util.TestCase):
    """unittest's TestCase with the operator checks (see the module docstring)."""

    def assertDeviceChecks(self, device_options, op, inputs, outputs_to_check, input_device_options=None,
                           threshold=0.01):
        checker = device_checker.DeviceChecker(threshold, device_options=device_options)
        self.assertTrue(checker.CheckSimple(op, inputs, outputs_to_check, input_device_options))

    def assertGradientChecks(self, device_option, op, inputs, outputs_to_check, outputs_with_grads,
                             grad_ops=None, threshold=0.005, stepsize=0.05, input_device_options=None,
                             ensure_outputs_are_inferred=False):
        checker = gradient_checker.GradientChecker(
            stepsize=stepsize, threshold=threshold, device_option=device_option,
            workspace_name=str(device_option), input_device_options=input_device_options)
        ok, grad, estimate = checker.CheckSimple(op, inputs, outputs_to_check, outputs_with_grads,
                                                 grad_ops=grad_ops, input_device_options=input_device_options,
                                                 ensure_outputs_are_inferred=ensure_outputs_are_inferred)
        self.assertEqual(grad.shape, estimate.shape)
        self.assertTrue(ok, f"gradient check failed for input {op.input[outputs_to_check]}")

    def _assertGradReferenceChecks(self, op, inputs, ref_outputs, output_to_grad, grad_reference,
                                   threshold=1e-4):
        grad_name = output_to_grad + "_grad"
        grad_ops, grad_map = core.GradientRegistry.GetBackwardPass([op], {output_to_grad: grad_name})
        output_grad = workspace.FetchBlob(output_to_grad)
        expected = grad_reference(output_grad, ref_outputs, inputs)
        workspace.FeedBlob(grad_name, output_grad)
        workspace.RunOperatorsOnce(grad_ops)
        self.assertEqual(len(expected), len(inputs))
        for name, ref in zip(op.input, expected):
            got = grad_map.get(name)
            if not got:
                self.assertIsNone(ref)
                continue
            if isinstance(got, core.GradientSlice):
                ref_values, ref_indices = ref
                np.testing.assert_allclose(workspace.FetchBlob(str(got.indices)), ref_indices, atol=1e-4, rtol=1e-4)
                got = got.values
            else:
                ref_values = ref
            np.testing.assert_allclose(workspace.FetchBlob(str(got)), ref_values, atol=threshold,
                                       rtol=threshold, err_msg=f"gradient {got} differs from the reference")

    def assertReferenceChecks(self, device_option, op, inputs, reference, input_device_options=None,
                              threshold=1e-4, output_to_grad=None, grad_reference=None, atol=None,
                              outputs_to_check=None, ensure_outputs_are_inferred=False):
        """Run ``op`` on ``inputs``; its outputs must match ``reference(*inputs)`` (a tuple or
        list of arrays) within ``threshold`` (relative) and ``atol``; returns the outputs."""
        op = _on_device(op, device_option)
        with temp_workspace():
            _feed(op, inputs, device_option, input_device_options)
            workspace.RunOperatorOnce(op)
            expected = reference(*inputs)
            if not isinstance(expected, (tuple, list)):
                raise RuntimeError("a reference implementation returns a tuple or list of numpy arrays")
            if not outputs_to_check:
                self.assertEqual(len(expected), len(op.output))
                outputs_to_check = list(range(len(op.output)))
            outs = []
            for k, ref in zip(outputs_to_check, expected):
                name = op.output[k]
                got = workspace.FetchBlob(name)
                if getattr(got, "dtype", None) is not None and got.dtype.kind in "SOU":
                    np.testing.assert_array_equal(got, ref)
                else:
                    np.testing.assert_allclose(got, ref, atol=threshold if atol is None else atol,
                                               rtol=threshold, err_msg=f"output {name} differs from the reference")
                outs.append(got)
            if grad_reference is not None:
                assert output_to_grad is not None, "grad_reference needs output_to_grad"
                with core.DeviceScope(device_option):
                    self._assertGradReferenceChecks(op, inputs, expected, output_to_grad, grad_reference,
                                                    threshold=threshold)
            return outs

    def assertValidationChecks(self, device_option, op, inputs, validator, input_device_options=None,
                               as_kwargs=True, init_net=None):
        """Run ``op``; call ``validator`` with its inputs and outputs (by blob name, or as lists)."""
        if as_kwargs:
            assert len(set(op.input) | set(op.output)) == len(op.input) + len(op.output), \
                "in-place ops cannot be validated with as_kwargs"
        op = _on_device(op, device_option)
        with temp_workspace():
            _feed(op, inputs, device_option, input_device_options)
            if init_net:
                workspace.RunNetOnce(init_net)
            workspace.RunOperatorOnce(op)
            outputs = [workspace.FetchBlob(n) for n in op.output]
            if as_kwargs:
                validator(**dict(zip(list(op.input) + list(op.output), list(inputs) + outputs)))
            else:
                validator(inputs=inputs, outputs=outputs)

    def assertRunOpRaises(self, device_option, op, inputs, input_device_options=None,
                          exception=(Exception,), regexp=None):
        op = _on_device(op, device_option)
        with temp_workspace():
            _feed(op, inputs, device_option, input_device_options)
            if regexp is None:
                self.assertRaises(exception, workspace.RunOperatorOnce, op)
            else:
                self.assertRaisesRegex(exception, regexp, workspace.RunOperatorOnce, op)
