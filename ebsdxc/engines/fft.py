"""FFT correlation engine (scipy.fft on the CPU, cuFFT through CuPy on the GPU).

The reference spectra are computed once and stay on the device; each batch costs
one forward real FFT per scan tile, a product, and one inverse FFT. With K reference sets
and a set index per pattern, the product takes each pattern's conjugate spectra gathered
by the index (one gather, no loop); with one set it broadcasts them, as it always did. FFT sizes are
the smallest fast sizes that avoid wrap-around for the shifts searched:
``2w - 1`` in full mode, ``w + max_shift`` in window mode (a lag ``l`` aliases to
``l - N``, which must stay outside the ``w - 1`` lags with any overlap), or the tile size
itself for circular window correlation.

On the GPU the peak search and subpixel refinement run in the fused kernels of
:mod:`ebsdxc.engines.gpu_ops`; on the CPU in :func:`ebsdxc.peaks.locate_peaks`.
"""

from __future__ import annotations

import numpy as np

from .. import timing
from ..peaks import (
    DFT_MAX_MOVES,
    DFT_STEPS,
    SPECTRUM_METHODS,
    drop_far_peaks,
    drop_loose_peaks,
    integer_lag_table,
    locate_peaks,
    upsampled_dft_peak,
    window_power_spectrum,
)
from .base import CorrelationEngine, EngineInfo
from .registry import register

__all__ = ["FFTEngine", "fft_shape"]


def fft_shape(tile_shape, max_lag, mode, *, circular=False):
    """(Ny, Nx) FFT size for tiles of (h, w) searched up to ``max_lag`` = (ry, rx)."""
    h, w = tile_shape
    ry, rx = max_lag
    if mode == "full":
        need = (2 * h - 1, 2 * w - 1)
    elif circular:
        need = (h, w)
    else:
        need = (h + ry, w + rx)
    import scipy.fft  # here, not at import: the CLI lists the engines without paying 0.3 s for scipy.fft

    return tuple(scipy.fft.next_fast_len(n, real=True) for n in need)


class FFTEngine(CorrelationEngine):
    """Cross-correlation through real FFTs, same code on NumPy and CuPy."""

    info = EngineInfo("fft", devices=("cpu", "gpu"), circular=True, method="fft", baseline=True,
                      summary="FFT correlation (scipy.fft on the CPU, cuFFT on the GPU); every option")

    def __init__(self, backend, tile_shape, config, *, window_1d=None):
        super().__init__(backend, tile_shape, config)
        if config.circular:
            h, w = self.tile_shape
            if window_1d is None or any(np.all(np.asarray(f) == 1) for f in window_1d):
                raise ValueError("correlation.circular needs a tapering window (preprocess.window 'hann')")
            if 4 * self.max_lag[0] > h or 4 * self.max_lag[1] > w:
                raise ValueError(f"correlation.circular needs correlation.max_shift <= tile size / 4 "
                                 f"({min(h, w) // 4} px for {w}x{h} tiles)")
        self.fft_shape = fft_shape(self.tile_shape, self.max_lag, config.mode, circular=config.circular)
        self._window_spectra = None
        if config.compensate and window_1d is not None:
            wy, wx = window_1d
            self._window_spectra = (window_power_spectrum(wy, self.fft_shape[0], self.xp),
                                    window_power_spectrum(wx, self.fft_shape[1], self.xp))
        self._lags = self._window_lags()

    @classmethod
    def fallback_rank(cls, case):
        return 2 if case.small else 1

    @classmethod
    def benchmark(cls, case, lefts, rights, variant=None):
        if case.peaks:
            return super().benchmark(case, lefts, rights, variant)
        # Maps: the bare cuFFT calls, in every form (n-to-m as one broadcast product).
        import cupy as cp

        s = fft_shape((case.h, case.w), case.max_lag, case.mode)
        lspec = cp.conj(cp.fft.rfft2(lefts, s=s))
        if case.form == "n_to_m":
            def run():
                spec = cp.fft.rfft2(rights, s=s)
                return cp.fft.irfft2(lspec[:, None] * spec[None], s=s)
        else:
            tiles = rights.reshape(case.n_right, case.n_left, case.h, case.w)

            def run():
                spec = cp.fft.rfft2(tiles, s=s)
                spec *= lspec[None]
                return cp.fft.irfft2(spec, s=s)
        return run

    @property
    def input_shape(self):
        return self.fft_shape

    def _key(self):
        return super()._key() + (self.fft_shape,)

    def _window_lags(self):
        # Compensation weights at integer lags, indexed by lag mod N (fused peak kernel).
        if self._window_spectra is None:
            return None
        return tuple(integer_lag_table(S, self.xp) for S in self._window_spectra)

    def _prepare(self, tiles):
        return self.xp.conj(self.backend.rfft2(tiles, s=self.fft_shape)).astype(self.xp.complex64)

    def cross_power(self, tiles, *, references=None, index=None):
        """(B, n, Ny, Nx//2+1) spectrum of the correlation maps (``references``, ``index`` as
        :meth:`match`)."""
        refs, idx = self._resolve(tiles, references, index)
        return self._cross_power(tiles, refs, idx)

    def _cross_power(self, tiles, refs, index):
        spec = self.backend.rfft2(tiles, s=self.fft_shape)
        spec *= self._set_payload(refs, index)
        return spec

    def _maps(self, tiles, refs, index):
        return self.backend.irfft2(self._cross_power(tiles, refs, index), s=self.fft_shape, overwrite=True)

    def _locate(self, tiles, refs, index):
        T = tiles.shape[0] * tiles.shape[1]
        shape = self.fft_shape
        if self.backend.is_gpu:
            return self._locate_fused(tiles, T, refs, index)
        keep = self.config.subpixel in SPECTRUM_METHODS
        cps = self._cross_power(tiles, refs, index)
        corr = self.backend.irfft2(cps, s=shape, overwrite=not keep)
        with timing.stage("peaks"):
            return locate_peaks(corr.reshape(T, *shape), max_lag=self.max_lag, method=self.config.subpixel,
                                cross_power=cps.reshape(T, *cps.shape[2:]) if keep else None,
                                upsample=self.config.upsample, window_spectra=self._window_spectra, xp=self.xp)

    def _locate_fused(self, tiles, T, refs, index):
        method, shape = self.config.subpixel, self.fft_shape
        ref = self._set_payload(refs, index)
        spec = self.backend.rfft2(tiles, s=shape)
        if method == "dft":
            # Product out of place: the inverse FFT may destroy it, while the refinement
            # kernel multiplies the kept scan spectrum by the resident reference on the fly.
            corr = self.backend.irfft2(spec * ref, s=shape, overwrite=True)
        else:
            spec *= ref
            corr = self.backend.irfft2(spec, s=shape, overwrite=method != "upsampled")
        corr = corr.reshape(T, *shape)
        spec = spec.reshape(T, *spec.shape[2:])
        with timing.stage("peaks", xp=self.xp):
            return self._peaks_fused(corr, spec, ref, refs, index, T, method, shape)

    def _peaks_fused(self, corr, spec, ref, refs, index, T, method, shape):
        from .gpu_ops import dft_refine, find_peaks

        kernel_method = {"upsampled": "none", "dft": "quadratic"}.get(method, method)
        # The refinements fit later: the kernel says which compensated peaks are barely concave.
        y, x, value, border, ly, lx, flat = find_peaks(corr, self.max_lag, kernel_method, self._lags, with_flat=True)
        if method == "upsampled":
            y, x = upsampled_dft_peak(spec, ly, lx, shape, upsample=self.config.upsample,
                                      window_spectra=self._window_spectra, xp=self.xp)
        elif method == "dft":
            if index is None:
                y, x = dft_refine(spec, y, x, shape, steps=DFT_STEPS, max_moves=DFT_MAX_MOVES,
                                  window_spectra=self._window_spectra, reference=ref)
            else:  # the kernel reads each pattern's own set from all K
                p = refs.payload
                y, x = dft_refine(spec, y, x, shape, steps=DFT_STEPS, max_moves=DFT_MAX_MOVES,
                                  window_spectra=self._window_spectra,
                                  reference=p.reshape(refs.count, refs.n, *p.shape[1:]), reference_index=index)
        if method in SPECTRUM_METHODS:  # the 3x3 fits stay within reach by construction
            y, x = drop_loose_peaks(y, x, ly, lx, flat, xp=self.xp)
            y, x = drop_far_peaks(y, x, ly, lx, xp=self.xp)
        return y, x, value, border


register(FFTEngine)
