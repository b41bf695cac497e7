"""The ROIs of whole patterns on the device, prepared as they are read.

An engine that sets ``reads_rois`` takes a batch of patterns, the ROIs' origins and the window
(``match_rois``) in place of the float32 tiles that
:func:`~ebsdxc.engines.gpu_ops.prepare_tiles_padded` would write: one pass over the ROIs
finds each tile's mean, energy and status (:func:`~ebsdxc.engines.gpu_ops.tile_statistics`),
and the engine's kernels centre and window each value as they load it, by the same
expression, so they see bit for bit the tile that pass would have written. No tile goes
through device memory: for 86 ROIs of 96x96 in a 256x256 pattern that is 3.2 MB of float32
written and read back per pattern, against the pattern's 128 KB.

:class:`RoiTiles` is such a batch as the tensor engine's kernels take it (``RightSource`` in
``kernels/tensorcorr.cu``), standing in for a (B, n, h, w) tile array.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..kernel_loader import NULL_POINTER

__all__ = ["RoiTiles", "PackedBuffer", "check_roi_inputs", "roi_tiles", "source_args"]


def check_roi_inputs(patterns, origins, window, tile_shape):
    """``match_rois``'s inputs checked: (origins as contiguous int32, window as contiguous
    float32), both on the device; ValueError in plain words naming what does not fit.

    Host origins are checked to keep every ROI inside the patterns; device origins are taken
    as given (a check would stop the stream)."""
    import cupy as cp

    h, w = tile_shape
    if getattr(patterns, "ndim", 0) != 3:
        raise ValueError(f"patterns must be (B, H, W), got shape {getattr(patterns, 'shape', None)}")
    _, H, W = patterns.shape
    if getattr(origins, "ndim", 0) != 2 or origins.shape[1] != 2:
        raise ValueError(f"origins must be (n, 2) [x0, y0] rows, got shape {getattr(origins, 'shape', None)}")
    if isinstance(origins, np.ndarray) and origins.size and (
            origins.min() < 0 or (origins[:, 0] + w).max() > W or (origins[:, 1] + h).max() > H):
        raise ValueError(f"origins must keep every {h}x{w} ROI inside the {H}x{W} patterns")
    origins = cp.ascontiguousarray(cp.asarray(origins), dtype=cp.int32)
    window = cp.ascontiguousarray(cp.asarray(window), dtype=cp.float32)
    if window.shape != (h, w):
        raise ValueError(f"window must be ({h}, {w}), got shape {window.shape}")
    return origins, window


@dataclass(frozen=True)
class RoiTiles:
    """ROI k of pattern b, for the patterns ``sel`` (all where None) and every ROI: the tile
    (b, k) of a (B, n, h, w) batch, prepared when a kernel reads it.

    ``patterns`` (B, H, W) C-contiguous in a dtype of the tile kernels; ``offsets`` (n,) int32
    y0 W + x0; ``mean``, ``status`` (B n,) of the whole batch; ``window`` (h, w) float32;
    ``sel`` a device int32 array of pattern indices; ``packed`` the right operand of the tensor
    engine that the tile pass wrote for all B n tiles, (words, (precision, row words, pad rows)).
    """

    patterns: object
    offsets: object
    mean: object
    status: object
    window: object
    tile_shape: tuple
    sel: object = None
    packed: tuple = None

    @property
    def shape(self):
        """(patterns, ROIs, h, w), as the tile array it stands for."""
        B = int(self.patterns.shape[0] if self.sel is None else self.sel.size)
        return (B, int(self.offsets.size), *self.tile_shape)

    @property
    def n_matrices(self):
        """Tiles in pattern order, ROI fastest (a right matrix index of a pairing)."""
        B, n = self.shape[:2]
        return B * n

    def select(self, sel):
        """The tiles of patterns ``sel`` (device integers, positions in this batch)."""
        import cupy as cp

        sel = cp.ascontiguousarray(sel, dtype=cp.int32)
        return replace(self, sel=sel if self.sel is None else cp.ascontiguousarray(self.sel[sel]))

    def packed_words(self, precision, row_words, pad_rows):
        """The (B n, h + 2 pad_rows, row_words) packed words the tile pass wrote in that layout
        for these tiles, or None (another layout or precision, or a selection of patterns)."""
        if self.packed is None or self.sel is not None or self.packed[1] != (precision, row_words, pad_rows):
            return None
        return self.packed[0][:self.n_matrices]

    def args(self):
        """``RIGHT_ARGS`` of ``kernels/tensorcorr.cu`` with RAW = 1."""
        H, W = self.patterns.shape[1:]
        return (self.patterns, np.int64(H * W), np.int32(W), self.offsets, self.mean, self.status, self.window,
                np.int32(self.offsets.size), NULL_POINTER if self.sel is None else self.sel)


def source_args(mats):
    """(C type, RAW, ``RIGHT_ARGS``) of ``kernels/tensorcorr.cu`` for a :class:`RoiTiles` or a
    (T, h, w) contiguous float32 array of tiles."""
    from .gpu_ops import tile_dtype

    if isinstance(mats, RoiTiles):
        return tile_dtype(mats.patterns.dtype), 1, mats.args()
    h, w = mats.shape[1:]
    null = NULL_POINTER
    return "float", 0, (mats, np.int64(h * w), np.int32(w), null, null, null, null, np.int32(1), null)


class PackedBuffer:
    """Words for the tensor engine's packed right operand, kept between batches: the tile pass
    writes each tile's h x w values and nothing else, so the padding (columns past w, rows
    above and below) is zeroed once, when a layout is first asked for."""

    def __init__(self):
        self._buf = None

    def get(self, n_tiles, h, row_words, pad_rows):
        """(n_tiles, h + 2 pad_rows, row_words) uint32, zero outside what the tile pass writes."""
        import cupy as cp

        shape = (h + 2 * pad_rows, row_words)
        if self._buf is None or self._buf.shape[1:] != shape or self._buf.shape[0] < n_tiles:
            self._buf = None  # its memory back first
            self._buf = cp.zeros((n_tiles, *shape), dtype=cp.uint32)
        return self._buf[:n_tiles]


def roi_tiles(patterns, origins, window, tile_shape, *, packed=None):
    """(:class:`RoiTiles`, energy (B n,), status (B n,)) of the ROIs at ``origins`` (n, 2)
    [x0, y0] of (B, H, W) device ``patterns``, centred and multiplied by ``window``, as
    :func:`~ebsdxc.engines.gpu_ops.prepare_tiles_padded` would prepare them.

    ``packed`` = (words, row_words, pad_rows, "bf16"): the tile pass also writes the tensor
    engine's right operand for all B n tiles in that layout into ``words`` ((B n, h + 2
    pad_rows, row_words) uint32 from a :class:`PackedBuffer`), which the RoiTiles then carries.
    """
    from .gpu_ops import tile_statistics

    origins, window = check_roi_inputs(patterns, origins, window, tile_shape)
    pk = None
    if packed is not None:
        words, row_words, pad_rows, precision = packed
        if precision != "bf16":
            raise ValueError(f"the tile pass writes bf16 operands only, got precision {precision!r}")
        pk = (words.view(np.uint16), pad_rows)
    patterns, mean, energy, status = tile_statistics(patterns, origins, tuple(tile_shape), window, packed=pk)
    W = patterns.shape[2]
    offsets = origins[:, 1] * np.int32(W) + origins[:, 0]
    layout = None if packed is None else (words, (precision, row_words, pad_rows))
    return RoiTiles(patterns, offsets, mean, status, window, tuple(tile_shape), packed=layout), energy, status
