"""The numba backend's convolution kernels (backends/numba/conv.py): windows cut and
gradients scattered by compiled loops, max pooling's gradient in one pass.

Conv's gradient is checked by its adjoint identity (Conv is linear in X and in W, so
<Conv(X + E), dY> - <Conv(X), dY> = <dX, E> exactly, up to rounding), max pooling's
gradient against a loop written here, and both backends against each other.
"""
import numpy as np
import pytest

from dslc import core, workspace
from dslc.backends.numba import conv as compiled
from dslc.session import LocalSession

GEOMETRIES = [{}, {"stride": 2}, {"pad": 1}, {"dilation": 2, "pad_t": 1, "pad_l": 2}, {"stride_h": 2, "pad": 2}]


def _run(backend, net, feeds):
    ws = workspace.Workspace()
    for name, value in feeds.items():
        ws.feed_blob(name, value)
    LocalSession(ws, backend=backend).run(net)
    return ws


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: ",".join(f"{k}={v}" for k, v in g.items()) or "plain")
def test_conv_gradient_is_the_adjoint_of_conv(geometry):
    rng = np.random.default_rng(4)
    x, w = rng.normal(size=(3, 4, 9, 8)), rng.normal(size=(5, 4, 3, 2))
    e, ew = rng.normal(size=x.shape), rng.normal(size=w.shape)
    b = np.zeros(5)
    fwd = core.Net("fwd")
    for name in ("y", "y_e", "y_ew"):
        src, wt = {"y": ("x", "w"), "y_e": ("x_e", "w"), "y_ew": ("x", "w_e")}[name]
        fwd.Conv([src, wt, "b"], name, **geometry)
    feeds = {"x": x, "w": w, "b": b, "x_e": x + e, "w_e": w + ew}
    ys = _run("numba", fwd, feeds)
    dy = rng.normal(size=ys.fetch_blob("y").shape)
    grad = core.Net("grad")
    grad.ConvGradient(["x", "w", "dy"], ["dw", "db", "dx"], **geometry)
    got = {}
    for backend in ("interp", "numba"):
        ws = _run(backend, grad, dict(feeds, dy=dy))
        got[backend] = [ws.fetch_blob(k) for k in ("dw", "db", "dx")]
    dw, db, dx = got["numba"]
    y, y_e, y_ew = (ys.fetch_blob(k) for k in ("y", "y_e", "y_ew"))
    assert abs(((y_e - y) * dy).sum() - (dx * e).sum()) < 1e-9
    assert abs(((y_ew - y) * dy).sum() - (dw * ew).sum()) < 1e-9
    np.testing.assert_allclose(db, dy.sum(axis=(0, 2, 3)), rtol=1e-12)
    for g, i in zip(got["numba"], got["interp"]):  # (the same sums in the same order)
        np.testing.assert_array_equal(g, i)
    # (and numba's were the compiled loops, not numpy's fallback)
    assert compiled._scatter_matrix_2d.signatures


def _max_pool_grad(x, y, dy, k, s, p):
    """Each window's gradient to the elements equal to its max (padding never is)."""
    dx = np.zeros_like(x)
    n, c, h, w = x.shape
    for b in range(n):
        for ci in range(c):
            for oy in range(y.shape[2]):
                for ox in range(y.shape[3]):
                    for iy in range(oy * s - p, oy * s - p + k):
                        for ix in range(ox * s - p, ox * s - p + k):
                            if 0 <= iy < h and 0 <= ix < w and x[b, ci, iy, ix] == y[b, ci, oy, ox]:
                                dx[b, ci, iy, ix] += dy[b, ci, oy, ox]
    return dx


@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 1, 1), (3, 2, 1)])
def test_max_pool_gradient_matches_a_plain_loop(k, s, p):
    rng = np.random.default_rng(7)
    x = rng.integers(-3, 4, size=(2, 3, 7, 6)).astype(np.float32)  # (ties: several maxima per window)
    net = core.Net("pool")
    net.MaxPool(["x"], "y", kernel=k, stride=s, pad=p)
    y = _run("interp", net, {"x": x}).fetch_blob("y")
    dy = rng.normal(size=y.shape).astype(np.float32)
    grad = core.Net("pool_grad")
    grad.MaxPoolGradient(["x", "y", "dy"], "dx", kernel=k, stride=s, pad=p)
    want = _max_pool_grad(x, y, dy, k, s, p)
    for backend in ("interp", "numba"):
        np.testing.assert_allclose(_run(backend, grad, {"x": x, "y": y, "dy": dy}).fetch_blob("dx"), want,
                                   rtol=1e-6, atol=1e-6)
    assert compiled._max_pool_grad_2d.signatures


def _max_pool(x, kernel, stride, pads, dilation):
    """MaxPool from its definition: x padded with -inf by np.pad, the max over each
    kernel offset's strided slice."""
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = kernel, stride, pads, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=-np.inf)
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    return np.max([xp[:, :, ky * dh: ky * dh + sh * (oh - 1) + 1: sh, kx * dw: kx * dw + sw * (ow - 1) + 1: sw]
                   for ky in range(kh) for kx in range(kw)], axis=0)


# (kernel, stride, pads (t, l, b, r), dilation): ResNet's 3x3 s2, unit strides, mixed
# strides, asymmetric pads, a dilated kernel, a 2x3 kernel
POOLS = [((3, 3), (2, 2), (1, 1, 1, 1), (1, 1)), ((3, 3), (1, 1), (1, 0, 2, 1), (1, 1)),
         ((2, 3), (1, 2), (0, 1, 1, 0), (1, 1)), ((3, 3), (2, 1), (2, 2, 2, 2), (2, 1))]


@pytest.mark.parametrize("kernel,stride,pads,dilation", POOLS)
def test_max_pool_matches_its_definition(kernel, stride, pads, dilation):
    rng = np.random.default_rng(3)
    x = rng.integers(-3, 4, size=(2, 3, 9, 8)).astype(np.float32)  # (ties)
    x[0, 1, 4, 4] = np.nan  # (np.maximum's: NaN wins)
    args = dict(zip(("pad_t", "pad_l", "pad_b", "pad_r"), pads), kernel_h=kernel[0], kernel_w=kernel[1],
                stride_h=stride[0], stride_w=stride[1], dilation_h=dilation[0], dilation_w=dilation[1])
    net = core.Net("pool")
    net.MaxPool(["x"], "y", **args)
    want = _max_pool(x, kernel, stride, pads, dilation)
    for backend in ("interp", "numba"):
        np.testing.assert_array_equal(_run(backend, net, {"x": x}).fetch_blob("y"), want)
    assert compiled._max_pool_2d.signatures
