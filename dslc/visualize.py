"""Caffe2's ``visualize``: images and filters (patches) shown in a grid with matplotlib.

``NCHW.ShowMultiple(batch)`` / ``NHWC.ShowMultiple(batch)`` lay the patches out in a
mosaic with a gap between them (``PatchVisualizer.mosaic``, plain numpy) and show it;
``ShowSingle`` one patch, ``ShowChannels`` one patch's channels side by side. Showing
needs matplotlib (``pip install matplotlib``); the mosaic itself does not.
"""
from __future__ import annotations

import numpy as np

from dslc.ir.diagnostics import DSLError
from dslc.trace.tracing import user_location


class VisualizeError(DSLError, ImportError):
    """matplotlib is not installed."""


def ChannelFirst(arr):
    """NHWC (or HWC) to NCHW (CHW)."""
    return arr.swapaxes(arr.ndim - 1, arr.ndim - 2).swapaxes(arr.ndim - 2, arr.ndim - 3)


def ChannelLast(arr):
    """NCHW (or CHW) to NHWC (HWC)."""
    return arr.swapaxes(arr.ndim - 3, arr.ndim - 2).swapaxes(arr.ndim - 2, arr.ndim - 1)


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise VisualizeError("visualize needs matplotlib to show images", user_location(3),
                             "pip install matplotlib (PatchVisualizer.mosaic gives the image without it)") from None
    return plt


class PatchVisualizer:
    """Shows patches (HW, or HWC with 1 or 3 channels) with ``gap`` pixels between them."""

    def __init__(self, gap=1):
        self.gap = gap

    def mosaic(self, patches, ncols=None, bg_func=np.mean) -> np.ndarray:
        """The patches [N, H, W(, C)] in a grid of ``ncols`` columns (about square by
        default); the gaps and empty cells filled with ``bg_func`` of all patches."""
        patches = np.asarray(patches)
        n = patches.shape[0]
        if ncols is None:
            ncols = int(np.ceil(np.sqrt(n)))
        nrows = int(np.ceil(n / ncols))
        h, w = patches.shape[1:3]
        gap = self.gap
        canvas = np.full((nrows * (h + gap) - gap, ncols * (w + gap) - gap) + patches.shape[3:],
                         bg_func(patches), dtype=np.float64)
        for k in range(n):
            r, c = divmod(k, ncols)
            canvas[r * (h + gap):r * (h + gap) + h, c * (w + gap):c * (w + gap) + w] = patches[k]
        return canvas

    def ShowSingle(self, patch, cmap=None):
        plt = _pyplot()
        patch = np.asarray(patch)
        if patch.ndim == 3 and patch.shape[2] == 1:
            patch = patch[:, :, 0]
        plt.imshow(patch, cmap=cmap)
        plt.axis("off")

    def ShowMultiple(self, patches, ncols=None, cmap=None, bg_func=np.mean):
        plt = _pyplot()
        image = self.mosaic(patches, ncols, bg_func)
        if image.ndim == 3 and image.shape[2] == 1:
            image = image[:, :, 0]
        plt.imshow(image, cmap=cmap)
        plt.axis("off")
        return image

    def ShowImages(self, patches, *args, **kwargs):
        """Each patch scaled to [0, 1] first (images of any range)."""
        patches = np.asarray(patches, dtype=np.float64)
        lo = patches.min(axis=tuple(range(1, patches.ndim)), keepdims=True)
        hi = patches.max(axis=tuple(range(1, patches.ndim)), keepdims=True)
        return self.ShowMultiple((patches - lo) / np.where(hi > lo, hi - lo, 1), *args, **kwargs)

    def ShowChannels(self, patch, cmap=None, bg_func=np.mean):
        """One HWC patch's channels, side by side."""
        patch = np.asarray(patch)
        return self.ShowMultiple(patch.transpose(2, 0, 1), ncols=patch.shape[2], cmap=cmap, bg_func=bg_func)

    def get_patch_shape(self, patch):
        return np.asarray(patch).shape


_default = PatchVisualizer()


class NHWC:
    @staticmethod
    def ShowSingle(*args, **kwargs):
        return _default.ShowSingle(*args, **kwargs)

    @staticmethod
    def ShowMultiple(*args, **kwargs):
        return _default.ShowMultiple(*args, **kwargs)

    @staticmethod
    def ShowImages(*args, **kwargs):
        return _default.ShowImages(*args, **kwargs)

    @staticmethod
    def ShowChannels(*args, **kwargs):
        return _default.ShowChannels(*args, **kwargs)


class NCHW:
    @staticmethod
    def ShowSingle(patch, *args, **kwargs):
        return _default.ShowSingle(ChannelLast(np.asarray(patch)), *args, **kwargs)

    @staticmethod
    def ShowMultiple(patch, *args, **kwargs):
        return _default.ShowMultiple(ChannelLast(np.asarray(patch)), *args, **kwargs)

    @staticmethod
    def ShowImages(patch, *args, **kwargs):
        return _default.ShowImages(ChannelLast(np.asarray(patch)), *args, **kwargs)

    @staticmethod
    def ShowChannels(patch, *args, **kwargs):
        return _default.ShowChannels(ChannelLast(np.asarray(patch)), *args, **kwargs)
