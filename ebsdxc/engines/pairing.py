"""What the GPU engines that correlate pairings of tiles (the direct and tensor engines) share:
how a batch's tiles meet their references (one launch, or one per reference set), the maps
of those launches in batch order, and the window autocorrelation by lag.

With K reference sets and a set per pattern (``match(..., index=...)``), a batch whose sets
hold several patterns each, with enough work per set (:data:`GROUP_MIN`, :data:`GROUP_FMAS`),
is matched set by set (one launch per set present), so every left value still feeds several
patterns; otherwise (each pattern its own set, as HR-EBSD's remapping pass, or small tiles)
it is one pairing of the B n gathered left tiles with the B n right tiles, one launch.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np

from ..peaks import integer_lag_table, window_power_spectrum
from .base import CorrelationEngine
from .definition import Pairing, overlap_fmas
from .roi_tiles import RoiTiles

__all__ = ["PairingEngine", "GROUP_MIN", "GROUP_FMAS", "matched_set_by_set"]

# A batch with several reference sets is matched set by set (one launch per set present, every
# left value reused for several patterns) where a set holds GROUP_MIN patterns on average and
# its launch GROUP_FMAS multiply-adds: smaller launches leave the GPU partly idle, and one
# launch over all the pairs wins (H100, 25 ROIs of 40x40, window 6, 3 sets of 85 patterns:
# 4.9 ms set by set, 2.3 ms as pairs; 86 ROIs of 96x96, window 16, 3 sets of 21: 10.7 ms
# set by set, 22 ms as pairs). The direct engine's launches still win at 8 patterns a set
# (86 ROIs of 96x96 at +-16, 512 patterns: 4.8k patterns/s against 3.1k as pairs); the tensor
# engine's need more (TensorEngine.group_min).
GROUP_MIN = 4
GROUP_FMAS = 2 ** 32


def matched_set_by_set(tile_shape, max_lag, n, per_set, *, group_min=None):
    """Whether a batch whose reference sets hold ``per_set`` patterns each (of ``n`` tiles) is
    matched set by set (one launch per set) rather than as one launch of gathered pairs.
    ``group_min`` (default :data:`GROUP_MIN`): the fewest patterns a set's launch takes."""
    least = GROUP_MIN if group_min is None else group_min
    return per_set >= least and overlap_fmas(tile_shape, max_lag, n * per_set) >= GROUP_FMAS


class PairingEngine(CorrelationEngine):
    """A GPU engine whose maps come from launches over :class:`~ebsdxc.engines.definition.Pairing`
    of reference (left) and scan (right) tiles: subclasses say how one launch correlates
    (:meth:`_correlate`, :meth:`_pairing_maps`) and how peaks are found."""

    #: The fewest patterns a reference set's launch takes (:func:`matched_set_by_set`); None:
    #: :data:`GROUP_MIN`. An engine class or instance may set its own (benchmarks and tests
    #: force a path with it).
    group_min = None

    def __init__(self, backend, tile_shape, config):
        super().__init__(backend, tile_shape, config)
        ry, rx = self.max_lag
        self.map_shape = (2 * ry + 1, 2 * rx + 1)
        self._lags = None

    # ------------------------------------------------------------------ self-description

    @classmethod
    @abstractmethod
    def _variant_maps(cls, lefts, rights, pairing, max_lag, variant, out=None):
        """(n_pairs, 2 ry + 1, 2 rx + 1) float32 maps of one launch with ``variant`` (into ``out``)."""

    @classmethod
    def benchmark(cls, case, lefts, rights, variant=None):
        if case.peaks:
            return super().benchmark(case, lefts, rights, variant)
        import cupy as cp

        out = cp.empty((case.pairing.n_pairs, 2 * case.max_lag[0] + 1, 2 * case.max_lag[1] + 1), dtype=cp.float32)
        return lambda: cls._variant_maps(lefts, rights, case.pairing, case.max_lag, variant, out=out)

    # ------------------------------------------------------------------ correlation

    def _linear_lags(self, window, m, r):
        # Linear window autocorrelation (FFT size >= 2 * len - 1: no wrap), laid out by lag mod m.
        size = 2 * len(window) - 1
        table = self.backend.asnumpy(integer_lag_table(window_power_spectrum(window, size)))
        lags = np.fft.fftfreq(m, 1.0 / m).astype(int)  # 0..r, -r..-1
        return self.xp.asarray(table[lags % size])

    def _prepare(self, tiles):
        return self.xp.ascontiguousarray(tiles, dtype=self.xp.float32)

    def _launches(self, tiles, refs, index):
        """How tiles (B, n, h, w) meet their references: a list of (lefts, rights, pairing, sel),
        one per launch, whose maps come in the order of ``rights`` (patterns ``sel``, a device
        index array, or all B in order where ``sel`` is None). ``tiles`` may be a
        :class:`~ebsdxc.engines.roi_tiles.RoiTiles` (an engine that reads the ROIs of the
        patterns): its rights are then RoiTiles too."""
        cp = self.xp
        B, n, h, w = tiles.shape
        if isinstance(tiles, RoiTiles):
            def rights(sel=None):
                return tiles if sel is None else tiles.select(sel)
        else:
            tiles = cp.ascontiguousarray(tiles, dtype=cp.float32)

            def rights(sel=None):
                return (tiles if sel is None else tiles[sel]).reshape(-1, h, w)
        if index is None:  # every pattern against set 0: n lefts shared by B patterns
            return [(refs.payload[:n], rights(), Pairing.n_to_mn(n, B), None)]
        # Waits only for the work queued before (tile preparation), not for the correlation.
        host = cp.asnumpy(index)
        sets = np.unique(host)
        if len(sets) == 1:
            k = int(sets[0])
            return [(refs.payload[k * n:(k + 1) * n], rights(), Pairing.n_to_mn(n, B), None)]
        per_set = B // len(sets)
        if matched_set_by_set(self.tile_shape, self.max_lag, n, per_set, group_min=self.group_min):
            # Patterns grouped by set: each group shares its set's n lefts, so the kernels
            # reuse every left value for several patterns (kr > 1).
            out = []
            for k in sets:
                sel = cp.asarray(np.flatnonzero(host == k))
                out.append((refs.payload[int(k) * n:(int(k) + 1) * n], rights(sel),
                            Pairing.n_to_mn(n, int(sel.size)), sel))
            return out
        # Few patterns per set (each its own, e.g.): B n pairs of gathered lefts, one launch.
        lefts = self._set_payload(refs, index).reshape(B * n, h, w)
        return [(lefts, rights(), Pairing.n_to_mn(B * n, 1), None)]

    @abstractmethod
    def _correlate(self, lefts, rights, pairing):
        """(n_pairs, My, Mx) maps of one launch."""

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
