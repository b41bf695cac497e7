"""The Fourier filters' padded frames, and integer patterns that need no search for unusable
pixels: the same results as the general path, on NumPy and on CuPy."""

from __future__ import annotations

import numpy as np
import pytest
from preprocess_oracles import kikuchi_like

from ebsdxc.preprocess import PatternPreprocessor, PreprocessConfig


def _host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _smooth(n):
    for p in (2, 3, 5):
        while n % p == 0:
            n //= p
    return n == 1


@pytest.mark.parametrize("shape,sigma", [((512, 512), 12.0), ((256, 256), 30.0), ((41, 58), 5.0), ((16, 20), 9.0)])
def test_filter_frames_have_small_factors(be, shape, sigma):
    """At 512 px a 12 px dynamic background padded 37 px a side is 586 = 2 x 293 px: a length
    cuFFT transforms slowly. The frame is widened to a length of factors 2, 3 and 5, the margins
    kept; where the pattern is too small to reflect that far, the margins are what they were."""
    H, W = shape
    pp = PatternPreprocessor(PreprocessConfig(dynamic_background_sigma=sigma), be)
    x = be.xp.asarray(1000 + 500 * kikuchi_like(shape, 3)[None], dtype=be.xp.float32)
    out = pp(x)
    assert out.shape == (1, H, W) and bool(be.xp.isfinite(out).all())
    (key, frame), = pp._filters
    py, px = min(int(3 * sigma) + 1, H - 1), min(int(3 * sigma) + 1, W - 1)
    assert key == "dynamic" and frame[0] >= H + 2 * py and frame[1] >= W + 2 * px
    if H + 2 * py <= 2 * H - 1 and W + 2 * px <= 2 * W - 1 and min(H, W) > 32:
        assert _smooth(frame[0]) and _smooth(frame[1]), frame


CONFIGS = {
    "dynamic": (PreprocessConfig(dynamic_background_sigma=5), None),
    "bandpass": (PreprocessConfig(bandpass=(1.0, 6.0)), None),
    "mask and dynamic": (PreprocessConfig(mask="circle", dynamic_background_sigma=4), None),
    "subtract and bandpass": (PreprocessConfig(static_operation="subtract", bandpass=(0.0, 8.0)), "positive"),
    "divide by zeros and dynamic": (PreprocessConfig(static_operation="divide", dynamic_background_sigma=5), "zeros"),
    "erf": (PreprocessConfig(bandpass_kind="erf", bandpass_cutoffs=(0.02, 0.3)), None),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_integer_patterns_give_what_the_search_for_bad_pixels_gives(be, name):
    """Integer patterns cannot hold NaN or infinity, so the search for them before a Fourier
    filter is left out for them; the results are those of the search, bit for bit. A static
    background with zeros, divided by, makes NaN of its own: there the search runs, and the
    NaN stay where the background is zero instead of spreading through the filter."""
    config, bg_kind = CONFIGS[name]
    rng = np.random.default_rng(7)
    H, W = 41, 58
    pats = np.clip(np.round(200 + 3000 * kikuchi_like((H, W), 2)[None] * rng.uniform(0.8, 1.0, (3, 1, 1))),
                   0, 65535).astype(np.uint16)
    bg = None
    if bg_kind is not None:
        bg = (100 + 50 * rng.random((H, W))).astype(np.float32)
        if bg_kind == "zeros":
            bg[5, 7] = bg[30, 40] = 0.0
    pp = PatternPreprocessor(config, be, static_background=bg)
    fast = _host(pp(pats))
    searched = _host(pp.correct(pp.convert(pats)))
    np.testing.assert_array_equal(fast, searched)
    nan = np.isnan(fast)
    if bg_kind == "zeros":
        assert nan.sum() == 2 * len(pats) and nan[:, 5, 7].all() and nan[:, 30, 40].all()
    else:
        assert not nan.any()
