"""Tests of the FFT correlation engine (CPU backend) against brute-force and known shifts."""

from __future__ import annotations

import numpy as np
import pytest

from ebsdxc import status as st
from ebsdxc.backend import select_backend
from ebsdxc.engines import EngineConfig, make_engine
from ebsdxc.preprocess import prepare_tiles, window_1d, window_2d


@pytest.fixture(scope="module")
def be():
    return select_backend("cpu")


def engine(be, shape, window=True, **cfg):
    h, w = shape
    win = (window_1d(h), window_1d(w)) if window else None
    return make_engine("fft", be, shape, EngineConfig(**cfg), window_1d=win)


# ---------------------------------------------------------------- brute-force definition

def corr_oracle(scan, ref, dy, dx):
    """sum_{y,x} scan[.., y+dy, x+dx] * ref[.., y, x] over overlapping pixels (float64)."""
    h, w = ref.shape[-2:]
    y0, y1 = max(0, -dy), min(h, h - dy)
    x0, x1 = max(0, -dx), min(w, w - dx)
    if y0 >= y1 or x0 >= x1:
        return np.zeros(np.broadcast_shapes(scan.shape[:-2], ref.shape[:-2]))
    s = scan[..., y0 + dy:y1 + dy, x0 + dx:x1 + dx].astype(np.float64)
    r = ref[..., y0:y1, x0:x1].astype(np.float64)
    return (s * r).sum(axis=(-2, -1))


TILE_SHAPES = [(1, 1), (3, 5), (7, 7), (13, 6), (16, 33), (1, 9), (10, 1)]
BN = [(1, 1), (2, 3), (3, 2)]


@pytest.mark.parametrize("shape", TILE_SHAPES)
@pytest.mark.parametrize("B,n", BN)
def test_full_maps_equal_definition(be, shape, B, n):
    h, w = shape
    rng = np.random.default_rng(h * 100 + w + 7 * B + n)
    ref = rng.standard_normal((n, h, w)).astype(np.float32)
    scan = (rng.standard_normal((B, n, h, w)) + 0.5).astype(np.float32)  # not zero-mean
    eng = engine(be, shape, mode="full", subpixel="none")
    eng.set_reference(ref, (ref.astype(np.float64) ** 2).sum((-2, -1)), np.zeros(n, np.uint8))
    maps = eng.correlation_maps(scan)
    Ny, Nx = eng.fft_shape
    assert Ny >= 2 * h - 1 and Nx >= 2 * w - 1
    assert maps.shape == (B, n, Ny, Nx)
    norm = np.sqrt((scan.astype(np.float64) ** 2).sum((-2, -1)) * (ref.astype(np.float64) ** 2).sum((-2, -1)))
    tol = 1e-5 * norm.max() + 1e-6
    covered = np.zeros((Ny, Nx), bool)
    for dy in range(-(h - 1), h):
        for dx in range(-(w - 1), w):
            np.testing.assert_allclose(maps[:, :, dy % Ny, dx % Nx], corr_oracle(scan, ref, dy, dx),
                                       rtol=0, atol=tol, err_msg=f"lag ({dy}, {dx})")
            covered[dy % Ny, dx % Nx] = True
    # lags without overlap are zero (zero-padded, no wrap-around)
    assert np.abs(maps[:, :, ~covered]).max(initial=0) <= tol
    # tiles handed in the engine's input frame (tile at top-left, zeros around) give the same maps
    frame = np.zeros((B, n, Ny, Nx), np.float32)
    frame[..., :h, :w] = scan
    assert eng.input_shape == (Ny, Nx)
    np.testing.assert_allclose(eng.correlation_maps(frame), maps, atol=tol)


@pytest.mark.parametrize("shape,max_shift", [((1, 1), 1), ((3, 5), 1), ((3, 5), 7), ((7, 7), 2),
                                             ((13, 6), 4), ((16, 33), 5), ((16, 33), 15),
                                             ((21, 17), 3)])
@pytest.mark.parametrize("B,n", [(1, 1), (2, 3)])
def test_window_maps_equal_definition(be, shape, max_shift, B, n):
    h, w = shape
    rng = np.random.default_rng(h * 31 + w + max_shift)
    ref = rng.standard_normal((n, h, w)).astype(np.float32)
    scan = rng.standard_normal((B, n, h, w)).astype(np.float32)
    eng = engine(be, shape, mode="window", max_shift=max_shift, subpixel="none")
    ry, rx = min(max_shift, h - 1), min(max_shift, w - 1)
    assert eng.max_lag == (ry, rx)
    eng.set_reference(ref, np.ones(n, np.float32), np.zeros(n, np.uint8))
    maps = eng.correlation_maps(scan)
    Ny, Nx = eng.fft_shape
    norm = np.sqrt((scan.astype(np.float64) ** 2).sum((-2, -1)) * (ref.astype(np.float64) ** 2).sum((-2, -1)))
    tol = 1e-5 * norm.max() + 1e-6
    for dy in range(-ry, ry + 1):
        for dx in range(-rx, rx + 1):
            np.testing.assert_allclose(maps[:, :, dy % Ny, dx % Nx], corr_oracle(scan, ref, dy, dx),
                                       rtol=0, atol=tol, err_msg=f"lag ({dy}, {dx})")


# ---------------------------------------------------------------- textures and shifts

def texture_spectrum(N, corr_len, rng):
    """Spectrum of a smooth, band-limited (|f| < 0.4) random N x N texture."""
    f = np.fft.fftfreq(N)
    F = np.fft.fft2(rng.standard_normal((N, N)))
    F *= np.exp(-2 * np.pi**2 * corr_len**2 * (f[:, None] ** 2 + f[None, :] ** 2))
    F[np.abs(f) > 0.4, :] = 0
    F[:, np.abs(f) > 0.4] = 0
    return F


def shifted_image(F, dy, dx):
    """The texture with its content moved by (dy, dx) px (Fourier shift theorem)."""
    f = np.fft.fftfreq(F.shape[0])
    return np.fft.ifft2(F * np.exp(-2j * np.pi * (f[:, None] * dy + f[None, :] * dx))).real


def cut(img, origins, h, w):
    return np.stack([img[y:y + h, x:x + w] for y, x in origins])


def prepared(tiles, shape, kind="hann"):
    return prepare_tiles(np.asarray(tiles, np.float32), window_2d(shape, kind))


@pytest.fixture(scope="module")
def big_texture():
    """200 x 200 smooth texture, correlation length about 1 px."""
    return shifted_image(texture_spectrum(200, 1.0, np.random.default_rng(1234)), 0, 0)


@pytest.fixture(scope="module")
def sharp_texture():
    """Finer texture: its sharp correlation peak is not pulled off integer shifts by the window."""
    return shifted_image(texture_spectrum(200, 0.6, np.random.default_rng(1234)), 0, 0)


INT_CASES = [  # tile (h, w), mode, max_shift, largest |shift| tested as recoverable
    ((33, 40), "window", 6, 5),
    ((21, 17), "window", 4, 3),
    ((33, 40), "full", None, 8),
    ((16, 33), "full", None, 5),
]


@pytest.mark.parametrize("shape,mode,max_shift,reach", INT_CASES)
def test_integer_shifts_recovered_exactly(be, sharp_texture, shape, mode, max_shift, reach):
    big_texture = sharp_texture
    h, w = shape
    rng = np.random.default_rng(5)
    origins = [(30, 30), (30, 110), (110, 40), (120, 120), (60, 75)]
    n, B = len(origins), 6
    ref = cut(big_texture, origins, h, w)
    shifts = rng.integers(-reach, reach + 1, (B, n, 2))  # [dx, dy]
    shifts[0] = [[reach, -reach], [-reach, reach], [0, 0], [-reach, -reach], [reach, 0]]
    scan = np.zeros((B, n, h, w))
    for b in range(B):
        for k, (y, x) in enumerate(origins):
            dx, dy = shifts[b, k]
            # content moved by (dx, dy): the scan tile shows the texture from (y - dy, x - dx)
            scan[b, k] = big_texture[y - dy:y - dy + h, x - dx:x - dx + w]
    eng = engine(be, shape, mode=mode, max_shift=max_shift, subpixel="none")
    eng.set_reference(*prepared(ref, shape))
    ps, es, ss = prepared(scan, shape)
    res = eng.match(ps, es, ss)
    assert res.displacement.shape == (B, n, 2) and res.displacement.dtype == np.float32
    np.testing.assert_array_equal(res.status, st.OK)
    np.testing.assert_array_equal(res.displacement, shifts.astype(np.float32))
    assert np.all(res.peak_height > 0.3) and np.all(res.peak_height <= 1)
    # the same tiles in the engine's input frame give the same answer
    frame = np.zeros((B, n) + eng.input_shape, np.float32)
    frame[..., :h, :w] = ps
    np.testing.assert_array_equal(eng.match(frame, es, ss).displacement, res.displacement)


@pytest.mark.parametrize("method", ["none", "quadratic", "dft", "upsampled", "parabolic"])
@pytest.mark.parametrize("shape,max_shift", [((33, 40), 6), ((29, 37), 5)])
def test_shift_at_or_beyond_max_shift_is_flagged(be, big_texture, method, shape, max_shift):
    h, w = shape
    origins = [(40, 40), (40, 120), (120, 60)]
    ref = cut(big_texture, origins, h, w)
    # per ROI: inside (max_shift - 1), on the border (max_shift), beyond (max_shift + 2)
    cases = [(max_shift - 1, 0), (0, max_shift), (max_shift + 2, 0), (0, -(max_shift + 2)),
             (-(max_shift + 1), max_shift + 1), (-(max_shift - 1), max_shift - 1)]
    scan = np.stack([[big_texture[y - dy:y - dy + h, x - dx:x - dx + w] for (y, x) in origins]
                     for dx, dy in cases])
    eng = engine(be, shape, mode="window", max_shift=max_shift, subpixel=method)
    eng.set_reference(*prepared(ref, shape))
    res = eng.match(*prepared(scan, shape))
    expect_ok = np.array([True, False, False, False, False, True])
    np.testing.assert_array_equal(res.status[expect_ok], st.OK)
    np.testing.assert_array_equal(res.status[~expect_ok], st.PEAK_ON_BORDER)
    assert np.all(np.isnan(res.displacement[~expect_ok]))
    assert np.all(np.isfinite(res.displacement[expect_ok]))
    truth = np.array(cases, np.float64)[expect_ok][:, None, :]
    tol = 0 if method == "none" else 0.15
    assert np.abs(res.displacement[expect_ok] - truth).max() <= tol
    # the peak height of a flagged match is still a correlation coefficient
    assert np.all(np.isfinite(res.peak_height)) and np.all(np.abs(res.peak_height) <= 1)


@pytest.mark.parametrize("method", ["none", "parabolic", "gaussian", "quadratic", "dft", "upsampled"])
@pytest.mark.parametrize("shape,mode", [((7, 7), "full"), ((13, 6), "window"), ((16, 33), "full"),
                                        ((45, 52), "window")])
@pytest.mark.parametrize("compensate", [True, False])
def test_identical_tiles(be, method, shape, mode, compensate):
    h, w = shape
    rng = np.random.default_rng(h + w)
    raw = rng.standard_normal((3, h, w))
    ref = prepared(raw, shape)
    eng = engine(be, shape, mode=mode, max_shift=3 if mode == "window" else None, subpixel=method,
                 compensate=compensate)
    eng.set_reference(*ref)
    res = eng.match(*prepared(raw[None].repeat(2, axis=0), shape))
    np.testing.assert_array_equal(res.status, st.OK)
    np.testing.assert_allclose(res.peak_height, 1.0, atol=1e-5)
    np.testing.assert_allclose(res.displacement, 0.0, atol=1e-4)


@pytest.mark.parametrize("shape,mode", [((7, 7), "full"), ((16, 33), "full"), ((13, 6), "window"),
                                        ((45, 52), "window")])
def test_negated_tile(be, shape, mode):
    h, w = shape
    rng = np.random.default_rng(2 * h + w)
    raw = rng.standard_normal((2, h, w))
    pr, er, sr = prepared(raw, shape)
    ms = 3 if mode == "window" else None
    eng = engine(be, shape, mode=mode, max_shift=ms, subpixel="none")
    eng.set_reference(pr, er, sr)
    ps, es, ss = prepared(-raw[None], shape)
    maps = eng.correlation_maps(ps)
    # normalised correlation at zero shift is exactly -1
    np.testing.assert_allclose(maps[0, :, 0, 0] / np.sqrt(es[0] * er), -1.0, atol=1e-5)
    res = eng.match(ps, es, ss)
    # still a defined result: the best (largest) coefficient over the searched shifts
    ry, rx = eng.max_lag
    lags = [(dy, dx) for dy in range(-ry, ry + 1) for dx in range(-rx, rx + 1)]
    vals = np.stack([corr_oracle(ps[0].astype(np.float64), pr, dy, dx) for dy, dx in lags], axis=-1)
    best = vals.argmax(axis=-1)
    np.testing.assert_allclose(res.peak_height[0], vals.max(axis=-1) / np.sqrt(es[0] * er), atol=1e-5)
    assert np.all(np.isfinite(res.peak_height)) and np.all(np.abs(res.peak_height) <= 1)
    assert np.all(res.peak_height < 1 - 1e-3)
    for k in range(2):
        dy, dx = lags[best[k]]
        on_border = abs(dy) == ry or abs(dx) == rx
        assert res.status[0, k] == (st.PEAK_ON_BORDER if on_border else st.OK)
        if not on_border:  # -autocorrelation is symmetric: its maxima come in pairs +-lag
            d = res.displacement[0, k]
            assert (d == [dx, dy]).all() or (d == [-dx, -dy]).all(), (d, dx, dy)


@pytest.mark.parametrize("method", ["none", "quadratic", "gaussian", "dft", "upsampled"])
@pytest.mark.parametrize("shape,mode", [((16, 33), "full"), ((13, 6), "window"), ((5, 7), "full")])
def test_bad_scan_and_reference_tiles(be, big_texture, method, shape, mode):
    h, w = shape
    rng = np.random.default_rng(11)
    n, B = 4, 3
    ref = cut(big_texture, [(10, 10), (10, 60), (60, 10), (60, 60)], h, w) + 100
    ref[3] = 250.0  # constant reference subregion
    ref[2, 0, w // 2] = np.nan  # NaN in a reference subregion
    scan = ref[None].repeat(B, axis=0) + 0.05 * rng.standard_normal((B, n, h, w))
    scan[:, 3] += 0.5 * rng.standard_normal((B, h, w))  # scan has contrast where the reference has none
    scan[:, 2] = ref[None, 0]
    scan[1, 0, h - 1, 0] = np.nan
    scan[2, 1] = 60000.0  # constant scan subregion
    scan[0, 0] = np.inf
    eng = engine(be, shape, mode=mode, max_shift=2 if mode == "window" else None, subpixel=method)
    pr, er, sr = prepared(ref, shape)
    np.testing.assert_array_equal(sr, [st.OK, st.OK, st.NOT_FINITE, st.CONSTANT_TILE])
    eng.set_reference(pr, er, sr)
    res = eng.match(*prepared(scan, shape))
    expected = np.zeros((B, n), np.uint8)
    expected[:, 2] = st.NOT_FINITE
    expected[:, 3] = st.CONSTANT_TILE
    expected[1, 0] = st.NOT_FINITE
    expected[0, 0] = st.NOT_FINITE
    expected[2, 1] = st.CONSTANT_TILE
    np.testing.assert_array_equal(res.status, expected)
    bad = expected != st.OK
    assert np.all(np.isnan(res.displacement[bad]))  # never 0
    assert np.all(np.isnan(res.peak_height[bad]))
    assert np.all(np.isfinite(res.displacement[~bad])) and np.all(np.isfinite(res.peak_height[~bad]))
    # (tiny Hann-windowed tiles with 5 % noise: only roughly zero)
    np.testing.assert_allclose(res.displacement[~bad], 0.0, atol=0.3)


@pytest.mark.parametrize("method", ["none", "quadratic", "dft", "upsampled"])
@pytest.mark.parametrize("mode", ["full", "window"])
def test_sign_convention(be, method, mode):
    # a bright blob at (x, y) = (14, 10) in the reference, at (16, 9) in the scan:
    # it moved right by 2 and up by 1 -> dx = +2, dy = -1
    h, w = 23, 30
    y, x = np.mgrid[0:h, 0:w].astype(float)

    def blob(cx, cy):
        return np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * 1.6**2))

    ref = np.stack([blob(14, 10), blob(12, 12)])
    scan = np.stack([blob(16, 9), blob(11, 15)])[None]
    eng = engine(be, (h, w), window=False, mode=mode, max_shift=5 if mode == "window" else None,
                 subpixel=method)
    eng.set_reference(*prepared(ref, (h, w), "none"))
    res = eng.match(*prepared(scan, (h, w), "none"))
    np.testing.assert_array_equal(res.status, st.OK)
    np.testing.assert_allclose(res.displacement[0], [[2, -1], [-1, 3]], atol=0 if method == "none" else 0.05)


@pytest.mark.parametrize("shape,mode", [((1, 40), "window"), ((1, 40), "full"), ((40, 1), "window")])
def test_single_row_or_column_tiles(be, shape, mode):
    # A 1-row tile has only dy = 0 to search (max_lag ry = 0): a clear x shift must still be
    # an ordinary match, not "peak on the border of the searched shifts" for every tile.
    h, w = shape
    t = np.linspace(0, 1, 200)
    sig = np.sin(2 * np.pi * 7 * t) + 0.5 * np.cos(2 * np.pi * 17 * t + 0.4)
    L = max(h, w)
    ref = sig[60:60 + L].reshape(shape)[None]
    scan = np.stack([sig[60 - d:60 - d + L].reshape(shape) for d in (2, -3)])[:, None]
    eng = engine(be, shape, mode=mode, max_shift=5 if mode == "window" else None, subpixel="none")
    eng.set_reference(*prepared(ref, shape))
    res = eng.match(*prepared(scan, shape))
    np.testing.assert_array_equal(res.status, st.OK)
    axis = 0 if h == 1 else 1  # displacement is [dx, dy]
    np.testing.assert_array_equal(res.displacement[:, 0, axis], [2, -3])
    np.testing.assert_array_equal(res.displacement[:, 0, 1 - axis], [0, 0])


@pytest.fixture(scope="module")
def subpixel_set():
    """Prepared reference and scan tiles of a smooth texture with known fractional shifts."""
    rng = np.random.default_rng(0)
    F = texture_spectrum(160, 1.5, rng)
    h, w = 45, 52
    origins = [(20, 20), (20, 90), (90, 30), (95, 95)]
    B = 12
    shifts = rng.uniform(-2.5, 2.5, (B, len(origins), 2))  # [dx, dy]
    ref = cut(shifted_image(F, 0, 0), origins, h, w)
    scan = np.zeros((B, len(origins), h, w))
    for b in range(B):
        for k, (y, x) in enumerate(origins):
            # cut from a larger shifted image: no wrap-around inside the tile
            scan[b, k] = shifted_image(F, shifts[b, k, 1], shifts[b, k, 0])[y:y + h, x:x + w]
    return (h, w), prepared(ref, (h, w)), prepared(scan, (h, w)), shifts


def _rms(be, subpixel_set, mode, method, compensate):
    shape, ref, scan, shifts = subpixel_set
    circular = mode == "circular"
    mode = "window" if circular else mode
    eng = engine(be, shape, mode=mode, max_shift=6 if mode == "window" else None, subpixel=method,
                 compensate=compensate, circular=circular)
    eng.set_reference(*ref)
    res = eng.match(*scan)
    np.testing.assert_array_equal(res.status, st.OK)
    return float(np.sqrt(np.mean((res.displacement.astype(np.float64) - shifts) ** 2)))


@pytest.mark.parametrize("mode", ["full", "window", "circular"])
@pytest.mark.parametrize("method", ["dft", "upsampled"])
def test_subpixel_shifts_spectrum_methods(be, subpixel_set, mode, method):
    rms = _rms(be, subpixel_set, mode, method, True)
    assert rms < 0.01, f"RMS error {rms:.4f} px"
    # without compensation the window's pull towards zero shift is clearly visible
    assert _rms(be, subpixel_set, mode, method, False) > 2 * rms


@pytest.mark.parametrize("mode", ["full", "window"])
@pytest.mark.parametrize("method", ["quadratic", "gaussian", "parabolic"])
def test_subpixel_compensation_helps_3x3_fits(be, subpixel_set, mode, method):
    on = _rms(be, subpixel_set, mode, method, True)
    off = _rms(be, subpixel_set, mode, method, False)
    assert on < off, (on, off)
    if method == "quadratic":
        assert on < 0.02 and on < off / 2, (on, off)
    assert off < 0.1


def test_subpixel_shifts_anisotropic_texture(be):
    # Band-like texture (correlation length 1 px across, 3 px along, tilted): the correlation
    # peak is a ridge, as for subregions dominated by one Kikuchi band.
    rng = np.random.default_rng(0)
    N = 160
    f = np.fft.fftfreq(N)
    F = np.fft.fft2(rng.standard_normal((N, N)))
    c, s = np.cos(0.6), np.sin(0.6)
    fu, fv = c * f[None, :] + s * f[:, None], -s * f[None, :] + c * f[:, None]
    F *= np.exp(-2 * np.pi**2 * (1.0**2 * fu**2 + 3.0**2 * fv**2))
    F[np.abs(f) > 0.4, :] = 0
    F[:, np.abs(f) > 0.4] = 0
    h, w = 45, 52
    origins = [(20, 20), (20, 90), (90, 30), (95, 95)]
    B = 12
    shifts = rng.uniform(-2.5, 2.5, (B, len(origins), 2))
    ref = cut(shifted_image(F, 0, 0), origins, h, w)
    scan = np.stack([[shifted_image(F, shifts[b, k, 1], shifts[b, k, 0])[y:y + h, x:x + w]
                      for k, (y, x) in enumerate(origins)] for b in range(B)])
    eng = engine(be, (h, w), mode="window", max_shift=6, subpixel="dft")
    eng.set_reference(*prepared(ref, (h, w)))
    res = eng.match(*prepared(scan, (h, w)))
    np.testing.assert_array_equal(res.status, st.OK)
    err = res.displacement.astype(np.float64) - shifts
    rms = float(np.sqrt(np.mean(err**2)))
    assert rms < 0.01, f"RMS error {rms:.4f} px, max {np.abs(err).max():.3f} px"


@pytest.mark.parametrize("method", ["quadratic", "gaussian", "dft", "upsampled"])
def test_no_runtime_warnings_for_flagged_tiles(be, big_texture, method):
    # A constant subregion is an expected input (status CONSTANT_TILE), not a numerical
    # accident: matching a batch holding one must not emit RuntimeWarnings.
    import warnings

    h, w = 16, 33
    ref = cut(big_texture, [(10, 10), (10, 60)], h, w)
    scan = ref[None].repeat(2, axis=0).copy()
    scan[1, 1] = 7.0
    eng = engine(be, (h, w), mode="full", subpixel=method)
    eng.set_reference(*prepared(ref, (h, w)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        res = eng.match(*prepared(scan, (h, w)))
    assert res.status[1, 1] == st.CONSTANT_TILE


# ---------------------------------------------------------------- configuration

@pytest.mark.parametrize("kwargs", [dict(mode="window"), dict(mode="window", max_shift=0),
                                    dict(mode="partial"), dict(mode="FULL"), dict(subpixel="cubic"),
                                    dict(subpixel="Gaussian"), dict(upsample=1),
                                    dict(mode="full", circular=True)])
def test_engine_config_validation(kwargs):
    with pytest.raises(ValueError):
        EngineConfig(**kwargs)


def test_circular_engine_validation(be):
    # needs a tapering window and max_shift <= tile size / 4
    with pytest.raises(ValueError):
        engine(be, (32, 40), window=False, mode="window", max_shift=4, circular=True)
    with pytest.raises(ValueError):
        make_engine("fft", be, (32, 40), EngineConfig(mode="window", max_shift=4, circular=True),
                    window_1d=(np.ones(32), np.ones(40)))
    with pytest.raises(ValueError):
        engine(be, (32, 40), mode="window", max_shift=9, circular=True)
    engine(be, (32, 40), mode="window", max_shift=8, circular=True)  # fine


def test_engine_config_max_lag_and_unknown_engine(be):
    assert EngineConfig().max_lag((13, 6)) == (12, 5)
    assert EngineConfig(mode="window", max_shift=4).max_lag((13, 6)) == (4, 4)
    assert EngineConfig(mode="window", max_shift=8).max_lag((13, 6)) == (8, 5)
    with pytest.raises(ValueError):
        make_engine("nope", be, (8, 8), EngineConfig())
