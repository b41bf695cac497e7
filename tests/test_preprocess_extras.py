"""Preprocessing extras: erf band-pass, binning, detector mask, neighbour averaging.

Each function is checked against a float64 NumPy oracle written from its definition
(loops where practical). The same test bodies run on NumPy and, marked ``gpu``, on CuPy
(compared with the NumPy float64 oracle at float32 tolerances).
"""

from __future__ import annotations

import dataclasses
import json
import math
import zlib

import numpy as np
import pytest
from scipy.special import erf

from ebsdxc.errors import InputError
from ebsdxc.preprocess import (
    PatternPreprocessor,
    PreprocessConfig,
    average_neighbours,
    bin_patterns,
    circular_mask,
    erf_bandpass_transfer,
    neighbour_weights,
    rois_inside_mask,
)

XP = [pytest.param("numpy", id="numpy"), pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)]


@pytest.fixture(params=XP)
def xp(request):
    if request.param == "numpy":
        return np
    return pytest.importorskip("cupy")


@pytest.fixture
def be(xp):
    from ebsdxc.backend import select_backend

    return select_backend("cpu" if xp is np else "cuda")


def host(a):
    """NumPy copy of a NumPy or CuPy array."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def seeded(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


# ================================================================ erf band-pass

def erf_oracle(shape, low, high, width):
    """float64 transfer function from its definition, frequencies written out by hand."""
    H, W = shape
    out = np.empty((H, W // 2 + 1))
    for i in range(H):
        fy = (i if i <= (H - 1) // 2 else i - H) / H
        for j in range(W // 2 + 1):
            r = math.hypot(fy, j / W)
            t = 1.0
            if low:
                t *= 0.5 * (1 + erf((r - low) / width))
            if high and math.isfinite(high):
                t *= 0.5 * (1 - erf((r - high) / width))
            out[i, j] = t
    return out


@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (7, 5), (16, 16), (33, 64), (50, 17)])
@pytest.mark.parametrize("cut", [(0.05, 0.3, 0.02), (0.0, 0.2, 0.05), (0.1, 0.0, 0.01), (0.1, math.inf, 0.03),
                                 (0.01, 0.45, 0.005)])
def test_erf_transfer_matches_formula(xp, shape, cut):
    low, high, width = cut
    t = erf_bandpass_transfer(shape, low, high, width, xp=xp)
    assert type(t) is xp.ndarray and t.dtype == np.float32 and t.shape == (shape[0], shape[1] // 2 + 1)
    np.testing.assert_allclose(host(t), erf_oracle(shape, low, high, width), rtol=0, atol=2e-7)


def test_erf_transfer_values_at_given_radii():
    # On a 100 x 100 grid, index (i, j) has radius hypot(i, j) / 100 cycles/px.
    low, high, w = 0.05, 0.30, 0.01
    t = erf_bandpass_transfer((100, 100), low, high, w)

    def lp(r):
        return 0.5 * (1 - erf((r - high) / w))

    def hp(r):
        return 0.5 * (1 + erf((r - low) / w))

    assert t[0, 5] == pytest.approx(0.5 * lp(0.05), abs=1e-7)  # r = low: half way up the high-pass edge
    assert t[0, 5] == pytest.approx(0.5, abs=1e-6)
    assert t[0, 30] == pytest.approx(0.5 * hp(0.30), abs=1e-7)  # r = high
    assert t[0, 6] == pytest.approx(0.5 * (1 + erf(1)), abs=1e-6)  # one width inside: 0.92
    assert t[0, 4] == pytest.approx(0.5 * (1 - erf(1)), abs=1e-6)  # one width outside: 0.08
    assert t[0, 0] == pytest.approx(hp(0.0) * lp(0.0), abs=1e-7) and t[0, 0] < 1e-6  # DC removed
    assert t[6, 8] == pytest.approx(hp(0.1) * lp(0.1), abs=1e-7) and t[6, 8] == pytest.approx(1, abs=1e-6)
    assert t[30, 40] == pytest.approx(0.0, abs=1e-7)  # r = 0.5: far above high
    # negative frequencies (bottom rows) mirror the positive ones
    np.testing.assert_array_equal(t[1:50], t[99:50:-1])


def erf_T(f, low, high, width):
    r = float(np.hypot(*f))
    t = 1.0
    if low:
        t *= 0.5 * (1 + erf((r - low) / width))
    if high:
        t *= 0.5 * (1 - erf((r - high) / width))
    return t


@pytest.mark.parametrize("shape", [(200, 231), (181, 256), (151, 150)])
@pytest.mark.parametrize("case", [
    # (low, high, width) cycles/px; in-band and out-of-band frequencies (fx, fy)
    ((0.02, 0.25, 0.02), (0.08, -0.05), (0.31, 0.20)),  # out above the low-pass edge
    ((0.07, 0.0, 0.015), (0.15, 0.10), (0.010, -0.008)),  # out below the high-pass edge (no low-pass)
    ((0.06, 0.30, 0.015), (0.10, 0.12), (0.008, 0.006)),  # out below, band-pass
], ids=["lowpass-out", "highpass-out", "bandpass-out"])
def test_erf_bandpass_keeps_in_band_sinusoid_removes_other(be, shape, case):
    (low, high, w), fin, fout = case
    H, W = shape
    y, x = np.mgrid[0:H, 0:W].astype(float)
    keep = np.cos(2 * np.pi * (fin[0] * x + fin[1] * y) + 0.3)
    drop = 0.7 * np.cos(2 * np.pi * (fout[0] * x + fout[1] * y) + 1.1)
    pat = 5 + keep + drop
    cfg = PreprocessConfig(bandpass_kind="erf", bandpass_cutoffs=(low, high), bandpass_width=w)
    out = host(PatternPreprocessor(cfg, be)(be.xp.asarray(pat[None])))[0]
    assert out.dtype == np.float32 and out.shape == shape
    assert erf_T(fin, low, high, w) > 1 - 1e-5 and erf_T(fout, low, high, w) < 1e-5
    # away from the edges by 4 envelope sigmas of the kernel (1 / (sqrt 2 pi w) px)
    m = int(4 / (np.sqrt(2) * np.pi * w)) + 1
    inner = (slice(m, H - m), slice(m, W - m))
    dc = 5 * erf_T((0, 0), low, high, w)
    # Stated tolerance: the in-band sinusoid kept and the out-of-band one (amplitude 0.7) removed
    # to 2e-4 absolute (0.03 %).
    np.testing.assert_allclose(out[inner], (dc + keep)[inner], rtol=0, atol=2e-4)
    # the dropped one really was in the input at full strength
    assert np.abs(pat - dc - keep)[inner].max() > 0.69


def erf_reflect_oracle(pat, low, high, width):
    """float64 erf band-pass of a pattern reflect-padded as far as NumPy allows (H-1, W-1)."""
    H, W = pat.shape
    padded = np.pad(np.asarray(pat, np.float64), ((H - 1, H - 1), (W - 1, W - 1)), mode="reflect")
    t = erf_oracle(padded.shape, low, high, width)
    return np.fft.irfft2(np.fft.rfft2(padded) * t, s=padded.shape)[H - 1:2 * H - 1, W - 1:2 * W - 1]


@pytest.mark.parametrize("cut", [(0.02, 0.3, 0.02), (0.05, 0.0, 0.03), (0.0, 0.2, 0.05), (0.03, 0.25, 0.01)])
@pytest.mark.parametrize("shape", [(90, 121), (64, 47), (9, 14)])
def test_erf_bandpass_whole_pattern_against_oracle(be, cut, shape):
    """Edges included: the reflect padding (4 kernel-envelope sigmas) keeps the result within
    0.5 % of the pattern's filtered amplitude of the filter on a far longer padding."""
    low, high, w = cut
    H, W = shape
    y, x = np.mgrid[0:H, 0:W]
    rng = seeded("erfwhole", cut, shape)
    pat = (100 + 30 * np.exp(-((x - 0.1 * W) ** 2 + (y - 0.45 * H) ** 2) / 50) + 0.5 * x
           + rng.normal(0, 3, shape))
    cfg = PreprocessConfig(bandpass_kind="erf", bandpass_cutoffs=(low, high), bandpass_width=w)
    out = host(PatternPreprocessor(cfg, be)(be.xp.asarray(pat[None])))[0]
    want = erf_reflect_oracle(pat, low, high, w)
    assert np.abs(out - want).max() <= 5e-3 * np.abs(want).max()


def test_erf_and_gaussian_kinds_differ_and_default_is_gaussian(be):
    pat = seeded("kinds").uniform(0, 100, (2, 40, 52))
    g = host(PatternPreprocessor(PreprocessConfig(bandpass=(1.0, 8.0)), be)(be.xp.asarray(pat)))
    g2 = host(PatternPreprocessor(PreprocessConfig(bandpass=(1.0, 8.0), bandpass_kind="gaussian"), be)(
        be.xp.asarray(pat)))
    np.testing.assert_array_equal(g, g2)
    e = host(PatternPreprocessor(PreprocessConfig(bandpass_kind="erf", bandpass_cutoffs=(0.02, 0.2)), be)(
        be.xp.asarray(pat)))
    assert np.abs(e - g).max() > 1


def test_erf_filter_is_built_once_per_shape(be):
    pp = PatternPreprocessor(PreprocessConfig(bandpass_kind="erf", bandpass_cutoffs=(0.02, 0.3)), be)
    x = be.xp.asarray(seeded("cache").uniform(0, 1, (3, 30, 41)), dtype=be.xp.float32)
    pp(x)
    first = dict(pp._filters)
    pp(x[:1])
    assert len(first) == 1 and pp._filters.keys() == first.keys()
    assert all(pp._filters[k] is first[k] for k in first)


@pytest.mark.parametrize("args", [((8, 8), -0.1, 0.2, 0.01), ((8, 8), 0.3, 0.2, 0.01), ((8, 8), 0.2, 0.2, 0.01),
                                  ((8, 8), 0.1, 0.2, 0.0), ((8, 8), 0.1, 0.2, -1.0), ((0, 8), 0.1, 0.2, 0.01),
                                  ((8, 8), 0.1, 0.2, float("nan")), ((8, 8), float("nan"), 0.2, 0.01)])
def test_erf_transfer_bad_options(args):
    with pytest.raises(ValueError):
        erf_bandpass_transfer(*args)


# ================================================================ binning

def bin_oracle(x, f):
    x = np.asarray(x, dtype=np.float64)
    H, W = x.shape[-2:]
    out = np.empty(x.shape[:-2] + (H // f, W // f))
    for i in range(H // f):
        for j in range(W // f):
            out[..., i, j] = x[..., i * f:(i + 1) * f, j * f:(j + 1) * f].mean(axis=(-2, -1))
    return out


@pytest.mark.parametrize("shape,f", [((1, 1), 1), ((3, 9), 3), ((6, 10), 2), ((15, 21), 3), ((16, 16), 4),
                                     ((7, 5), 1), ((2, 2), 2), ((1, 4), 1), ((20, 5), 5), ((12, 18), 6)])
@pytest.mark.parametrize("lead", [(), (1,), (5,), (2, 3)])
@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.float64])
def test_bin_patterns_matches_oracle(xp, shape, f, lead, dtype):
    rng = seeded("bin", shape, f, lead, np.dtype(dtype).name)
    x = (rng.uniform(0, 60000, lead + shape)).astype(dtype)
    out = bin_patterns(xp.asarray(x), f)
    assert type(out) is xp.ndarray and out.dtype == np.float32
    assert out.shape == lead + (shape[0] // f, shape[1] // f)
    np.testing.assert_allclose(host(out), bin_oracle(x, f), rtol=2e-7, atol=0)


def test_bin_patterns_of_counts_is_exact():
    # sums of <= 16 uint16 counts are exact in float32; a 2^k-pixel mean divides exactly
    x = seeded("exact").integers(0, 65536, (4, 8, 12)).astype(np.uint16)
    np.testing.assert_array_equal(bin_patterns(x, 2), bin_oracle(x, 2).astype(np.float32))
    np.testing.assert_array_equal(bin_patterns(x, 4), bin_oracle(x, 4).astype(np.float32))


@pytest.mark.parametrize("shape,f", [((3, 10), 2), ((10, 3), 2), ((9, 9), 2), ((16, 15), 4), ((1, 1), 2)])
def test_bin_patterns_refuses_sides_not_multiple(xp, shape, f):
    with pytest.raises(ValueError, match="multiples of"):
        bin_patterns(xp.zeros((2,) + shape), f)


@pytest.mark.parametrize("f", [0, -2, 2.0, 1.5, True, "2", None])
def test_bin_patterns_bad_factor(f):
    with pytest.raises(ValueError, match="binning"):
        bin_patterns(np.zeros((1, 4, 4)), f)


def test_bin_patterns_factor_one_keeps_float32_without_copy():
    x = np.ones((2, 3, 5), np.float32)
    assert bin_patterns(x, 1) is x
    assert bin_patterns(x.astype(np.uint8), 1).dtype == np.float32


@pytest.mark.parametrize("raw,f", [((160, 160), 2), ((60, 90), 3), ((12, 8), 4), ((7, 5), 1)])
@pytest.mark.parametrize("op", ["subtract", "divide"])
def test_preprocessor_bins_patterns_and_static_background(be, raw, f, op):
    xp = be.xp
    rng = seeded("ppbin", raw, f, op)
    pats = rng.integers(100, 4000, (3,) + raw).astype(np.uint16)
    bg = rng.uniform(20, 80, raw)
    pp = PatternPreprocessor(PreprocessConfig(binning=f, static_operation=op), be, static_background=bg)
    assert pp.output_shape(raw) == (raw[0] // f, raw[1] // f)
    assert pp.is_identity is False
    out = host(pp(xp.asarray(pats)))
    assert out.dtype == np.float32 and out.shape == (3,) + pp.output_shape(raw)
    b, g = bin_oracle(pats, f), bin_oracle(bg, f)
    np.testing.assert_allclose(out, b - g if op == "subtract" else b / g, rtol=2e-6, atol=2e-4)


def test_binning_is_the_first_step(be):
    # binning then dynamic background + band-pass == the unbinned pipeline run on binned input
    xp = be.xp
    rng = seeded("first")
    pats = rng.uniform(50, 200, (2, 64, 90))
    opts = dict(dynamic_background_sigma=3.0, bandpass=(0.5, 6.0))
    a = host(PatternPreprocessor(PreprocessConfig(binning=2, **opts), be)(xp.asarray(pats)))
    b = host(PatternPreprocessor(PreprocessConfig(**opts), be)(xp.asarray(bin_oracle(pats, 2))))
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_output_shape_refuses_indivisible(be):
    pp = PatternPreprocessor(PreprocessConfig(binning=4), be)
    assert pp.output_shape((480, 640)) == (120, 160)
    assert pp.output_shape((3, 480, 640)) == (120, 160)
    with pytest.raises(ValueError, match="multiples of 4"):
        pp.output_shape((482, 640))
    assert PatternPreprocessor(PreprocessConfig(), be).output_shape((7, 5)) == (7, 5)


def test_static_background_of_indivisible_size_is_refused(be):
    with pytest.raises(ValueError, match="multiples"):
        PatternPreprocessor(PreprocessConfig(binning=2), be, static_background=np.ones((9, 10)))


# ================================================================ detector mask

def mask_oracle(shape, centre=None, radius=None):
    H, W = shape
    cx, cy = ((W - 1) / 2, (H - 1) / 2) if centre is None else centre
    r = min(H, W) / 2 if radius is None else radius
    m = np.zeros(shape, bool)
    for i in range(H):  # row = y
        for j in range(W):  # column = x
            m[i, j] = (j - cx) ** 2 + (i - cy) ** 2 <= r * r
    return m


@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (7, 5), (10, 13), (33, 32), (2, 9)])
@pytest.mark.parametrize("geom", [(None, None), ((1.0, 2.0), None), (None, 2.5), ((3.5, 0.0), 4.0),
                                  ((-3.0, 20.0), 6.2), ((0.0, 0.0), 0.5)])
def test_circular_mask_matches_loops(xp, shape, geom):
    centre, radius = geom
    m = circular_mask(shape, centre=centre, radius=radius, xp=xp)
    assert type(m) is xp.ndarray and m.dtype == bool and m.shape == shape
    np.testing.assert_array_equal(host(m), mask_oracle(shape, centre, radius))


def test_circular_mask_convention():
    m = circular_mask((5, 7))  # centre (3, 2), radius 2.5
    assert m[2, 3] and m[0, 3] and m[2, 1] and m[2, 5] and not m[2, 0] and not m[0, 0]
    # x is the column: a centre at x = 0 (left edge) keeps the left column, not the top row
    m = circular_mask((9, 9), centre=(0.0, 4.0), radius=1.0)
    assert m[4, 0] and m[4, 1] and m[3, 0] and not m[0, 4] and m.sum() == 4


@pytest.mark.parametrize("bad", [dict(radius=0), dict(radius=-1.0), dict(radius=float("nan")),
                                 dict(centre=(1.0,)), dict(centre=(1.0, float("inf"))), dict(centre="middle")])
def test_circular_mask_bad_options(bad):
    with pytest.raises(ValueError):
        circular_mask((10, 10), **bad)


def inside_oracle(mask, origins, size):
    H, W = mask.shape
    w, h = size
    out = []
    for x0, y0 in origins:
        ok = True
        for y in range(y0, y0 + h):
            for x in range(x0, x0 + w):
                ok &= 0 <= y < H and 0 <= x < W and bool(mask[y, x])
        out.append(ok)
    return np.array(out, bool)


@pytest.mark.parametrize("shape,size", [((40, 40), (8, 8)), ((31, 45), (5, 9)), ((12, 7), (1, 1)),
                                        ((60, 50), (20, 13))])
def test_rois_inside_mask_matches_loops(xp, shape, size):
    rng = seeded("inside", shape, size)
    mask = circular_mask(shape, radius=min(shape) / 2 - 1, xp=xp)
    H, W = shape
    w, h = size
    origins = np.stack([rng.integers(-w, W + 1, 60), rng.integers(-h, H + 1, 60)], axis=1)
    got = rois_inside_mask(mask, origins, size)
    want = inside_oracle(host(mask), origins, size)
    assert got.dtype == bool and got.shape == (60,)
    np.testing.assert_array_equal(got, want)
    assert want.any() and not want.all()  # the sample tests both answers


def test_rois_inside_mask_with_a_layout():
    from ebsdxc.rois import grid_layout

    shape = (160, 160)
    lay = grid_layout(shape, grid=(5, 5), size=32)
    mask = circular_mask(shape)
    got = rois_inside_mask(mask, lay.origins, lay.size)
    np.testing.assert_array_equal(got, inside_oracle(mask, lay.origins, lay.size))
    corners = [0, 4, 20, 24]
    assert not got[corners].any() and got[12]
    assert rois_inside_mask(np.ones(shape, bool), lay.origins, lay.size).all()


def test_rois_inside_mask_bad_input():
    with pytest.raises(ValueError):
        rois_inside_mask(np.ones((4, 4, 2), bool), [[0, 0]], (2, 2))
    with pytest.raises(ValueError):
        rois_inside_mask(np.ones((4, 4), bool), [[0, 0]], (0, 2))
    with pytest.raises(ValueError):
        rois_inside_mask(np.ones((4, 4), bool), [[0.5, 0]], (2, 2))


def fill_oracle(x, mask):
    """Off-screen pixels take the mean of the finite on-screen pixels; on-screen NaNs stay."""
    x = np.asarray(x, dtype=np.float64)
    out = x.copy()
    for b in range(len(x)):
        ok = mask & np.isfinite(x[b])
        out[b][~mask] = x[b][ok].mean() if ok.any() else 0.0
    return out


@pytest.mark.parametrize("shape", [(21, 21), (30, 47), (1, 6), (9, 4)])
def test_mask_fill_without_filters(be, shape):
    xp = be.xp
    rng = seeded("fill", shape)
    pats = rng.uniform(0, 1000, (3,) + shape)
    pats[1, shape[0] // 2, shape[1] // 2] = np.nan  # on screen: stays NaN, not in the mean
    pats[2, 0, 0] = np.inf  # off screen (a corner): filled
    pp = PatternPreprocessor(PreprocessConfig(mask="circle"), be)
    assert not pp.is_identity
    out = host(pp(xp.asarray(pats)))
    mask = mask_oracle(shape)
    want = fill_oracle(pats, mask)
    np.testing.assert_allclose(out, want, rtol=1e-6, equal_nan=True)
    assert np.isnan(out[1, shape[0] // 2, shape[1] // 2]) and np.isfinite(out[2]).all()
    np.testing.assert_array_equal(out[:, mask][np.isfinite(out[:, mask])],
                                  pats.astype(np.float32)[:, mask][np.isfinite(out[:, mask])])
    np.testing.assert_array_equal(pp.screen_mask(shape), mask)


def test_mask_with_static_divide_leaves_no_nan_off_screen(be):
    xp = be.xp
    shape = (40, 40)
    mask = mask_oracle(shape)
    bg = np.where(mask, 50.0, 0.0)  # a static background that is 0 off the screen
    pats = seeded("div").uniform(100, 200, (2,) + shape)
    cfg = PreprocessConfig(mask="circle", static_operation="divide", dynamic_background_sigma=4.0)
    out = host(PatternPreprocessor(cfg, be, static_background=bg)(xp.asarray(pats)))
    assert np.isfinite(out).all()
    without = host(PatternPreprocessor(PreprocessConfig(static_operation="divide", dynamic_background_sigma=4.0), be,
                                       static_background=bg)(xp.asarray(pats)))
    assert np.isnan(without[:, ~mask]).all()  # the NaNs the mask fill prevents


def disk_pattern(shape, radius, seed, *, rim=5.0):
    H, W = shape
    y, x = np.mgrid[0:H, 0:W].astype(float)
    rng = np.random.default_rng(seed)
    tex = 100 * np.ones(shape)
    for _ in range(10):
        th, off = rng.uniform(0, np.pi), rng.uniform(-40, 40)
        d = (x - W / 2) * np.cos(th) + (y - H / 2) * np.sin(th) - off
        tex += rng.uniform(5, 15) * np.exp(-d ** 2 / (2 * rng.uniform(2, 4) ** 2))
    r = np.hypot(x - (W - 1) / 2, y - (H - 1) / 2)
    return np.where(r <= radius, tex, rim), tex, r


@pytest.mark.parametrize("opts", [dict(bandpass=(1.0, 10.0)), dict(dynamic_background_sigma=6.0),
                                  dict(bandpass_kind="erf", bandpass_cutoffs=(0.02, 0.3), bandpass_width=0.02),
                                  dict(dynamic_background_sigma=6.0, bandpass=(0.0, 12.0))],
                         ids=["gaussian-bp", "dynamic", "erf-bp", "dynamic+bp"])
def test_dark_rim_leaves_no_edge_inside_the_screen(be, opts):
    """A dark rim outside the screen must not put an edge into the filtered screen."""
    xp = be.xp
    shape, R = (96, 110), 44.0
    pat, tex, r = disk_pattern(shape, R, 3)
    masked = PatternPreprocessor(PreprocessConfig(mask="circle", mask_radius=R, **opts), be)
    plain = PatternPreprocessor(PreprocessConfig(**opts), be)
    out_m = host(masked(xp.asarray(pat[None])))[0]
    out_p = host(plain(xp.asarray(pat[None])))[0]
    # 1. Whatever lies off the screen has no influence at all: the same output for the
    #    pattern with its dark rim and for the texture running on over the whole detector.
    out_t = host(masked(xp.asarray(tex[None])))[0]
    np.testing.assert_array_equal(out_m, out_t)
    # 2. Quantified edge: RMS contrast (about the median of the middle of the screen) in the
    #    5 px just inside the screen edge, against that in the middle of the screen.
    rim = (r > R - 5) & (r <= R)
    mid = r < R - 15

    def rms(o, sel):
        return np.sqrt(np.mean((o[sel] - np.median(o[mid])) ** 2))

    ratio_m, ratio_p = rms(out_m, rim) / rms(out_m, mid), rms(out_p, rim) / rms(out_p, mid)
    assert ratio_p > 4, ratio_p  # without the mask the filters draw the screen edge (5 to 20)
    assert ratio_m < 1.25, ratio_m  # with it, the edge zone looks like the rest of the screen (about 1)
    # 3. Off the screen: one value per pattern, the mean of the on-screen pixels.
    off = ~mask_oracle(shape, radius=R)
    assert np.ptp(out_m[off]) == 0
    assert out_m[off][0] == pytest.approx(out_m[~off].astype(np.float64).mean(), rel=1e-5, abs=1e-6)


def test_constant_screen_stays_constant_with_mask(be):
    xp = be.xp
    R = 30.0
    r = np.hypot(*np.mgrid[0:64, 0:64] - 31.5)
    pat = np.where(r <= R, 200.0, 3.0)
    opts = dict(bandpass=(0.0, 6.0))
    out_m = host(PatternPreprocessor(PreprocessConfig(mask="circle", mask_radius=R, **opts), be)(
        xp.asarray(pat[None])))[0]
    out_p = host(PatternPreprocessor(PreprocessConfig(**opts), be)(xp.asarray(pat[None])))[0]
    inside = r <= R
    assert np.abs(out_m[inside]).max() < 1e-3  # high-passed constant: 0 (of a 197 step)
    assert np.abs(out_p[inside]).max() > 20


@pytest.mark.parametrize("f", [1, 2, 4])
def test_screen_mask_in_stored_pixels(be, f):
    raw = (96, 128)
    cfg = PreprocessConfig(binning=f, mask="circle", mask_centre=(70.5, 40.5), mask_radius=36.0)
    pp = PatternPreprocessor(cfg, be)
    m = pp.screen_mask(raw)
    assert m.shape == (raw[0] // f, raw[1] // f) and m.dtype == bool
    # a binned pixel's centre is at stored x = f * j + (f - 1) / 2
    np.testing.assert_array_equal(m, mask_oracle(m.shape, ((70.5 + 0.5) / f - 0.5, (40.5 + 0.5) / f - 0.5),
                                                 36.0 / f))
    # the default screen is the same circle whatever the binning
    d = PatternPreprocessor(PreprocessConfig(binning=f, mask="circle"), be).screen_mask(raw)
    np.testing.assert_array_equal(d, mask_oracle(d.shape))
    assert PatternPreprocessor(PreprocessConfig(binning=f), be).screen_mask(raw) is None
    # the preprocessor fills with that same mask
    pats = seeded("sm", f).uniform(0, 10, (2,) + raw)
    out = host(pp(be.xp.asarray(pats)))
    np.testing.assert_allclose(out, fill_oracle(bin_oracle(pats, f), m), rtol=2e-6)


# ================================================================ neighbour averaging

def average_oracle(patterns, cols, weights, present=None):
    """float64 loops over every point and every neighbour."""
    x = np.asarray(patterns, dtype=np.float64)
    N = len(x)
    R = N // cols
    p = np.ones(N, bool) if present is None else np.asarray(present, bool)
    k = weights.shape[0] // 2
    out = x.copy()
    for r in range(R):
        for c in range(cols):
            if not p[r * cols + c]:
                continue
            num, den = 0.0, 0.0
            for di in range(-k, k + 1):
                for dj in range(-k, k + 1):
                    rr, cc = r + di, c + dj
                    if 0 <= rr < R and 0 <= cc < cols and p[rr * cols + cc]:
                        wt = weights[di + k, dj + k]
                        num = num + wt * x[rr * cols + cc]
                        den += wt
            out[r * cols + c] = num / den
    return out


def test_neighbour_weights():
    np.testing.assert_array_equal(neighbour_weights("box", 3), np.ones((3, 3)))
    np.testing.assert_array_equal(neighbour_weights("circular", 3), [[0, 1, 0], [1, 1, 1], [0, 1, 0]])
    c5 = neighbour_weights("circular", 5)
    assert c5.sum() == 13 and c5[0, 0] == 0 and c5[0, 2] == 1 and c5[1, 1] == 1
    g = neighbour_weights("gaussian", 5, 1.5)
    d = np.arange(-2, 3)
    np.testing.assert_allclose(g, np.exp(-(d[:, None] ** 2 + d[None, :] ** 2) / (2 * 1.5 ** 2)), rtol=1e-15)
    assert neighbour_weights("gaussian", 1).tolist() == [[1.0]]


@pytest.mark.parametrize("grid", [(1, 1), (1, 5), (4, 1), (3, 4), (5, 7), (2, 2)])
@pytest.mark.parametrize("kernel,size,sigma", [("gaussian", 3, 1.0), ("gaussian", 5, 1.5), ("gaussian", 3, 0.6),
                                               ("box", 3, 1.0), ("box", 5, 1.0), ("circular", 3, 1.0),
                                               ("circular", 5, 1.0), ("gaussian", 1, 1.0)])
@pytest.mark.parametrize("with_present", [False, True])
def test_average_neighbours_matches_oracle(xp, grid, kernel, size, sigma, with_present):
    R, C = grid
    rng = seeded("avg", grid, kernel, size, sigma, with_present)
    pats = rng.uniform(0, 4000, (R * C, 5, 3))
    present = None
    if with_present:
        present = rng.random(R * C) > 0.3
        present[0] = True
        pats[~present] = 0.0  # as the reader gives absent points
    before = pats.copy()
    out = average_neighbours(xp.asarray(pats), cols=C, kernel=kernel, size=size, sigma=sigma,
                             present=None if present is None else xp.asarray(present))
    assert type(out) is xp.ndarray and out.dtype == np.float32 and out.shape == pats.shape
    want = average_oracle(pats, C, neighbour_weights(kernel, size, sigma), present)
    np.testing.assert_allclose(host(out), want, rtol=2e-6, atol=1e-3)
    np.testing.assert_array_equal(pats, before)  # input untouched


def test_average_neighbours_absent_points_contribute_nothing(xp):
    R, C = 4, 5
    rng = seeded("absent")
    pats = rng.uniform(0, 100, (R * C, 6, 7)).astype(np.float32)
    present = np.ones(R * C, bool)
    present[[3, 7, 12, 19]] = False
    junk = pats.copy()
    junk[~present] = 1e6  # absent points holding garbage
    a = host(average_neighbours(xp.asarray(pats), cols=C, present=xp.asarray(present)))
    b = host(average_neighbours(xp.asarray(junk), cols=C, present=xp.asarray(present)))
    np.testing.assert_array_equal(a[present], b[present])
    np.testing.assert_array_equal(b[~present], junk[~present])  # absent points stay as they were
    assert np.abs(b[present]).max() < 200


def test_average_neighbours_constant_and_uniform_weights(xp):
    # a constant map stays constant (the weights are renormalised everywhere, edges included)
    pats = np.full((12, 4, 4), 7.0, np.float32)
    for kernel in ("gaussian", "box", "circular"):
        out = host(average_neighbours(xp.asarray(pats), cols=4, kernel=kernel, size=5, sigma=0.8))
        np.testing.assert_allclose(out, 7.0, rtol=1e-6)
    # a 3x3 box on a 3x3 map: the centre point is the mean of all nine
    x = np.arange(9, dtype=np.float32)[:, None, None] * np.ones((1, 2, 2), np.float32)
    out = host(average_neighbours(xp.asarray(x), cols=3, kernel="box", size=3))
    assert out[4, 0, 0] == pytest.approx(4.0) and out[0, 0, 0] == pytest.approx((0 + 1 + 3 + 4) / 4)


@pytest.mark.parametrize("size", [3, 5])
@pytest.mark.parametrize("kernel", ["gaussian", "circular"])
def test_average_neighbours_halo_contract(xp, size, kernel):
    """Averaging row chunks with size // 2 halo rows and dropping them equals averaging the whole scan."""
    R, C, halo = 11, 6, size // 2
    rng = seeded("halo", size, kernel)
    pats = rng.uniform(0, 1000, (R * C, 4, 5)).astype(np.float32)
    present = rng.random(R * C) > 0.1
    pats[~present] = 0
    whole = host(average_neighbours(xp.asarray(pats), cols=C, kernel=kernel, size=size, present=present))
    parts = []
    for r0 in range(0, R, 4):  # chunks of 4 rows (the last one shorter)
        r1 = min(R, r0 + 4)
        a, b = max(0, r0 - halo), min(R, r1 + halo)
        blk = average_neighbours(xp.asarray(pats[a * C:b * C]), cols=C, kernel=kernel, size=size,
                                 present=present[a * C:b * C])
        parts.append(host(blk)[(r0 - a) * C:(r1 - a) * C])
    np.testing.assert_allclose(np.concatenate(parts), whole, rtol=1e-6, atol=1e-4)
    # without the halo the chunk borders differ (the test can tell)
    no_halo = host(average_neighbours(xp.asarray(pats[4 * C:8 * C]), cols=C, kernel=kernel, size=size,
                                      present=present[4 * C:8 * C]))
    assert np.abs(no_halo - whole[4 * C:8 * C]).max() > 1


@pytest.mark.parametrize("kwargs", [dict(cols=4), dict(cols=0), dict(cols=2.0), dict(cols=3, size=2),
                                    dict(cols=3, size=0), dict(cols=3, kernel="hann"), dict(cols=3, sigma=0),
                                    dict(cols=3, sigma=float("nan")), dict(cols=3, present=np.ones(5, bool))])
def test_average_neighbours_bad_options(kwargs):
    with pytest.raises(ValueError):
        average_neighbours(np.zeros((6, 3, 3), np.float32), **kwargs)
    with pytest.raises(ValueError):
        average_neighbours(np.zeros((6, 9), np.float32), cols=3)


def test_preprocessor_average_neighbours_method(be):
    xp = be.xp
    pats = seeded("ppavg").uniform(0, 100, (12, 8, 8))
    off = PatternPreprocessor(PreprocessConfig(), be)
    assert off.halo_rows == 0
    x = off.convert(xp.asarray(pats))
    np.testing.assert_array_equal(host(off.average_neighbours(x, cols=4)), pats.astype(np.float32))
    cfg = PreprocessConfig(binning=2, average_neighbours=5, average_kernel="box")
    pp = PatternPreprocessor(cfg, be)
    assert pp.halo_rows == 2 and pp.is_identity is False
    x = pp.convert(xp.asarray(pats))
    assert x.shape == (12, 4, 4)
    got = host(pp.average_neighbours(x, cols=4))
    np.testing.assert_allclose(got, average_oracle(bin_oracle(pats, 2), 4, np.ones((5, 5))), rtol=2e-6)
    # __call__ = correct(convert(x)) and never averages
    np.testing.assert_array_equal(host(pp(xp.asarray(pats))), host(pp.correct(pp.convert(xp.asarray(pats)))))
    np.testing.assert_allclose(host(pp(xp.asarray(pats))), bin_oracle(pats, 2), rtol=1e-6)


@pytest.fixture(scope="module")
def nickel():
    kp = pytest.importorskip("kikuchipy")
    s = kp.data.nickel_ebsd_small()
    return kp, s.data.astype(np.float32)  # (3, 3, 60, 60)


@pytest.mark.parametrize("window,kw,mine", [
    ("gaussian", {"std": 1.0}, ("gaussian", 1.0)),
    ("gaussian", {"std": 0.7}, ("gaussian", 0.7)),
    ("circular", {}, ("circular", 1.0)),
    ("rectangular", {}, ("box", 1.0)),
])
@pytest.mark.parametrize("size", [3, 5])
@pytest.mark.parametrize("nav", ["small", "tiled"])
def test_average_neighbours_matches_kikuchipy(nickel, window, kw, mine, size, nav):
    """kikuchipy's EBSD.average_neighbour_patterns, up to its per-pattern rescaling to [-1, 1]."""
    kp, data = nickel
    if nav == "tiled":  # a 4 x 5 map of the sample's patterns, scaled differently
        rng = seeded("tile")
        idx = rng.integers(0, 9, (4, 5))
        data = data.reshape(9, 60, 60)[idx] * rng.uniform(0.5, 2.0, (4, 5, 1, 1)).astype(np.float32)
    R, C = data.shape[:2]
    s = kp.signals.EBSD(data.copy())
    theirs = s.average_neighbour_patterns(window=window, window_shape=(size, size), inplace=False,
                                          show_progressbar=False, **kw).data.astype(np.float64)
    ours = average_neighbours(data.reshape(R * C, 60, 60), cols=C, kernel=mine[0], size=size, sigma=mine[1])
    ours = ours.reshape(R, C, 60, 60).astype(np.float64)
    lo, hi = ours.min(axis=(-2, -1), keepdims=True), ours.max(axis=(-2, -1), keepdims=True)
    np.testing.assert_allclose((ours - lo) / (hi - lo) * 2 - 1, theirs, rtol=0, atol=5e-6)
    # the comparison can fail: a different kernel is far off
    other = average_neighbours(data.reshape(R * C, 60, 60), cols=C, kernel="box" if mine[0] != "box" else "circular",
                               size=size).reshape(R, C, 60, 60).astype(np.float64)
    lo, hi = other.min(axis=(-2, -1), keepdims=True), other.max(axis=(-2, -1), keepdims=True)
    if not (nav == "small" and size == 5 and mine[0] in ("box", "circular")):  # same weights on a 3x3 map
        assert np.abs((other - lo) / (hi - lo) * 2 - 1 - theirs).max() > 1e-3


# ================================================================ full pipeline on the device

@pytest.mark.parametrize("raw", [(120, 160), (90, 90)])
def test_full_pipeline_against_float64_pieces(be, raw):
    """binning + static divide + mask + dynamic + erf band-pass on the backend vs the CPU pipeline."""
    from ebsdxc.backend import select_backend

    rng = seeded("full", raw)
    pats = rng.integers(500, 3000, (4,) + raw).astype(np.uint16)
    bg = rng.uniform(300, 600, raw)
    cfg = PreprocessConfig(binning=2, static_operation="divide", mask="circle", dynamic_background_sigma=5.0,
                           bandpass_kind="erf", bandpass_cutoffs=(0.02, 0.3), bandpass_width=0.03)
    out = host(PatternPreprocessor(cfg, be, static_background=bg)(be.xp.asarray(pats)))
    cpu = PatternPreprocessor(cfg, select_backend("cpu"), static_background=bg)(pats)
    assert out.dtype == np.float32 and out.shape == (4, raw[0] // 2, raw[1] // 2)
    np.testing.assert_allclose(out, cpu, rtol=1e-5, atol=1e-6)
    assert np.isfinite(out).all()
    # the same, step by step in float64 on the host, for the parts that have closed forms
    x = bin_oracle(pats, 2) / bin_oracle(bg, 2)
    m = mask_oracle(x.shape[1:])
    x = fill_oracle(x, m)
    pp_f = PatternPreprocessor(dataclasses.replace(cfg, binning=1, mask=None, static_operation="subtract"),
                               select_backend("cpu"))
    y = fill_oracle(pp_f(x), m)
    np.testing.assert_allclose(out, y, rtol=1e-4, atol=1e-5)


# ================================================================ config, recipes, CLI

@pytest.mark.parametrize("kwargs", [
    dict(bandpass_kind="fft"),
    dict(bandpass_kind="erf"),  # no cutoffs
    dict(bandpass_kind="erf", bandpass_cutoffs=(0.01, 0.2), bandpass=(1.0, 5.0)),
    dict(bandpass_cutoffs=(0.01, 0.2)),  # cutoffs with the gaussian kind
    dict(bandpass_kind="erf", bandpass_cutoffs=(0.3, 0.2)),
    dict(bandpass_kind="erf", bandpass_cutoffs=(-0.1, 0.2)),
    dict(bandpass_kind="erf", bandpass_cutoffs=(0.1,)),
    dict(bandpass_kind="erf", bandpass_cutoffs=(float("nan"), 0.2)),
    dict(bandpass_kind="erf", bandpass_cutoffs=(0.01, 0.2), bandpass_width=0),
    dict(bandpass_width=-0.01),
    dict(bandpass_width=float("inf")),
    dict(binning=0), dict(binning=-1), dict(binning=2.0), dict(binning=True),
    dict(mask="ellipse"), dict(mask="none"),
    dict(mask_radius=10.0),  # no mask
    dict(mask_centre=(1.0, 2.0)),
    dict(mask="circle", mask_radius=0.0), dict(mask="circle", mask_radius=float("nan")),
    dict(mask="circle", mask_centre=(1.0,)), dict(mask="circle", mask_centre=(1.0, float("inf"))),
    dict(average_neighbours=1), dict(average_neighbours=2), dict(average_neighbours=-3),
    dict(average_neighbours=3.0),
    dict(average_kernel="hann"), dict(average_sigma=0.0), dict(average_sigma=float("nan")),
])
def test_config_validation_extras(kwargs):
    with pytest.raises(ValueError) as e:
        PreprocessConfig(**kwargs)
    assert len(str(e.value).split()) >= 4  # a sentence, not a bare value


@pytest.mark.parametrize("kwargs", [
    dict(bandpass_kind="erf", bandpass_cutoffs=(0.0, 0.2)),
    dict(bandpass_kind="erf", bandpass_cutoffs=(0.02, 0.0)),
    dict(bandpass_kind="erf", bandpass_cutoffs=[0.02, float("inf")], bandpass_width=0.005),
    dict(binning=4), dict(mask="circle"), dict(mask="circle", mask_centre=[10, 20.5], mask_radius=30),
    dict(average_neighbours=3), dict(average_neighbours=5, average_kernel="box"),
    dict(average_kernel="circular", average_sigma=2.5),
])
def test_config_valid_extras(kwargs):
    c = PreprocessConfig(**kwargs)
    for k in ("bandpass_cutoffs", "mask_centre"):
        v = getattr(c, k)
        assert v is None or (isinstance(v, tuple) and all(isinstance(a, float) for a in v))


def test_default_config_unchanged():
    c = PreprocessConfig()
    assert (c.bandpass_kind, c.bandpass_cutoffs, c.binning, c.mask, c.average_neighbours) == \
        ("gaussian", None, 1, None, 0)
    from ebsdxc.backend import select_backend

    assert PatternPreprocessor(c, select_backend("cpu")).is_identity


RECIPE = """
[preprocess]
dynamic_background_sigma = 8.0
bandpass_kind = "erf"
bandpass_cutoffs = [0.015, 0.35]
bandpass_width = 0.02
binning = 2
mask = "circle"
mask_centre = [239.5, 230.0]
mask_radius = 220.0
average_neighbours = 3
average_kernel = "circular"
average_sigma = 1.5
"""


def test_recipe_round_trip(tmp_path):
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    from ebsdxc.config import ProcessConfig, load_config

    p = tmp_path / "r.toml"
    p.write_text(RECIPE)
    cfg = load_config(p)[0]
    pre = cfg.preprocess
    assert pre == PreprocessConfig(dynamic_background_sigma=8.0, bandpass_kind="erf", bandpass_cutoffs=(0.015, 0.35),
                                   bandpass_width=0.02, binning=2, mask="circle", mask_centre=(239.5, 230.0),
                                   mask_radius=220.0, average_neighbours=3, average_kernel="circular",
                                   average_sigma=1.5)
    # through the results file's JSON parameters and back
    params = json.loads(json.dumps(cfg.parameters(), sort_keys=True))
    assert params["preprocess"]["binning"] == 2 and params["preprocess"]["bandpass_cutoffs"] == [0.015, 0.35]
    back = ProcessConfig.from_parameters(params)
    assert back.preprocess == pre
    # settings over that recipe (in its TOML shape): mask "none" switches it off, a Gaussian
    # band-pass replaces the erf one
    over = tomllib.loads('[preprocess]\nmask = "none"\nbandpass_kind = "gaussian"\nbandpass = [1.0, 20.0]\n')
    pre2 = load_config(p, over)[0].preprocess
    assert pre2.mask is None and pre2.mask_centre is None and pre2.mask_radius is None
    assert pre2.bandpass_kind == "gaussian" and pre2.bandpass == (1.0, 20.0) and pre2.bandpass_cutoffs is None
    assert pre2.binning == 2 and pre2.average_neighbours == 3


def test_old_parameters_without_the_new_keys_still_load():
    from ebsdxc.config import ProcessConfig

    params = ProcessConfig().parameters()
    for k in ("bandpass_kind", "bandpass_cutoffs", "bandpass_width", "binning", "mask", "mask_centre",
              "mask_radius", "average_neighbours", "average_kernel", "average_sigma"):
        del params["preprocess"][k]
    assert ProcessConfig.from_parameters(params).preprocess == PreprocessConfig()


@pytest.mark.parametrize("text,words", [
    ("binning = 0", "binning"),
    ("binning = 1.5", "binning"),
    ('mask = "square"', "mask"),
    ("mask_radius = 10.0", "mask"),
    ('bandpass_kind = "erf"', "bandpass_cutoffs"),
    ('bandpass_kind = "erf"\nbandpass_cutoffs = [0.3, 0.1]', "low < high"),
    ("bandpass_cutoffs = 0.1", "two numbers"),
    ("average_neighbours = 4", "odd"),
    ('average_kernel = "hann"', "kernel"),
    ("average_sigma = -1.0", "sigma"),
    ("mask_center = [1, 2]", "unknown key"),
])
def test_recipe_bad_values_are_input_errors(tmp_path, text, words):
    from ebsdxc.config import load_config

    p = tmp_path / "bad.toml"
    p.write_text("[preprocess]\n" + text + "\n")
    with pytest.raises(InputError, match=words) as e:
        load_config(p)
    assert str(p) in str(e.value)


def cli_config(*flags, pipeline=None):
    from ebsdxc.cli import _config_from_args, _parser

    argv = ["process", "scan.h5", "--ref-index", "0", *flags]
    if pipeline:
        argv += ["--pipeline", str(pipeline)]
    return _config_from_args(_parser().parse_args(argv))[0]


def test_cli_flags_reach_the_config():
    pre = cli_config("--pattern-binning", "4", "--bandpass-cutoffs", "0.01", "0.3", "--bandpass-width", "0.02",
                     "--mask", "circle", "--mask-radius", "200", "--mask-centre", "240,230.5",
                     "--average-neighbours", "5", "--average-kernel", "box", "--average-sigma", "2").preprocess
    assert pre == PreprocessConfig(binning=4, bandpass_kind="erf", bandpass_cutoffs=(0.01, 0.3), bandpass_width=0.02,
                                   mask="circle", mask_radius=200.0, mask_centre=(240.0, 230.5),
                                   average_neighbours=5, average_kernel="box", average_sigma=2.0)
    assert cli_config().preprocess == PreprocessConfig()
    # --mask-radius alone asks for the circle; --bandpass-kind erf with cutoffs is the same as cutoffs alone
    assert cli_config("--mask-radius", "50").preprocess.mask == "circle"
    a = cli_config("--bandpass-kind", "erf", "--bandpass-cutoffs", "0", "0.25").preprocess
    assert (a.bandpass_kind, a.bandpass_cutoffs, a.bandpass) == ("erf", (0.0, 0.25), None)
    # the detector binning of the strain options is a different option
    c = cli_config("--binning", "2", "--material", "Ni")
    assert c.strain.binning == 2 and c.preprocess.binning == 1


def test_cli_flags_over_a_recipe(tmp_path):
    p = tmp_path / "r.toml"
    p.write_text(RECIPE)
    pre = cli_config("--bandpass", "1", "20", "--mask", "none", "--average-neighbours", "0", pipeline=p).preprocess
    assert (pre.bandpass_kind, pre.bandpass, pre.bandpass_cutoffs) == ("gaussian", (1.0, 20.0), None)
    assert pre.mask is None and pre.mask_centre is None and pre.average_neighbours == 0
    assert pre.binning == 2 and pre.dynamic_background_sigma == 8.0  # the rest of the recipe stays


@pytest.mark.parametrize("flags,words", [
    (["--bandpass", "1", "20", "--bandpass-cutoffs", "0.01", "0.3"], "not both"),
    (["--bandpass", "1", "20", "--bandpass-kind", "erf"], "bandpass-cutoffs"),
    (["--bandpass-cutoffs", "0.01", "0.3", "--bandpass-kind", "gaussian"], "erf"),
    (["--bandpass-kind", "erf"], "--bandpass-cutoffs"),
    (["--bandpass-cutoffs", "0.3", "0.1"], "low < high"),
    (["--bandpass-cutoffs", "0.01", "0.3", "--bandpass-width", "0"], "width"),
    (["--mask", "none", "--mask-radius", "5"], "mask"),
    (["--mask-radius", "-5"], "radius"),
    (["--average-neighbours", "4"], "odd"),
    (["--average-neighbours", "3", "--average-sigma", "0"], "sigma"),
])
def test_cli_bad_combinations_are_input_errors(flags, words):
    with pytest.raises(InputError, match=words):
        cli_config(*flags)


@pytest.mark.parametrize("flags", [["--pattern-binning", "0"], ["--pattern-binning", "2.5"], ["--mask", "ellipse"],
                                   ["--mask-centre", "10"], ["--mask-centre", "a,b"], ["--bandpass-kind", "box"],
                                   ["--average-kernel", "hann"], ["--average-neighbours", "-1"],
                                   ["--bandpass-cutoffs", "-0.1", "0.2"], ["--bandpass-cutoffs", "0.1"]])
def test_cli_bad_flags_are_usage_errors(flags, capsys):
    from ebsdxc.cli import _parser

    with pytest.raises(SystemExit) as e:
        _parser().parse_args(["process", "scan.h5", "--ref-index", "0", *flags])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("ebsdxc: error:") and err.count("\n") == 1
