"""References as an input of their own: K prepared reference sets and a set index per pattern.

Matching with K sets and an index equals K calls with one set each (exactly on the CPU), and
the peaks are those of a float64 oracle; pairs (each pattern its own set, as the remapping
pass of HR-EBSD does) equal an engine built per call over all the pairs. GPU tests run with
``pytest -m gpu`` for the fft, fused and direct engines.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage
from scipy.signal import correlate2d

from ebsdxc import status as st
from ebsdxc.backend import select_backend
from ebsdxc.engines import ENGINES, EngineConfig, PreparedReferences, make_engine
from ebsdxc.peaks import locate_peaks
from ebsdxc.preprocess import prepare_tiles, window_1d, window_2d

SHAPE = (20, 24)
INDEX = np.array([0, 2, 1, 1, 0, 2, 2, 0, 1])  # every set, in no order, several patterns each
K, N_ROI = 3, 3
MODES = [("full", None, False), ("window", 5, False), ("window", 5, True)]  # (mode, max_shift, circular)


def _data(seed=0, shape=SHAPE, index=INDEX, k=K, n=N_ROI):
    """Prepared (tiles, energy, status) of K reference sets (K, n, h, w) and of scan tiles
    (B, n, h, w): pattern b shows set index[b] moved by up to 2.5 px, with noise."""
    rng = np.random.default_rng(seed)
    h, w = shape
    big = ndimage.gaussian_filter(rng.standard_normal((k, n, h + 16, w + 16)), (0, 0, 1.5, 1.5))
    refs = big[..., 8:8 + h, 8:8 + w]
    B = len(index)
    scans = np.empty((B, n, h, w))
    for b, s in enumerate(index):
        for j in range(n):
            dy, dx = rng.uniform(-2.5, 2.5, 2)
            moved = ndimage.shift(big[s, j], (dy, dx), order=3, mode="wrap")
            scans[b, j] = moved[8:8 + h, 8:8 + w] + 0.05 * rng.standard_normal((h, w))
    win = window_2d(shape)
    return prepare_tiles(refs.astype(np.float32), win), prepare_tiles(scans.astype(np.float32), win)


def _engine(be, name, mode, max_shift, circular, method, *, compensate=True, shape=SHAPE):
    h, w = shape
    cfg = EngineConfig(mode=mode, max_shift=max_shift, subpixel=method, circular=circular, compensate=compensate)
    return make_engine(name, be, shape, cfg, window_1d=(window_1d(h), window_1d(w)))


def _host(be, r):
    return [be.asnumpy(a) for a in (r.displacement, r.peak_height, r.status)]


def _per_set_calls(be, eng, refs, scans, index):
    """The K = 1 way: one set_reference and one match per reference set, results put back in order."""
    (rt, re, rs), (t, e, s) = refs, scans
    xp = be.xp
    B, n = index.shape[0], rt.shape[1]
    out = [np.full((B, n, 2), np.nan, np.float32), np.full((B, n), np.nan, np.float32), np.zeros((B, n), np.uint8)]
    for k in range(rt.shape[0]):
        sel = np.flatnonzero(index == k)
        eng.set_reference(xp.asarray(rt[k]), xp.asarray(re[k]), xp.asarray(rs[k]))
        got = _host(be, eng.match(xp.asarray(t[sel]), xp.asarray(e[sel]), xp.asarray(s[sel])))
        for o, g in zip(out, got):
            o[sel] = g
    return out


def _oracle_maps(scan, ref, fft_shape):
    """float64 circular correlation at the engine's FFT size: sum scan[y + dy, x + dx] ref[y, x]."""
    s = tuple(fft_shape)
    spec = np.fft.rfft2(scan.astype(np.float64), s=s) * np.conj(np.fft.rfft2(ref.astype(np.float64), s=s))
    return np.fft.irfft2(spec, s=s)


def _oracle_peaks(refs, scans, index, eng, method):
    """(displacement, peak height) of every (b, k) from float64 maps of its own reference set."""
    (rt, re, _), (t, e, _) = refs, scans
    B, n = t.shape[:2]
    ref_of = rt[index].reshape(B * n, *rt.shape[2:])
    maps = _oracle_maps(t.reshape(B * n, *t.shape[2:]), ref_of, eng.fft_shape)
    cps = np.fft.rfft2(maps)
    y, x, value, _ = locate_peaks(maps, max_lag=eng.max_lag, method=method, cross_power=cps,
                                  upsample=eng.config.upsample)
    height = value / np.sqrt(e.reshape(-1).astype(np.float64) * re[index].reshape(-1).astype(np.float64))
    return np.stack([x, y], axis=-1).reshape(B, n, 2), height.reshape(B, n)


def _definition(scan, ref, max_lag):
    """float64 definition over the overlap: [ry + dy, rx + dx] (centred)."""
    h, w = ref.shape
    ry, rx = max_lag
    full = correlate2d(scan.astype(np.float64), ref.astype(np.float64), mode="full")
    return full[h - 1 - ry:h + ry, w - 1 - rx:w + rx]


# ------------------------------------------------------------------ CPU


@pytest.fixture(scope="module")
def cpu():
    return select_backend("cpu")


@pytest.fixture(scope="module")
def data():
    return _data()


@pytest.mark.parametrize("method", ["dft", "upsampled", "quadratic", "gaussian", "parabolic", "none"])
@pytest.mark.parametrize("mode,max_shift,circular", MODES)
def test_k_references_equal_one_call_per_reference(cpu, data, method, mode, max_shift, circular):
    refs, scans = data
    eng = _engine(cpu, "fft", mode, max_shift, circular, method)
    prepared = eng.prepare_references(*refs)
    assert isinstance(prepared, PreparedReferences) and (prepared.count, prepared.n) == (K, N_ROI)
    got = _host(cpu, eng.match(*scans, references=prepared, index=INDEX))
    want = _per_set_calls(cpu, eng, refs, scans, INDEX)
    for g, w_ in zip(got, want):
        assert np.array_equal(g, w_, equal_nan=True)
    assert (got[2] == st.OK).all()
    # maps as well, and a device-style (list) index
    t = scans[0]
    maps = eng.correlation_maps(t, references=prepared, index=list(INDEX))
    for k in range(K):
        sel = INDEX == k
        eng.set_reference(*(a[k] for a in refs))
        assert np.array_equal(maps[sel], eng.correlation_maps(t[sel]))


@pytest.mark.parametrize("method", ["dft", "upsampled", "quadratic", "gaussian", "parabolic", "none"])
@pytest.mark.parametrize("mode,max_shift,circular", MODES)
def test_k_references_match_float64_oracle(cpu, data, method, mode, max_shift, circular):
    refs, scans = data
    eng = _engine(cpu, "fft", mode, max_shift, circular, method, compensate=False)
    d, hgt, s = _host(cpu, eng.match(*scans, references=eng.prepare_references(*refs), index=INDEX))
    od, oh = _oracle_peaks(refs, scans, INDEX, eng, method)
    np.testing.assert_array_equal(s, st.OK)
    np.testing.assert_allclose(d, od, atol=0 if method == "none" else 1e-3)
    np.testing.assert_allclose(hgt, oh, atol=1e-5)
    if not circular:  # the oracle's maps are the definition at the searched lags
        (rt, _, _), (t, _, _) = refs, scans
        ry, rx = eng.max_lag
        ny, nx = eng.fft_shape
        iy, ix = np.arange(-ry, ry + 1) % ny, np.arange(-rx, rx + 1) % nx
        for b in (0, 1, 2):
            circ = _oracle_maps(t[b, 1], rt[INDEX[b], 1], eng.fft_shape)
            np.testing.assert_allclose(circ[np.ix_(iy, ix)], _definition(t[b, 1], rt[INDEX[b], 1], (ry, rx)),
                                       atol=1e-9)


@pytest.mark.parametrize("method", ["dft", "quadratic", "none"])
@pytest.mark.parametrize("mode,max_shift,circular", MODES[:2])
def test_pairs_equal_an_engine_per_call(cpu, method, mode, max_shift, circular):
    # HR-EBSD remapping: B patterns, each with its own freshly remapped reference set. The old
    # way built a second engine with the B * n tiles as one reference set and the patterns as
    # one right-hand set (Pipeline.match_pairs); the same engine now takes them as B sets.
    index = np.arange(6)
    refs, scans = _data(seed=3, index=index, k=6)
    eng = _engine(cpu, "fft", mode, max_shift, circular, method)
    eng.set_reference(*(a[0] for a in refs))  # its own references stay as they are
    before = _host(cpu, eng.match(*scans))
    got = _host(cpu, eng.match(*scans, references=eng.prepare_references(*refs), index=index))
    (rt, re, rs), (t, e, s) = refs, scans
    B, n = t.shape[:2]
    other = _engine(cpu, "fft", mode, max_shift, circular, method)
    other.set_reference(rt.reshape(B * n, *SHAPE), re.reshape(-1), rs.reshape(-1))
    r = other.match(t.reshape(1, B * n, *SHAPE), e.reshape(1, -1), s.reshape(1, -1))
    want = [r.displacement.reshape(B, n, 2), r.peak_height.reshape(B, n), r.status.reshape(B, n)]
    for g, w_ in zip(got, want):
        assert np.array_equal(g, w_, equal_nan=True)
    for g, w_ in zip(_host(cpu, eng.match(*scans)), before):
        assert np.array_equal(g, w_, equal_nan=True)


def test_each_point_uses_its_own_reference_energy_and_status(cpu):
    refs, scans = _data(seed=5)
    (rt, re, rs), (t, e, _) = refs, scans
    rt, re, rs = rt.copy(), re.copy(), rs.copy()
    rt[2], re[2] = 3 * rt[0], 9 * re[0]  # set 2: set 0 three times as bright
    rs[1, 2] = st.CONSTANT_TILE  # set 1: its last tile is unusable
    index = np.array([0, 2, 1, 0, 1, 2])
    t = np.stack([t[0], t[0], t[2], t[0], t[2], t[0]])
    e = np.stack([e[0], e[0], e[2], e[0], e[2], e[0]])
    eng = _engine(cpu, "fft", "window", 5, False, "quadratic")
    r = eng.match(t, e, np.zeros((6, N_ROI), np.uint8), references=eng.prepare_references(rt, re, rs), index=index)
    assert (r.status[index == 1, 2] == st.CONSTANT_TILE).all() and np.isnan(r.peak_height[index == 1, 2]).all()
    assert (np.delete(r.status, 2, axis=1) == st.OK).all() and (r.status[index != 1] == st.OK).all()
    # the same content against set 0 and against set 2 (x 3): the same normalised height and shift
    np.testing.assert_allclose(r.peak_height[1], r.peak_height[0], rtol=1e-5)
    np.testing.assert_allclose(r.displacement[1], r.displacement[0], atol=1e-4)


def test_index_none_is_set_zero_and_bad_inputs_are_refused(cpu, data):
    refs, scans = data
    eng = _engine(cpu, "fft", "window", 5, False, "dft")
    prepared = eng.prepare_references(*refs)
    got = _host(cpu, eng.match(*scans, references=prepared))
    want = _host(cpu, eng.match(*scans, references=prepared, index=np.zeros(len(INDEX), int)))
    for g, w_ in zip(got, want):
        assert np.array_equal(g, w_, equal_nan=True)
    one = eng.prepare_references(*(a[:1] for a in refs))
    assert one.count == 1
    for g, w_ in zip(_host(cpu, eng.match(*scans, references=one, index=np.zeros(len(INDEX), np.int32))), got):
        assert np.array_equal(g, w_, equal_nan=True)
    with pytest.raises(ValueError, match="no references"):
        eng.match(*scans)
    with pytest.raises(ValueError, match="pick reference sets 0 to 2"):
        eng.match(*scans, references=prepared, index=INDEX + 1)
    with pytest.raises(ValueError, match="one per pattern"):
        eng.match(*scans, references=prepared, index=INDEX[:4])
    with pytest.raises(ValueError, match="integers"):
        eng.match(*scans, references=prepared, index=INDEX.astype(float))
    with pytest.raises(ValueError, match="reference tiles per set"):
        eng.match(*(a[:, :2] for a in scans), references=prepared, index=INDEX)
    with pytest.raises(ValueError, match=r"\(K, n, 20, 24\)"):
        eng.prepare_references(refs[0][0], refs[1][0], refs[2][0])
    with pytest.raises(ValueError, match="reference energy must be"):
        eng.prepare_references(refs[0], refs[1][:2], refs[2])
    full = _engine(cpu, "fft", "full", None, False, "dft")
    with pytest.raises(ValueError, match="another kind"):
        full.match(*scans, references=prepared, index=INDEX)


# ------------------------------------------------------------------ GPU

GPU_METHODS = [(name, m) for name in ("fft", "fused", "direct") for m in ENGINES[name].info.subpixel]


def _gpu_maps_oracle(eng, refs, scans, index):
    """float64 maps in the engine's layout for every (b, k), from its own reference set."""
    (rt, _, _), (t, _, _) = refs, scans
    B, n = t.shape[:2]
    ref_of = rt[index]
    if eng.name == "direct":
        ry, rx = eng.max_lag
        out = np.empty((B, n, 2 * ry + 1, 2 * rx + 1))
        for b in range(B):
            for k in range(n):
                out[b, k] = np.fft.ifftshift(_definition(t[b, k], ref_of[b, k], (ry, rx)))
        return out
    return _oracle_maps(t, ref_of, eng.fft_shape)


@pytest.mark.gpu
@pytest.mark.parametrize("name,method", GPU_METHODS)
@pytest.mark.parametrize("mode,max_shift", [("full", None), ("window", 5)])
def test_gpu_k_references_equal_one_call_per_reference(data, name, method, mode, max_shift):
    import cupy as cp

    gpu = select_backend("cuda")
    refs, scans = data
    eng = _engine(gpu, name, mode, max_shift, False, method)
    prepared = eng.prepare_references(*(cp.asarray(a) for a in refs))
    dev = [cp.asarray(a) for a in scans]
    for index in (INDEX, cp.asarray(INDEX)):  # host or device index
        got = _host(gpu, eng.match(*dev, references=prepared, index=index))
        want = _per_set_calls(gpu, eng, refs, scans, INDEX)
        np.testing.assert_array_equal(got[2], want[2])
        assert (got[2] == st.OK).all()
        np.testing.assert_allclose(got[0], want[0], atol=1e-3)
        np.testing.assert_allclose(got[1], want[1], atol=1e-4)
    # against the CPU float64 oracle (no window compensation)
    plain = _engine(gpu, name, mode, max_shift, False, method, compensate=False)
    d, hgt, s = _host(gpu, plain.match(*dev, references=plain.prepare_references(*(cp.asarray(a) for a in refs)),
                                       index=cp.asarray(INDEX)))
    cpu_eng = _engine(select_backend("cpu"), "fft", mode, max_shift, False, method, compensate=False)
    od, oh = _oracle_peaks(refs, scans, INDEX, cpu_eng, method)
    np.testing.assert_array_equal(s, st.OK)
    np.testing.assert_allclose(d, od, atol=1e-3)
    np.testing.assert_allclose(hgt, oh, atol=1e-4)
    # maps in the engine's own layout against float64 maps of each pattern's own set
    maps = eng.correlation_maps(dev[0], references=prepared, index=INDEX).get()
    want = _gpu_maps_oracle(eng, refs, scans, INDEX)
    ry, rx = eng.max_lag
    My, Mx = maps.shape[-2:]
    iy, ix = np.arange(-ry, ry + 1) % My, np.arange(-rx, rx + 1) % Mx
    got_l, want_l = maps[..., iy, :][..., ix], want[..., iy, :][..., ix]
    assert np.abs(got_l - want_l).max() <= 1e-5 * np.abs(want_l).max()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["fft", "fused", "direct"])
@pytest.mark.parametrize("mode,max_shift", [("full", None), ("window", 5)])
def test_gpu_pairs_equal_an_engine_per_call(name, mode, max_shift):
    import cupy as cp

    gpu = select_backend("cuda")
    index = np.arange(6)
    refs, scans = _data(seed=3, index=index, k=6)
    (rt, re, rs), (t, e, s) = ([cp.asarray(a) for a in x] for x in (refs, scans))
    eng = _engine(gpu, name, mode, max_shift, False, "quadratic")
    eng.set_reference(rt[0], re[0], rs[0])
    got = _host(gpu, eng.match(t, e, s, references=eng.prepare_references(rt, re, rs), index=cp.asarray(index)))
    B, n = t.shape[:2]
    other = _engine(gpu, name, mode, max_shift, False, "quadratic")
    other.set_reference(rt.reshape(B * n, *SHAPE), re.reshape(-1), rs.reshape(-1))
    r = other.match(t.reshape(1, B * n, *SHAPE), e.reshape(1, -1), s.reshape(1, -1))
    want = [a.get() for a in (r.displacement.reshape(B, n, 2), r.peak_height.reshape(B, n), r.status.reshape(B, n))]
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_allclose(got[0], want[0], atol=1e-3)
    np.testing.assert_allclose(got[1], want[1], atol=1e-4)
    assert (got[2] == st.OK).all()


@pytest.mark.gpu
@pytest.mark.parametrize("index", [np.tile(INDEX, 3), np.ones(8, int), INDEX], ids=["by-set", "one-set", "pairs"])
@pytest.mark.parametrize("mode,max_shift", [("full", None), ("window", 5)])
def test_gpu_direct_engine_set_by_set_or_by_pairs(monkeypatch, index, mode, max_shift):
    # Many patterns per set: one launch per set present; one set: no gather; few: one pairing.
    import cupy as cp

    from ebsdxc.engines import pairing

    monkeypatch.setattr(pairing, "GROUP_FMAS", 0)  # these small tiles would always go as pairs
    gpu = select_backend("cuda")
    refs, scans = _data(seed=11, index=index)
    eng = _engine(gpu, "direct", mode, max_shift, False, "quadratic")
    prepared = eng.prepare_references(*(cp.asarray(a) for a in refs))
    dev = [cp.asarray(a) for a in scans]
    got = _host(gpu, eng.match(*dev, references=prepared, index=cp.asarray(index)))
    want = _per_set_calls(gpu, eng, refs, scans, index)
    np.testing.assert_array_equal(got[2], want[2])
    # random tiles: a barely concave peak far from its integer peak is flagged (peaks.LOOSE_REACH)
    assert np.isin(got[2], (st.OK, st.SUBPIXEL_FAILED)).all() and (got[2] == st.OK).mean() > 0.9
    np.testing.assert_allclose(got[0], want[0], atol=1e-3)
    np.testing.assert_allclose(got[1], want[1], atol=1e-4)
    maps = eng.correlation_maps(dev[0], references=prepared, index=index).get()
    oracle = _gpu_maps_oracle(eng, refs, scans, index)
    assert np.abs(maps - oracle).max() <= 1e-5 * np.abs(oracle).max()
