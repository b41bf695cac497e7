"""The engines on the GPU against the CPU and float64 oracles (run with ``pytest -m gpu``)."""

import os

import numpy as np
import pytest
from correlation_oracles import direct_oracle

from ebsdxc import status as st
from ebsdxc.backend import select_backend
from ebsdxc.engines import EngineConfig, make_engine
from ebsdxc.preprocess import window_1d, window_2d

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


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
    want = direct_oracle(ref, scan.reshape(B * n, h, w), n, eng.max_lag)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max() + 1e-6


@pytest.mark.parametrize("method", ["quadratic", "parabolic", "none"])
def test_direct_engine_agrees_with_fft_engine(sample_dir, method):
    config = EngineConfig(mode="window", max_shift=6, subpixel=method)
    (d0, h0, s0), (d1, h1, s1) = (_match_sample(sample_dir, "cuda", name, config) for name in ("direct", "fft"))
    np.testing.assert_array_equal(s0, s1)
    np.testing.assert_allclose(d0, d1, atol=1e-3, equal_nan=True)
    np.testing.assert_allclose(h0, h1, atol=1e-4, equal_nan=True)
