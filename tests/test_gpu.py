"""GPU kernels and the GPU path against CPU float64 oracles (run with ``pytest -m gpu``)."""

import os

import numpy as np
import pytest

from ebsdxc import status as st
from ebsdxc.backend import select_backend
from ebsdxc.engines import EngineConfig, make_engine
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


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32, np.float64])
@pytest.mark.parametrize("tile", [(1, 1), (7, 13), (17, 5), (33, 64), (96, 96)])
def test_prepare_tiles_kernel_matches_float64_oracle(cp, rng, dtype, tile):
    from ebsdxc.engines.gpu_ops import prepare_tiles_padded

    h, w = tile
    H, W = h + 23, w + 31
    B, n = 3, 5
    hi = 250 if dtype == np.uint8 else 60000
    patterns = rng.uniform(0, hi, (B, H, W)).astype(dtype)
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


def _sample_tiles(sample_dir, be, size=40, grid=(5, 5)):
    from ebsdxc.io import open_scan, read_reference
    from ebsdxc.preprocess import prepare_tiles
    from ebsdxc.rois import extract_tiles, grid_layout

    with open_scan(os.path.join(sample_dir, "scan.h5")) as src:
        pats = src.read(0, src.n_patterns)
    ref = read_reference(os.path.join(sample_dir, "ref.tif"))
    lay = grid_layout(pats.shape[1:], grid=grid, size=size)
    xp = be.xp
    win = window_2d((size, size), xp=xp)
    rt = prepare_tiles(extract_tiles(xp.asarray(ref, dtype=xp.float32)[None], lay, xp)[0], win, xp)
    t = prepare_tiles(extract_tiles(xp.asarray(pats, dtype=xp.float32), lay, xp), win, xp)
    return rt, t


def _match_sample(sample_dir, device, engine, config):
    """(displacement, peak height, status) on the host for the sample scan's 5x5 ROIs of 40x40."""
    be = select_backend(device)
    (rt, re, rs), (t, e, s) = _sample_tiles(sample_dir, be)
    eng = make_engine(engine, be, (40, 40), config, window_1d=(window_1d(40), window_1d(40)))
    eng.set_reference(rt, re, rs)
    r = eng.match(t, e, s)
    return [be.asnumpy(a) for a in (r.displacement, r.peak_height, r.status)]


@pytest.mark.parametrize("method", ["dft", "upsampled", "quadratic", "parabolic", "gaussian", "none"])
@pytest.mark.parametrize("mode,max_shift,circular", [("full", None, False), ("window", 6, False),
                                                     ("window", 6, True)])
def test_fft_engine_gpu_agrees_with_cpu(sample_dir, method, mode, max_shift, circular):
    config = EngineConfig(mode=mode, max_shift=max_shift, subpixel=method, circular=circular)
    (d0, h0, s0), (d1, h1, s1) = (_match_sample(sample_dir, dev, "fft", config) for dev in ("cpu", "cuda"))
    np.testing.assert_array_equal(s0, s1)
    assert (s0 == st.OK).mean() > 0.95
    np.testing.assert_allclose(d1, d0, atol=1e-3, equal_nan=True)
    np.testing.assert_allclose(h1, h0, atol=1e-4, equal_nan=True)


def test_process_gpu_equals_cpu(tmp_path, sample_dir):
    from ebsdxc.io.results import read_results
    from ebsdxc.recipes import ProcessConfig
    from ebsdxc.runner import process

    out = {}
    for dev in ("cpu", "cuda"):
        out[dev] = process(os.path.join(sample_dir, "scan.h5"), ref=os.path.join(sample_dir, "ref.tif"),
                           output=str(tmp_path / f"{dev}.h5"),
                           config=ProcessConfig(device=dev, batch=7))
    a, b = read_results(out["cpu"]), read_results(out["cuda"])
    assert a["done"].all() and b["done"].all() and b["attrs"]["complete"]
    np.testing.assert_array_equal(a["status"], b["status"])
    np.testing.assert_allclose(b["displacement"], a["displacement"], atol=1e-3, equal_nan=True)
    assert "cuda" in b["attrs"]["device"]


def test_process_gpu_uint_and_float_inputs_agree(tmp_path, sample_dir):
    """The GPU tile kernel converts raw dtypes itself: every dtype gives the same shifts."""
    import h5py

    from ebsdxc.io.results import read_results
    from ebsdxc.recipes import ProcessConfig
    from ebsdxc.runner import process

    with h5py.File(os.path.join(sample_dir, "scan.h5"), "r") as f:
        pats = f["patterns"][...]
    res = []
    for dt in (np.uint16, np.float32, np.float64):
        p = tmp_path / f"{np.dtype(dt).name}.h5"
        with h5py.File(p, "w") as f:
            f["patterns"] = pats.astype(dt)
        o = process(str(p), ref=os.path.join(sample_dir, "ref.tif"), output=str(tmp_path / f"r{p.name}"),
                    config=ProcessConfig(device="cuda"))
        res.append(read_results(o)["displacement"])
    for r in res[1:]:
        np.testing.assert_allclose(r, res[0], atol=1e-4, equal_nan=True)


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


def test_gpu_stream_interrupted_and_resumed_equals_uninterrupted(tmp_path, sample_dir):
    """The GPU streaming path (pinned buffers, events, two streams) keeps resume exact."""
    from ebsdxc.io.results import read_results
    from ebsdxc.progress import Progress
    from ebsdxc.recipes import ProcessConfig
    from ebsdxc.runner import process

    class StopAfterFirst(Progress):
        def update(self, n):
            raise KeyboardInterrupt

    scan, ref = os.path.join(sample_dir, "scan.h5"), os.path.join(sample_dir, "ref.tif")
    cfg = ProcessConfig(device="cuda", batch=9)
    whole = process(scan, ref=ref, output=str(tmp_path / "whole.h5"), config=cfg)
    part = str(tmp_path / "part.h5")
    with pytest.raises(KeyboardInterrupt):
        process(scan, ref=ref, output=part, config=cfg, progress=StopAfterFirst())
    r = read_results(part)
    assert not r["attrs"]["complete"] and 0 < r["done"].sum() < r["done"].size
    process(scan, ref=ref, output=part, config=cfg, resume=True)
    a, b = read_results(whole), read_results(part)
    assert b["attrs"]["complete"]
    for k in ("displacement", "peak_height", "status", "done"):
        np.testing.assert_array_equal(a[k], b[k])


def _direct_oracle(ref, scan, n, max_lag):
    """float64 definition: lag (dy, dx) = sum over the overlap of ref[y, x] * scan[y + dy, x + dx]."""
    from scipy.signal import correlate2d

    T, h, w = scan.shape
    ry, rx = max_lag
    out = np.empty((T, 2 * ry + 1, 2 * rx + 1))
    for t in range(T):
        full = correlate2d(scan[t].astype(np.float64), ref[t % n].astype(np.float64), mode="full")
        for dy in range(-ry, ry + 1):
            for dx in range(-rx, rx + 1):
                out[t, dy % (2 * ry + 1), dx % (2 * rx + 1)] = full[dy + h - 1, dx + w - 1]
    return out


@pytest.mark.parametrize("tile", [(1, 1), (7, 13), (17, 5), (33, 64), (40, 40)])
@pytest.mark.parametrize("mode,max_shift", [("full", None), ("window", 3)])
def test_direct_kernel_matches_float64_definition(cp, rng, tile, mode, max_shift):
    h, w = tile
    n, B = 3, 2
    eng = make_engine("direct", select_backend("cuda"), tile,
                      EngineConfig(mode=mode, max_shift=max_shift, subpixel="quadratic"))
    ref = rng.standard_normal((n, h, w)).astype(np.float32)
    scan = rng.standard_normal((B, n, h, w)).astype(np.float32)
    eng.set_reference(cp.asarray(ref), cp.ones(n, dtype=cp.float32), cp.zeros(n, dtype=cp.uint8))
    got = eng.correlation_maps(cp.asarray(scan)).get().reshape(B * n, *eng.map_shape)
    want = _direct_oracle(ref, scan.reshape(B * n, h, w), n, eng.max_lag)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max() + 1e-6


@pytest.mark.parametrize("method", ["quadratic", "parabolic", "none"])
def test_direct_engine_agrees_with_fft_engine(sample_dir, method):
    config = EngineConfig(mode="window", max_shift=6, subpixel=method)
    (d0, h0, s0), (d1, h1, s1) = (_match_sample(sample_dir, "cuda", name, config) for name in ("direct", "fft"))
    np.testing.assert_array_equal(s0, s1)
    np.testing.assert_allclose(d0, d1, atol=1e-3, equal_nan=True)
    np.testing.assert_allclose(h0, h1, atol=1e-4, equal_nan=True)


def test_process_with_direct_engine(tmp_path, sample_dir):
    from ebsdxc.cli import main
    from ebsdxc.io.results import read_results

    out = {}
    for engine in ("direct", "fft"):
        o = tmp_path / f"{engine}.h5"
        assert main(["process", os.path.join(sample_dir, "scan.h5"), "--ref", os.path.join(sample_dir, "ref.tif"),
                     "-o", str(o), "-q", "--device", "cuda", "--engine", engine, "--max-shift", "6",
                     "--subpixel", "quadratic"]) == 0
        out[engine] = read_results(o)
    assert out["direct"]["attrs"]["engine"] == "direct"
    np.testing.assert_allclose(out["direct"]["displacement"], out["fft"]["displacement"], atol=1e-3)


@pytest.mark.parametrize("engine", ["fft", "direct"])
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (13, 6), (33, 20), (64, 64)])
@pytest.mark.parametrize("mode,max_shift", [("full", None), ("window", 3)])
def test_four_forms_on_the_gpu_match_float64_oracle(cp, rng, engine, shape, mode, max_shift):
    from ebsdxc import xcorr

    h, w = shape
    ml = (h - 1, w - 1) if mode == "full" else (min(max_shift, h - 1), min(max_shift, w - 1))
    lefts = rng.standard_normal((3, h, w)).astype(np.float32)
    rights = rng.standard_normal((4, h, w)).astype(np.float32)
    opts = dict(mode=mode, max_shift=max_shift, engine=engine)
    want = _direct_oracle(np.repeat(lefts[None], 4, 0).reshape(12, h, w),
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


def test_repeated_streams_reuse_the_memory_pool(cp, sample_dir):
    """A Dask worker calls run_stream once per task on one pipeline: the device memory the
    pool holds must not grow with the number of calls (blocks are cached per CUDA stream)."""
    import tifffile

    from ebsdxc.io import open_scan
    from ebsdxc.progress import NullProgress
    from ebsdxc.recipes import ProcessConfig
    from ebsdxc.runner import Pipeline, _todo_chunks, build_layout, run_stream

    config = ProcessConfig(device="cuda", batch=16)
    source = open_scan(os.path.join(sample_dir, "scan.h5"))
    ref = tifffile.imread(os.path.join(sample_dir, "ref.tif"))
    backend = select_backend("cuda")
    with backend.use():
        pipeline = Pipeline(backend, config, build_layout(config.roi, source.pattern_shape), ref)
        pool = cp.get_default_memory_pool()
        chunks = _todo_chunks(np.zeros(source.grid.size, bool), 16)
        got, held, buffers = [], [], None
        for _ in range(6):
            out = {}
            buffers = run_stream(pipeline, source, chunks, write=lambda a, d, h, s: out.__setitem__(a, d),
                                 progress=NullProgress(), buffers=buffers)
            cp.cuda.Device().synchronize()
            got.append(np.concatenate([out[k] for k in sorted(out)]))
            held.append(pool.total_bytes())
        pipeline.close()
    for g in got[1:]:
        np.testing.assert_array_equal(g, got[0])
    assert held[-1] == held[1], f"pool grew from {held[1]} to {held[-1]} bytes over repeated calls"
