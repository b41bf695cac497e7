"""The interface every correlation engine implements.

An engine holds the reference subregions (n of them, prepared once and kept on the
device) and correlates batches of scan subregions against them in the n-to-mn form:
tile ``[b, k]`` of a batch is matched with reference tile ``k``. Later engines
(direct CUDA kernels, tensor cores) plug in by subclassing :class:`CorrelationEngine`
and registering in :mod:`ebsdxc.engines`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from .. import status as st
from ..peaks import SUBPIXEL_METHODS

__all__ = ["CorrelationEngine", "EngineConfig", "PeakResult"]

MODES = ("full", "window")


@dataclass(frozen=True)
class EngineConfig:
    """What to correlate and how to find the peak.

    Attributes
    ----------
    mode : {"full", "window"}
        ``full``: zero-padded linear correlation, every shift with any overlap;
        ``window``: only ``|dx|, |dy| <= max_shift``.
    max_shift : int or None
        Required for ``window`` mode.
    subpixel : str
        One of :data:`ebsdxc.peaks.SUBPIXEL_METHODS`.
    upsample : int
        Grid refinement of the ``upsampled`` method.
    compensate : bool
        Divide the correlation by the window autocorrelation before the subpixel fit
        (removes the pull of the window towards zero shift; see :mod:`ebsdxc.peaks`).
    circular : bool
        Window mode only: correlate circularly at the tile size instead of zero-padding
        to ``w + max_shift``. Faster (smaller FFTs); the wrapped products involve only
        the tapered tile edges, so with a Hann window and ``max_shift <= w/4`` they stay
        negligible (measured in ``BENCHMARKS.md``); without a window it is an error.
    kernel : str
        Definition-based kernel of the ``direct`` engine: ``"auto"`` (the dispatcher's
        measured choice) or a label such as ``"grouped_overlap:g=4,kr=8"``
        (:mod:`ebsdxc.engines.definition`).
    """

    mode: str = "full"
    max_shift: int | None = None
    subpixel: str = "dft"
    upsample: int = 16
    compensate: bool = True
    circular: bool = False
    kernel: str = "auto"

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.mode == "window" and (self.max_shift is None or self.max_shift < 1):
            raise ValueError("window mode needs max_shift >= 1 px")
        if self.subpixel not in SUBPIXEL_METHODS:
            raise ValueError(f"subpixel method must be one of {SUBPIXEL_METHODS}, got {self.subpixel!r}")
        if self.circular and self.mode != "window":
            raise ValueError("circular correlation needs window mode (--max-shift)")
        if self.upsample < 2:
            raise ValueError(f"upsample factor must be >= 2, got {self.upsample}")
        if self.kernel != "auto":
            from .definition import parse_kernel

            parse_kernel(self.kernel)

    def max_lag(self, tile_shape):
        """(ry, rx): the largest |dy|, |dx| searched for tiles of (h, w)."""
        h, w = tile_shape
        if self.mode == "full":
            return h - 1, w - 1
        return min(self.max_shift, h - 1), min(self.max_shift, w - 1)


@dataclass
class PeakResult:
    """Per-tile match results, arrays on the engine's backend.

    displacement : (B, n, 2) float32 [dx, dy] px; NaN where status != OK
    peak_height : (B, n) float32 normalised cross-correlation at the peak, in [-1, 1]
    status : (B, n) uint8 codes of :mod:`ebsdxc.status`
    """

    displacement: object
    peak_height: object
    status: object


class CorrelationEngine(ABC):
    """n-to-mn correlation of prepared (zero-mean, windowed, float32) subregions."""

    name = "?"

    def __init__(self, backend, tile_shape, config: EngineConfig):
        self.backend = backend
        self.xp = backend.xp
        self.tile_shape = (int(tile_shape[0]), int(tile_shape[1]))
        self.config = config
        self.max_lag = config.max_lag(self.tile_shape)
        self._ref_energy = None
        self._ref_status = None

    def set_reference(self, tiles, energy, status) -> None:
        """Keep the n prepared reference tiles ((n, h, w)) resident for later batches."""
        xp = self.xp
        self._ref_energy = xp.asarray(energy, dtype=xp.float32)
        self._ref_status = xp.asarray(status, dtype=xp.uint8)
        self._set_reference(xp.asarray(tiles, dtype=xp.float32))

    @property
    def input_shape(self):
        """(Ny, Nx) frame the engine wants prepared tiles in (tile at the top-left, zeros
        around it); tiles of ``tile_shape`` are accepted too."""
        return self.tile_shape

    @abstractmethod
    def _set_reference(self, tiles) -> None: ...

    @abstractmethod
    def correlation_maps(self, tiles):
        """(B, n, Ny, Nx) circular lag maps of prepared tiles (B, n, h, w) (see :mod:`ebsdxc.peaks`)."""

    @abstractmethod
    def _locate(self, tiles):
        """Peak (y, x, value, on_border) arrays of shape (B*n,) for prepared tiles."""

    def match(self, tiles, energy, status) -> PeakResult:
        """Correlate a batch of prepared tiles and locate every peak.

        Parameters
        ----------
        tiles : (B, n, h, w) or (B, n, *input_shape) float32 prepared scan subregions
        energy : (B, n) float32 their sums of squares
        status : (B, n) uint8 their status from preparation
        """
        B, n = tiles.shape[:2]
        y, x, value, border = self._locate(tiles)
        return self.assemble(y.reshape(B, n), x.reshape(B, n), value.reshape(B, n),
                             border.reshape(B, n), energy, status)

    def assemble(self, y, x, value, border, energy, status) -> PeakResult:
        """Combine peak positions with tile statuses into a :class:`PeakResult`."""
        xp = self.xp
        ref_status = self._ref_status[None, :]
        code = xp.where(status != st.OK, status,
                        xp.where(ref_status != st.OK, ref_status,
                                 xp.where(border, np.uint8(st.PEAK_ON_BORDER), np.uint8(st.OK))))
        code = code.astype(xp.uint8)
        ok = code == st.OK
        with np.errstate(divide="ignore", invalid="ignore"):
            denom = xp.sqrt(energy.astype(xp.float64) * self._ref_energy[None, :].astype(xp.float64))
            height = xp.clip(value / denom, -1.0, 1.0)
        height = xp.where((status == st.OK) & (ref_status == st.OK), height, xp.nan).astype(xp.float32)
        disp = xp.stack([x, y], axis=-1).astype(xp.float32)
        disp = xp.where(ok[..., None], disp, xp.float32(np.nan))
        return PeakResult(disp, height, code)
