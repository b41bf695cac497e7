"""Tests of ebsdxc.preprocess against float64 NumPy oracles and analytic filter responses."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from ebsdxc import status as st
from ebsdxc.backend import select_backend
from ebsdxc.preprocess import (
    PatternPreprocessor,
    PreprocessConfig,
    prepare_tiles,
    window_1d,
    window_2d,
)


@pytest.fixture(scope="module")
def be():
    return select_backend("cpu")


# ---------------------------------------------------------------- windows

@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 16, 33, 96])
def test_window_1d(n):
    w = window_1d(n)
    assert w.shape == (n,) and w.dtype == np.float64
    if n <= 2:
        np.testing.assert_array_equal(w, np.ones(n))
    else:
        k = np.arange(n)
        np.testing.assert_allclose(w, 0.5 - 0.5 * np.cos(2 * np.pi * k / (n - 1)), atol=1e-15)
        np.testing.assert_allclose(w, w[::-1], atol=1e-15)  # symmetric
        assert w.max() <= 1.0 + 1e-15
    np.testing.assert_array_equal(window_1d(n, "none"), np.ones(n))


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (7, 7), (13, 6), (16, 33), (1, 9)])
@pytest.mark.parametrize("kind", ["hann", "none"])
def test_window_2d(shape, kind):
    h, w = shape
    win = window_2d(shape, kind)
    assert win.shape == shape and win.dtype == np.float32
    expected = np.outer(window_1d(h, kind), window_1d(w, kind))
    np.testing.assert_allclose(win, expected, rtol=1e-7, atol=1e-7)


# ---------------------------------------------------------------- prepare_tiles

def prepare_oracle(tiles, window):
    """float64 reference: zero mean, window, energy, status."""
    t = np.asarray(tiles, dtype=np.float64)
    finite = np.isfinite(t).all(axis=(-2, -1))
    tz = np.where(finite[..., None, None], t, 0.0)
    constant = (tz.max(axis=(-2, -1)) == tz.min(axis=(-2, -1)))
    p = (tz - tz.mean(axis=(-2, -1), keepdims=True)) * window.astype(np.float64)
    status = np.where(~finite, st.NOT_FINITE, np.where(constant, st.CONSTANT_TILE, st.OK)).astype(np.uint8)
    p = np.where((status == st.OK)[..., None, None], p, 0.0)
    return p, (p * p).sum(axis=(-2, -1)), status


@pytest.mark.parametrize("lead", [(5,), (2, 3), (1, 1)])
@pytest.mark.parametrize("shape", [(3, 5), (7, 7), (13, 6), (16, 33), (1, 9), (45, 52)])
@pytest.mark.parametrize("kind", ["hann", "none"])
@pytest.mark.parametrize("offset", [0.0, 1000.0])
def test_prepare_tiles_matches_oracle(lead, shape, kind, offset):
    rng = np.random.default_rng(zlib.crc32(repr((lead, shape, kind, offset)).encode()))
    tiles = (offset + 10 * rng.standard_normal(lead + shape)).astype(np.float32)
    win = window_2d(shape, kind)
    before = tiles.copy()
    p, e, s = prepare_tiles(tiles, win)
    np.testing.assert_array_equal(tiles, before)  # the input is left alone
    po, eo, so = prepare_oracle(tiles, win)
    assert p.shape == tiles.shape and p.dtype == np.float32
    assert e.shape == lead and e.dtype == np.float32
    assert s.shape == lead and s.dtype == np.uint8
    np.testing.assert_array_equal(s, so)
    scale = np.abs(tiles).max()
    np.testing.assert_allclose(p, po, rtol=0, atol=2e-6 * scale)
    np.testing.assert_allclose(e, eo, rtol=1e-4, atol=1e-6 * scale**2)
    # zero mean before the window (window "none": exactly the prepared tile)
    if kind == "none":
        assert np.abs(p.astype(np.float64).mean(axis=(-2, -1))).max() <= 1e-6 * scale


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int32, np.float64])
def test_prepare_tiles_input_dtypes(dtype):
    rng = np.random.default_rng(3)
    tiles = rng.integers(0, 250, size=(4, 11, 14)).astype(dtype)
    win = window_2d((11, 14))
    p, e, s = prepare_tiles(tiles, win)
    po, eo, so = prepare_oracle(tiles, win)
    np.testing.assert_array_equal(s, so)
    np.testing.assert_allclose(p, po, atol=1e-3)
    np.testing.assert_allclose(e, eo, rtol=1e-5)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("shape", [(3, 5), (16, 33), (1, 2)])
def test_prepare_tiles_not_finite(bad, shape):
    rng = np.random.default_rng(5)
    tiles = rng.standard_normal((3, 4) + shape).astype(np.float32)
    h, w = shape
    tiles[1, 2, h // 2, w - 1] = bad  # one bad pixel
    tiles[2, 0, 0, 0] = bad
    win = window_2d(shape)
    p, e, s = prepare_tiles(tiles, win)
    expected = np.zeros((3, 4), np.uint8)
    expected[1, 2] = expected[2, 0] = st.NOT_FINITE
    np.testing.assert_array_equal(s, expected)
    assert np.all(np.isfinite(p)) and np.all(np.isfinite(e))
    assert np.all(p[1, 2] == 0) and np.all(p[2, 0] == 0)
    assert e[1, 2] == 0 and e[2, 0] == 0
    # the good tiles are untouched by the bad ones
    po, eo, so = prepare_oracle(tiles, win)
    np.testing.assert_allclose(p, po, atol=1e-5)


@pytest.mark.parametrize("value", [0.0, 1.0, -3.5, 1e-20, 255.0, 60000.0, 65535.0, 1e6, -2.5e7])
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (16, 33), (96, 96), (45, 52)])
def test_prepare_tiles_constant(value, shape):
    rng = np.random.default_rng(9)
    tiles = rng.standard_normal((2, 3) + shape).astype(np.float32) * 10 + 100
    tiles[0, 1] = value
    tiles[1, 2] = value
    p, e, s = prepare_tiles(tiles, window_2d(shape))
    expected = np.zeros((2, 3), np.uint8)
    expected[0, 1] = expected[1, 2] = st.CONSTANT_TILE
    if shape == (1, 1):  # a single pixel never has contrast
        expected[:] = st.CONSTANT_TILE
    np.testing.assert_array_equal(s, expected)
    assert np.all(p[s != st.OK] == 0)
    assert np.all(np.isfinite(p))


def test_prepare_tiles_small_contrast_is_not_constant():
    # a tile of 60000 + small steps is real contrast (uint16 counts), not constant
    rng = np.random.default_rng(11)
    tiles = (60000 + rng.integers(0, 8, size=(3, 32, 40))).astype(np.float32)
    p, e, s = prepare_tiles(tiles, window_2d((32, 40)))
    np.testing.assert_array_equal(s, st.OK)
    po, eo, _ = prepare_oracle(tiles, window_2d((32, 40)))
    np.testing.assert_allclose(p, po, atol=0.02)
    np.testing.assert_allclose(e, eo, rtol=0.02)


# ---------------------------------------------------------------- PatternPreprocessor

def test_identity_returns_float32(be):
    rng = np.random.default_rng(1)
    pats = rng.integers(0, 4000, size=(2, 17, 23)).astype(np.uint16)
    pp = PatternPreprocessor(PreprocessConfig(), be)
    assert pp.is_identity
    out = pp(pats)
    assert out.dtype == np.float32 and out.shape == pats.shape
    np.testing.assert_array_equal(out, pats.astype(np.float32))


@pytest.mark.parametrize("shape", [(17, 23), (40, 40), (1, 5)])
def test_static_background(be, shape):
    rng = np.random.default_rng(2)
    pats = rng.uniform(10, 200, size=(3,) + shape)
    bg = rng.uniform(5, 50, size=shape)
    out = PatternPreprocessor(PreprocessConfig(static_operation="subtract"), be, static_background=bg)(pats)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, pats - bg, rtol=1e-5, atol=1e-4)
    pp = PatternPreprocessor(PreprocessConfig(static_operation="divide"), be, static_background=bg)
    assert not pp.is_identity
    out = pp(pats)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, pats / bg, rtol=1e-5)


def test_static_divide_by_nonpositive_background_is_nan(be):
    pats = np.full((2, 4, 5), 10.0)
    bg = np.full((4, 5), 2.0)
    bg[1, 2] = 0.0
    bg[3, 4] = -1.0
    out = PatternPreprocessor(PreprocessConfig(static_operation="divide"), be, static_background=bg)(pats)
    assert np.isnan(out[:, 1, 2]).all() and np.isnan(out[:, 3, 4]).all()
    mask = np.ones((4, 5), bool)
    mask[1, 2] = mask[3, 4] = False
    np.testing.assert_allclose(out[:, mask], 5.0, rtol=1e-6)


def kikuchi_like(shape, seed):
    """Smooth band texture around 1 (Kikuchi bands: Gaussian-profile lines)."""
    H, W = shape
    y, x = np.mgrid[0:H, 0:W].astype(float)
    rng = np.random.default_rng(seed)
    tex = np.ones(shape)
    for _ in range(12):
        th, off = rng.uniform(0, np.pi), rng.uniform(-60, 60)
        wd, a = rng.uniform(2, 5), rng.uniform(0.1, 0.3)
        d = (x - W / 2) * np.cos(th) + (y - H / 2) * np.sin(th) - off
        tex += a * np.exp(-d**2 / (2 * wd**2))
    return tex


def large_scale(im, sigma=12.0):
    from scipy import ndimage

    return ndimage.gaussian_filter(np.asarray(im, dtype=np.float64), sigma, mode="reflect")


@pytest.mark.parametrize("shape", [(90, 121), (101, 80)])
def test_dynamic_background_removes_broad_variation(be, shape):
    H, W = shape
    y, x = np.mgrid[0:H, 0:W].astype(float)
    tex = kikuchi_like(shape, 1)
    bg = np.exp(-((x - 0.6 * W) ** 2 + (y - 0.4 * H) ** 2) / (2 * (0.35 * W) ** 2))
    pat = 200 * tex * bg
    out = PatternPreprocessor(PreprocessConfig(dynamic_background_sigma=8), be)(pat[None])[0]
    assert out.dtype == np.float32 and np.all(np.isfinite(out))
    m = 15
    inner = (slice(m, H - m), slice(m, W - m))
    before, after = large_scale(pat)[inner], large_scale(out)[inner]
    cv_before = before.std() / before.mean()
    cv_after = after.std() / after.mean()
    assert cv_before > 0.15  # the test pattern really has a broad background
    assert cv_after < 0.05, cv_after
    assert cv_after < cv_before / 5
    assert after.max() / after.min() < 1.25
    # the band texture survives: much better correlated with it than the raw pattern
    r_after = np.corrcoef(out[inner].ravel(), tex[inner].ravel())[0, 1]
    r_before = np.corrcoef(pat[inner].ravel(), tex[inner].ravel())[0, 1]
    assert r_after > 0.8 and r_after > r_before + 0.2


@pytest.mark.parametrize("sigma", [3.0, 6.0])
def test_dynamic_background_exponential_ramp(be, sigma):
    # Gaussian blur of exp(a.x) is exp(a.x) exp(|a|^2 sigma^2 / 2): the ratio is constant.
    H, W = 70, 95
    y, x = np.mgrid[0:H, 0:W].astype(float)
    a = np.array([0.031, -0.017])
    pat = 50 * np.exp(a[0] * x + a[1] * y)
    out = PatternPreprocessor(PreprocessConfig(dynamic_background_sigma=sigma), be)(np.stack([pat, 3 * pat]))
    expected = np.exp(-(a @ a) * sigma**2 / 2)
    m = int(4 * sigma) + 2
    np.testing.assert_allclose(out[:, m:H - m, m:W - m], expected, rtol=2e-4)
    # a flat pattern divided by its own blur is 1 everywhere, edges included
    flat = PatternPreprocessor(PreprocessConfig(dynamic_background_sigma=sigma), be)(np.full((1, H, W), 123.0))
    np.testing.assert_allclose(flat, 1.0, rtol=1e-4)


def _two_sinusoids(shape):
    H, W = shape
    y, x = np.mgrid[0:H, 0:W].astype(float)
    fl, fh = np.array([1 / 60, 1 / 80]), np.array([1 / 3.7, -1 / 5.3])
    low = np.cos(2 * np.pi * (fl[0] * x + fl[1] * y) + 0.3)
    high = 0.7 * np.cos(2 * np.pi * (fh[0] * x + fh[1] * y) + 1.1)
    return low, high, fl, fh


def _gauss_transfer(f, s):
    return np.exp(-2 * np.pi**2 * s**2 * (f @ f)) if s else 1.0


@pytest.mark.parametrize("shape", [(90, 121), (77, 64)])
@pytest.mark.parametrize("bandpass", [(2.0, 0.0), (0.0, 2.0), (1.5, 3.0), (3.0, 0.0), (0.0, 4.0)])
def test_bandpass_sinusoids(be, shape, bandpass):
    H, W = shape
    low, high, fl, fh = _two_sinusoids(shape)
    pat = 5 + low + high
    out = PatternPreprocessor(PreprocessConfig(bandpass=bandpass), be)(pat[None])[0]
    assert out.dtype == np.float32
    lo, hi = bandpass
    # Exact response of a Gaussian low-pass G_lo and high-pass 1 - G_hi to each sinusoid.
    t_low = _gauss_transfer(fl, lo) * ((1 - _gauss_transfer(fl, hi)) if hi else 1)
    t_high = _gauss_transfer(fh, lo) * ((1 - _gauss_transfer(fh, hi)) if hi else 1)
    dc = 0.0 if hi else 5.0
    m = int(4 * max(bandpass)) + 2
    inner = (slice(m, H - m), slice(m, W - m))
    np.testing.assert_allclose(out[inner], (dc + t_low * low + t_high * high)[inner], atol=1e-4)
    res = out - dc
    if lo >= 2:  # low-pass alone: the fine sinusoid is gone, the coarse one stays
        assert np.abs(res - t_low * low)[inner].max() < 1e-3
        assert t_low > 0.9
    if hi and not lo and hi <= 2:  # high-pass alone: the coarse sinusoid is (mostly) gone
        assert np.abs(res - high)[inner].max() < 0.04
    if lo and hi:  # band-pass (1.5, 3) keeps neither strongly
        assert np.abs(res)[inner].max() < 0.1


@pytest.mark.parametrize("config", [PreprocessConfig(dynamic_background_sigma=5),
                                    PreprocessConfig(bandpass=(1.0, 6.0)),
                                    PreprocessConfig(dynamic_background_sigma=4, bandpass=(0.0, 8.0))])
def test_input_dtypes_give_same_result(be, config):
    rng = np.random.default_rng(4)
    H, W = 41, 58
    base = np.round(60 + 120 * kikuchi_like((H, W), 2)[None] * rng.uniform(0.8, 1.0, (2, 1, 1)))
    base = np.clip(base, 0, 255)
    outs = [PatternPreprocessor(config, be)(base.astype(dt)) for dt in
            (np.uint8, np.uint16, np.float32, np.float64)]
    for o in outs:
        assert o.dtype == np.float32 and o.shape == (2, H, W)
        np.testing.assert_allclose(o, outs[0], rtol=1e-6, atol=1e-6)


def test_batch_items_processed_independently(be):
    rng = np.random.default_rng(6)
    pats = rng.uniform(1, 100, size=(3, 30, 37)) * np.array([1, 50, 0.01])[:, None, None]
    pp = PatternPreprocessor(PreprocessConfig(dynamic_background_sigma=4, bandpass=(1.0, 5.0)), be)
    batch = pp(pats)
    for b in range(3):
        np.testing.assert_allclose(batch[b], pp(pats[b:b + 1])[0], rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- config validation

@pytest.mark.parametrize("kwargs", [
    dict(static_operation="multiply"),
    dict(window="hamming"),
    dict(dynamic_background_sigma=0),
    dict(dynamic_background_sigma=-2.0),
    dict(dynamic_background_sigma=float("nan")),
    dict(bandpass=(-1.0, 2.0)),
    dict(bandpass=(3.0, 2.0)),
    dict(bandpass=(2.0, 2.0)),
    dict(bandpass=(0.0, -1.0)),
])
def test_config_validation(kwargs):
    with pytest.raises(ValueError):
        PreprocessConfig(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(), dict(static_operation="divide"), dict(window="none"),
                                    dict(dynamic_background_sigma=0.5), dict(bandpass=(0.0, 2.0)),
                                    dict(bandpass=(2.0, 0.0)), dict(bandpass=(1.0, 10.0))])
def test_config_valid(kwargs):
    PreprocessConfig(**kwargs)
