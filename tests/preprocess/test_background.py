"""Static and dynamic background correction against closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from preprocess_oracles import kikuchi_like

from ebsdxc.backend import select_backend
from ebsdxc.preprocess import PatternPreprocessor, PreprocessConfig


@pytest.fixture(scope="module")
def be():
    # CPU only: overrides the NumPy / CuPy `be` of conftest.py.
    return select_backend("cpu")


# ================================================================ static background

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


# ================================================================ dynamic background

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
