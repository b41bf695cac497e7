"""Fused shared-memory FFT correlation engine (GPU): one CUDA block per (pattern, ROI) pair.

Everything between the float32 scan tile and its peak stays in shared memory
(``kernels/fftcorr.cu``): a real 2-D FFT of the zero-padded tile (two rows packed as one
complex row FFT, all-zero padding rows skipped), the product with the resident conjugate
reference spectrum (read from L2), the inverse 2-D FFT (two map rows packed as one complex
row FFT), and the peak search with the 3x3 subpixel fit of :mod:`ebsdxc.engines.gpu_ops`
(``find_peaks``), so the maps never reach global memory. The spectrum of a 96x96 tile
padded to 192x192 (192 x 97 complex64 = 149 KB) fits the 227 KB of opt-in shared memory of
sm_90.

FFT lengths are ``2^a 3^b 5^c`` >= ``2h - 1`` (full mode) or ``h + max_shift`` (window mode) that
split into two factors N = N1 * N2 of at most 32 each: the one of the fewest warp instructions
(:func:`fast_length`; 192 = 12 x 16 rather than 162 = 9 x 18, whose factors leave most of a
32-lane team idle; 160 = 10 x 16 for 128x128 ROIs at +-24 px) where it fits, else the smallest.
Each 1-D FFT is
one four-step pass done by a team of threads of one warp: N2 threads do N1-point DFTs in
registers, twiddle, exchange through shared memory in a skewed layout (no bank
conflicts), then N1 threads do N2-point DFTs. The column pass runs forward FFT, product and
inverse FFT back to back, the inverse starting from the registers of the forward one.

Measured (H200, ``benchmarks/fused_fft.py``): 86 ROIs of 96x96 against 50 patterns, full mode,
tiles on the device to quadratic peaks: 1.06 ms (cuFFT engine 3.99 ms); window mode +-16 px
(128x128 FFTs): 0.51 ms (cuFFT engine 1.75 ms).

With K reference sets, block t reads the conjugate spectrum of tile ``t % n`` of its
pattern's set (an index per pattern, ``fc::reference`` in the kernel).

The tiles come prepared (:meth:`FusedFFTEngine.match`: float32, zero mean, windowed, as
:func:`~ebsdxc.engines.gpu_ops.prepare_tiles_padded` writes them), or straight from the patterns
(:meth:`FusedFFTEngine.match_rois`, what the runner uses): a pass over the ROIs finds each tile's
mean, energy and status without writing it (:func:`~ebsdxc.engines.gpu_ops.tile_statistics`), and
the kernel, compiled for the patterns' dtype (``FC_RAW``, ``FC_IN``), centres and windows each
value as it loads it, by the same float expression, so the two give the same results bit for
bit. That saves writing and reading back the tiles (at 1024x1024 with 49 ROIs of 256x256, 12.8 MB
per pattern each way; H100, ``benchmarks/batch_stages.py``: 11.7k -> 13.7k patterns/s of one batch
on the device).

Subpixel methods: the 3x3 fits of ``find_peaks``, and ``dft`` and ``upsampled`` (issue 17),
which the cuFFT engine refines from the cross-power spectrum in global memory. Here the spectrum
is gone once the map is made, so they evaluate the same function from the map in shared memory:
the correlation between integer lags is the trigonometric interpolant of the map samples,
``g(y, x) = sum_jk c[j, k] Re(Dy(y - j) Dx(x - k)) / (Ny Nx)`` with Dirichlet kernels Dy (all
frequencies) and Dx (the half spectrum with its Hermitian weights) in closed form -- exactly
what :func:`ebsdxc.peaks.dft_grid` computes from the spectrum. A 3x3 stencil of ``dft`` costs,
for each map column, 3 weighted sums and one alternating sum down the column (float, a warp's rows
at a time, widened to double once per pass: for an even length the imaginary part of Dy is
-(-1)^j sin(pi y), so the alternating sum serves all three rows), then 12 weighted sums across the
columns; the 24x24 grid of ``upsampled``
8 weighted sums along each map row per four columns of 12 x 12 Chebyshev nodes (on the FP64
tensor cores), then 12 sums along the column of row sums, and the polynomial interpolant of the
nodes' values at the grid's lags (:data:`GRID_NODES`). The Dirichlet weights, and the window
autocorrelation that compensation divides by, are made in one round before the pass (at even
lengths the stencil's weights from cot(pi t / N) and constants per parity of the row or column,
the autocorrelation's step phases from :func:`step_table`). Its
precision is that of the float32 map (the kernel's inverse FFT): 1e-5 px from the float64
result on sharp peaks, up to about 2e-4 px RMS (1.5e-3 max) on broad ones, 3.7e-4 px RMS on the
sample EBSD scan, where the cuFFT engine's spectrum path stays near 1e-5
(``correlation.engine = "fft"`` when that matters).

Maps too big for one block (full mode; 128x128 tiles need a 256x129 spectrum, 264 KB) are split
over the two blocks of a thread-block cluster (sm_90, ``FusedPlan.split = 2``). Tile rows past
NY / 2 are zero in full mode, so each block does the whole forward transform itself from the tile
(the redundant half is cheap) and folds the spectrum to the NY / 2 frequencies of its own map rows
y = 2 j + s: ``map[2 j + s] = IFFT_{NY/2}(Q_s)[j]`` with ``Q_s[k] = (P[k] + (-1)^s P[k + NY/2])
exp(2 pi i k s / NY)``; the fold happens in registers (the thread of stage B holds both k and
k + NY/2). Each block keeps NY / 2 spectrum rows and map rows. The peak search and the subpixel
sums over map rows combine the two halves through distributed shared memory, added in rank
order so that both blocks take the same steps. Measured (H200, ``benchmarks/fused_fft.py --tile
128 --rois 45``, full mode, tiles on the device to peaks): quadratic 1.56 ms (cuFFT engine
3.71 ms), dft 2.52 ms (4.74), upsampled 7.14 ms (9.48).

In window mode the tile fills more than half the column FFT (256x256 tiles at +-24 px: 256 of 288
rows), so the fold does not apply; there the two blocks split the half spectrum by columns
(``FusedPlan.cols = 2``): block s transforms half the tile's row pairs and writes each spectrum
column to the block that owns it (block 0 the first ``ld`` columns, ``ld`` odd; block 1 the rest)
through distributed shared memory, does the full column FFTs, product and inverse FFTs of its own
columns, and the two blocks then swap the other block's columns of their own map rows y = 2 j + s
(a cluster barrier between each round's reads and writes). Map row j's half spectrum is then the
two rows 2 j, 2 j + 1 of the column pass, one row of 2 ``ld`` complex, and the inverse row pass, the
peak search and the subpixel sums are those of the row split. Measured (H100, ``benchmarks/fused_fft.py
--tile 256 --rois 45 --patterns 20 --mode window --max-shift 24``, tiles on the device to peaks):
quadratic 0.995 ms (cuFFT engine 2.65 ms, tensor engine in bf16 1.68 ms), dft 1.43 ms (3.32),
upsampled 2.95 ms (7.32). These blocks run 384 threads (:data:`COLS_THREADS_MAX`), not 512: at 512
the compiler's cap of 128 registers a thread made the FFT passes spill (one run, shifted noisy tiles:
dft 1.18 ms at 384 threads against 1.39 at 512, quadratic 0.88 against 0.97;
``benchmarks/fused_threads.py``).

Sizes whose spectrum (and subpixel grid) do not fit in shared memory even split, or with a length
over 1024, are refused with a ValueError (:func:`supports` says so beforehand); the FFT engine
handles them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..kernel_loader import NULL_POINTER, get_function
from ..peaks import (
    DFT_MAX_MOVES,
    DFT_STEPS,
    SUBPIXEL_REACH,
    UPSAMPLED_MAX_RECENTRE,
    integer_lag_table,
    window_power_spectrum,
)
from .base import CorrelationEngine, EngineInfo, PeakResult
from .registry import register

__all__ = ["FusedFFTEngine", "axis_factors", "can_split", "device_limits", "fast_length", "fft_length", "fused_plan",
           "grid_interpolation", "grid_nodes", "grid_side", "skew", "step_table", "supports"]

RADIX_MAX = 32          # largest DFT held in one thread's registers
LENGTH_MAX = RADIX_MAX * RADIX_MAX
SMEM_OPTIN = 232448     # bytes of opt-in dynamic shared memory per block on sm_90 (227 KB)
THREADS_MAX = 512
# A column split's blocks at 512 threads get 128 registers a thread and spill in their FFT
# passes; at 384 they spill nothing. H100, 45 ROIs of 256x256 at +-24, tiles on the device to
# peaks (benchmarks/fused_threads.py): dft 1.385 -> 1.181 ms, quadratic 0.971 -> 0.876 ms
# (256 threads: 1.208, 0.917).
COLS_THREADS_MAX = 384
# Subpixel grids summed at up to this many lags a side (grid_nodes: every upsampled grid since
# GRID_NODES) take the cheapest FFT lengths (fast_length), larger ones the smallest, whose maps
# cost the grid's row sums less (benchmarks set it to compare). 24: the default upsampling
# factor's grid, measured before it was summed at nodes; H100, 45 ROIs of 128x128 at +-24 (FFT
# 192 against 162, benchmarks/fused_upsampled_lengths.py): 37.3k against 32.7k patterns/s, results moved 3.3e-4 px
# (on simulated EBSD patterns both lengths are as accurate: benchmarks/window_length_accuracy.py).
FAST_GRID_MAX = 24
_STATIC_SMEM = 512      # static shared memory of the kernel (reduction slots), rounded up
_METHODS = {"none": 0, "parabolic": 1, "gaussian": 2, "quadratic": 3}
_KERNELS = ("fused_peaks", "fused_maps", "fused_dft", "fused_upsampled", "fused_upsampled_tables")


def _smooth(n):
    for p in (2, 3, 5):
        while n % p == 0:
            n //= p
    return n == 1


@functools.cache
def _skew_conflicts(n1, n2):
    # The most lanes of a team that hit one bank (16 of 8 bytes: a 64-bit access per half warp)
    # in one access to the skewed slots of an n1 x n2 four-step FFT: the n2 writers of a k1, the
    # n1 readers of an n2, and the same with the roles swapped (the column pass's inverse).
    worst = 1
    for a, b in ((n1, n2), (n2, n1)):
        slots = [[skew(q, k, a, b) % 16 for k in range(a)] for q in range(b)]
        groups = [[row[k] for row in slots] for k in range(a)] + slots
        for g in groups:
            for i in range(0, len(g), 16):
                part = g[i:i + 16]
                worst = max(worst, max(part.count(v) for v in part))
    return worst


#: The worst bank conflict a split may have (fused._skew_conflicts): 27 x 27 (729), which the kernel
#: has always taken, has 4; a factor of 15 (15 = -1 mod 16 slots a row, so that the skew's
#: rotation cancels) puts up to 15 lanes on one bank.
SKEW_CONFLICTS_MAX = 4

#: The largest factor of a length with a factor of 5 (16-lane teams): 160 = 10 x 16 took 45 ROIs
#: of 128x128 at +-24 from 53-57k to 61-67k patterns/s (upsampled, H100), while in 32-lane teams
#: the smallest such lengths cost more than the 2^a 3^b ones they would replace (240 = 12 x 20 for
#: 200x200 ROIs at +-24, a column split: 24.0k against 28.9k patterns/s at 256, H200), and
#: 225 = 9 x 25 would have put that split into one block of 9- and 25-lane stages.
RADIX5_FACTOR_MAX = 16


@functools.cache
def axis_factors(n):
    """(N1, N2) with N1 * N2 = n, both 2^a 3^b 5^c <= RADIX_MAX, as balanced as possible
    (N2 >= N1 on ties), whose skewed exchange has few bank conflicts (:data:`SKEW_CONFLICTS_MAX`)
    and, with a factor of 5, no factor above :data:`RADIX5_FACTOR_MAX`; None where there is no such
    split."""
    best = None
    for n1 in range(1, min(n, RADIX_MAX) + 1):
        if n % n1 or not _smooth(n1):
            continue
        n2 = n // n1
        if n2 > RADIX_MAX or not _smooth(n2) or _skew_conflicts(n1, n2) > SKEW_CONFLICTS_MAX:
            continue
        if n % 5 == 0 and max(n1, n2) > RADIX5_FACTOR_MAX:
            continue
        key = (max(n1, n2), n1 > n2)
        if best is None or key < best[0]:
            best = (key, (n1, n2))
    return None if best is None else best[1]


def fft_length(need):
    """Smallest 2^a 3^b 5^c >= ``need`` the kernel can transform (see :func:`axis_factors`), or None."""
    n = max(int(need), 1)
    while n <= LENGTH_MAX:
        if _smooth(n) and axis_factors(n) is not None:
            return n
        n += 1
    return None


# Floating-point operations of fc::Dft<R> for the radices it does directly; composites recurse
# as the kernel does (_dft_flops). Dft<5> (pairs v1 +- v4, v2 +- v3) does 44 but is priced by
# what it measured against the others (H100, call 6 of 2026-11-27): at 44, 100 = 10 x 10 came
# out 2% cheaper than 108 = 9 x 12 and ran 4-12% slower (50x50 ROIs in full mode, quadratic),
# and 80 = 8 x 10 no faster than 81 = 9 x 9; at 64 those keep their 2^a 3^b lengths, while
# 160 = 10 x 16 (128x128 ROIs at +-24) and 40 = 5 x 8 (20x20 in full mode: 407k-504k -> 584k-587k
# patterns/s) keep theirs.
_RADIX_FLOPS = {1: 0, 2: 4, 3: 14, 4: 16, 5: 64}


@functools.cache
def _dft_flops(r):
    if r in _RADIX_FLOPS:
        return _RADIX_FLOPS[r]
    a = 4 if r % 4 == 0 else (3 if r % 3 == 0 else (2 if r % 2 == 0 else 5))
    b = r // a
    # b a-point DFTs, a b-point DFTs, a complex product (6) per twiddle b * ka != 0
    return b * _dft_flops(a) + a * _dft_flops(b) + 6 * (a - 1) * (b - 1)


def _lane_cost(n):
    # warp instructions of the 1-D FFTs of a pass over n lines of length n, up to a constant:
    # stage A (an N1-point DFT, N1 - 1 twiddles, N1 loads and stores) and stage B (an N2-point
    # DFT, its loads and stores) run in a team of T lanes in lockstep, 32 / T FFTs to a warp, so
    # idle lanes cost as much as busy ones. Lengths whose factors leave most of a 32-lane team
    # idle (162 = 9 x 18) cost more than longer ones that fill 16-lane teams (192 = 12 x 16); by
    # operations, not N log N, radices 3 and 5 cost more per point than 2 and 4, so 120 = 10 x 12
    # does not beat 128 = 8 x 16 (H100, 86 ROIs of 96x96 at +-16: quadratic 99k/91k patterns/s
    # at 120 against 101k/100k at 128), while 160 = 10 x 16 beats 192 = 12 x 16 (45 ROIs of
    # 128x128 at +-24, upsampled 61.8k/66.2k against 53.1k/56.9k).
    n1, n2 = axis_factors(n)
    lanes = _dft_flops(n1) + 6 * (n1 - 1) + 2 * n1 + _dft_flops(n2) + 2 * n2
    return n * lanes * _team(n1, n2) / 32


@functools.cache
def fast_length(need):
    """The 2^a 3^b 5^c length >= ``need``, up to 1.5 ``need``, whose transforms cost the kernel the
    fewest warp instructions (:func:`fft_length` where no longer one is cheaper), or None.
    Measured (H100, 45 ROIs of 128x128 at +-24 px, tiles to peaks): 192 instead of 162 in both
    axes takes `quadratic` from 0.70 to 0.45 ms and `dft` from 1.27 to 0.97-1.06 ms."""
    n = fft_length(need)
    best = n
    while n is not None and n <= max(1.5 * need, best):
        if _lane_cost(n) < _lane_cost(best):
            best = n
        n = fft_length(n + 1)
    return best


def skew(n2, k1, n1_len, n2_len):
    """Shared-memory slot of the intermediate value (n2, k1) between the two passes of an
    N1 x N2 four-step FFT: rows of N2 slots per k1, rotated by k1, so that both the N2
    writers of a k1 and the N1 readers of an n2 hit distinct banks."""
    return k1 * n2_len + (n2 + k1) % n2_len


def _team(n1, n2):
    t = 1
    while t < max(n1, n2):
        t *= 2
    return t


@dataclass(frozen=True)
class FusedPlan:
    tile: tuple          # (h, w)
    fft: tuple           # (Ny, Nx)
    max_lag: tuple       # (ry, rx)
    fy: tuple            # (N1, N2) of the column FFT
    fx: tuple            # (N1, N2) of the row FFT
    ld: int              # complex row stride of the shared spectrum
    rows: int            # rows allocated (even)
    smem: int            # dynamic shared memory, bytes
    threads: int
    grid_smem: int = 0   # dynamic shared memory of the dft / upsampled kernels (their grid's scratch)
    split: int = 1       # blocks per tile pair (a thread-block cluster), each holding NY / split map rows
    cols: int = 1        # 2: a split whose blocks share the forward transform by spectrum columns
    grid_cw: int = 3     # columns of the upsampled grid summed per pass over the map (fc::CW)
    grid_mma: bool = False  # their row sums on the FP64 tensor cores (fc::row_sums_mma)

    @property
    def nxh(self):
        return self.fft[1] // 2 + 1

    def defines(self):
        (h, w), (ny, nx), (ry, rx) = self.tile, self.fft, self.max_lag
        return (("FC_H", h), ("FC_W", w), ("FC_NY", ny), ("FC_NX", nx), ("FC_RY", ry), ("FC_RX", rx),
                ("FC_N1Y", self.fy[0]), ("FC_N2Y", self.fy[1]), ("FC_N1X", self.fx[0]), ("FC_N2X", self.fx[1]),
                ("FC_TY", _team(*self.fy)), ("FC_TX", _team(*self.fx)), ("FC_LD", self.ld),
                ("FC_ROWS", self.rows), ("FC_NT", self.threads), ("FC_SPLIT", self.split), ("FC_COLS", self.cols),
                ("FC_GRID_CW", self.grid_cw), ("FC_GRID_MMA", int(self.grid_mma)))


def _need(tile_shape, mode, max_shift):
    h, w = (int(v) for v in tile_shape)
    if mode == "full":
        return (h - 1, w - 1), (2 * h - 1, 2 * w - 1)
    if mode != "window":
        raise ValueError(f"the fused engine correlates in full or window mode, not {mode!r}")
    if max_shift is None or max_shift < 1:
        raise ValueError("window mode needs max_shift >= 1 px")
    ry, rx = min(int(max_shift), h - 1), min(int(max_shift), w - 1)
    return (ry, rx), (h + ry, w + rx)


def grid_side(subpixel, upsample=16) -> int:
    """Side of the lag grid the ``dft`` (3, its stencils) and ``upsampled`` (ceil(1.5 upsample))
    kernels evaluate by trigonometric interpolation; 0 for the 3x3 fits."""
    if subpixel == "dft":
        return 3
    if subpixel == "upsampled":
        return (3 * int(upsample) + 1) // 2
    return 0


#: Nodes a side at which the kernel sums a larger ``upsampled`` grid (fc::grid_finish
#: interpolates the rest): the grid's values are the trigonometric interpolant of the map,
#: band-limited to half a cycle per pixel, and over the grid's 1.5 px the polynomial through
#: them at 12 Chebyshev nodes meets them within 4e-9 of the largest value (white-noise maps,
#: upsample 9 to 50; tests/engines/test_fused.py), far below the float32 map's own rounding. At
#: 128x128 +-24 (upsample 16, a 24 x 24 grid) the row sums make 3 passes over the map instead of
#: 8 (4 columns a pass), the column sums 144 values instead of 576: 36.0k -> 54.9k patterns/s on
#: an H100 (BENCHMARKS.md, fourteenth session). 15 nodes cost 10% more for no gain that shows.
GRID_NODES = 12


def grid_nodes(side) -> int:
    """Nodes a side at which the fused kernels sum a grid of ``side`` lags a side: the grid's own
    lags up to :data:`GRID_NODES`, that many Chebyshev nodes beyond (:func:`grid_interpolation`)."""
    return min(int(side), GRID_NODES)


def grid_interpolation(upsample, nodes):
    """(offsets, lerp) of the ``upsampled`` grid for ``upsample``: the ``nodes`` Chebyshev nodes
    (first kind) over the grid's span, in px from its centre, and the (R, nodes) matrix that
    takes values at them to the grid's R = ceil(1.5 upsample) lags (barycentric Lagrange
    interpolation, float64); the grid's own lags and None where ``nodes`` is R."""
    from numpy.polynomial.chebyshev import chebpts1
    from scipy.interpolate import BarycentricInterpolator

    side = grid_side("upsampled", upsample)
    lags = (np.arange(side) - side // 2) / int(upsample)
    if nodes >= side:
        return lags, None
    lo, hi = lags[0], lags[-1]
    offsets = 0.5 * (lo + hi) + 0.5 * (hi - lo) * chebpts1(nodes)
    return offsets, BarycentricInterpolator(offsets, np.eye(nodes))(lags)


def _grid_scratch(nyl, nx, side, split=1, cw=3):
    # fc::GridScratch: position, grid values (and their nodes' sum over a split, in the row
    # sums' space where it fits), window autocorrelations, column weights of cw columns
    # (double2, aligned to 16 bytes), row weights of the block's nyl map rows (float2) at the
    # nodes, row sums, the interpolation's first product (side x nodes, where nodes < side)
    q = grid_nodes(side)
    rld = 2 * cw if 2 * cw % 4 == 2 else 2 * cw + 2  # fc::RLD, the row sums' stride
    own_sum = split > 1 and q * q > rld * nyl
    return (8 * 8 + side * side * 8 + (q * q * 8 if own_sum else 0) + 2 * side * 8 + 8 + cw * nx * 16
            + q * nyl * 8 + nyl * rld * 8 + (side * q * 8 if q < side else 0))


#: Columns of the general grid (``upsampled``) summed in one pass over the map, widest first
#: (fc::CW): each pass widens every map value to double again. Held to 12 row sums a thread
#: (CW times the rows of a piece, 4 where the row FFT length is a multiple of 4, else 1).
#: Measured on an H100 (benchmarks/fused_grid_columns.py): 3, 6, 12 columns took 45 ROIs of
#: 128x128 at +-24 to 29.0k, 30.7k, 26.2k patterns/s and 86 of 64x64 at +-16 to 37.3k, 39.2k,
#: 35.3k (12: the row sums' registers spill).
GRID_COLUMNS = (6, 3)
#: The row sums on the FP64 tensor cores (fc::row_sums_mma, sm_80 and later) with the widest
#: chunk of these that fits (tiles of 8 weight columns, 2 a grid column). Measured on an H100
#: (benchmarks/results/s14-2026-11-27/call2, 12 x 12 nodes, the row sums' stride fc::RLD): 3, 4,
#: 6 columns took 128x128 at +-24 to 52.1k, 57.2k, 54.8k patterns/s, 64x64 at +-16 to 63.4k,
#: 70.4k, 70.8k, 96x96 full to 28.4k, 29.6k, 29.7k and 256x256 at +-24 to 16.0k, 16.6k, - (no
#: room for 6). Before the stride was padded, 4 columns put the column sums' reads on a quarter
#: of the banks and were the slowest.
GRID_MMA_COLUMNS = (4, 3)


def _grid_columns(nyl, nx, side, split, room):
    # (columns, tensor cores): the widest chunk of grid columns whose scratch fits in room bytes,
    # on the tensor cores where one of GRID_MMA_COLUMNS does (3 on the FP64 pipes where none does)
    q = grid_nodes(side)  # the columns a pass are node columns
    for cw in GRID_MMA_COLUMNS:
        if cw < q and _grid_scratch(nyl, nx, side, split, cw) <= room:
            return cw, True
    rb = 4 if nx % 4 == 0 else 1
    for cw in GRID_COLUMNS:
        if (cw == 3 or (cw * rb <= 12 and cw < q)) and _grid_scratch(nyl, nx, side, split, cw) <= room:
            return cw, False
    return 3, False


def can_split(h, ny, fy) -> bool:
    """Whether a column FFT of length ``ny`` split as ``fy`` can be shared by two blocks of a
    cluster (fc::columns_split): tile rows in its first half, both factors even."""
    return ny % 2 == 0 and h <= ny // 2 and fy[0] % 2 == 0 and fy[1] % 2 == 0


def fused_plan(tile_shape, mode, max_shift=None, *, smem_limit=SMEM_OPTIN, grid=0, clusters=True, split=None):
    """Kernel plan for tiles of (h, w); ValueError where the fused kernel cannot run them
    (``grid``: :func:`grid_side` of the subpixel method; its kernel needs more shared memory).

    Where the map does not fit in one block and ``clusters`` (sm_90 and later), the plan splits
    its rows over the two blocks of a thread-block cluster (``split = 2``): in full mode by
    folding the column FFT (see :func:`can_split`; its length may then be longer), else (window
    mode, where the tile fills more than half the column FFT) by spectrum columns (``cols = 2``,
    an even column FFT). ``split`` = 1 or 2 forces one or the other (tests and benchmarks).
    """
    if split not in (None, 1, 2):
        raise ValueError(f"split must be None, 1 or 2, got {split!r}")
    h, w = (int(v) for v in tile_shape)
    if h < 1 or w < 1:
        raise ValueError(f"tile shape must be positive, got {tile_shape}")
    max_lag, need = _need((h, w), mode, max_shift)
    fft = tuple(fft_length(n) for n in need)
    if None in fft:
        raise ValueError(f"the fused FFT engine handles FFT lengths up to {LENGTH_MAX}; {w}x{h} tiles "
                         f"in {mode} mode need {need[1]}x{need[0]}: use the fft engine")
    # The upsampled grid's sums grow with the map and outweigh what the FFTs save (H100, 45 ROIs
    # of 128x128 at +-24: 2.19 ms at 162, 3.01 ms at 192, 24 x 24 values summed), so larger
    # grids keep the smallest lengths.
    fast = tuple(fast_length(n) for n in need) if grid_nodes(grid) <= FAST_GRID_MAX else fft
    ny, nx = fft
    if split != 2:
        plan, why = _first_plan((h, w), (fast, fft), max_lag, 1, smem_limit, grid)
        if plan is not None:
            return plan
    if split == 2 and not clusters:
        raise ValueError(f"{w}x{h} tiles in {mode} mode cannot be split over two blocks without "
                         "thread-block clusters (sm_90)")
    nys = None  # the row split's column FFT length, full mode only
    if clusters and mode == "full" and split != 1:
        nys = _first_length(need[0], lambda n: can_split(h, n, axis_factors(n)))
    if nys is not None:
        plan, why_split = _first_plan((h, w), ((nys, fast[1]), (nys, nx)), max_lag, 2, smem_limit, grid)
        if plan is not None:
            return plan
        why = f"split over two blocks, {why_split}" if split == 2 else f"{why}; split over two blocks, {why_split}"
    elif clusters and split != 1:
        nye = _first_length(need[0], lambda n: n % 2 == 0)  # a column split's map rows alternate
        plan, why_cols = None, "no even FFT length"
        if nye is not None:
            plan, why_cols = _first_plan((h, w), ((nye, fast[1]), (nye, nx)), max_lag, 2, smem_limit, grid, cols=2)
        if plan is not None:
            return plan
        why = (f"split over two blocks by columns, {why_cols}" if split == 2
               else f"{why}; split over two blocks by columns, {why_cols}")
    raise ValueError(f"{w}x{h} tiles in {mode} mode need a {nx}x{ny} FFT: {why}, more than the "
                     f"{smem_limit // 1024} KB of shared memory: use the fft engine")


def _first_length(need, ok):
    # The smallest FFT length >= need for which ok(length) holds, or None.
    n = fft_length(need)
    while n is not None and not ok(n):
        n = fft_length(n + 1)
    return n


def _first_plan(tile, candidates, max_lag, split, smem_limit, grid, cols=1):
    # The plan of the first FFT lengths among candidates (the cheapest first, the smallest last:
    # a longer FFT may not fit where a shorter does), or None and why the smallest do not fit.
    why = None
    for fft in dict.fromkeys(candidates):
        plan, why = _plan(tile, fft, max_lag, split, smem_limit, grid, cols)
        if plan is not None:
            return plan, None
    return None, why


def _plan(tile, fft, max_lag, split, smem_limit, grid, cols=1):
    (h, _), (ny, nx) = tile, fft
    fy, fx = axis_factors(ny), axis_factors(nx)
    nxh = nx // 2 + 1
    nyl = ny // split
    if cols > 1:
        # block 0 owns ld columns, block 1 the rest; ld odd (a column's rows fall in distinct
        # banks), and map row j's half spectrum is rows 2j, 2j+1 of ld: one row of 2 ld
        ld = (nxh + 1) // 2
        ld += 1 - ld % 2
        # the inverse row pass writes map rows 2j, 2j+1 as one complex row of nx from row 4j of
        # ld: where nyl is odd the last row's complex row runs past ny rows (into the twiddles)
        rows = max(ny, -(-(4 * ((nyl - 1) // 2) * ld + nx) // ld))
        rows += rows & 1
    else:
        ld = nxh | 1                   # odd stride: a column's rows fall in distinct banks
        rows = max(nyl, h) if split > 1 else ny
        rows += rows & 1
    smem = rows * ld * 8 + (nx + ny) * 16    # spectrum, twiddles, window lag tables
    if smem + _STATIC_SMEM > smem_limit:
        return None, f"the spectrum needs {smem // 1024} KB"
    ty, tx = _team(*fy), _team(*fx)
    work = max(tx * ((h + 1) // 2), ty * nxh, tx * ((nyl + 1) // 2), 32)
    threads = min(THREADS_MAX if cols == 1 else COLS_THREADS_MAX, -(-work // 32) * 32)
    # a column split transforms its tile rows in a line of NX per team of the row pass
    lines = (threads // 32) * (32 // tx) * nx * 8 if cols > 1 else 0
    cw, mma = _grid_columns(nyl, nx, grid, split, smem_limit - _STATIC_SMEM - smem) if grid > 3 else (3, False)
    grid_smem = smem + max(lines, _grid_scratch(nyl, nx, grid, split, cw)) if grid else smem + lines
    smem += lines
    if max(smem, grid_smem) + _STATIC_SMEM > smem_limit:
        return None, f"the spectrum and subpixel grid need {max(smem, grid_smem) // 1024} KB"
    return FusedPlan(tile, fft, max_lag, fy, fx, ld, rows, smem, threads, grid_smem, split, cols, cw, mma), None


@functools.cache
def _device_limits(device_id):
    import cupy as cp

    dev = cp.cuda.Device(device_id)
    return int(dev.attributes.get("MaxSharedMemoryPerBlockOptin", SMEM_OPTIN)), int(dev.compute_capability) >= 90


def device_limits():
    """(opt-in shared memory per block, thread-block clusters) of the current CUDA device, or
    sm_90's where there is none (plans and tables made on another machine)."""
    try:
        import cupy as cp

        return _device_limits(cp.cuda.Device().id)
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: the sm_90 plan
        return SMEM_OPTIN, True


def supports(tile_shape, mode, max_shift=None, *, smem_limit=SMEM_OPTIN, grid=0, clusters=True) -> bool:
    """Whether :class:`FusedFFTEngine` can correlate tiles of ``tile_shape`` in ``mode``."""
    try:
        fused_plan(tile_shape, mode, max_shift, smem_limit=smem_limit, grid=grid, clusters=clusters)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class _Source:
    """Where the kernels read tile t of ``count`` = (B, n): ``tiles + t * frame`` (prepared float32
    tiles, rows ``row`` apart), or with ``raw`` (the C type of the values) the ROI at
    ``offsets[t % n]`` of pattern ``t // n`` (``frame`` = H W, ``row`` = W), prepared from
    ``mean``, ``status``, ``window``."""

    tiles: object
    frame: int
    row: int
    count: tuple
    offsets: object = NULL_POINTER
    mean: object = NULL_POINTER
    status: object = NULL_POINTER
    window: object = NULL_POINTER
    raw: str | None = None

    def args(self):
        return (self.tiles, np.int64(self.frame), np.int32(self.row), self.offsets, self.mean, self.status,
                self.window)


def step_table(steps, fft_shape):
    """Cosines and sines of the phase steps of the ``dft`` stencils (fused_dft's ``step_cs``).

    Parameters
    ----------
    steps : sequence of float
        The stencils' steps in px (:data:`ebsdxc.peaks.DFT_STEPS`).
    fft_shape : (int, int)
        FFT lengths ``(NY, NX)``.

    Returns
    -------
    (len(steps), NY // 2 + 1 + NX // 2 + 1, 2) float64
        For each step ``h``: ``cos, sin`` of ``2 pi k h / NY`` for ``k = 0 .. NY // 2``, then of
        ``2 pi k h / NX`` for ``k = 0 .. NX // 2``; the window autocorrelation at a stencil's
        three lags needs them, and they depend on the step alone.
    """
    ny, nx = fft_shape
    h = np.asarray(steps, dtype=np.float64)[:, None]
    ph = np.concatenate([h * np.arange(ny // 2 + 1) / ny, h * np.arange(nx // 2 + 1) / nx], axis=1)
    ph -= np.floor(ph)  # as the kernel reduces its own phases, before the factor 2 pi
    return np.ascontiguousarray(np.stack([np.cos(2 * np.pi * ph), np.sin(2 * np.pi * ph)], axis=-1))


class FusedFFTEngine(CorrelationEngine):
    """n-to-mn FFT correlation fused in shared memory, CUDA only (full and window mode)."""

    info = EngineInfo("fused", devices=("gpu",), subpixel=("dft", "upsampled") + tuple(_METHODS)[::-1], circular=False,
                      forms=("one_to_one", "one_to_many", "n_to_mn"), method="fft",
                      summary="FFT correlation and peak search in shared memory, one CUDA block per tile "
                              "pair (tiles whose spectrum fits in shared memory)")
    reads_rois = True

    def __init__(self, backend, tile_shape, config, *, window_1d=None, split=None):
        super().__init__(backend, tile_shape, config)
        limit, clusters = _device_limits(self.xp.cuda.Device().id)
        self._grid = grid_side(config.subpixel, config.upsample)
        self.plan = fused_plan(self.tile_shape, config.mode, config.max_shift, smem_limit=limit, grid=self._grid,
                               clusters=clusters, split=split)
        self.fft_shape = self.plan.fft
        ny, nx = self.fft_shape
        cp = self.xp
        self._twiddles = cp.asarray(np.concatenate([np.exp(-2j * np.pi * np.arange(nx) / nx),
                                                    np.exp(-2j * np.pi * np.arange(ny) / ny)]).astype(np.complex64))
        self._lags = self._spectra = None
        if config.compensate and window_1d is not None:
            self._spectra = tuple(cp.ascontiguousarray(window_power_spectrum(f, n, cp), dtype=cp.float64)
                                  for f, n in zip(window_1d, self.fft_shape))
            self._lags = tuple(cp.ascontiguousarray(integer_lag_table(S, cp), dtype=cp.float64) for S in self._spectra)
        self._steps = cp.asarray(np.asarray(DFT_STEPS, dtype=np.float64))
        self._step_cs = cp.asarray(step_table(DFT_STEPS, self.fft_shape))
        self._sums = (1.0, 1.0) if self._spectra is None else tuple(float(S.sum()) for S in self._spectra)
        self._no_lags = (cp.ones(ny), cp.ones(nx))  # kernel arguments when not compensating
        self._no_index = cp.zeros(1, dtype=cp.int32)  # kernel argument for one reference set
        self._fns = {}
        self._grid_tables = None

    @classmethod
    def size_refusal(cls, tile_shape, config):
        # The plan for the current device (an A100 has 163 KB and no clusters), so that "auto"
        # never picks an engine that then refuses; sm_90's where there is no device.
        limit, clusters = device_limits()
        try:
            fused_plan(tile_shape, config.mode, config.max_shift, grid=grid_side(config.subpixel, config.upsample),
                       smem_limit=limit, clusters=clusters)
        except ValueError as e:
            return str(e)
        return None

    @classmethod
    def fallback_rank(cls, case):
        return 1 if case.small else 0

    def _key(self):
        return super()._key() + (self.fft_shape,)

    def _prepare(self, tiles):
        cp = self.xp
        ny, nx = self.fft_shape
        spec = cp.fft.rfft2(tiles.astype(cp.float64), s=(ny, nx), axes=(-2, -1))
        spec = cp.conj(spec) / (ny * nx)           # the inverse FFT's scale folded in
        # (K n, Nx//2+1, Ny): a column of the spectrum is contiguous (read along ky by a team).
        return cp.ascontiguousarray(spec.transpose(0, 2, 1), dtype=cp.complex64)

    def _kernel(self, name, raw=None):
        # raw: the C type of the pattern values the kernel prepares as it loads them (FC_RAW)
        key = (self.xp.cuda.Device().id, name, raw)
        fn = self._fns.get(key)
        if fn is None:
            defines = self.plan.defines() + ((("FC_RAW", 1), ("FC_IN", raw)) if raw else ())
            fn = get_function("fftcorr.cu", name, name_expressions=_KERNELS, defines=defines)
            fn.max_dynamic_shared_size_bytes = self._smem(name)
            self._fns[key] = fn
        return fn

    def _upsampled_tables(self):
        # fc::GridTables: the grid's weights at its nodes and window autocorrelations at its lags,
        # at every remainder of a whole-pixel centre, made once (the kernel reads them rotated),
        # the interpolation from the nodes, and their number
        if self._grid_tables is None:
            cp = self.xp
            ny, nx = self.fft_shape
            R, up = self._grid, int(self.config.upsample)
            q = grid_nodes(R)
            offsets, lerp = grid_interpolation(up, q)
            wy = cp.empty((q, ny), dtype=cp.complex64)
            wx = cp.empty((q, nx), dtype=cp.complex128)
            acy = cp.ones((ny, R), dtype=cp.float64)
            acx = cp.ones((nx, R), dtype=cp.float64)
            sy, sx = self._spectra if self._spectra is not None else self._no_lags
            fn, threads = self._kernel("fused_upsampled_tables"), 256
            args = (np.int32(up), np.int32(q), cp.asarray(offsets, dtype=cp.float64), sy, sx,
                    np.float64(self._sums[0]), np.float64(self._sums[1]), wy, wx, acy, acx)
            fn((-(-q * (ny + nx) // threads),), (threads,), (np.int32(0),) + args)  # a thread a weight
            if self._spectra is not None:  # a warp an autocorrelation
                fn((-(-R * (ny + nx) * 32 // threads),), (threads,), (np.int32(1),) + args)
            lerp = NULL_POINTER if lerp is None else cp.asarray(lerp, dtype=cp.float64)
            self._grid_tables = (wy, wx, acy, acx, lerp, np.int32(q))
        return self._grid_tables

    def _smem(self, name):
        return self.plan.grid_smem if name in ("fused_dft", "fused_upsampled") else self.plan.smem

    def _tiles(self, tiles):
        cp = self.xp
        tiles = cp.asarray(tiles, dtype=cp.float32)
        h, w = self.tile_shape
        if tiles.ndim != 4 or tiles.shape[2] < h or tiles.shape[3] < w:
            raise ValueError(f"tiles must be (B, n, >={h}, >={w}), got {tiles.shape}")
        if not tiles.flags.c_contiguous:
            tiles = cp.ascontiguousarray(tiles)
        # tile t, row y, column x at t * frame + y * row + x (a padded frame is read in place)
        return _Source(tiles, tiles.shape[2] * tiles.shape[3], tiles.shape[3], tiles.shape[:2])

    def match_rois(self, patterns, origins, window, *, references=None, index=None) -> PeakResult:
        """Cut, prepare and correlate the ROIs of whole patterns, without writing the tiles.

        The result is :meth:`match`'s on the tiles that
        :func:`~ebsdxc.engines.gpu_ops.prepare_tiles_padded` cuts from ``patterns`` (bit for bit:
        the kernel prepares each value as it loads it, from that kernel's mean), but no
        tile goes through global memory: at 1024x1024 with 49 ROIs of 256x256 that saves
        writing and reading back 12.8 MB per pattern.

        Parameters
        ----------
        patterns : (B, H, W) device array
            Raw or preprocessed patterns; uint8, uint16, int16, int32, float32 and float64
            are read as they are, other dtypes as float32.
        origins : (n, 2) int32 array
            Each ROI's top-left corner (x0, y0). Host origins are checked to lie inside the
            patterns; device origins are taken as given (a check would stop the stream).
        window : (h, w) float32 device array
            The window each zero-mean tile is multiplied by.
        references, index
            As :meth:`match`.
        """
        from .gpu_ops import tile_dtype
        from .roi_tiles import check_roi_inputs, roi_tiles

        origins, window = check_roi_inputs(patterns, origins, window, self.tile_shape)
        B, H, W = patterns.shape
        n = int(origins.shape[0])
        refs, idx = self._resolve_shape(B, n, references, index)
        rt, energy, status = roi_tiles(patterns, origins, window, self.tile_shape)
        source = _Source(rt.patterns, H * W, W, (B, n), rt.offsets, rt.mean, status, window,
                         tile_dtype(rt.patterns.dtype))
        y, x, value, border = self._peaks(source, refs, idx)
        return self._assemble(y.reshape(B, n), x.reshape(B, n), value.reshape(B, n), border.reshape(B, n),
                              energy.reshape(B, n), status.reshape(B, n), refs, idx)

    def _sets(self, index):
        # (ref_of, indexed): block t reads reference set ref_of[t / n] where indexed, else set 0.
        return (self._no_index, 0) if index is None else (index, 1)

    def _maps(self, tiles, refs, index):
        cp = self.xp
        src = self._tiles(tiles)
        B, n = src.count
        ny, nx = self.fft_shape
        out = cp.empty((B, n, ny, nx), dtype=cp.float32)
        if B * n:
            ref_of, indexed = self._sets(index)
            self._kernel("fused_maps")((B * n * self.plan.split,), (self.plan.threads,),
                                       src.args() + (refs.payload, np.int32(n),
                                        ref_of, np.int32(indexed), self._twiddles, out), shared_mem=self.plan.smem)
        return out

    def _locate(self, tiles, refs, index):
        return self._peaks(self._tiles(tiles), refs, index)

    def _peaks(self, src, refs, index):
        cp = self.xp
        B, n = src.count
        T = B * n
        y = cp.empty(T, dtype=cp.float64)
        x = cp.empty(T, dtype=cp.float64)
        value = cp.empty(T, dtype=cp.float32)
        border = cp.empty(T, dtype=cp.uint8)
        if T:
            wy, wx = self._lags if self._lags is not None else self._no_lags
            ref_of, indexed = self._sets(index)
            # every peak kernel's arguments up to the window compensation, then its own, then the outputs
            head = src.args() + (refs.payload, np.int32(n), ref_of, np.int32(indexed), self._twiddles, wy, wx,
                                 np.int32(self._lags is not None))
            out = (y, x, value, border)
            if self._grid:
                if self.config.subpixel == "dft":
                    sy, sx = self._spectra if self._spectra is not None else self._no_lags
                    name, own = "fused_dft", (sy, sx, np.float64(self._sums[0]), np.float64(self._sums[1]),
                                              self._steps, self._step_cs, np.int32(len(DFT_STEPS)),
                                              np.int32(DFT_MAX_MOVES))
                else:
                    name, own = "fused_upsampled", self._upsampled_tables() + (
                        np.int32(self.config.upsample), np.int32(UPSAMPLED_MAX_RECENTRE))
                self._kernel(name, src.raw)((T * self.plan.split,), (self.plan.threads,),
                                            head + own + (np.float64(SUBPIXEL_REACH),) + out,
                                            shared_mem=self.plan.grid_smem)
                return y, x, value, border.view(cp.bool_)
            self._kernel("fused_peaks", src.raw)((T * self.plan.split,), (self.plan.threads,),
                                                 head + (np.int32(_METHODS[self.config.subpixel]),) + out,
                                                 shared_mem=self.plan.smem)
        return y, x, value, border.view(cp.bool_)


register(FusedFFTEngine)
