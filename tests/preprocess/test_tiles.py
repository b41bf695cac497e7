"""Subregion preparation: windows and prepare_tiles against a float64 NumPy oracle."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from ebsdxc import status as st
from ebsdxc.preprocess import prepare_tiles, window_1d, window_2d

# ================================================================ windows

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


# ================================================================ prepare_tiles

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
