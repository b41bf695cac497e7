"""Direct (definition-based) correlation engine on the GPU: the paper's kernels.

Every lag is summed over the overlap of the two tiles, in float32, by one of the kernels
of :mod:`ebsdxc.engines.definition` (``kernels/definition.cu``): the one named by
``EngineConfig.kernel``, or with ``"auto"`` the one the dispatcher measured fastest for
this tile size, count and window on this GPU (:mod:`ebsdxc.dispatch`). Its cost grows
with the number of lags times the overlap, so it suits window mode (small
``max_shift``) and small tiles; FFT engines win for full-mode correlation of large tiles.

Peaks use the 3x3 subpixel methods (fused peak kernel); the spectrum-based methods
(``dft``, ``upsampled``) need the FFT engine.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..peaks import integer_lag_table, window_power_spectrum
from .base import CorrelationEngine
from .definition import Pairing, correlate_maps, parse_kernel

__all__ = ["DirectEngine"]


class DirectEngine(CorrelationEngine):
    """n-to-mn correlation by definition (overlap-wise), CUDA only."""

    name = "direct"

    def __init__(self, backend, tile_shape, config, *, window_1d=None):
        if not backend.is_gpu:
            raise InputError("the direct engine runs on a CUDA GPU only; use engine 'fft' on the CPU")
        if config.subpixel in ("dft", "upsampled"):
            raise InputError(f"subpixel method {config.subpixel!r} needs the FFT engine; the direct "
                             "engine offers quadratic, gaussian, parabolic and none")
        super().__init__(backend, tile_shape, config)
        ry, rx = self.max_lag
        self.map_shape = (2 * ry + 1, 2 * rx + 1)
        self._ref = None
        self._lags = None
        self._choice = None if config.kernel == "auto" else parse_kernel(config.kernel)
        if config.compensate and window_1d is not None:
            self._lags = tuple(self._linear_lags(f, n, r) for f, n, r in
                               zip(window_1d, self.map_shape, self.max_lag))

    def _linear_lags(self, window, m, r):
        # Linear window autocorrelation (FFT size >= 2 * len - 1: no wrap), laid out by lag mod m.
        size = 2 * len(window) - 1
        table = self.backend.asnumpy(integer_lag_table(window_power_spectrum(window, size)))
        lags = np.fft.fftfreq(m, 1.0 / m).astype(int)  # 0..r, -r..-1
        return self.xp.asarray(table[lags % size])

    def _set_reference(self, tiles):
        self._ref = self.xp.ascontiguousarray(tiles, dtype=self.xp.float32)

    def kernel_for(self, batch):
        """The :class:`~ebsdxc.engines.definition.KernelChoice` used for ``batch`` patterns."""
        if self._choice is not None:
            return self._choice
        from ..dispatch import direct_kernel

        return direct_kernel(Pairing.n_to_mn(self._ref.shape[0], batch), self.tile_shape, self.config.mode,
                             self.config.max_shift)

    def correlation_maps(self, tiles):
        cp = self.xp
        B, n, h, w = tiles.shape
        rights = cp.ascontiguousarray(tiles, dtype=cp.float32).reshape(B * n, h, w)
        maps = correlate_maps(self._ref, rights, Pairing.n_to_mn(n, B), self.max_lag, self.kernel_for(B))
        return maps.reshape(B, n, *self.map_shape)

    def _locate(self, tiles):
        from .gpu_ops import find_peaks

        maps = self.correlation_maps(tiles)
        T = maps.shape[0] * maps.shape[1]
        y, x, value, border, _, _ = find_peaks(maps.reshape(T, *self.map_shape), self.max_lag,
                                               self.config.subpixel, self._lags)
        return y, x, value, border
