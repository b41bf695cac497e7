"""The tensor-core engine: maps against a float64 oracle for every precision, size and pairing,
exact peaks against the CPU peak search, the engine against the direct engine (GPU); its
launch shapes and option rules (CPU)."""

import os

import numpy as np
import pytest
from scipy.signal import correlate, correlate2d

from ebsdxc.engines import ENGINES, EngineConfig
from ebsdxc.engines.base import PRECISIONS
from ebsdxc.engines.definition import Pairing
from ebsdxc.engines.tensor import TensorEngine, launch_shape
from ebsdxc.engines.tensor_wgmma import SHAPES

# Unit roundoff of each input precision (tf32 rounds to nearest-away, the others to nearest even;
# fp32 is three tf32 products, without the small-by-small term).
UNIT = {"fp32": 2.0 ** -21, "tf32": 2.0 ** -11, "bf16": 2.0 ** -8, "fp16": 2.0 ** -11}

# (h, w), (ry, rx), pairing: the EBSD layout, odd and non-square tiles, rows of maps that cross
# pattern boundaries, lag columns split over blocks (rx = 30: 61 columns), a wide flat tile, the
# 128x128 layout of realistic patterns, n-to-m.
CASES = [
    ((96, 96), (16, 16), Pairing.n_to_mn(3, 7)),
    ((37, 53), (5, 9), Pairing.n_to_mn(2, 11)),
    ((20, 31), (9, 15), Pairing.n_to_m(3, 4)),
    ((64, 64), (30, 30), Pairing.n_to_mn(1, 5)),
    ((9, 200), (4, 60), Pairing.n_to_mn(2, 3)),
    ((128, 128), (24, 24), Pairing.n_to_mn(2, 3)),
    ((5, 7), (1, 2), Pairing.n_to_mn(4, 1)),
]


def oracle(left, right, max_lag, method="direct"):
    """[ry + dy, rx + dx] = sum over the overlap of left[y, x] * right[y + dy, x + dx], float64
    (``method="fft"``: the same through float64 FFTs, 1e-13 of the terms' size off, for large tiles)."""
    h, w = left.shape
    a, b = right.astype(np.float64), left.astype(np.float64)
    full = correlate2d(a, b, mode="full") if method == "direct" else correlate(a, b, mode="full", method="fft")
    ry, rx = max_lag
    return full[h - 1 - ry:h + ry, w - 1 - rx:w + rx]


# ---------------------------------------------------------------- CPU: launch shapes and options

@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shape,lag,nb", [((96, 96), (16, 16), 50), ((256, 256), (64, 64), 1),
                                          ((9, 200), (4, 60), 3), ((512, 512), (128, 128), 2)])
def test_launch_shapes_fit_shared_memory(precision, shape, lag, nb):
    ls = launch_shape(*shape, lag, nb, precision)
    assert ls["smem"] <= 227 * 1024
    half = precision in ("bf16", "fp16")
    # Conflict-free fragment loads: 8 rows of 4 lanes on distinct banks.
    words = ls["rs"] // 2 if half else ls["rs"]
    banks = {(g * words + t) % 32 for g in range(8) for t in range(4)}
    assert len(banks) == 32
    assert ls["nt"] * 8 * ls["col_blocks"] >= 2 * lag[1] + 1
    assert ls["row_blocks"] * ls["warps"] * ls["mtw"] * 16 >= nb * (2 * lag[0] + 1)
    assert ls["lwt"] % 8 == 0 and ls["lw"] % 8 == 0 and ls["stage"] % 4 == 0  # 16-byte copies


@pytest.mark.parametrize("w", [1, 17, 32, 40, 64, 70, 96, 100, 128, 150, 192, 256, 300])
def test_exact_peak_columns_leave_fewest_lanes_idle(w):
    # tc_exact's columns a lane: double sums one; float sums one to three, the fewest idle lanes
    # over the row's walks of 32 lanes, the most columns on a tie (measured: 3 at 96, 2 at 128).
    from ebsdxc.engines.tensor import _peak_columns

    assert _peak_columns(w, True) == 1
    nj = _peak_columns(w, False)
    idle = {n: -(-w // (32 * n)) * 32 * n - w for n in (1, 2, 3)}
    assert nj in idle and idle[nj] == min(idle.values())
    assert all(n <= nj for n in idle if idle[n] == idle[nj])
    assert {96: 3, 128: 2, 64: 2, 32: 1}.get(w, nj) == nj


@pytest.mark.parametrize("shape,lag,nb", [((96, 96), (16, 16), 50), ((96, 96), (16, 16), 512),
                                          ((128, 128), (24, 24), 512), ((256, 256), (24, 24), 128),
                                          ((9, 200), (4, 60), 64), ((37, 53), (5, 9), 1000)])
def test_gemm_plans_fit(shape, lag, nb):
    from ebsdxc.engines import tensor_wgmma

    p = tensor_wgmma.plan(*shape, lag, nb, "bf16", 227 * 1024, na=86)
    assert p["smem"] <= 227 * 1024 and (p["mt"], p["nn"]) in tensor_wgmma.SHAPES
    ry, rx = lag
    assert p["blocks"][0] * 2 * p["mt"] * 64 >= (2 * ry + 1) * (2 * rx + 1)
    assert p["blocks"][1] * p["nn"] >= nb
    assert p["wk"] % 32 == 0 and p["wk"] % (16 * p["kb"]) == 0 and p["wk"] >= shape[1]  # atoms, batches
    assert p["lw"] % 4 == 0 and p["lw"] >= p["wk"] + 2 * rx  # 16-byte copies; every gathered word
    # The ring of left rows holds the rows a block's lags meet, the two rows copied ahead and
    # the further rows of a barrier's copies (rps - 1).
    span = min(2 * ry + 1, (2 * p["mt"] * 64 - 1) // (2 * rx + 1) + 2)
    assert p["ring"] & (p["ring"] - 1) == 0 and p["ring"] > span + p["rps"]


def test_gemm_plan_declines():
    from ebsdxc.engines import tensor_wgmma

    assert tensor_wgmma.plan(96, 96, (16, 16), 512, "tf32", 227 * 1024) is None
    assert tensor_wgmma.plan(96, 96, (16, 16), tensor_wgmma.MIN_RIGHTS - 1, "bf16", 227 * 1024) is None
    assert tensor_wgmma.plan(2048, 2048, (16, 16), 512, "bf16", 227 * 1024, na=86) is None  # rows too long
    # One reference ROI against 512 patterns: 36 blocks at most for 132 multiprocessors.
    assert tensor_wgmma.plan(96, 96, (16, 16), 512, "bf16", 227 * 1024, na=1) is None
    assert tensor_wgmma.plan(96, 96, (16, 16), 512, "bf16", 227 * 1024, na=1, sms=16) is not None


def test_options_name_the_tensor_engine():
    fft = ENGINES["fft"]
    why = fft.refusal((32, 32), EngineConfig(mode="window", max_shift=4, subpixel="quadratic", precision="bf16"),
                      gpu=True)
    assert "correlation.precision 'bf16' needs the 'tensor' engine" in why
    why = fft.refusal((32, 32), EngineConfig(mode="window", max_shift=4, subpixel="quadratic",
                                             peak_precision="fp64"), gpu=True)
    assert "correlation.peak_precision 'fp64'" in why and "'tensor'" in why
    why = TensorEngine.refusal((32, 32), EngineConfig(), gpu=True)
    assert "does not correlate in correlation.mode 'full'" in why
    why = TensorEngine.refusal((32, 32), EngineConfig(mode="window", max_shift=4), gpu=True)
    assert "correlation.subpixel 'dft'" in why
    assert TensorEngine.refusal((32, 32), EngineConfig(mode="window", max_shift=4, subpixel="quadratic",
                                                       precision="tf32"), gpu=False).startswith("the tensor engine")
    assert TensorEngine.supports((31, 45), EngineConfig(mode="window", max_shift=7, subpixel="gaussian"))
    with pytest.raises(ValueError, match="correlation.precision must be one of auto, fp32"):
        EngineConfig(precision="fp8")
    with pytest.raises(ValueError, match="correlation.peak_precision must be one of fp32, fp64"):
        EngineConfig(peak_precision="fp16")


# ---------------------------------------------------------------- GPU against the oracle

@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shape,lag,pairing", CASES, ids=lambda v: str(v) if not isinstance(v, Pairing) else "")
def test_maps_match_oracle(rng, precision, shape, lag, pairing):
    check_maps(rng, precision, shape, lag, pairing, gemm=False)


# The wgmma GEMM (Hopper): the cases above, right matrices over several blocks and a partial
# last block (70, 130), n-to-m with many rights, one lag (ry = rx = 0), a block of one lag row.
GEMM_CASES = CASES + [
    ((96, 96), (16, 16), Pairing.n_to_mn(2, 70)),
    ((33, 47), (7, 11), Pairing.n_to_m(2, 130)),
    ((24, 40), (0, 0), Pairing.n_to_mn(3, 9)),
    ((16, 300), (2, 100), Pairing.n_to_mn(1, 4)),
]


def _need_wgmma():
    from ebsdxc.engines import tensor_wgmma

    if not tensor_wgmma.available():
        pytest.skip("the wgmma GEMM needs a compute capability 9.0 GPU")


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ("bf16", "fp16"))
@pytest.mark.parametrize("shape,lag,pairing", GEMM_CASES, ids=lambda v: str(v) if not isinstance(v, Pairing) else "")
def test_gemm_maps_match_oracle(rng, precision, shape, lag, pairing):
    _need_wgmma()
    check_maps(rng, precision, shape, lag, pairing, gemm=True)


@pytest.mark.gpu
@pytest.mark.parametrize("rows_per_barrier", (1, 2))
@pytest.mark.parametrize("block", SHAPES)
def test_gemm_blocks_match_oracle(rng, monkeypatch, block, rows_per_barrier):
    # Every compiled block shape, with lags and right matrices over several blocks each, and
    # both stage barriers (an odd number of rows: 41 rows, 21 lags of dy).
    from ebsdxc.engines import tensor_wgmma

    _need_wgmma()
    monkeypatch.setattr(tensor_wgmma, "ROWS_PER_BARRIER", rows_per_barrier)
    tensor_wgmma.plan.cache_clear()
    try:
        check_maps(rng, "bf16", (41, 44), (10, 12), Pairing.n_to_mn(2, 150), gemm=block)
    finally:
        tensor_wgmma.plan.cache_clear()


def _rounded_bits(x, precision):
    """uint32 bits of float32 ``x`` as the tensor operands hold it (fp16/bf16: 16-bit values)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    if precision == "fp32":
        return u.astype(np.uint32)
    if precision == "tf32":  # nearest, ties away from zero
        return ((u + 0x1000) & 0xFFFFE000).astype(np.uint32)
    if precision == "bf16":  # nearest, ties to even
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32)
    return x.astype(np.float16).view(np.uint16).astype(np.uint32)


def _packed_oracle(mats, precision, *, left, row_words, first_column=0, pad_rows=0):
    T, h, w = mats.shape
    epw = 2 if precision in ("bf16", "fp16") else 1
    if precision == "fp16":
        ms = np.mean(mats.astype(np.float64) ** 2, axis=(1, 2))
        scale = np.where(ms > 0, 1.0 / np.sqrt(np.where(ms > 0, ms, 1.0)), 1.0).astype(np.float32)
        mats = mats * scale[:, None, None]
    rows = h + (0 if left else 2 * pad_rows)
    cols = (np.arange(row_words)[:, None] * (1 if left else epw) + np.arange(epw)[None, :]).ravel()
    cols = cols + first_column
    padded = np.zeros((T, rows, row_words * epw), np.float32)
    ok = (cols >= 0) & (cols < w)
    y0 = 0 if left else pad_rows
    padded[:, y0:y0 + h, ok] = mats[:, :, cols[ok]]
    bits = _rounded_bits(padded, precision).reshape(T, rows, row_words, epw)
    return bits[..., 0] | (bits[..., 1] << 16) if epw == 2 else bits[..., 0]


@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("left,h,w,row_words,first_column,pad_rows", [
    (False, 5, 16, 8, 0, 0),     # vector loads and stores, the wgmma GEMM's layout
    (False, 7, 10, 7, 0, 3),     # odd words, zero columns past w, zero rows: the mma.sync layout
    (False, 3, 12, 12, 0, 1),    # w a multiple of 4, more words than columns
    (True, 6, 9, 12, -3, 0),     # left: shifted columns
])
def test_pack_matches_numpy(rng, monkeypatch, precision, left, h, w, row_words, first_column, pad_rows):
    # Every packed word, from an oracle of the rounding rules; a launch limit small enough that
    # the right matrices take several launches.
    import cupy as cp

    from ebsdxc.engines import tensor

    monkeypatch.setattr(tensor, "_PACK_THREADS", 3 * (h + 2 * pad_rows) * -(-row_words // 4) + 1)
    mats = (10.0 * rng.standard_normal((11, h, w))).astype(np.float32)
    mats[4] = 0.0  # fp16 scale of an all-zero matrix: 1
    got, scale = tensor._pack(cp.asarray(mats), precision, left=left, row_words=row_words,
                              first_column=first_column, pad_rows=pad_rows)
    want = _packed_oracle(mats, precision, left=left, row_words=row_words, first_column=first_column,
                          pad_rows=pad_rows)
    np.testing.assert_array_equal(cp.asnumpy(got), want)
    assert (scale is None) == (precision != "fp16")


def check_maps(rng, precision, shape, lag, pairing, *, gemm):
    import cupy as cp

    from ebsdxc.engines.tensor import tensor_maps

    lefts = rng.standard_normal((pairing.na, *shape)).astype(np.float32)
    rights = (100.0 * rng.standard_normal((pairing.n_rights, *shape))).astype(np.float32)  # fp16 scaling
    maps = cp.asnumpy(tensor_maps(cp.asarray(lefts), cp.asarray(rights), pairing, lag, precision, gemm=gemm))
    got = np.fft.fftshift(maps, axes=(-2, -1))
    u = UNIT[precision]
    worst = 0.0
    for a in range(pairing.na):
        for b in range(pairing.nb):
            r = rights[a * pairing.rs_a + b * pairing.rs_b]
            want = oracle(lefts[a], r, lag, "fft")
            bound = oracle(np.abs(lefts[a]), np.abs(r), lag, "fft")  # sum |L||R|: rounding scales with it
            g = got[a * pairing.os_a + b * pairing.os_b]
            # inputs rounded (2u) plus the tensor cores' fp32 sums (which truncate), against the
            # size of the terms summed
            err = np.abs(g - want) / (2.2 * u * bound + 1e-5 * bound.max())
            worst = max(worst, err.max())
    assert worst <= 1.0, worst


@pytest.mark.gpu
def test_gemm_is_the_default_for_many_rights(rng, monkeypatch):
    # On Hopper a left matrix with MIN_RIGHTS right matrices or more goes to the GEMM, fewer to
    # the mma.sync kernel (both sum a row's 16-pixel steps in the same order: the maps alone
    # cannot tell them apart, so the GEMM's launches are counted).
    import cupy as cp

    from ebsdxc.engines import tensor_wgmma
    from ebsdxc.engines.tensor import tensor_maps

    _need_wgmma()
    launches = []
    run = tensor_wgmma.maps
    monkeypatch.setattr(tensor_wgmma, "maps", lambda *a, **k: launches.append(1) or run(*a, **k))
    na = cp.cuda.Device().attributes["MultiProcessorCount"]  # a block per left: enough to fill the GPU
    for nb, gemm in ((tensor_wgmma.MIN_RIGHTS, True), (tensor_wgmma.MIN_RIGHTS - 1, False)):
        p = Pairing.n_to_mn(na, nb)
        lefts = cp.asarray(rng.standard_normal((na, 48, 48)).astype(np.float32))
        rights = cp.asarray(rng.standard_normal((na * nb, 48, 48)).astype(np.float32))
        before = len(launches)
        tensor_maps(lefts, rights, p, (8, 8), "bf16")
        assert len(launches) - before == int(gemm)


@pytest.mark.gpu
def test_precisions_order_by_error(rng):
    # The bound above could hide a precision computed in another: the errors must order as the inputs.
    import cupy as cp

    from ebsdxc.engines.tensor import tensor_maps

    p = Pairing.n_to_mn(2, 5)
    lefts = rng.standard_normal((2, 48, 48)).astype(np.float32)
    rights = rng.standard_normal((10, 48, 48)).astype(np.float32)
    want = np.stack([oracle(lefts[t % 2], rights[t], (8, 8)) for t in range(10)])
    err = {}
    for prec in PRECISIONS:
        got = np.fft.fftshift(cp.asnumpy(tensor_maps(cp.asarray(lefts), cp.asarray(rights), p, (8, 8), prec)),
                              axes=(-2, -1))
        err[prec] = np.sqrt(np.mean((got - want) ** 2))
    # fp32 is three tf32 products summed by the tensor cores (whose fp32 sums truncate): 20x closer
    # than tf32 on an H200, not IEEE fp32 (the peaks are re-evaluated in fp32 or fp64 anyway)
    assert err["fp32"] < err["tf32"] / 10
    assert err["fp32"] < err["fp16"] / 10
    assert err["fp16"] < err["bf16"] / 4
    assert err["tf32"] < err["bf16"] / 4


def _shifted_pairs(rng, n, shape, lag, shifts=None):
    """Reference tiles and scan tiles shifted by known integer lags inside the window (random,
    or the (n, 2) ``shifts``)."""
    from ebsdxc.preprocess import window_2d

    h, w = shape
    ry, rx = lag
    big = rng.standard_normal((n, h + 2 * ry + 2, w + 2 * rx + 2))
    from scipy.ndimage import gaussian_filter

    big = np.stack([gaussian_filter(b, 1.5) for b in big])
    win = window_2d(shape)
    if shifts is None:
        shifts = np.stack([rng.integers(-ry + 1, ry, n), rng.integers(-rx + 1, rx, n)], axis=1)
    lefts, rights = [], []
    for i in range(n):
        cy, cx = ry + 1, rx + 1
        l0 = big[i, cy:cy + h, cx:cx + w]
        dy, dx = shifts[i]
        r0 = big[i, cy - dy:cy - dy + h, cx - dx:cx - dx + w] + 0.05 * rng.standard_normal(shape)  # R[y] = L[y - dy]
        lefts.append((l0 - l0.mean()) * win)
        rights.append((r0 - r0.mean()) * win)
    return np.asarray(lefts, np.float32), np.asarray(rights, np.float32), shifts


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["quadratic", "gaussian", "parabolic", "none"])
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("peak_precision", ["fp32", "fp64"])
def test_exact_peaks_match_cpu_peaks(rng, method, precision, peak_precision):
    # The subpixel peak of every precision is the float64 oracle's: the map only picks the lag.
    import cupy as cp

    from ebsdxc.engines.tensor import exact_peaks, tensor_maps
    from ebsdxc.peaks import locate_peaks

    lag = (7, 9)
    lefts, rights, shifts = _shifted_pairs(rng, 40, (33, 41), lag)
    p = Pairing.n_to_mn(40, 1)
    maps = tensor_maps(cp.asarray(lefts), cp.asarray(rights), p, lag, precision)
    y, x, value, border = (cp.asnumpy(a) for a in exact_peaks(maps, cp.asarray(lefts), cp.asarray(rights), p, lag,
                                                              method, peak_precision=peak_precision))
    want = np.fft.ifftshift(np.stack([oracle(lefts[i], rights[i], lag) for i in range(40)]), axes=(-2, -1))
    wy, wx, wv, wb = locate_peaks(want, max_lag=lag, method=method)
    np.testing.assert_array_equal(border, wb)
    if method == "none":  # the integer peaks are the shifts the pairs were made with
        np.testing.assert_array_equal(y, shifts[:, 0])
        np.testing.assert_array_equal(x, shifts[:, 1])
    tol = 1e-8 if peak_precision == "fp64" else 2e-4
    np.testing.assert_allclose(y, wy, atol=tol, rtol=0, equal_nan=True)
    np.testing.assert_allclose(x, wx, atol=tol, rtol=0, equal_nan=True)
    assert np.isfinite(y).mean() > 0.9
    np.testing.assert_allclose(value, wv, rtol=1e-7 if peak_precision == "fp64" else 1e-6)  # value is float32


@pytest.mark.gpu
@pytest.mark.parametrize("peak_precision", ["fp32", "fp64"])
@pytest.mark.parametrize("shape", [(40, 17), (32, 70), (32, 100), (30, 128), (24, 150)])
def test_exact_values_every_width(rng, shape, peak_precision):
    # Rows of one to three 32-pixel columns a lane, and of more than one walk (100 to 150): the integer
    # peak and the exact value there are the float64 oracle's (its top two lags 2.5% apart or
    # more; on tiles this small the window moves some peaks off the shift they were made with).
    import cupy as cp

    from ebsdxc.engines.tensor import exact_peaks, tensor_maps

    lag = (4, 5)
    lefts, rights, _ = _shifted_pairs(rng, 6, shape, lag)
    p = Pairing.n_to_mn(6, 1)
    maps = tensor_maps(cp.asarray(lefts), cp.asarray(rights), p, lag, "bf16")
    y, x, value, _ = (cp.asnumpy(a) for a in exact_peaks(maps, cp.asarray(lefts), cp.asarray(rights), p, lag,
                                                          "none", peak_precision=peak_precision))
    want = [oracle(lefts[i], rights[i], lag) for i in range(6)]
    peaks = np.array([np.unravel_index(np.argmax(m), m.shape) for m in want]) - np.array(lag)
    np.testing.assert_array_equal(np.stack([y, x], axis=1), peaks)
    np.testing.assert_allclose(value, [m.max() for m in want], rtol=1e-7 if peak_precision == "fp64" else 1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("peak_precision", ["fp32", "fp64"])
@pytest.mark.parametrize("shape", [(36, 30), (33, 70), (33, 100), (24, 150)])
def test_exact_peaks_on_the_window_edge(rng, shape, peak_precision):
    # Peaks on the window's corners and edges: their 3x3 reaches a lag past the window, so the
    # exact sums read the left matrix's padding as far as it goes (rows two past each edge,
    # rx + 1 columns past each walk; one to three columns a lane, several walks at 100 and 150).
    # Fits and values are the float64 oracle's, for the pairs whose oracle maximum is the shift
    # they were made with (the window moves a few on small tiles).
    import cupy as cp

    from ebsdxc.engines.tensor import exact_peaks, tensor_maps
    from ebsdxc.peaks import fit_3x3

    lag = (4, 5)
    shifts = np.array([(sy * lag[0], sx * lag[1]) for sy in (-1, 0, 1) for sx in (-1, 0, 1) if sy or sx])
    n = len(shifts)
    lefts, rights, _ = _shifted_pairs(rng, n, shape, lag, shifts)
    p = Pairing.n_to_mn(n, 1)
    maps = tensor_maps(cp.asarray(lefts), cp.asarray(rights), p, lag, "bf16")
    y, x, value, border = (cp.asnumpy(a) for a in exact_peaks(maps, cp.asarray(lefts), cp.asarray(rights), p, lag,
                                                              "quadratic", peak_precision=peak_precision))
    wide = np.stack([oracle(lefts[i], rights[i], (lag[0] + 1, lag[1] + 1)) for i in range(n)])
    top = np.array([np.unravel_index(np.argmax(m[1:-1, 1:-1]), m[1:-1, 1:-1].shape) for m in wide]) - np.array(lag)
    keep = (top == shifts).all(axis=1)
    assert keep.sum() >= 6
    cy, cx = shifts[:, 0] + lag[0] + 1, shifts[:, 1] + lag[1] + 1
    neigh = np.stack([wide[i, cy[i] - 1:cy[i] + 2, cx[i] - 1:cx[i] + 2] for i in range(n)])
    dy, dx = fit_3x3(neigh, "quadratic")
    assert border[keep].all()
    tol = 1e-8 if peak_precision == "fp64" else 2e-4
    np.testing.assert_allclose(y[keep], (shifts[:, 0] + dy)[keep], atol=tol, rtol=0)
    np.testing.assert_allclose(x[keep], (shifts[:, 1] + dx)[keep], atol=tol, rtol=0)
    np.testing.assert_allclose(value[keep], neigh[keep, 1, 1], rtol=1e-7 if peak_precision == "fp64" else 1e-6)


@pytest.mark.gpu
def test_peak_climbs_to_the_exact_maximum(rng):
    # A map whose maximum sits one lag off the true peak (as a rounding near-tie would put it):
    # the exact neighbourhood moves the peak back; with no moves allowed it stays.
    import cupy as cp

    from ebsdxc.engines.tensor import exact_peaks

    lag = (6, 6)
    lefts, rights, shifts = _shifted_pairs(rng, 8, (32, 32), lag)
    p = Pairing.n_to_mn(8, 1)
    maps = np.stack([oracle(lefts[i], rights[i], lag) for i in range(8)])
    for i, (dy, dx) in enumerate(shifts):
        maps[i, lag[0] + dy + 1, lag[1] + dx - 1] = 2 * maps.max()  # a neighbour diagonal to the peak
    dev = cp.asarray(np.fft.ifftshift(maps, axes=(-2, -1)).astype(np.float32))
    args = (cp.asarray(lefts), cp.asarray(rights), p, lag, "quadratic")
    y, x, _, _ = (cp.asnumpy(a) for a in exact_peaks(dev, *args))
    np.testing.assert_array_equal(np.round(y), shifts[:, 0])
    np.testing.assert_array_equal(np.round(x), shifts[:, 1])
    y0, x0, _, _ = (cp.asnumpy(a) for a in exact_peaks(dev, *args, max_moves=0))
    # fitted about the wrong lag: within a lag of it, or no fit at all (NaN)
    assert not np.any(np.abs(y0 - (shifts[:, 0] + 1)) >= 1.01) and not np.any(np.abs(x0 - (shifts[:, 1] - 1)) >= 1.01)
    assert not np.allclose(y0, y)


def _match_sample(sample_dir, engine, config, index=None, sets=1):
    from ebsdxc.backend import select_backend
    from ebsdxc.engines import make_engine
    from ebsdxc.io import open_scan, read_reference
    from ebsdxc.preprocess import prepare_tiles, window_1d, window_2d
    from ebsdxc.rois import extract_tiles, grid_layout

    be = select_backend("cuda")
    xp = be.xp
    with open_scan(os.path.join(sample_dir, "scan.h5")) as src:
        pats = src.read(0, src.n_patterns)
    ref = read_reference(os.path.join(sample_dir, "ref.tif"))
    size = 40
    lay = grid_layout(pats.shape[1:], grid=(5, 5), size=size)
    win = window_2d((size, size), xp=xp)
    rt, re, rs = prepare_tiles(extract_tiles(xp.asarray(ref, dtype=xp.float32)[None], lay, xp)[0], win, xp)
    t, e, s = prepare_tiles(extract_tiles(xp.asarray(pats, dtype=xp.float32), lay, xp), win, xp)
    eng = make_engine(engine, be, (size, size), config, window_1d=(window_1d(size), window_1d(size)))
    # K sets: the reference and copies of scan patterns, so each set matches differently.
    refs = eng.prepare_references(xp.concatenate([rt[None], t[1:sets]]), xp.concatenate([re[None], e[1:sets]]),
                                  xp.concatenate([rs[None], s[1:sets]]))
    r = eng.match(t, e, s, references=refs, index=index)
    return [be.asnumpy(a) for a in (r.displacement, r.peak_height, r.status)]


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["quadratic", "gaussian", "parabolic", "none"])
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_engine_matches_direct_engine(sample_dir, method, precision):
    cfg = dict(mode="window", max_shift=6, subpixel=method)
    d0, h0, s0 = _match_sample(sample_dir, "direct", EngineConfig(**cfg))
    d1, h1, s1 = _match_sample(sample_dir, "tensor", EngineConfig(**cfg, precision=precision))
    np.testing.assert_array_equal(s1, s0)
    # the direct engine's float32 sums are the looser side (3e-5 px from the exact neighbourhood)
    np.testing.assert_allclose(d1, d0, atol=1e-4, equal_nan=True)
    np.testing.assert_allclose(h1, h0, atol=1e-5, equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("grouped", [True, False])
def test_engine_with_reference_sets_matches_direct_engine(sample_dir, grouped, monkeypatch):
    # Patterns grouped by set (several per set) and gathered pairs (each pattern its own set).
    if grouped:  # these small tiles would be gathered: lower the work a grouped launch needs
        monkeypatch.setattr("ebsdxc.engines.pairing.GROUP_FMAS", 0)
    n = 100
    index = np.arange(n) % 3 if grouped else np.arange(n) % 50
    sets = 3 if grouped else 50
    cfg = dict(mode="window", max_shift=6, subpixel="quadratic")
    d0, h0, s0 = _match_sample(sample_dir, "direct", EngineConfig(**cfg), index, sets)
    d1, h1, s1 = _match_sample(sample_dir, "tensor", EngineConfig(**cfg), index, sets)
    np.testing.assert_array_equal(s1, s0)
    np.testing.assert_allclose(d1, d0, atol=1e-4, equal_nan=True)
    np.testing.assert_allclose(h1, h0, atol=1e-5, equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("precision,gemm", [("bf16", False), ("fp16", False), ("tf32", False), ("bf16", True),
                                            ("fp16", True)])
def test_real_patterns_match_the_cpu_engine(precision, gemm, monkeypatch):
    # kikuchipy's 3x3 Ni scan (real patterns, 60x60): nine 24 px ROIs against point 0, window +-6,
    # against the float64 FFT engine on the CPU; nine patterns a reference ROI take the mma.sync
    # kernel unless the wgmma GEMM is allowed for so few.
    from real_patterns import ni_tiles

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import make_engine, tensor_wgmma
    from ebsdxc.preprocess import window_1d

    launches = []
    if gemm:  # nine ROIs against nine patterns: allowed onto the GEMM, which must then run
        _need_wgmma()
        monkeypatch.setattr(tensor_wgmma, "MIN_RIGHTS", 1)
        monkeypatch.setattr("ebsdxc.engines.tensor._sms", lambda: 1)
        run = tensor_wgmma.maps
        monkeypatch.setattr(tensor_wgmma, "maps", lambda *a, **k: launches.append(1) or run(*a, **k))

    size = 24
    tp, en, status = ni_tiles(size)
    out = []
    for device, engine in (("cpu", "fft"), ("cuda", "tensor")):
        be = select_backend(device)
        xp = be.xp
        cfg = EngineConfig(mode="window", max_shift=6, subpixel="quadratic",
                           precision=precision if engine == "tensor" else "auto")
        eng = make_engine(engine, be, (size, size), cfg, window_1d=(window_1d(size), window_1d(size)))
        eng.set_reference(xp.asarray(tp[0]), xp.asarray(en[0]), xp.asarray(status[0]))
        r = eng.match(xp.asarray(tp), xp.asarray(en), xp.asarray(status))
        out.append([be.asnumpy(a) for a in (r.displacement, r.peak_height, r.status)])
    (d0, h0, s0), (d1, h1, s1) = out
    assert bool(launches) == gemm
    np.testing.assert_array_equal(s1, s0)
    assert (s0 == 0).mean() > 0.7
    assert np.nanmax(np.abs(d0)) > 0.1  # the points do move against point 0
    np.testing.assert_allclose(d1, d0, atol=1e-4, equal_nan=True)
    np.testing.assert_allclose(h1, h0, atol=1e-5, equal_nan=True)


# ------------------------------------------------ ROIs read from whole patterns (match_rois)

def _tensor_engine(tile, shift, method="quadratic", precision="bf16", peak_precision="fp32"):
    from ebsdxc.backend import select_backend
    from ebsdxc.engines import make_engine
    from ebsdxc.preprocess import window_1d

    cfg = EngineConfig(mode="window", max_shift=shift, subpixel=method, precision=precision,
                       peak_precision=peak_precision)
    return make_engine("tensor", select_backend("cuda"), tile, cfg, window_1d=(window_1d(tile[0]), window_1d(tile[1])))


def _force_gemm(monkeypatch, launches):
    # Few patterns a reference ROI, onto the GEMM all the same (which must then run).
    from ebsdxc.engines import tensor_wgmma

    _need_wgmma()
    monkeypatch.setattr(tensor_wgmma, "MIN_RIGHTS", 1)
    monkeypatch.setattr("ebsdxc.engines.tensor._sms", lambda: 1)
    run = tensor_wgmma.maps
    monkeypatch.setattr(tensor_wgmma, "maps", lambda *a, **k: launches.append(1) or run(*a, **k))


def _count_tile_pass_operands(monkeypatch):
    # How often the right operand came from the tile pass (bf16, one launch of all tiles).
    from ebsdxc.engines.roi_tiles import RoiTiles

    used = []
    words = RoiTiles.packed_words
    monkeypatch.setattr(RoiTiles, "packed_words",
                        lambda self, *a: (lambda got: used.append(got is not None) or got)(words(self, *a)))
    return used


@pytest.mark.gpu
@pytest.mark.parametrize("tile,shift,precision,peak_precision,gemm", [
    ((64, 64), 16, "bf16", "fp32", True), ((41, 44), 10, "fp16", "fp64", True),
    ((37, 53), 5, "bf16", "fp64", False), ((37, 53), 5, "fp16", "fp32", False), ((24, 20), 6, "tf32", "fp64", False),
    ((30, 33), 4, "fp32", "fp32", False)])
def test_rois_from_patterns_are_the_prepared_tiles_bit_for_bit(rng, monkeypatch, tile, shift, precision,
                                                              peak_precision, gemm):
    """The packing and exact-peak kernels prepare each value as they load it, from the tile
    pass's own float mean, and with bf16 the tile pass writes the packed operand itself: every
    packed word, map and exact sum is the one of the prepared tiles, so match_rois equals match()
    on prepare_tiles_padded's tiles exactly, on the GEMM and on the mma.sync kernel, for every
    input precision."""
    from roi_patterns import rois_both_ways, with_reference

    launches = []
    if gemm:
        _force_gemm(monkeypatch, launches)
    from_tile_pass = _count_tile_pass_operands(monkeypatch)
    eng = _tensor_engine(tile, shift, precision=precision, peak_precision=peak_precision)
    pats, origins, window = with_reference(eng, rng, 5, 7, tile, np.uint16)
    got, want = rois_both_ways(eng, pats, origins, window)
    assert bool(launches) == gemm
    assert from_tile_pass == [precision == "bf16"]
    assert (want[2] == 0).mean() > 0.5  # most peaks found: the comparison is not of NaNs
    for g, wnt in zip(got, want):
        np.testing.assert_array_equal(g, wnt)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.int32, np.float32, np.float64, np.int64])
@pytest.mark.parametrize("grouped", [None, True, False])
def test_rois_from_patterns_of_every_dtype_and_reference_set(rng, monkeypatch, dtype, grouped):
    """Each pattern dtype has its own kernels (int64, which has none, is read as float32); tiles
    that prepare_tiles rejects (a NaN, a constant area) come back with its status and NaN (and
    zeros in the operand the tile pass writes); one reference set (``grouped`` None: the tile
    pass writes the bf16 operand), or two, the patterns matched set by set (a launch each: the
    ROIs of selected patterns) or as gathered pairs."""
    from roi_patterns import assert_spoiled_rejected, rois_both_ways, spoil, two_reference_sets, with_reference

    monkeypatch.setattr("ebsdxc.engines.pairing.GROUP_FMAS", 0 if grouped else 2 ** 62)
    monkeypatch.setattr("ebsdxc.engines.tensor.TensorEngine.group_min", 1)  # 4 patterns a set
    from_tile_pass = _count_tile_pass_operands(monkeypatch)
    tile = (24, 20)
    eng = _tensor_engine(tile, 6)
    pats, origins, window = with_reference(eng, rng, 8, 6, tile, dtype, side=64)
    spoil(pats, origins, tile)
    refs, index = None, None
    if grouped is not None:
        refs, index = two_reference_sets(eng, pats, origins, window), np.array([0, 1, 1, 0, 1, 0, 0, 1])
    got, want = rois_both_ways(eng, pats, origins, window, index=index, references=refs)
    assert any(from_tile_pass) == (grouped is None)
    for g, wnt in zip(got, want):
        np.testing.assert_array_equal(g, wnt)
    assert_spoiled_rejected(got[2], got[0], 30, nan=np.dtype(dtype).kind == "f")


@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("pad_rows,row_words", [(0, 16), (3, 15)])
def test_rois_pack_as_their_prepared_tiles(rng, monkeypatch, precision, pad_rows, row_words):
    """Every packed word (and fp16 scale) of selected patterns' ROIs, read from the patterns,
    is that of the tiles prepare_tiles_padded writes, over several launches."""
    import cupy as cp
    from roi_patterns import patterns_and_origins

    from ebsdxc.engines import tensor
    from ebsdxc.engines.gpu_ops import prepare_tiles_padded
    from ebsdxc.engines.roi_tiles import roi_tiles
    from ebsdxc.preprocess import window_2d

    tile = (13, 30)
    monkeypatch.setattr(tensor, "_PACK_THREADS", 5 * (tile[0] + 2 * pad_rows) * -(-row_words // 4) + 1)
    pats, origins = patterns_and_origins(rng, 6, 4, tile, np.uint8, side=50)
    window = window_2d(tile, xp=cp)
    dev = cp.asarray(pats)
    frames = cp.zeros((6 * 4, *tile), cp.float32)
    prepare_tiles_padded(dev, cp.asarray(origins), tile, window, frames)
    sel = np.array([4, 1, 5])
    prepared = frames.reshape(6, 4, *tile)[cp.asarray(sel)].reshape(-1, *tile)
    rt = roi_tiles(dev, origins, window, tile)[0].select(cp.asarray(sel))
    assert rt.shape == (3, 4, *tile) and rt.n_matrices == 12
    got, got_scale = tensor._pack(rt, precision, left=False, row_words=row_words, pad_rows=pad_rows)
    want, want_scale = tensor._pack(prepared, precision, left=False, row_words=row_words, pad_rows=pad_rows)
    np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(want))
    np.testing.assert_array_equal(cp.asnumpy(got), _packed_oracle(cp.asnumpy(prepared), precision, left=False,
                                                                  row_words=row_words, pad_rows=pad_rows))
    if precision == "fp16":
        np.testing.assert_array_equal(cp.asnumpy(got_scale), cp.asnumpy(want_scale))
    if precision == "bf16":  # the tile pass writing the operand, a constant tile among them
        from ebsdxc.engines.roi_tiles import PackedBuffer

        x0, y0 = origins[2]
        pats[3, y0:y0 + tile[0], x0:x0 + tile[1]] = 7
        dev = cp.asarray(pats)
        prepare_tiles_padded(dev, cp.asarray(origins), tile, window, frames)
        buf = PackedBuffer()
        # a batch before left values in the h x w corners: the pass writes every one of them,
        # and nothing else (the padding stays as the buffer keeps it, zero)
        buf.get(30, tile[0], row_words, pad_rows).view(cp.uint16)[:, pad_rows:pad_rows + tile[0], :tile[1]] = 0xFFFF
        words = buf.get(24, tile[0], row_words, pad_rows)
        rt, _, status = roi_tiles(dev, origins, window, tile, packed=(words, row_words, pad_rows, "bf16"))
        assert int(status[3 * 4 + 2]) != 0
        assert rt.packed_words("bf16", row_words, pad_rows) is not None
        assert rt.packed_words("bf16", row_words + 1, pad_rows) is None
        assert rt.select(cp.asarray(sel)).packed_words("bf16", row_words, pad_rows) is None
        np.testing.assert_array_equal(cp.asnumpy(words), _packed_oracle(cp.asnumpy(frames), "bf16", left=False,
                                                                         row_words=row_words, pad_rows=pad_rows))


@pytest.mark.gpu
@pytest.mark.parametrize("gemm", [False, True])
def test_rois_from_real_patterns_match_the_cpu_float64_engine(monkeypatch, gemm):
    """kikuchipy's real Ni patterns in their stored uint8, nine 24 px ROIs read straight from
    the patterns by the kernels, against the float64 FFT engine on the CPU's prepared tiles."""
    import cupy as cp
    from real_patterns import ni_patterns

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import make_engine
    from ebsdxc.preprocess import prepare_tiles, window_1d, window_2d
    from ebsdxc.rois import extract_tiles, grid_layout

    launches = []
    if gemm:
        _force_gemm(monkeypatch, launches)
    size = 24
    pats = ni_patterns()
    layout = grid_layout(pats.shape[1:], grid=(3, 3), size=size)
    tp, en, status = prepare_tiles(extract_tiles(pats.astype(np.float32), layout, dtype=np.float32),
                                   window_2d((size, size)))
    cfg = EngineConfig(mode="window", max_shift=6, subpixel="quadratic")
    cpu = make_engine("fft", select_backend("cpu"), (size, size), cfg, window_1d=(window_1d(size), window_1d(size)))
    cpu.set_reference(tp[0], en[0], status[0])
    want = cpu.match(tp, en, status)
    eng = _tensor_engine((size, size), 6)
    eng.set_reference(cp.asarray(tp[0]), cp.asarray(en[0]), cp.asarray(status[0]))
    got = eng.match_rois(cp.asarray(pats), np.asarray(layout.origins, dtype=np.int32),
                         window_2d((size, size), xp=cp))
    assert bool(launches) == gemm
    np.testing.assert_array_equal(got.status.get(), want.status)
    assert (want.status == 0).mean() > 0.7 and np.nanmax(np.abs(want.displacement)) > 0.1
    np.testing.assert_allclose(got.displacement.get(), want.displacement, atol=1e-4, equal_nan=True)
    np.testing.assert_allclose(got.peak_height.get(), want.peak_height, atol=1e-5, equal_nan=True)


@pytest.mark.gpu
def test_release_memory_gives_back_the_operand_buffer(rng):
    """The bf16 operand buffer the tile pass writes is kept between batches (its padding zeroed
    once) and given back by release_memory, as the runner calls it after running out of memory."""
    import cupy as cp
    from roi_patterns import with_reference

    tile = (40, 40)
    eng = _tensor_engine(tile, 8)
    pats, origins, window = with_reference(eng, rng, 64, 9, tile, np.uint16, side=128)
    dev = cp.asarray(pats)
    pool = cp.get_default_memory_pool()
    first = eng.match_rois(dev, origins, window)
    cp.cuda.Device().synchronize()
    kept = pool.used_bytes()
    again = eng.match_rois(dev, origins, window)
    np.testing.assert_array_equal(again.displacement.get(), first.displacement.get())
    eng.release_memory()
    cp.cuda.Device().synchronize()
    assert pool.used_bytes() <= kept - 64 * 9 * 40 * 40 * 2  # at least the operand's bf16 values
    after = eng.match_rois(dev, origins, window)
    np.testing.assert_array_equal(after.displacement.get(), first.displacement.get())


@pytest.mark.gpu
@pytest.mark.parametrize("own", (False, True), ids=("one-set", "own-sets"))
@pytest.mark.parametrize("precision", ("bf16", "fp16", "fp32"))
@pytest.mark.parametrize("tile,lag", [((48, 48), 8), ((40, 56), 12)])
def test_device_bytes_per_tile_bound_a_batch(rng, precision, tile, lag, own):
    """What the engine says a tile takes bounds the device memory a batch of match_rois takes
    (up to what does not grow with the batch: the packed references), and not by a wide margin:
    the runner sizes its batches by it (Pipeline.bytes_per_pattern). With a reference set for
    every few patterns (own-sets: 3 a set, matched as pairs of gathered lefts) each tile's
    gathered reference counts too, which the one-set figure leaves out."""
    import cupy as cp
    from roi_patterns import reference_from, with_reference

    eng = _tensor_engine(tile, lag, precision=precision)
    B, n, K = 192, 12, 64
    pats, origins, window = with_reference(eng, rng, B, n, tile, np.uint16, side=160)
    dev, org = cp.asarray(pats), cp.asarray(origins)
    refs, index = None, None
    if own:
        sets = [reference_from(eng, pats[k:k + 1], origins, window) for k in range(K)]
        refs = eng.prepare_references(*(cp.stack([s[i] for s in sets]) for i in range(3)))
        index = cp.arange(B, dtype=cp.int32) % K
    eng.match_rois(dev[:2], org, window, references=refs, index=None if index is None else index[:2])  # compiled
    cp.cuda.Device().synchronize()
    pool = cp.cuda.MemoryPool()
    with cp.cuda.using_allocator(pool.malloc):
        res = eng.match_rois(dev, org, window, references=refs, index=index)
        cp.cuda.Device().synchronize()
        taken = pool.total_bytes()  # the pool keeps every block freed: its high-water mark
    assert (res.status.get() == 0).mean() > 0.9
    said = eng.device_bytes_per_tile(own_references=own) * B * n
    assert 0.5 * said <= taken <= said + n * 64 * 1024, (taken, said)
    if own:
        assert taken > eng.device_bytes_per_tile() * B * n + n * 64 * 1024, taken
