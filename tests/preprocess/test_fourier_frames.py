"""The Fourier filters' padded frames (lengths of small factors), the dynamic background on its
band of low frequencies against the float64 filter (simulated and real patterns), integer
patterns that need no search for unusable pixels nor a conversion pass, and the GPU's one-pass
pad and division against NumPy bit for bit; on NumPy and on CuPy."""

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


@pytest.mark.parametrize("dtype", [np.uint16, np.uint8, np.int16])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_integer_patterns_give_what_the_search_for_bad_pixels_gives(be, name, dtype):
    """Integer patterns cannot hold NaN or infinity, so the search for them before a Fourier
    filter is left out for them (and on the GPU, with only filters to meet, they are converted
    as the filters read them); the results are those of the converted patterns with the search,
    bit for bit. A static background with zeros, divided by, makes NaN of its own: there the
    search runs, and the NaN stay where the background is zero instead of spreading through the
    filter."""
    config, bg_kind = CONFIGS[name]
    rng = np.random.default_rng(7)
    H, W = 41, 58
    top = np.iinfo(dtype).max
    pats = np.clip(np.round(top * (0.05 + 0.9 * kikuchi_like((H, W), 2)[None] * rng.uniform(0.8, 1.0, (3, 1, 1)))),
                   0, top).astype(dtype)
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


def _oracle_filter(x, transfer, pads):
    """Float64: reflect-padded frame, the filter's transfer on its full half spectrum, cropped."""
    (py, ay), (px, ax) = pads
    xpad = np.pad(np.asarray(x, np.float64), ((0, 0), (py, ay), (px, ax)), mode="reflect")
    out = np.fft.irfft2(np.fft.rfft2(xpad) * transfer, s=xpad.shape[-2:])
    return out[:, py:py + x.shape[1], px:px + x.shape[2]]


@pytest.mark.parametrize("shape,sigma", [((512, 512), 12.0), ((256, 200), 8.0), ((60, 80), 12.0), ((41, 58), 3.0)])
def test_low_pass_on_its_band_against_the_float64_filter(be, shape, sigma):
    """The dynamic background's blur transforms only the columns of the half spectrum where its
    transfer is above 1e-9 of its peak (52 of 301 at 512 px and 12 px), and the rows' inverse
    only for the pattern's rows. Against the whole filter in float64 on the same frame it is
    right to float32's rounding."""
    import scipy.fft

    rng = np.random.default_rng(11)
    H, W = shape
    x = (1000 + 800 * kikuchi_like(shape, 4)[None] * rng.uniform(0.7, 1.0, (3, 1, 1))
         + 300 * rng.standard_normal((3, H, W))).astype(np.float32)  # energy in every column
    pp = PatternPreprocessor(PreprocessConfig(dynamic_background_sigma=sigma), be)
    got = _host(pp._fourier_filter(be.xp.asarray(x), "dynamic", sigma))
    (key, frame), = pp._filters
    band = pp._bands[(key, frame)]
    if shape == (512, 512):
        assert band is not None and band <= 60, band  # the band path ran
    py, px = min(int(3 * sigma) + 1, H - 1), min(int(3 * sigma) + 1, W - 1)
    pads = ((py, frame[0] - H - py), (px, frame[1] - W - px))
    fy = np.fft.fftfreq(frame[0])[:, None]
    fx = np.fft.rfftfreq(frame[1])[None, :]
    transfer = np.exp(-2 * np.pi ** 2 * sigma ** 2 * (fy ** 2 + fx ** 2))
    want = _oracle_filter(x, transfer, pads)
    assert got.shape == want.shape
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < 1e-6, err  # float32 rounding: 5e-7 on the CPU; a band cut at 1e-4 gives 1.4e-6
    assert scipy.fft.next_fast_len(frame[1], real=True) == frame[1] or frame[1] - W - px == W - 1


@pytest.mark.gpu
def test_gpu_reflect_pad_and_division_match_numpy_bit_for_bit():
    """The GPU's one-pass reflect pad and fused division give NumPy's values exactly: NaN,
    zero and negative blurs, a pattern whose blur is zero throughout (its floor is zero)."""
    import cupy as cp

    from ebsdxc.preprocess import _divide_by_blur, _reflect_pad

    rng = np.random.default_rng(5)
    x = (rng.standard_normal((3, 37, 50)) * 100).astype(np.float32)
    for pads in ((3, 5, 7, 2), (36, 36, 49, 49), (0, 1, 0, 0)):
        got = _reflect_pad(cp.asarray(x), *pads, cp)
        want = np.pad(x, ((0, 0), pads[:2], pads[2:]), mode="reflect")
        np.testing.assert_array_equal(got.get(), want, err_msg=str(pads))
    from ebsdxc.preprocess import _divide_kernel, _reflect_pad_kernel

    wide = cp.empty((3, 37 + 9, 50 + 12), cp.float32)  # 64-bit indices, for arrays of 2^31 values and more
    _reflect_pad_kernel(True)(cp.asarray(x), 37, 50, 4, 7, 46, 62, wide)
    np.testing.assert_array_equal(wide.get(), np.pad(x, ((0, 0), (4, 5), (7, 5)), mode="reflect"))
    u16 = rng.integers(0, 65535, (2, 20, 30)).astype(np.uint16)  # converted in the pass
    np.testing.assert_array_equal(_reflect_pad(cp.asarray(u16), 4, 6, 5, 3, cp).get(),
                                  np.pad(u16.astype(np.float32), ((0, 0), (4, 6), (5, 3)), mode="reflect"))
    blur = (rng.standard_normal((3, 37, 50)) * 50 + 20).astype(np.float32)
    blur[0, 3, 4], blur[0, 5, 6], blur[1, 7, 8] = np.nan, 0.0, -3.0
    blur[2] = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        want = _divide_by_blur(x, blur, np)
    got = _divide_by_blur(cp.asarray(x), cp.asarray(blur), cp).get()
    np.testing.assert_array_equal(got, want)
    assert np.isnan(want[0]).all() and not np.isfinite(want[2]).any()  # NaN's max spreads, as before
    wide = cp.empty(x.shape, cp.float32)  # 64-bit indices
    floor = cp.float32(1e-6) * cp.abs(cp.asarray(blur)).max(axis=(-2, -1))
    _divide_kernel(True)(cp.asarray(x).ravel(), cp.asarray(blur).ravel(), floor, 0, 37 * 50, 50, 37, 50, wide)
    np.testing.assert_array_equal(wide.get(), want)
    # a crop of wider rows, as the filter gives it: read through its parent's pitches
    rows = cp.asarray(rng.standard_normal((3, 45, 64)).astype(np.float32) * 50 + 20)
    crop = rows[:, 4:41, 6:56]
    with np.errstate(divide="ignore", invalid="ignore"):
        want = _divide_by_blur(x, crop.get(), np)
    np.testing.assert_array_equal(_divide_by_blur(cp.asarray(x), crop, cp).get(), want)


def test_dynamic_background_of_real_patterns_against_float64(be):
    """kikuchipy's nine real Ni patterns (60x60 uint8), a 5 px dynamic background, taken on the
    band path (20 of 49 columns): against the correction in float64 on the whole spectrum, right
    to float32's rounding."""
    from real_patterns import ni_patterns

    pats = ni_patterns()
    sigma = 5.0
    pp = PatternPreprocessor(PreprocessConfig(dynamic_background_sigma=sigma), be)
    got = _host(pp(be.xp.asarray(pats)))
    (key, frame), = pp._filters
    assert pp._bands[(key, frame)] is not None
    H, W = pats.shape[1:]
    p = int(3 * sigma) + 1
    fy = np.fft.fftfreq(frame[0])[:, None]
    fx = np.fft.rfftfreq(frame[1])[None, :]
    x = pats.astype(np.float64)
    blur = _oracle_filter(x, np.exp(-2 * np.pi ** 2 * sigma ** 2 * (fy ** 2 + fx ** 2)),
                          ((p, frame[0] - H - p), (p, frame[1] - W - p)))
    want = x / np.maximum(blur, 1e-6 * np.abs(blur).max(axis=(-2, -1), keepdims=True))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)
