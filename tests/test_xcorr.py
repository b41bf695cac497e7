"""The four forms against a float64 definition oracle (CPU, and on the GPU with ``pytest -m gpu``)."""

import numpy as np
import pytest
from correlation_oracles import direct_oracle
from scipy.signal import correlate2d

from ebsdxc import xcorr

SHAPES = [(1, 1), (5, 7), (16, 16), (13, 6), (33, 20)]


def oracle(left, right, max_lag=None):
    """Centred map: [ry + dy, rx + dx] = sum over the overlap of left[y, x] * right[y + dy, x + dx]."""
    h, w = left.shape
    full = correlate2d(right.astype(np.float64), left.astype(np.float64), mode="full")  # lag 0 at (h-1, w-1)
    ry, rx = (h - 1, w - 1) if max_lag is None else max_lag
    return full[h - 1 - ry:h + ry, w - 1 - rx:w + rx]


def close(got, want):
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-5 * max(np.abs(want).max(), 1e-30) + 1e-6)


@pytest.mark.parametrize("shape", SHAPES)
def test_one_to_one_full(rng, shape):
    a, b = rng.standard_normal(shape), rng.standard_normal(shape)
    got = xcorr.one_to_one(a, b)
    assert got.shape == (2 * shape[0] - 1, 2 * shape[1] - 1)
    close(got, oracle(a, b))


@pytest.mark.parametrize("shape", [(16, 16), (13, 9), (33, 20)])
@pytest.mark.parametrize("r", [1, 3])
def test_one_to_many_window(rng, shape, r):
    a = rng.standard_normal(shape)
    bs = rng.standard_normal((4, *shape))
    got = xcorr.one_to_many(a, bs, mode="window", max_shift=r)
    assert got.shape == (4, 2 * r + 1, 2 * r + 1)
    for j in range(4):
        close(got[j], oracle(a, bs[j], (r, r)))


@pytest.mark.parametrize("shape", SHAPES)
def test_n_to_mn(rng, shape):
    lefts = rng.standard_normal((3, *shape))
    rights = rng.standard_normal((2, 3, *shape))
    got = xcorr.n_to_mn(lefts, rights)
    for j in range(2):
        for k in range(3):
            close(got[j, k], oracle(lefts[k], rights[j, k]))


def test_n_to_m_is_every_pair(rng):
    lefts = rng.standard_normal((3, 9, 11))
    rights = rng.standard_normal((4, 9, 11))
    got = xcorr.n_to_m(lefts, rights, mode="window", max_shift=2)
    assert got.shape == (3, 4, 5, 5)
    for i in range(3):
        for j in range(4):
            close(got[i, j], oracle(lefts[i], rights[j], (2, 2)))


def test_peaks_find_known_shifts(rng):
    from scipy import ndimage

    big = ndimage.gaussian_filter(rng.standard_normal((80, 80)), 1.5)
    left = big[20:52, 20:52]
    shifts = [(3, -2), (-4, 5), (0, 0)]  # (dy, dx): right content sits dy, dx from the left's
    rights = np.stack([big[20 - dy:52 - dy, 20 - dx:52 - dx] for dy, dx in shifts])
    left = left - left.mean()
    rights = rights - rights.mean(axis=(1, 2), keepdims=True)
    p = xcorr.one_to_many(left, rights, peaks=True, subpixel="none", mode="window", max_shift=8)
    np.testing.assert_array_equal(p.displacement, [[dx, dy] for dy, dx in shifts])
    assert (p.status == 0).all() and p.peak_height[2] == pytest.approx(1.0, abs=1e-6)
    # Raw (unwindowed) correlation: the shrinking overlap pulls subpixel peaks a little
    # towards zero lag, so only closeness to the whole-pixel shift is asserted here.
    q = xcorr.one_to_one(left, rights[0], peaks=True, subpixel="dft")
    np.testing.assert_array_equal(np.rint(q.displacement), [-2, 3])
    assert np.abs(q.displacement - [-2, 3]).max() < 0.2


def test_bad_shapes_are_plain_errors(rng):
    with pytest.raises(ValueError, match="right matrices must be"):
        xcorr.n_to_mn(rng.standard_normal((2, 5, 5)), rng.standard_normal((3, 2, 5, 6)))
    with pytest.raises(ValueError, match="2 dimensions"):
        xcorr.one_to_one(rng.standard_normal((2, 5, 5)), rng.standard_normal((5, 5)))
    with pytest.raises(ValueError, match="max_shift"):
        xcorr.one_to_one(rng.standard_normal((5, 5)), rng.standard_normal((5, 5)), mode="window")


@pytest.mark.gpu
@pytest.mark.parametrize("engine", ["fft", "direct"])
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (13, 6), (33, 20), (64, 64)])
@pytest.mark.parametrize("mode,max_shift", [("full", None), ("window", 3)])
def test_four_forms_on_the_gpu_match_float64_oracle(rng, engine, shape, mode, max_shift):
    import cupy as cp

    h, w = shape
    ml = (h - 1, w - 1) if mode == "full" else (min(max_shift, h - 1), min(max_shift, w - 1))
    lefts = rng.standard_normal((3, h, w)).astype(np.float32)
    rights = rng.standard_normal((4, h, w)).astype(np.float32)
    opts = dict(mode=mode, max_shift=max_shift, engine=engine)
    want = direct_oracle(np.repeat(lefts[None], 4, 0).reshape(12, h, w),
                          np.repeat(rights[:, None], 3, 1).reshape(12, h, w), 12, ml)
    want = np.fft.fftshift(want, axes=(-2, -1)).reshape(4, 3, *want.shape[1:])  # centred
    got = xcorr.n_to_m(cp.asarray(lefts), cp.asarray(rights), **opts)
    assert isinstance(got, cp.ndarray) and got.shape == (3, 4, 2 * ml[0] + 1, 2 * ml[1] + 1)
    scale = np.abs(want).max()
    assert np.abs(got.get() - want.swapaxes(0, 1)).max() <= 1e-5 * scale + 1e-6
    one = xcorr.one_to_one(lefts[0], rights[0], device="cuda", **opts)  # NumPy in, NumPy out
    assert isinstance(one, np.ndarray)
    assert np.abs(one - want[0, 0]).max() <= 1e-5 * scale + 1e-6
    p = xcorr.n_to_mn(cp.asarray(lefts), cp.asarray(np.repeat(rights[:, None], 3, 1)), peaks=True, **opts)
    assert p.displacement.shape == (4, 3, 2) and isinstance(p.status, cp.ndarray)
