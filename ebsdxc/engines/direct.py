"""Direct (definition-based) correlation engine on the GPU: the paper's kernels.

Every lag is summed over the overlap of the two tiles, in float32, by one of the kernels
of :mod:`ebsdxc.engines.definition` (``kernels/definition.cu``): the one named by
``EngineConfig.kernel``, or with ``"auto"`` the one the dispatcher measured fastest for
this tile size, count and window on this GPU (:mod:`ebsdxc.engines.dispatch`). Its cost grows
with the number of lags times the overlap, so it suits window mode (small
``max_shift``) and small tiles; FFT engines win for full-mode correlation of large tiles.

With K reference sets and a set per pattern (``match(..., index=...)``), a batch whose
sets hold several patterns each, with enough work per set (:data:`GROUP_MIN`,
:data:`GROUP_FMAS`), is matched set by set (one launch per set present), so every left value
still feeds several patterns; otherwise (each pattern its own set, as HR-EBSD's remapping
pass, or small tiles) it is one pairing of the B n gathered left tiles with the B n right
tiles, one launch.

Peaks use the 3x3 subpixel methods (fused peak kernel); the spectrum-based methods
(``dft``, ``upsampled``) need the FFT engine.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..peaks import integer_lag_table, window_power_spectrum
from .base import CorrelationEngine, EngineInfo
from .definition import (
    ALGORITHMS,
    KernelChoice,
    Pairing,
    correlate_maps,
    default_choice,
    overlap_fmas,
    parse_kernel,
    precompile,
    segment_width,
)
from .registry import register

__all__ = ["DirectEngine"]

# A batch with several reference sets is matched set by set (one launch per set present, every
# left value reused for several patterns) where a set holds GROUP_MIN patterns on average and
# its launch GROUP_FMAS multiply-adds: smaller launches leave the GPU partly idle, and one
# launch over all the pairs wins (H100, 25 ROIs of 40x40, window 6, 3 sets of 85 patterns:
# 4.9 ms set by set, 2.3 ms as pairs; 86 ROIs of 96x96, window 16, 3 sets of 21: 10.7 ms
# set by set, 22 ms as pairs).
GROUP_MIN = 4
GROUP_FMAS = 2 ** 32


class DirectEngine(CorrelationEngine):
    """n-to-mn correlation by definition (overlap-wise), CUDA only."""

    info = EngineInfo("direct", devices=("gpu",), subpixel=("quadratic", "gaussian", "parabolic", "none"),
                      circular=False, method="definition", pairings=True,
                      summary="definition-based kernels (sums over the overlap; window mode, small tiles)")

    def __init__(self, backend, tile_shape, config, *, window_1d=None):
        super().__init__(backend, tile_shape, config)
        ry, rx = self.max_lag
        self.map_shape = (2 * ry + 1, 2 * rx + 1)
        self._lags = None
        self._choice = None if config.kernel == "auto" else parse_kernel(config.kernel)
        if config.compensate and window_1d is not None:
            self._lags = tuple(self._linear_lags(f, n, r) for f, n, r in
                               zip(window_1d, self.map_shape, self.max_lag))

    # ------------------------------------------------------------------ self-description

    @classmethod
    def variant_applies(cls, variant, case):
        return variant is not None and variant.fits(case.pairing)

    @classmethod
    def case_config(cls, case, variant=None):
        cfg = super().case_config(case, variant)
        return dataclasses.replace(cfg, kernel=variant.label) if variant is not None else cfg

    @classmethod
    def default_variant(cls, case):
        return default_choice(case.pairing, (case.h, case.w), case.max_lag)

    @classmethod
    def fallback_rank(cls, case):
        return 0 if case.small else 2

    @classmethod
    def parse_variant(cls, text):
        return parse_kernel(text)

    @classmethod
    def family(cls, variant):
        return cls.info.name if variant is None else variant.algorithm

    @classmethod
    def families(cls):
        return ALGORITHMS

    @classmethod
    def candidates(cls, case):
        """The definition-based kernels and blocking factors worth timing for ``case``."""
        W = segment_width(case.max_lag)
        per_left = case.n_right
        ks = [KernelChoice("overlap_wise"), KernelChoice("warp_shuffle", width=W)]
        if case.mode == "window" and W > 8:  # narrower segments waste fewer lanes on short rows
            ks += [KernelChoice("grouped_overlap", width=W // 2, g=4, kr=k) for k in (1, 8) if k <= per_left]
        if case.h * case.w <= 64 * 64:
            ks.append(KernelChoice("warp_per_overlap"))
        krs = [k for k in (2, 4, 8) if k <= per_left]
        ks += [KernelChoice("multi_matrix_right", width=W, kr=k) for k in krs]
        if case.form == "n_to_m":
            ks += [KernelChoice("multi_matrix_both", width=W, kl=kl, kr=kr)
                   for kl, kr in ((2, 2), (4, 4), (4, 8), (8, 8)) if kl <= case.n_left and kr <= per_left]
        rows = 2 * case.max_lag[0] + 1
        for g in (4, 8):
            if g <= rows:
                for kr in [1] + [k for k in (4, 8) if k <= per_left]:
                    ks.append(KernelChoice("grouped_overlap", width=W, g=g, kr=kr))
                if case.form == "n_to_m" and case.n_left >= 4 and per_left >= 4:
                    ks.append(KernelChoice("grouped_overlap", width=W, g=g, kl=4, kr=4 if g == 4 else 2))
        if case.pairing.n_pairs <= 8 and case.h >= 64:
            ks += [KernelChoice("split_row", width=W, splits=s, g=4) for s in (8, 32) if 4 <= rows]
        return [k for k in ks if k.fits(case.pairing)]

    @classmethod
    def precompile(cls, variants):
        precompile(variants)

    @classmethod
    def pairing_maps(cls, lefts, rights, pairing, config):
        from .dispatch import choose_variant

        shape = tuple(lefts.shape[1:])
        choice = (choose_variant(cls.info.name, pairing, shape, config.mode, config.max_shift)
                  if config.kernel == "auto" else parse_kernel(config.kernel))
        return correlate_maps(lefts, rights, pairing, config.max_lag(shape), choice)

    @classmethod
    def benchmark(cls, case, lefts, rights, variant=None):
        if case.peaks:
            return super().benchmark(case, lefts, rights, variant)
        import cupy as cp

        out = cp.empty((case.pairing.n_pairs, 2 * case.max_lag[0] + 1, 2 * case.max_lag[1] + 1), dtype=cp.float32)
        return lambda: correlate_maps(lefts, rights, case.pairing, case.max_lag, variant, out=out)

    # ------------------------------------------------------------------ correlation

    def _linear_lags(self, window, m, r):
        # Linear window autocorrelation (FFT size >= 2 * len - 1: no wrap), laid out by lag mod m.
        size = 2 * len(window) - 1
        table = self.backend.asnumpy(integer_lag_table(window_power_spectrum(window, size)))
        lags = np.fft.fftfreq(m, 1.0 / m).astype(int)  # 0..r, -r..-1
        return self.xp.asarray(table[lags % size])

    def _prepare(self, tiles):
        return self.xp.ascontiguousarray(tiles, dtype=self.xp.float32)

    def kernel_for(self, pairing):
        """The :class:`~ebsdxc.engines.definition.KernelChoice` used for ``pairing``
        (:class:`~ebsdxc.engines.definition.Pairing` of reference and scan tiles)."""
        if self._choice is not None:
            return self._choice
        from .dispatch import choose_variant

        return choose_variant(self.info.name, pairing, self.tile_shape, self.config.mode, self.config.max_shift)

    def _launches(self, tiles, refs, index):
        """How tiles (B, n, h, w) meet their references: a list of (lefts, rights, pairing, sel),
        one per launch, whose maps come in the order of ``rights`` (patterns ``sel``, a device
        index array, or all B in order where ``sel`` is None)."""
        cp = self.xp
        B, n, h, w = tiles.shape
        tiles = cp.ascontiguousarray(tiles, dtype=cp.float32)
        if index is None:  # every pattern against set 0: n lefts shared by B patterns
            return [(refs.payload[:n], tiles.reshape(B * n, h, w), Pairing.n_to_mn(n, B), None)]
        # Waits only for the work queued before (tile preparation), not for the correlation.
        host = cp.asnumpy(index)
        sets = np.unique(host)
        if len(sets) == 1:
            k = int(sets[0])
            return [(refs.payload[k * n:(k + 1) * n], tiles.reshape(B * n, h, w), Pairing.n_to_mn(n, B), None)]
        per_set = B // len(sets)
        if per_set >= GROUP_MIN and overlap_fmas(self.tile_shape, self.max_lag, n * per_set) >= GROUP_FMAS:
            # Patterns grouped by set: each group shares its set's n lefts, so the kernels
            # reuse every left value for several patterns (kr > 1).
            out = []
            for k in sets:
                sel = cp.asarray(np.flatnonzero(host == k))
                out.append((refs.payload[int(k) * n:(int(k) + 1) * n], tiles[sel].reshape(-1, h, w),
                            Pairing.n_to_mn(n, int(sel.size)), sel))
            return out
        # Few patterns per set (each its own, e.g.): B n pairs of gathered lefts, one launch.
        lefts = self._set_payload(refs, index).reshape(B * n, h, w)
        return [(lefts, tiles.reshape(B * n, h, w), Pairing.n_to_mn(B * n, 1), None)]

    def _correlate(self, lefts, rights, pairing):
        """(n_pairs, My, Mx) maps of one launch."""
        return correlate_maps(lefts, rights, pairing, self.max_lag, self.kernel_for(pairing))

    def _maps(self, tiles, refs, index):
        B, n = tiles.shape[:2]
        maps = None
        for lefts, rights, pairing, sel in self._launches(tiles, refs, index):
            part = self._correlate(lefts, rights, pairing).reshape(-1, n, *self.map_shape)
            if sel is None:
                return part
            if maps is None:
                maps = self.xp.empty((B, n, *self.map_shape), dtype=self.xp.float32)
            maps[sel] = part
        return maps

    def _locate(self, tiles, refs, index):
        from .gpu_ops import find_peaks

        maps = self._maps(tiles, refs, index)
        T = maps.shape[0] * maps.shape[1]
        y, x, value, border, _, _ = find_peaks(maps.reshape(T, *self.map_shape), self.max_lag,
                                               self.config.subpixel, self._lags)
        return y, x, value, border


register(DirectEngine)
