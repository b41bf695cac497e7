"""Direct (definition-based) correlation engine on the GPU: the paper's kernels.

Every lag is summed over the overlap of the two tiles, in float32, by one of the kernels
of :mod:`ebsdxc.engines.definition` (``kernels/definition.cu``): the one named by
``EngineConfig.kernel``, or with ``"auto"`` the one the dispatcher measured fastest for
this tile size, count and window on this GPU (:mod:`ebsdxc.engines.dispatch`). Its cost grows
with the number of lags times the overlap, so it suits window mode (small
``max_shift``) and small tiles; FFT engines win for full-mode correlation of large tiles.

With K reference sets, a batch is matched set by set or as one pairing of gathered tiles
(:mod:`ebsdxc.engines.pairing`).

Peaks use the 3x3 subpixel methods (fused peak kernel); the spectrum-based methods
(``dft``, ``upsampled``) need the FFT engine.
"""

from __future__ import annotations

import dataclasses

from .base import EngineInfo
from .definition import (
    ALGORITHMS,
    KernelChoice,
    correlate_maps,
    default_choice,
    parse_kernel,
    precompile,
    segment_width,
)
from .pairing import PairingEngine
from .registry import register

__all__ = ["DirectEngine"]


class DirectEngine(PairingEngine):
    """n-to-mn correlation by definition (overlap-wise), CUDA only."""

    info = EngineInfo("direct", devices=("gpu",), subpixel=("quadratic", "gaussian", "parabolic", "none"),
                      circular=False, method="definition", pairings=True,
                      summary="definition-based kernels (sums over the overlap; window mode, small tiles)")

    def __init__(self, backend, tile_shape, config, *, window_1d=None):
        super().__init__(backend, tile_shape, config)
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
    def _variant_maps(cls, lefts, rights, pairing, max_lag, variant, out=None):
        return correlate_maps(lefts, rights, pairing, max_lag, variant, out=out)

    # ------------------------------------------------------------------ correlation

    def kernel_for(self, pairing):
        """The :class:`~ebsdxc.engines.definition.KernelChoice` used for ``pairing``
        (:class:`~ebsdxc.engines.definition.Pairing` of reference and scan tiles)."""
        if self._choice is not None:
            return self._choice
        from .dispatch import choose_variant

        return choose_variant(self.info.name, pairing, self.tile_shape, self.config.mode, self.config.max_shift)

    def _correlate(self, lefts, rights, pairing):
        """(n_pairs, My, Mx) maps of one launch."""
        return correlate_maps(lefts, rights, pairing, self.max_lag, self.kernel_for(pairing))

    def _locate(self, tiles, refs, index):
        from .gpu_ops import find_peaks

        maps = self._maps(tiles, refs, index)
        T = maps.shape[0] * maps.shape[1]
        y, x, value, border, _, _ = find_peaks(maps.reshape(T, *self.map_shape), self.max_lag,
                                               self.config.subpixel, self._lags)
        return y, x, value, border


register(DirectEngine)
