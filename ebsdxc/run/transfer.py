"""What travels to the device: whole patterns, or only the pixels their ROIs cover.

When nothing before the ROI cut looks at the whole pattern (no background, filter, mask,
binning or whole-pattern refinement: the tile kernel converts raw values itself), only the
ROIs need to cross the bus. :func:`plan_transfer` picks the cheaper of two crops, if either
is smaller than the pattern:

- the ROIs' bounding box (one rectangle with long rows: layouts with a margin);
- every ROI on its own, stacked into a column of ROI-sized frames (sparse layouts: a ring,
  a few ROIs on a large detector).

Either is copied from the pinned host batch by the copy engine (one ``cudaMemcpy3DAsync``
per rectangle, the batch as the third dimension), so no host work grows with the pixels; the
pipeline then cuts its tiles from the cropped frame with the plan's :attr:`TransferPlan.layout`.
:meth:`TransferPlan.crop` is the same crop in NumPy, the oracle of the device copy.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from ..rois import RoiLayout

__all__ = ["TransferPlan", "plan_transfer", "copy_to_device", "copy_efficiency", "MAX_FRACTION"]

#: A crop is used only when its estimated copy time is at most this share of the whole
#: pattern's: a crop of nearly everything saves too little to be worth a second code path.
MAX_FRACTION = 0.75
# The copy engine moves short rows slowly: rate of a strided pinned-to-device copy with rows
# of this many bytes, as a share of a contiguous copy (NVIDIA H100, cudaMemcpy3DAsync of
# 256 patterns of 512x512 uint16, 2026-11-26: 16.4, 30.9, 45.8 and 55 GB/s against 55.1).
_ROW_BYTES = (64, 128, 256, 512)
_EFFICIENCY = (0.30, 0.56, 0.83, 1.0)


@dataclass(frozen=True)
class TransferPlan:
    """Rectangles of the pattern that travel, and where they land in the transferred frame.

    Attributes
    ----------
    boxes : (m, 4) int64 ndarray
        ``[x0, y0, w, h]`` of each rectangle in the pattern.
    targets : (m, 2) int64 ndarray
        ``[x0, y0]`` of each rectangle in the transferred frame.
    shape : (int, int)
        (H, W) of the transferred frame.
    layout : RoiLayout
        The ROIs in the transferred frame's coordinates: tiles cut from it are the tiles of the
        whole pattern.
    """

    boxes: np.ndarray
    targets: np.ndarray
    shape: tuple[int, int]
    layout: RoiLayout

    @property
    def pixels(self) -> int:
        return int(self.shape[0] * self.shape[1])

    def crop(self, patterns: np.ndarray) -> np.ndarray:
        """(B, H, W) patterns -> (B, *shape): the transferred frames, in NumPy."""
        out = np.zeros((patterns.shape[0], *self.shape), dtype=patterns.dtype)
        for (x0, y0, w, h), (tx, ty) in zip(self.boxes, self.targets):
            out[:, ty:ty + h, tx:tx + w] = patterns[:, y0:y0 + h, x0:x0 + w]
        return out

    def copy(self, host: np.ndarray, device, stream) -> None:
        """Copy the rectangles of C-contiguous (B, H, W) pinned ``host`` patterns into the
        C-contiguous (B, *shape) CuPy array ``device`` on ``stream``, asynchronously."""
        from cupy.cuda import runtime

        if not host.flags.c_contiguous or not device.flags.c_contiguous:
            raise ValueError("host and device must be C-contiguous")
        B, H, W = host.shape
        if device.shape != (B, *self.shape) or device.dtype != host.dtype:
            raise ValueError(f"device must be {(B, *self.shape)} {host.dtype}, got {device.shape} {device.dtype}")
        if B == 0:
            return
        isz = host.dtype.itemsize
        Hc, Wc = self.shape
        for (x0, y0, w, h), (tx, ty) in zip(self.boxes, self.targets):
            p = _Memcpy3DParms()
            p.srcPos = _Pos(int(x0) * isz, int(y0), 0)
            p.srcPtr = _PitchedPtr(host.ctypes.data, W * isz, W * isz, H)
            p.dstPos = _Pos(int(tx) * isz, int(ty), 0)
            p.dstPtr = _PitchedPtr(device.data.ptr, Wc * isz, Wc * isz, Hc)
            p.extent = _Extent(int(w) * isz, int(h), B)
            p.kind = runtime.memcpyHostToDevice
            runtime.memcpy3DAsync(ctypes.addressof(p), stream.ptr)


def copy_to_device(host: np.ndarray, device, stream, plan: TransferPlan | None = None) -> None:
    """Pinned (B, H, W) ``host`` patterns into the CuPy array ``device`` on ``stream``,
    asynchronously: whole, or the crop of ``plan``."""
    if plan is None:
        device.set(host, stream=stream)
    else:
        plan.copy(host, device, stream)


def copy_efficiency(row_bytes: float) -> float:
    """Estimated rate of a strided host-to-device copy with rows of ``row_bytes`` bytes, as a
    share of a contiguous copy's (measured points, linear between them, 1 from 512 bytes up)."""
    return float(np.interp(row_bytes, _ROW_BYTES, _EFFICIENCY))


def plan_transfer(layout: RoiLayout, pattern_shape, *, itemsize: int = 2,
                  max_fraction: float = MAX_FRACTION) -> TransferPlan | None:
    """The crop of (H, W) patterns of ``itemsize`` bytes per pixel that holds every ROI of
    ``layout`` and copies fastest (pixels over :func:`copy_efficiency` of its rows), or None
    when no crop is estimated to take at most ``max_fraction`` of the whole pattern's copy.
    """
    H, W = (int(v) for v in pattern_shape)
    layout.check_inside((H, W))
    w, h = layout.size
    o = layout.origins
    x0, y0 = int(o[:, 0].min()), int(o[:, 1].min())
    bw, bh = int(o[:, 0].max()) + w - x0, int(o[:, 1].max()) + h - y0
    plans = [TransferPlan(np.array([[x0, y0, bw, bh]]), np.zeros((1, 2), np.int64), (bh, bw),
                          RoiLayout(layout.centres - [x0, y0], layout.size))]
    n = layout.n
    boxes = np.column_stack([o, np.full(n, w), np.full(n, h)]).astype(np.int64)
    targets = np.column_stack([np.zeros(n), np.arange(n) * h]).astype(np.int64)
    plans.append(TransferPlan(boxes, targets, (n * h, w), RoiLayout(layout.centres - o + targets, layout.size)))

    def cost(p):
        return p.pixels / copy_efficiency(p.shape[1] * itemsize)
    best = min(plans, key=lambda p: (cost(p), len(p.boxes)))
    return best if cost(best) <= max_fraction * H * W / copy_efficiency(W * itemsize) else None


class _Pos(ctypes.Structure):
    _fields_ = [("x", ctypes.c_size_t), ("y", ctypes.c_size_t), ("z", ctypes.c_size_t)]


class _PitchedPtr(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("pitch", ctypes.c_size_t), ("xsize", ctypes.c_size_t),
                ("ysize", ctypes.c_size_t)]


class _Extent(ctypes.Structure):
    _fields_ = [("width", ctypes.c_size_t), ("height", ctypes.c_size_t), ("depth", ctypes.c_size_t)]


class _Memcpy3DParms(ctypes.Structure):
    # cudaMemcpy3DParms of the CUDA runtime (driver_types.h), field for field
    _fields_ = [("srcArray", ctypes.c_void_p), ("srcPos", _Pos), ("srcPtr", _PitchedPtr),
                ("dstArray", ctypes.c_void_p), ("dstPos", _Pos), ("dstPtr", _PitchedPtr),
                ("extent", _Extent), ("kind", ctypes.c_int)]
