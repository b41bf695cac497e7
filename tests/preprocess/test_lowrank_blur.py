"""The dynamic background's blur as matrix products of low rank (ebsdxc.lowrank_blur): its
factors against the float64 filter (CPU), its kernels against float64 products and means, the
blur against the float64 filter, and a pattern's blur the same bits whatever its batch (GPU)."""

from __future__ import annotations

import numpy as np
import pytest
from preprocess_oracles import kikuchi_like

from ebsdxc.lowrank_blur import MAX_RANK, lowpass_factors, with_mean_slot
from ebsdxc.preprocess import BAND_TOLERANCE, PatternPreprocessor, PreprocessConfig


def _axis_operator(n, before, after, sigma):
    """Float64 matrix of one axis of the low-pass: reflect pad, the Gaussian on the whole
    spectrum of the padded line, crop."""
    X = np.pad(np.eye(n), ((before, after), (0, 0)), mode="reflect")
    g = np.exp(-2 * np.pi ** 2 * sigma ** 2 * np.fft.rfftfreq(X.shape[0]) ** 2)
    return np.fft.irfft(np.fft.rfft(X, axis=0) * g[:, None], n=X.shape[0], axis=0)[before:before + n]


@pytest.mark.parametrize("n,before,after,sigma,rank", [(512, 37, 51, 12.0, 103), (200, 25, 31, 8.0, 65),
                                                       (60, 16, 16, 5.0, 37), (16, 15, 15, 9.0, 11),
                                                       (7, 3, 2, 50.0, 1)])
def test_lowpass_factors_are_the_filter_on_one_axis(n, before, after, sigma, rank):
    """Each axis of the low-pass (pad, Gaussian, crop) is G @ F of rank 2K - 1 for the K
    frequencies above 1e-9 of the peak, the pad folded into F; against the filter on the whole
    spectrum in float64."""
    F, G = lowpass_factors(n, before, after, sigma, BAND_TOLERANCE)
    assert F.shape == (rank, n) and G.shape == (n, rank)
    A = _axis_operator(n, before, after, sigma)
    assert np.abs(G @ F - A).max() < 1e-9 * np.abs(A).max()


def test_lowpass_factors_refuse_a_band_with_the_nyquist_frequency():
    assert lowpass_factors(64, 7, 9, 1.0, BAND_TOLERANCE) is None


def test_the_mean_slot_gives_the_blur_of_the_uncentred_pattern():
    """Centred patterns, the mean put in the spare slot: the four products give the blur of the
    pattern itself (float64, CPU: the algebra the GPU's kernels run in float32)."""
    rng = np.random.default_rng(1)
    H, W, pads, sigma = 60, 80, ((16, 20), (16, 24)), 5.0
    x = 30000 + 500 * kikuchi_like((H, W), 3) + 20 * rng.standard_normal((H, W))
    fy = lowpass_factors(H, *pads[0], sigma, BAND_TOLERANCE)
    fx = lowpass_factors(W, *pads[1], sigma, BAND_TOLERANCE)
    Fy, FxT, Gy, GxT = with_mean_slot(fy, fx)
    m = x.mean()
    T = Fy @ (x - m) @ FxT
    assert abs(T[len(fy[0]), len(fx[0])]) < 1e-9 * np.abs(T).max()  # the slot is free
    T[len(fy[0]), len(fx[0])] = m
    want = _axis_operator(H, *pads[0], sigma) @ x @ _axis_operator(W, *pads[1], sigma).T
    assert np.abs(Gy @ T @ GxT - want).max() < 1e-9 * np.abs(want).max()


# ------------------------------------------------------------------------------------ GPU

_DTYPES = [np.float32, np.uint16, np.int16, np.uint8, np.int32, np.uint32]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("M,N,K,shared", [(130, 97, 19, "b"), (1, 1, 1, "b"), (256, 128, 8, "a"),
                                          (300, 513, 129, "b"), (104, 104, 512, "a"), (200, 62, 100, "b"),
                                          (129, 64, 65, "a"), (77, 65, 7, "b")])
def test_gpu_batched_products_against_float64(dtype, M, N, K, shared):
    """The blur's product kernel: (A[b] - shift[b]) @ B[b] for any M, N, K (tiles of 128 x 128,
    or 128 x 64 up to 64 columns, over steps of 8 in k), one operand shared by every pattern
    (batch stride 0), against float64."""
    import cupy as cp

    from ebsdxc.lowrank_blur import _products

    rng = np.random.default_rng(M + N + K)
    batch = 3
    if np.dtype(dtype).kind == "f":
        a = rng.standard_normal((batch, M, K)).astype(dtype) * 100
    else:
        info = np.iinfo(dtype)
        a = rng.integers(max(info.min, -30000), min(info.max, 60000), (batch, M, K), endpoint=True).astype(dtype)
    b = rng.standard_normal((batch, K, N)).astype(np.float32)
    shift = rng.uniform(-50, 50, batch).astype(np.float32)
    if shared == "a":  # the factors on the left: A shared, no shift
        a, shift = a[:1], None
        got = _products(cp.asarray(a[0].astype(np.float32)), 0, K, None, cp.asarray(b), K * N, N, M, N, K, batch,
                        "float").get()
        want = a[0].astype(np.float64) @ b.astype(np.float64)
        mag = np.abs(a[0].astype(np.float64)) @ np.abs(b.astype(np.float64))
    else:
        from ebsdxc.lowrank_blur import _TYPES

        got = _products(cp.asarray(a), M * K, K, cp.asarray(shift), cp.asarray(b[0]), 0, N, M, N, K, batch,
                        _TYPES[np.dtype(dtype)]).get()
        centred = a.astype(np.float64) - shift.astype(np.float64)[:, None, None]
        want = centred @ b[0].astype(np.float64)
        mag = np.abs(centred) @ np.abs(b[0].astype(np.float64))
    assert got.shape == (batch, M, N)
    # float32 sums of K terms, in order: within K * eps of the sum of magnitudes
    assert (np.abs(got - want) <= 2 * (K + 2) * np.finfo(np.float32).eps * mag + 1e-30).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", _DTYPES)
def test_gpu_pattern_means_against_float64(dtype):
    import cupy as cp

    from ebsdxc.kernel_loader import get_function
    from ebsdxc.lowrank_blur import _MEANS, _TYPES

    rng = np.random.default_rng(2)
    x = (rng.random((5, 37, 53)) * 200).astype(dtype)
    x[2] = 0
    mean = cp.empty(5, dtype=cp.float32)
    get_function("lowrank_blur.cu", f"pattern_means<{_TYPES[np.dtype(dtype)]}>", name_expressions=_MEANS)(
        (5,), (256,), (cp.asarray(x), np.int64(37 * 53), mean))
    np.testing.assert_array_equal(mean.get(), x.astype(np.float64).mean(axis=(1, 2)).astype(np.float32))


def _patterns(shape, n, level, dtype, seed=3):
    rng = np.random.default_rng(seed)
    x = level + 100 * kikuchi_like(shape, 4)[None] * rng.uniform(0.7, 1.0, (n, 1, 1))
    return np.round(x + 20 * rng.standard_normal((n, *shape))).astype(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("shape,sigma,dtype,level", [((512, 512), 12.0, np.uint16, 1000.0),
                                                     ((256, 200), 8.0, np.float32, 1000.0),
                                                     ((60, 80), 12.0, np.float32, 60000.0),
                                                     ((300, 257), 20.0, np.uint16, 50000.0)])
def test_gpu_blur_as_matrix_products_against_float64(shape, sigma, dtype, level):
    """On the GPU the dynamic background's blur is four matrix products, each pattern centred
    on its mean first: against the filter on the whole spectrum in float64, right to float32's
    rounding of the blur and of the pattern's contrast (a pattern at 60,000 counts with a
    contrast of 100 too)."""
    import cupy as cp

    from ebsdxc.backend import select_backend

    H, W = shape
    x = _patterns(shape, 3, level, dtype)
    pp = PatternPreprocessor(PreprocessConfig(dynamic_background_sigma=sigma), select_backend("cuda"))
    got = pp._fourier_filter(cp.asarray(x), "dynamic", sigma).get()
    (k, blur), = pp._low_rank.items()
    assert blur is not None  # the products ran
    (py, ay), (px, ax) = k[1]
    want = _axis_operator(H, py, ay, sigma) @ x.astype(np.float64) @ _axis_operator(W, px, ax, sigma).T
    err = np.abs(got - want).max()
    top = np.abs(want).max()
    assert err < 1e-6 * top, err
    # Not centred, the products' rounding would scale with the level (60,000 counts: 0.035).
    bound = 1e-5 * np.ptp(want, axis=(1, 2)).min() + 2 * np.finfo(np.float32).eps * top
    assert err < bound, (err, bound)


@pytest.mark.gpu
def test_gpu_blur_of_a_pattern_is_the_same_bits_in_any_batch():
    """A pattern's blur does not depend on the batch it comes in: alone, among 300 others, at
    another place in its batch (a run halves its batches after running out of memory, and a Dask
    run must give a single process's bits)."""
    import cupy as cp

    from ebsdxc.backend import select_backend

    x = _patterns((512, 512), 300, 1000.0, np.uint16, seed=9)
    pp = PatternPreprocessor(PreprocessConfig(dynamic_background_sigma=12.0), select_backend("cuda"))
    whole = pp._fourier_filter(cp.asarray(x), "dynamic", 12.0).get()
    assert next(iter(pp._low_rank.values())) is not None
    for idx in ([0], [299], [5, 17, 250], list(range(299, 200, -1))):
        part = pp._fourier_filter(cp.asarray(x[idx]), "dynamic", 12.0).get()
        assert part.tobytes() == whole[idx].tobytes(), idx
    # and the whole correction, through the run's preprocessing
    np.testing.assert_array_equal(pp(cp.asarray(x[7:9])).get(), pp(cp.asarray(x)).get()[7:9])


@pytest.mark.gpu
def test_gpu_blur_of_more_patterns_than_a_launch_takes():
    """A launch's grid takes 65,535 patterns; more are blurred in parts, the same bits."""
    import cupy as cp

    from ebsdxc.backend import select_backend

    x = _patterns((16, 20), 65_540, 500.0, np.uint16, seed=4)
    pp = PatternPreprocessor(PreprocessConfig(dynamic_background_sigma=9.0), select_backend("cuda"))
    got = pp._fourier_filter(cp.asarray(x), "dynamic", 9.0)
    assert next(iter(pp._low_rank.values())) is not None
    tail = pp._fourier_filter(cp.asarray(x[-7:]), "dynamic", 9.0)
    assert got[-7:].get().tobytes() == tail.get().tobytes()


@pytest.mark.gpu
def test_gpu_blur_of_high_rank_keeps_the_transforms():
    """Where an axis's operator would have a rank over MAX_RANK (600 px, 5 px: 259) the blur
    stays with the band's FFTs."""
    import cupy as cp

    from ebsdxc.backend import select_backend

    assert MAX_RANK < 259
    rng = np.random.default_rng(4)
    x = (1000 + 300 * rng.standard_normal((2, 600, 600))).astype(np.float32)
    pp = PatternPreprocessor(PreprocessConfig(dynamic_background_sigma=5.0), select_backend("cuda"))
    got = pp._fourier_filter(cp.asarray(x), "dynamic", 5.0).get()
    (k, blur), = pp._low_rank.items()
    assert blur is None
    (py, ay), (px, ax) = k[1]
    want = _axis_operator(600, py, ay, 5.0) @ x.astype(np.float64) @ _axis_operator(600, px, ax, 5.0).T
    assert np.abs(got - want).max() < 1e-6 * np.abs(want).max()


@pytest.mark.gpu
def test_gpu_blur_refuses_patterns_of_another_size():
    import cupy as cp

    from ebsdxc.lowrank_blur import LowRankBlur

    blur = LowRankBlur(lowpass_factors(60, 16, 16, 5.0, BAND_TOLERANCE), lowpass_factors(80, 16, 20, 5.0,
                                                                                         BAND_TOLERANCE))
    with pytest.raises(ValueError, match="60x80"):
        blur(cp.zeros((2, 60, 81), dtype=cp.float32))
