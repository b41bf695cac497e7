"""The fused CUDA kernels of ebsdxc.engines.gpu_ops (tile preparation, peak search, DFT
refinement) against CPU float64 oracles (run with ``pytest -m gpu``)."""

import numpy as np
import pytest

from ebsdxc import status as st
from ebsdxc.peaks import locate_peaks, window_autocorrelation, window_power_spectrum
from ebsdxc.preprocess import window_1d, window_2d

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


def _oracle_prepare(patterns, origins, tile, window):
    h, w = tile
    out, energy = [], []
    for p in patterns.astype(np.float64):
        for x0, y0 in origins:
            t = p[y0:y0 + h, x0:x0 + w]
            t = (t - t.mean()) * window
            out.append(t)
            energy.append((t * t).sum())
    return np.array(out), np.array(energy)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.float32, np.float64])
@pytest.mark.parametrize("tile", [(1, 1), (7, 13), (17, 5), (33, 64), (96, 96), (128, 128), (200, 210), (256, 256)])
def test_prepare_tiles_kernel_matches_float64_oracle(cp, rng, dtype, tile):
    """Both kernels (for 1- and 2-byte values the one compiled for the tile's shape: 128 and 1024
    threads, shapes that do and do not divide into the warps and lanes) against NumPy in float64."""
    from ebsdxc.engines.gpu_ops import prepare_tiles_padded

    h, w = tile
    H, W = h + 23, w + 31
    B, n = 3, 5
    hi = {np.uint8: 250, np.int16: 30000}.get(dtype, 60000)
    patterns = rng.uniform(-hi if dtype == np.int16 else 0, hi, (B, H, W)).astype(dtype)
    origins = np.stack([rng.integers(0, W - w + 1, n), rng.integers(0, H - h + 1, n)], axis=1).astype(np.int32)
    win = np.outer(window_1d(h), window_1d(w))
    Ny, Nx = h + 4, w + 9
    frames = cp.zeros((B * n, Ny, Nx), dtype=cp.float32)
    energy, status = prepare_tiles_padded(cp.asarray(patterns), cp.asarray(origins), tile,
                                          cp.asarray(win, dtype=cp.float32), frames)
    ref, ref_e = _oracle_prepare(patterns, origins, tile, win)
    got = frames.get()
    ok = ref_e > 0
    scale = np.abs(ref).max()
    if h * w > 1:
        assert ok.all()
        np.testing.assert_allclose(got[:, :h, :w], ref, atol=2e-5 * scale)
        np.testing.assert_allclose(energy.get(), ref_e, rtol=1e-4)
        assert (status.get() == st.OK).all()
    else:  # a 1x1 tile has no contrast
        assert (status.get() == st.CONSTANT_TILE).all()
    pad = got.copy()
    pad[:, :h, :w] = 0
    assert not pad.any(), "the kernel wrote outside the tile"


def test_prepare_tiles_kernel_flags_nan_and_constant_tiles(cp, rng):
    from ebsdxc.engines.gpu_ops import prepare_tiles_padded

    patterns = rng.uniform(0, 1000, (2, 40, 40)).astype(np.float32)
    patterns[0, 2, 3] = np.nan
    patterns[1, 20:30, 20:30] = 777.0
    origins = np.array([[0, 0], [20, 20]], dtype=np.int32)
    frames = cp.full((4, 12, 12), 0, dtype=cp.float32)
    frames[:] = 0
    energy, status = prepare_tiles_padded(cp.asarray(patterns), cp.asarray(origins), (10, 10),
                                          cp.asarray(window_2d((10, 10))), frames)
    assert status.get().tolist() == [st.NOT_FINITE, st.OK, st.OK, st.CONSTANT_TILE]
    f = frames.get()
    assert not f[0].any() and not f[3].any() and np.isfinite(f).all()


@pytest.mark.parametrize("dtype,tile", [(np.uint16, (256, 256)), (np.uint16, (128, 128)), (np.uint8, (200, 210)),
                                        (np.int16, (64, 64)), (np.float32, (128, 128))])
def test_tile_statistics_are_those_of_the_prepared_tiles_bit_for_bit(cp, rng, dtype, tile):
    """The statistics-only pass and the pass that writes the tiles take the same kernel, so
    the fused engine's tiles (prepared from that mean as they load) are prepare_tiles' own;
    a constant tile is flagged in both."""
    from ebsdxc.engines.gpu_ops import _tile_kernel, prepare_tiles_padded, tile_statistics

    h, w = tile
    patterns = rng.uniform(0, 250 if dtype == np.uint8 else 20000, (2, h + 40, w + 30)).astype(dtype)
    patterns[1, 5:5 + h, 7:7 + w] = 9
    origins = np.array([[0, 0], [7, 5], [30, 40]], dtype=np.int32)
    win = cp.asarray(window_2d(tile))
    frames = cp.zeros((6, h, w), dtype=cp.float32)
    e1, s1 = prepare_tiles_padded(cp.asarray(patterns), cp.asarray(origins), tile, win, frames)
    _, mean, e2, s2 = tile_statistics(cp.asarray(patterns), cp.asarray(origins), tile, win)
    np.testing.assert_array_equal(e1.get(), e2.get())
    assert s1.get().tolist() == s2.get().tolist() == [st.OK] * 4 + [st.CONSTANT_TILE, st.OK]
    for t in range(6):
        b, k = divmod(t, 3)
        x0, y0 = origins[k]
        want = patterns[b, y0:y0 + h, x0:x0 + w].astype(np.float64).mean()
        assert float(mean.get()[t]) == pytest.approx(want, rel=1e-6)
    shaped = _tile_kernel(dtype, h, w, smem_limit=227 * 1024)[0].startswith("prepare_tiles_shaped")
    assert shaped == (np.dtype(dtype).itemsize <= 2)


@pytest.mark.parametrize("dtype,tile", [(np.uint16, (96, 96)), (np.int16, (64, 64)), (np.uint8, (33, 40)),
                                        (np.uint16, (300, 300))])
def test_integer_values_are_converted_exactly(cp, rng, dtype, tile):
    """Integer patterns of the full range, extremes included, become the float32 tiles NumPy's
    float32 arithmetic gives from the kernel's own mean, bit for bit (the tile pass converts
    1- and 2-byte integers without the conversion instruction; 300x300 uint16 takes the plain
    kernel, the others the one compiled for their shape), and their mean is the exact integer sum's."""
    from ebsdxc.engines.gpu_ops import _tile_kernel, prepare_tiles_padded, tile_statistics

    h, w = tile
    info = np.iinfo(dtype)
    patterns = rng.integers(info.min, info.max, (2, h + 9, w + 5), endpoint=True).astype(dtype)
    patterns[:, ::7, ::5] = info.max
    patterns[:, 3::11, 2::3] = info.min
    origins = np.array([[0, 0], [5, 9]], dtype=np.int32)
    win = window_2d(tile).astype(np.float32)
    frames = cp.zeros((4, h, w), dtype=cp.float32)
    prepare_tiles_padded(cp.asarray(patterns), cp.asarray(origins), tile, cp.asarray(win), frames)
    _, mean, _, _ = tile_statistics(cp.asarray(patterns), cp.asarray(origins), tile, cp.asarray(win))
    mean, got = mean.get(), frames.get()
    for t in range(4):
        b, k = divmod(t, 2)
        x0, y0 = origins[k]
        roi = patterns[b, y0:y0 + h, x0:x0 + w]
        assert mean[t] == np.float32(roi.astype(np.int64).sum() / roi.size)
        np.testing.assert_array_equal(got[t], (roi.astype(np.float32) - mean[t]) * win)
    shaped = _tile_kernel(dtype, h, w, smem_limit=227 * 1024)[0].startswith("prepare_tiles_shaped")
    assert shaped == (h * w * np.dtype(dtype).itemsize <= 160 * 1024)


def _smooth_maps(rng, T, shape):
    from scipy import ndimage

    m = rng.standard_normal((T, *shape))
    m = ndimage.gaussian_filter(m, (0, 1.5, 1.5), mode="wrap")
    return m.astype(np.float32)


@pytest.mark.parametrize("method", ["none", "parabolic", "gaussian", "quadratic"])
@pytest.mark.parametrize("shape,max_lag", [((16, 16), (15, 15)), ((23, 40), (5, 7)),
                                           ((191, 192), (95, 95)), ((9, 9), (1, 1)), ((1, 7), (0, 3))])
@pytest.mark.parametrize("compensate", [False, True])
def test_find_peaks_kernel_matches_numpy(cp, rng, method, shape, max_lag, compensate):
    from ebsdxc.engines.gpu_ops import find_peaks

    corr = _smooth_maps(rng, 64, shape)
    corr[0] = 1.0  # all ties: first lag in row-major order wins
    spectra = None
    lags = None
    if compensate:
        hy, hx = max(shape[0] // 2, 1), max(shape[1] // 2, 1)
        spectra = (window_power_spectrum(window_1d(hy), shape[0]), window_power_spectrum(window_1d(hx), shape[1]))
        lags = tuple(cp.asarray(window_autocorrelation(S, np.fft.fftfreq(n, 1.0 / n)))
                     for S, n in zip(spectra, shape))
    y, x, v, b = locate_peaks(corr, max_lag=max_lag, method=method, window_spectra=spectra)
    gy, gx, gv, gb, gly, glx = find_peaks(cp.asarray(corr), max_lag, method, lags)
    np.testing.assert_array_equal(gv.get(), v)
    np.testing.assert_array_equal(gb.get(), b)
    np.testing.assert_allclose(gy.get(), y, atol=1e-9)
    np.testing.assert_allclose(gx.get(), x, atol=1e-9)


def test_dft_grid_matches_float64_direct_sum(cp, rng):
    from ebsdxc.peaks import dft_grid

    Ny, Nx = 31, 27  # odd: no Nyquist terms, whose interpolation is a convention
    corr = rng.standard_normal((6, Ny, Nx))
    cps = np.fft.rfft2(corr)
    yc, xc = rng.uniform(-5, 5, 6), rng.uniform(-5, 5, 6)
    got = dft_grid(cp.asarray(cps), cp.asarray(yc), cp.asarray(xc), spacing=0.3, size=3,
                   shape=(Ny, Nx), xp=cp).get()
    # float64 oracle: the full complex inverse DFT at the fractional points.
    full = np.fft.fft2(corr)
    ky, kx = np.fft.fftfreq(Ny)[:, None], np.fft.fftfreq(Nx)[None, :]
    for t in range(6):
        for a, dy in enumerate((-0.3, 0, 0.3)):
            for b, dx in enumerate((-0.3, 0, 0.3)):
                ph = np.exp(2j * np.pi * (ky * (yc[t] + dy) + kx * (xc[t] + dx)))
                val = (full[t] * ph).sum().real / (Ny * Nx)
                assert abs(got[t, a, b] - val) <= 1e-5 * np.abs(corr[t]).max()


@pytest.mark.parametrize("shape", [(31, 27), (32, 30), (192, 192), (9, 1), (5, 6)])
@pytest.mark.parametrize("compensate", [False, True])
@pytest.mark.parametrize("peak", ["round", "ridge"])
def test_dft_refine_kernel_matches_float64_oracle(cp, rng, shape, compensate, peak):
    """The fused kernel against dft_refine_peak evaluated in complex128 on the CPU."""
    from ebsdxc.engines.gpu_ops import dft_refine
    from ebsdxc.peaks import DFT_MAX_MOVES, DFT_STEPS, dft_refine_peak

    Ny, Nx = shape
    T = 40
    yy, xx = np.meshgrid(np.arange(Ny), np.arange(Nx), indexing="ij")
    true = rng.uniform(-2, 2, (T, 2))
    # Smooth periodic peaks at known fractional positions (band-limited enough to refine).
    dy = (yy[None] - true[:, 0, None, None] + Ny / 2) % Ny - Ny / 2
    dx = (xx[None] - true[:, 1, None, None] + Nx / 2) % Nx - Nx / 2
    if peak == "round":
        corr = np.exp(-(dy ** 2 + dx ** 2) / (2 * 2.0 ** 2))
    else:  # an elongated, tilted ridge: the 3x3 start is far off and several moves are needed
        a = 0.7
        u, v = np.cos(a) * dx + np.sin(a) * dy, -np.sin(a) * dx + np.cos(a) * dy
        corr = np.exp(-(u ** 2 / (2 * 7.0 ** 2) + v ** 2 / (2 * 2.0 ** 2)))
    cps = np.fft.rfft2(corr)
    # Start where the engine starts: the quadratic fit on the integer grid.
    y0, x0, _, _ = locate_peaks(corr, max_lag=(min(4, Ny // 2), min(4, Nx // 2)), method="quadratic")
    spectra = None
    if compensate:
        spectra = (window_power_spectrum(window_1d(max(Ny // 2, 1)), Ny),
                   window_power_spectrum(window_1d(max(Nx // 2, 1)), Nx))
    ey, ex = dft_refine_peak(cps.astype(np.complex128), y0, x0, shape, window_spectra=spectra)
    gy, gx = dft_refine(cp.asarray(cps.astype(np.complex64)), cp.asarray(y0), cp.asarray(x0), shape,
                        steps=DFT_STEPS, max_moves=DFT_MAX_MOVES,
                        window_spectra=None if spectra is None else tuple(cp.asarray(s) for s in spectra))
    np.testing.assert_allclose(gy.get(), ey, atol=1e-4)
    np.testing.assert_allclose(gx.get(), ex, atol=1e-4)
    if not compensate and min(shape) >= 64:
        np.testing.assert_allclose(ey, true[:, 0], atol=2e-3)
        np.testing.assert_allclose(ex, true[:, 1], atol=2e-3)


def test_dft_refine_kernel_forms_cross_power_from_reference(cp, rng):
    """With ``reference=``, the kernel multiplies scan spectra by the resident reference itself."""
    from ebsdxc.engines.gpu_ops import dft_refine
    from ebsdxc.peaks import DFT_MAX_MOVES, DFT_STEPS

    Ny, Nx, n, B = 40, 36, 3, 4
    corr = rng.standard_normal((B * n, Ny, Nx)).astype(np.float32)
    cps = np.fft.rfft2(corr).astype(np.complex64)
    ref = np.exp(1j * rng.uniform(0, 2 * np.pi, (n, Ny, Nx // 2 + 1))).astype(np.complex64)
    scan = (cps.reshape(B, n, Ny, -1) / ref[None]).reshape(B * n, Ny, -1).astype(np.complex64)
    y0, x0 = rng.uniform(-3, 3, B * n), rng.uniform(-3, 3, B * n)
    a = dft_refine(cp.asarray(cps), cp.asarray(y0), cp.asarray(x0), (Ny, Nx), steps=DFT_STEPS,
                   max_moves=DFT_MAX_MOVES)
    b = dft_refine(cp.asarray(scan), cp.asarray(y0), cp.asarray(x0), (Ny, Nx), steps=DFT_STEPS,
                   max_moves=DFT_MAX_MOVES, reference=cp.asarray(ref))
    np.testing.assert_allclose(b[0].get(), a[0].get(), atol=1e-4)
    np.testing.assert_allclose(b[1].get(), a[1].get(), atol=1e-4)
