"""Tensor-core correlation engine for window mode (GPU): implicit GEMMs on mma.sync and wgmma.

The correlation of window mode, ``C[dy, dx] = sum L[y, x] R[y + dy, x + dx]`` for
``|dy|, |dx| <= max_shift``, is one GEMM per reference subregion whose rows are (pattern,
dy), columns dx and depth (y, x) (``kernels/tensorcorr.cu`` spells it out): the pattern
operand is rows of the staged scan tiles, the reference operand a Toeplitz matrix built
from one reference row, both gathered from shared memory, never stored. Inputs are bf16
(default), fp16 (scaled per matrix to unit RMS) or tf32, or fp32 as three tf32 products
(``EngineConfig.precision``); sums are the tensor cores' fp32. On compute capability 9.0
(H100, H200), bf16 and fp16 with many patterns per reference subregion go instead to the
warpgroup GEMM of :mod:`ebsdxc.engines.tensor_wgmma` (the lags as rows, the patterns as
columns: ``kernels/tensorgemm.cu``); ``tensor_maps(gemm=...)`` chooses by hand.

Only the integer peak comes from those maps. The 3x3 neighbourhood is then summed again
from the float32 values (``EngineConfig.peak_precision``: fp32 or fp64 sums), the peak
climbs to a neighbour that beats it there (up to :data:`MAX_MOVES` steps), and the 3x3
fits of :mod:`ebsdxc.peaks` run on those exact values: subpixel offsets and peak heights
are those of an fp32 engine; what the precision can change is which of two lags of
nearly equal correlation is the peak.

The runner hands the engine whole patterns (:meth:`TensorEngine.match_rois`): the kernels
that read the scan's matrices prepare each value as they load it (:mod:`ebsdxc.engines.roi_tiles`),
and with bf16 inputs and one reference set the tile pass writes the packed scan operand
itself, so no float32 tile is written.

Serves window mode with the 3x3 subpixel methods, any tile shape and window the other
engines accept (columns of lags beyond 48 are split over blocks), every form (a pairing
of left and right matrices, as the definition-based kernels). Not served: ``dft`` and
``upsampled``, which need the whole spectrum (the FFT and fused engines), and full mode,
where FFTs cost less than the overlap.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np

from ..kernel_loader import NULL_POINTER, get_function
from . import tensor_wgmma
from .base import PEAK_PRECISIONS, PRECISIONS, EngineInfo, PeakResult
from .definition import Pairing, check_operands
from .pairing import PairingEngine
from .registry import register
from .roi_tiles import PackedBuffer, RoiTiles, check_roi_inputs, roi_tiles, source_args

__all__ = ["TensorEngine", "tensor_maps", "exact_peaks", "launch_shape", "right_layout", "DEFAULT_PRECISION",
           "MAX_MOVES"]

#: What ``precision = "auto"`` means here: the fastest input precision (fp16 needs a scaling pass,
#: 10-15% slower: BENCHMARKS.md), and with the exact neighbourhood every precision gave the fp32
#: engine's integer peak in 49,000 of 49,000 noisy simulated ROIs.
DEFAULT_PRECISION = "bf16"
#: Steps the exact peak may climb from the map's integer maximum.
MAX_MOVES = 4
#: Largest column tile count per block (8 lags each): the accumulators per thread.
_NT_MAX = 7
_PREC = {"fp32": 0, "tf32": 1, "bf16": 2, "fp16": 3}
_METHODS = {"none": 0, "parabolic": 1, "gaussian": 2, "quadratic": 3}
_SMEM_OPTIN = 227 * 1024


def _precision(config):
    """The input precision ``config`` asks of this engine (``"auto"``: :data:`DEFAULT_PRECISION`)."""
    return DEFAULT_PRECISION if config.precision == "auto" else config.precision


def _half(precision):
    return precision in ("bf16", "fp16")


@functools.lru_cache(maxsize=256)
def launch_shape(h, w, max_lag, n_rows_maps, precision, smem_limit=_SMEM_OPTIN, *, warps=None, yc=None,
                 mtw=None, stages=1):
    """How :func:`tensor_maps` launches for (h, w) tiles, lags ``max_lag`` and ``n_rows_maps``
    right matrices per left: a dict of warps, mtw (16-row tiles per warp), yc (L rows per
    chunk), nt (8-lag column tiles per block), col_blocks, row_blocks, wp (padded width), rs,
    lw (staged strides), lwt, cmin (packed L layout), stage (words per pipeline stage) and smem
    (bytes, ``stages`` of them). ``warps``, ``yc`` and ``mtw`` fix those (benchmarks);
    ValueError where nothing fits."""
    ry, rx = max_lag
    My, Mx = 2 * ry + 1, 2 * rx + 1
    half = _half(precision)
    ks = 16 if half else 8
    wp = -(-w // ks) * ks
    # Fragment loads of 8 rows by 4 lanes (ldmatrix: 8 rows of 16 bytes) hit distinct banks.
    rs = wp + 8 if half else wp + (36 - wp % 32) % 32
    epw = 2 if half else 1
    ntot = -(-Mx // 8)
    nt = -(-ntot // -(-ntot // _NT_MAX))
    col_blocks = -(-ntot // nt)
    lw = wp + nt * 8
    m_rows = n_rows_maps * My
    # Several small blocks per SM with one stage each beat fewer with two (H200, bf16 maps; 86
    # ROIs of 96x96 +-16 / 45 of 128x128 +-24, 50 patterns: 4 warps of 2 row tiles, 16 L rows a
    # chunk, one stage: 94.6k / 68.7k patterns/s; 2 warps of 4 tiles, 8 rows, two stages:
    # 77.1k / 41.8k; chunks of 4 rows restage the right rows too often: 69.3k / 47.1k): the
    # first shape of this order within a third of the SM's shared memory, else the first with
    # 8 rows or more, else the first that fits.
    order = [(4, 2, 16), (8, 1, 16), (4, 2, 8), (4, 1, 8), (2, 2, 8), (2, 1, 8), (1, 2, 8), (1, 1, 8),
             (4, 1, 4), (2, 1, 4), (1, 1, 4), (1, 1, 2), (1, 1, 1)]
    if warps is not None or yc is not None or mtw is not None:
        order = [(warps or 4, mtw or 2, yc or 16)]
    cap = 2 if not half else 4  # fp32's split operands take the registers of more row tiles
    passes = ((smem_limit // 3, 8), (smem_limit, 8), (smem_limit, 1)) if len(order) > 1 else ((smem_limit, 1),)
    for budget, least in passes:
        for nw, mt, c in order:
            mt = min(mt, cap)
            if c < min(least, h):
                continue
            if len(order) > 1 and (c > 1 and c >= 2 * h or nw > 1 and m_rows <= nw // 2 * mt * 16):
                continue  # chunks past the tile, or half the warps cover every row already
            bm = nw * mt * 16
            span = min(n_rows_maps, (bm - 1) // My + 2)
            rows = span * (c - 1) + min(bm, m_rows)
            stage = c * lw + rows * rs // epw
            stage = -(-stage // 4) * 4
            if stages * stage * 4 <= budget:
                return dict(warps=nw, mtw=mt, yc=c, nt=nt, col_blocks=col_blocks,
                            row_blocks=-(-m_rows // bm), wp=wp, rs=rs, lw=lw, lwt=wp + col_blocks * nt * 8,
                            cmin=rx - col_blocks * nt * 8 + 1, stage=stage, stages=stages,
                            smem=stages * stage * 4)
    raise ValueError(f"{h}x{w} tiles with lags up to {max_lag} do not fit the tensor engine's shared memory")


#: ``tc_exact``'s fewest blocks an SM, by sum precision (double: True). Float sums at 10 blocks
#: (48 registers) spill only outside the walk's three-row loop; double ones spill inside it
#: there, and at 8 (64 registers) took 0.76-0.93 of the time (H100, Nsight Compute,
#: 2026-11-28).
_PEAK_BLOCKS = {False: 10, True: 8}


def _peak_columns(w, exact64):
    """Columns a lane of ``tc_exact`` walks at once: one with double sums (whose registers would
    spill); with float sums, of one to three, those that leave the fewest lanes idle in the
    walks across a row, the most of them on a tie (96 pixels: 3, one walk; 128: 2, two walks).
    Four, which covered 128 pixels in one walk, spilled in the walk at 10 blocks an SM."""
    if exact64:
        return 1
    return min((_walked(w, n) - w, -n, n) for n in (1, 2, 3))[2]


def _walked(w, nj):
    """Columns ``tc_exact``'s walks across a row of ``w`` cover, ``nj`` columns a lane: whole
    walks of 32 ``nj``."""
    return -(-w // (32 * nj)) * 32 * nj


def _padded_width(w, nj, rx):
    """(lw, lc) of :func:`_padded_lefts`: the padded row's length (on 16 bytes) and its first
    column's offset."""
    return -(-(_walked(w, nj) + 2 * rx + 2) // 4) * 4, rx + 1


def _padded_lefts(lefts, nj, rx):
    """``tc_exact``'s zero-padded left matrices, (na, h + 4, lw) float32 with L[y, x] at
    [y + 2, x + lc], and (lw, lc): every L value its walks read, two rows past each edge and
    ``rx + 1`` columns past each walk of 32 ``nj`` columns, exists, so they read without tests."""
    import cupy as cp

    na, h, w = lefts.shape
    lw, lc = _padded_width(w, nj, rx)
    lp = cp.zeros((na, h + 4, lw), dtype=cp.float32)
    lp[:, 2:h + 2, lc:lc + w] = lefts
    return lp, lw, lc


#: Most threads of a ``tc_pack_right`` launch: its thread index is an int.
_PACK_THREADS = 2**31 - 1


def _pack(mats, precision, *, left, row_words, first_column=0, pad_rows=0):
    """Packed operand of ``kernels/tensorcorr.cu``'s ``tc_pack_left`` / ``tc_pack_right`` and the
    fp16 scale per matrix (None for the other precisions): left, (T, h, row_words) words, word j
    holding columns j + first_column (and the next, fp16/bf16); right, (T, h + 2 pad_rows,
    row_words) words of consecutive columns, zero rows above and below. Right matrices are
    float32 tiles or a :class:`~ebsdxc.engines.roi_tiles.RoiTiles` (prepared as they are read)."""
    import cupy as cp

    c_type, raw, src = source_args(mats)
    T = mats.n_matrices if raw else mats.shape[0]
    h, w = mats.tile_shape if raw else mats.shape[1:]
    if raw and not left:
        words = mats.packed_words(precision, row_words, pad_rows)
        if words is not None:  # the tile pass wrote it
            return words, None
    rows = h if left else h + 2 * pad_rows
    dst = cp.empty((T, rows, row_words), dtype=cp.uint32)
    scale = cp.empty(T, dtype=cp.float32) if precision == "fp16" else None
    if not T:
        return dst, scale
    if scale is not None:
        get_function("tensorcorr.cu", f"tc_scale<{c_type}, {raw}>")((T,), (256,), (*src, np.int32(h), np.int32(w),
                                                                                   scale))
    null = NULL_POINTER
    if left:
        fn = get_function("tensorcorr.cu", f"tc_pack_left<{_PREC[precision]}>")
        fn((T,), (256,), (mats, dst, null if scale is None else scale, np.int32(h), np.int32(w),
                          np.int32(row_words), np.int32(first_column)))
        return dst, scale
    vec = int(row_words % 4 == 0 and (raw or w % 4 == 0))  # rows on 16 bytes: vector stores (and loads)
    fn = get_function("tensorcorr.cu", f"tc_pack_right<{_PREC[precision]}, {vec}, {c_type}, {raw}>")
    per_matrix = rows * -(-row_words // 4)  # threads
    step = max(1, _PACK_THREADS // per_matrix)  # matrices a launch
    for t0 in range(0, T, step):
        t1 = min(T, t0 + step)
        items = (t1 - t0) * per_matrix
        fn((-(-items // 256),), (256,), (*src, np.int64(t0), dst[t0:t1], null if scale is None else scale[t0:t1],
                                         np.int32(items), np.int32(h), np.int32(w), np.int32(pad_rows),
                                         np.int32(row_words)))
    return dst, scale


@functools.cache
def _device_limits(device_id):
    """(multiprocessors, opt-in shared memory per block) of a device: CuPy's ``attributes``
    queries every attribute of the device, too much for each batch."""
    import cupy as cp

    attrs = cp.cuda.Device(device_id).attributes
    return int(attrs["MultiProcessorCount"]), int(attrs.get("MaxSharedMemoryPerBlockOptin", _SMEM_OPTIN))


def _sms():
    import cupy as cp

    return _device_limits(cp.cuda.Device().id)[0]


def _smem_limit():
    import cupy as cp

    return _device_limits(cp.cuda.Device().id)[1]


def _launch(h, w, max_lag, pairing, precision, *, shape=None, gemm=None):
    """How :func:`tensor_maps` runs a case: (GEMM plan, None) or (None, mma.sync launch shape),
    and the packed right operand's (row words, zero rows above and below)."""
    ry, rx = max_lag
    if gemm is not False and shape is None and tensor_wgmma.available():
        forced = gemm is not None
        plan = tensor_wgmma.plan(h, w, (ry, rx), pairing.nb, precision, _smem_limit(), na=pairing.na,
                                 sms=1 if forced else _sms(), shape=gemm if isinstance(gemm, tuple) else None,
                                 least=1 if forced else tensor_wgmma.MIN_RIGHTS)
        if plan is not None:
            return plan, None, (plan["wk"] // 2, 0)
    if gemm:
        raise ValueError("gemm needs a compute capability 9.0 GPU, bf16 or fp16 inputs and tiles whose "
                         "rows fit its shared memory")
    ls = launch_shape(h, w, (ry, rx), pairing.nb, precision, _smem_limit()) if shape is None else shape
    return None, ls, (ls["wp"] // (2 if _half(precision) else 1), ry)


def right_layout(tile_shape, max_lag, pairing, precision):
    """(row words, pad rows) of the packed right operand :func:`tensor_maps` makes for ``pairing``
    of ``tile_shape`` tiles: what the tile pass writes for it (:func:`~ebsdxc.engines.roi_tiles.roi_tiles`)."""
    return _launch(*tile_shape, tuple(max_lag), pairing, precision)[2]


def tensor_maps(lefts, rights, pairing, max_lag, precision=DEFAULT_PRECISION, *, out=None, shape=None,
                gemm=None):
    """Window-mode correlation maps on tensor cores.

    Parameters
    ----------
    lefts : (na, h, w) float32 CuPy array
    rights : (n_rights, h, w) float32 CuPy array or :class:`~ebsdxc.engines.roi_tiles.RoiTiles`
        Indexed as ``pairing`` says.
    pairing : :class:`~ebsdxc.engines.definition.Pairing`
    max_lag : (ry, rx)
        Largest |dy|, |dx|.
    precision : {"fp32", "tf32", "bf16", "fp16"}
        Inputs of the products (sums are fp32; fp32 is three tf32 products).
    out : CuPy array, optional
        ``(n_pairs, 2 ry + 1, 2 rx + 1)`` float32 to write into.
    shape : dict, optional
        Launch shape of the ``mma.sync`` kernel overriding :func:`launch_shape` (benchmarks).
    gemm : bool or (int, int), optional
        True: the wgmma GEMM of :mod:`ebsdxc.engines.tensor_wgmma` whatever the number of right
        matrices (ValueError where it cannot run), (mt, nn): the same with that block shape;
        False: the ``mma.sync`` kernel; None (default): the GEMM where it applies.

    Returns
    -------
    (n_pairs, 2 ry + 1, 2 rx + 1) float32 maps, lag (dy, dx) at (dy mod My, dx mod Mx), the
    layout of :func:`ebsdxc.engines.definition.correlate_maps`.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    lefts, rights, (ry, rx), out = check_operands(lefts, rights, pairing, max_lag, out)
    h, w = lefts.shape[1:]
    if pairing.n_pairs == 0:
        return out
    plan, ls, (row_words, pad_rows) = _launch(h, w, (ry, rx), pairing, precision, shape=shape, gemm=gemm)
    rp, sr = _pack(rights, precision, left=False, row_words=row_words, pad_rows=pad_rows)
    if plan is not None:
        lp, sl = _pack(lefts, precision, left=True, row_words=plan["lw"], first_column=-rx)
        return tensor_wgmma.maps(lp, sl, rp, sr, pairing, (h, w), (ry, rx), precision, out, plan)
    lp, sl = _pack(lefts, precision, left=True, row_words=ls["lwt"], first_column=ls["cmin"])
    fn = get_function("tensorcorr.cu", f"tc_maps<{_PREC[precision]}, {ls['mtw']}, {ls['nt']}>")
    fn.max_dynamic_shared_size_bytes = ls["smem"]
    null = NULL_POINTER
    args = (lp, rp, out, null if sl is None else sl, null if sr is None else sr, np.int32(h), np.int32(w),
            np.int32(ry), np.int32(rx), *pairing.as_struct(), np.int32(ls["rs"]), np.int32(ls["lw"]),
            np.int32(ls["lwt"]), np.int32(ls["yc"]), np.int32(ls["stage"]), np.int32(ls["stages"]))
    fn((pairing.na, ls["row_blocks"], ls["col_blocks"]), (32 * ls["warps"],), args, shared_mem=ls["smem"])
    return out


def exact_peaks(maps, lefts, rights, pairing, max_lag, method, window_lags=None, *, peak_precision="fp32",
                max_moves=MAX_MOVES):
    """Integer peaks of ``maps`` (from :func:`tensor_maps`), re-evaluated exactly and fitted.

    ``window_lags`` = (wy (2 ry + 3,), wx (2 rx + 3,)) float64 window autocorrelation by lag
    mod its length (one lag past the window), or None (no compensation). ``rights`` as
    :func:`tensor_maps` takes them. Returns (y, x, value, on_border) per map (float64,
    float64, float32, bool), value the exact correlation at the integer peak.
    """
    import cupy as cp

    if peak_precision not in PEAK_PRECISIONS:
        raise ValueError(f"peak_precision must be one of {', '.join(PEAK_PRECISIONS)}, got {peak_precision!r}")
    lefts = cp.ascontiguousarray(lefts, dtype=cp.float32)
    if not isinstance(rights, RoiTiles):
        rights = cp.ascontiguousarray(rights, dtype=cp.float32)
    c_type, raw, src = source_args(rights)
    maps = cp.ascontiguousarray(maps, dtype=cp.float32)
    na, h, w = lefts.shape
    ry, rx = max_lag
    T = pairing.n_pairs
    y = cp.empty(T, dtype=cp.float64)
    x = cp.empty(T, dtype=cp.float64)
    value = cp.empty(T, dtype=cp.float32)
    border = cp.empty(T, dtype=cp.uint8)
    if T:
        comp = window_lags is not None
        if comp:
            wy, wx = (cp.ascontiguousarray(a, dtype=cp.float64) for a in window_lags)
        else:
            wy, wx = cp.ones(2 * ry + 3), cp.ones(2 * rx + 3)
        exact64 = peak_precision == "fp64"
        nj, minb = _peak_columns(w, exact64), _PEAK_BLOCKS[exact64]
        lag = cp.empty((T, 2), dtype=cp.int32)
        sums = cp.empty((T, 9), dtype=cp.float64)
        lp, lw, lc = _padded_lefts(lefts, nj, rx)
        fn = get_function("tensorcorr.cu", f"tc_exact<{int(exact64)}, {nj}, {minb}, {c_type}, {raw}>")
        fn((T,), (128,), (maps, lp, np.int32(lw), np.int32(lc), *src, np.int32(h), np.int32(w), np.int32(ry),
                          np.int32(rx), *pairing.as_struct(), np.int32(max_moves), lag, sums))
        fn = get_function("tensorcorr.cu", f"tc_fit<{_METHODS[method]}>")
        fn((-(-T // 128),), (128,), (lag, sums, np.int32(T), np.int32(ry), np.int32(rx), wy, wx,
                                     np.int32(wy.size), np.int32(wx.size), np.int32(comp), y, x, value, border))
    return y, x, value, border.astype(bool)


class TensorEngine(PairingEngine):
    """n-to-mn window-mode correlation on tensor cores with exact peaks, CUDA only."""

    reads_rois = True

    info = EngineInfo("tensor", devices=("gpu",), modes=("window",),
                      subpixel=("quadratic", "gaussian", "parabolic", "none"), circular=False, method="tensor",
                      pairings=True, precisions=PRECISIONS, peak_precisions=PEAK_PRECISIONS,
                      summary="tensor-core implicit GEMM (window mode; fp16/bf16/tf32/fp32 inputs, exact peaks)")

    # Set by set from 16 patterns a set: each launch costs about 0.65 ms whether it holds 8 or 32
    # patterns, and one launch of gathered pairs runs at 34k patterns/s (H100, paper layout at
    # +-16, 2048 patterns in random sets: 10 a set 21.5k, 12 33.7k, 16-18 37.3k-37.7k, 25
    # 45.1k patterns/s set by set; BENCHMARKS.md, twenty-sixth session).
    group_min = 16

    def __init__(self, backend, tile_shape, config, *, window_1d=None):
        super().__init__(backend, tile_shape, config)
        self.precision = _precision(config)
        self._packed = PackedBuffer()
        if config.compensate and window_1d is not None:
            # One lag past the window each way: the 3x3 around a peak on the window's edge.
            self._lags = tuple(self._linear_lags(f, n + 2, r + 1) for f, n, r in
                               zip(window_1d, self.map_shape, self.max_lag))

    def release_memory(self):
        self._packed = PackedBuffer()

    def device_bytes_per_tile(self, *, own_references=False):
        # The packed right operand in the larger of its two layouts (the GEMM's, the mma.sync
        # kernel's), the maps, the exact neighbourhood and the results; the left operands are
        # per reference subregion, not per tile, unless each tile's is gathered (below).
        h, w = self.tile_shape
        ry, rx = self.max_lag
        scale = 4 if self.precision == "fp16" else 0
        _, ls, mma_layout = _launch(h, w, (ry, rx), Pairing.n_to_mn(1, 1), self.precision, gemm=False)
        own = 0
        if own_references:
            # _launches' pairs of gathered lefts (few patterns a set): the float32 copy, its
            # packed operand (mma.sync layout: one right matrix a pair) and tc_exact's padded copy.
            lw, _ = _padded_width(w, _peak_columns(w, self.config.peak_precision == "fp64"), rx)
            own = h * w * 4 + h * ls["lwt"] * 4 + scale + (h + 4) * lw * 4
        layouts = [mma_layout]
        with contextlib.suppress(ValueError):  # no GEMM here (another GPU, another precision)
            layouts.append(_launch(h, w, (ry, rx), Pairing.n_to_mn(1, tensor_wgmma.MIN_RIGHTS), self.precision,
                                   gemm=True)[2])
        # _pack's (rows + 2 pad rows, row words) uint32 words a matrix
        packed = max((h + 2 * pad_rows) * row_words * 4 for row_words, pad_rows in layouts)
        maps = (2 * ry + 1) * (2 * rx + 1) * 4
        peak = 8 + 9 * 8 + 8 + 8 + 4 + 2  # lag, the nine float64 sums, y, x, value, border (and as bool)
        statistics = 4 + 4 + 1 + 4  # mean, energy, status, and room for the runner's own copies
        result = 32  # displacement, peak height and status as the runner gets them
        return packed + maps + peak + statistics + result + scale + own

    # ------------------------------------------------------------------ self-description

    @classmethod
    def size_refusal(cls, tile_shape, config):
        if config.mode != "window":
            return None
        try:
            launch_shape(int(tile_shape[0]), int(tile_shape[1]), config.max_lag(tile_shape), 1, _precision(config))
        except ValueError as e:
            return str(e)
        return None

    @classmethod
    def fallback_rank(cls, case):
        return 3

    @classmethod
    def pairing_maps(cls, lefts, rights, pairing, config):
        return tensor_maps(lefts, rights, pairing, config.max_lag(tuple(lefts.shape[1:])), _precision(config))

    @classmethod
    def _variant_maps(cls, lefts, rights, pairing, max_lag, variant, out=None):
        return tensor_maps(lefts, rights, pairing, max_lag, DEFAULT_PRECISION, out=out)

    # ------------------------------------------------------------------ correlation

    def _correlate(self, lefts, rights, pairing):
        return tensor_maps(lefts, rights, pairing, self.max_lag, self.precision)

    def match_rois(self, patterns, origins, window, *, references=None, index=None) -> PeakResult:
        """Cut, prepare and correlate the ROIs of whole patterns, without writing the tiles.

        The result is :meth:`match`'s on the tiles that
        :func:`~ebsdxc.engines.gpu_ops.prepare_tiles_padded` cuts from ``patterns``, bit for
        bit: the packing and exact-peak kernels prepare each value as they load it
        (:mod:`ebsdxc.engines.roi_tiles`). Parameters as
        :meth:`ebsdxc.engines.fused.FusedFFTEngine.match_rois`.
        """
        origins, window = check_roi_inputs(patterns, origins, window, self.tile_shape)
        B, n = int(patterns.shape[0]), int(origins.shape[0])
        refs, idx = self._resolve_shape(B, n, references, index)
        packed = None
        if self.precision == "bf16" and idx is None and B:
            # One launch of all the tiles in order (_launches): the tile pass writes its right
            # operand, which is then never read back as float32 tiles.
            layout = right_layout(self.tile_shape, self.max_lag, Pairing.n_to_mn(n, B), "bf16")
            packed = (self._packed.get(B * n, self.tile_shape[0], *layout), *layout, "bf16")
        rt, energy, status = roi_tiles(patterns, origins, window, self.tile_shape, packed=packed)
        y, x, value, border = self._locate(rt, refs, idx)
        return self._assemble(y.reshape(B, n), x.reshape(B, n), value.reshape(B, n), border.reshape(B, n),
                              energy.reshape(B, n), status.reshape(B, n), refs, idx)

    def _locate(self, tiles, refs, index):
        xp = self.xp
        B, n = tiles.shape[:2]
        out = None
        for lefts, rights, pairing, sel in self._launches(tiles, refs, index):
            maps = self._correlate(lefts, rights, pairing)
            found = exact_peaks(maps, lefts, rights, pairing, self.max_lag, self.config.subpixel, self._lags,
                                peak_precision=self.config.peak_precision)
            if sel is None:
                return found
            if out is None:
                out = [xp.empty((B, n), dtype=a.dtype) for a in found]
            for o, a in zip(out, found):
                o[sel] = a.reshape(-1, n)
        return tuple(o.reshape(B * n) for o in out)


register(TensorEngine)
