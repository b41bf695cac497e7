"""ebsdxc.simulate.simulate_patterns: batched, array-generic master-pattern projection."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ebsdxc import simulate as sim
from ebsdxc.crystal import euler_to_matrix


@pytest.fixture(scope="module")
def master():
    try:
        return sim.load_nickel_master_pattern()
    except ValueError as exc:  # kikuchipy (its data file) not installed
        pytest.skip(str(exc))


def orientations(n, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    w, x, y, z = q.T
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)], -2)


def ncc(a, b):
    a = (a - a.mean()) / a.std()
    b = (b - b.mean()) / b.std()
    return float((a * b).mean())


@pytest.mark.parametrize("shape, sample_tilt, detector_tilt", [((60, 80), 70.0, 0.0), ((48, 40), 65.0, 8.0)])
def test_equals_simulate_pattern(master, shape, sample_tilt, detector_tilt):
    B = 6
    g = orientations(B)
    rng = np.random.default_rng(1)
    pc = np.array([0.45, 0.4, 0.6]) + rng.normal(0, 0.03, (B, 3))
    F = np.eye(3) + rng.normal(0, 0.01, (B, 3, 3))
    tilts = dict(sample_tilt=sample_tilt, detector_tilt=detector_tilt)
    out = sim.simulate_patterns(master, shape=shape, pc=pc, orientations=g, F=F, background=True, **tilts)
    assert out.shape == (B,) + shape and out.dtype == np.float32
    for b in range(B):
        one = sim.simulate_pattern(master, shape=shape, pc=pc[b], orientation=g[b], F=F[b], background=True,
                                   **tilts)
        np.testing.assert_allclose(out[b], one, rtol=1e-6, atol=1e-6 * one.max())
    # one PC for all, no F
    common = sim.simulate_patterns(master, shape=shape, pc=pc[0], orientations=g, **tilts)
    one = sim.simulate_pattern(master, shape=shape, pc=pc[0], orientation=g[3], background=False, **tilts)
    np.testing.assert_allclose(common[3], one, rtol=1e-6, atol=1e-6 * one.max())


def test_master_pattern_object_and_chunks(master, monkeypatch):
    from ebsdxc.io.master_pattern import read_master_pattern

    mp = read_master_pattern(sim.nickel_master_pattern_path())
    g = orientations(9, seed=3)
    whole = sim.simulate_patterns(mp, shape=(32, 40), pc=(0.5, 0.45, 0.6), orientations=g)
    # chunks of 2 patterns (the chunking must not change a value)
    monkeypatch.setitem(sim._CHUNK_PIXELS, "cpu", 2 * 32 * 40)
    chunked = sim.simulate_patterns(master, shape=(32, 40), pc=(0.5, 0.45, 0.6), orientations=g)
    np.testing.assert_array_equal(whole, chunked)
    # an (n, n) master serves both hemispheres
    one = sim.simulate_patterns(master[0], shape=(32, 40), pc=(0.5, 0.45, 0.6), orientations=g[:1])
    np.testing.assert_allclose(one[0], sim.simulate_pattern(master[0], shape=(32, 40), pc=(0.5, 0.45, 0.6),
                                                            orientation=g[0], background=False), rtol=1e-6)
    assert sim.simulate_patterns(master, shape=(8, 8), pc=(0.5, 0.5, 0.6), orientations=g[:0]).shape == (0, 8, 8)


def test_matches_kikuchipy(master):
    kp = pytest.importorskip("kikuchipy")
    from orix.quaternion import Rotation

    shape, pc = (60, 80), (0.42, 0.31, 0.55)
    mp = kp.data.nickel_ebsd_master_pattern_small(projection="lambert", hemisphere="both")
    det = kp.detectors.EBSDDetector(shape=shape, pc=pc, sample_tilt=70.0, tilt=0.0)
    rot = Rotation.from_euler(np.deg2rad([[35.0, 52.0, 17.0], [10.0, 150.0, 40.0], [200.0, 20.0, 300.0]]))
    theirs = mp.get_patterns(rot, det, compute=True, dtype_out=np.float64, show_progressbar=False).data
    g = rot.to_matrix()
    np.testing.assert_allclose(g[0], euler_to_matrix([35.0, 52.0, 17.0]), atol=1e-12)
    ours = sim.simulate_patterns(master, shape=shape, pc=pc, orientations=g)
    for b in range(3):
        assert ncc(ours[b], theirs.reshape(3, *shape)[b]) > 0.99
    # the test can tell conventions apart: the inverse rotations give unrelated patterns
    wrong = sim.simulate_patterns(master, shape=shape, pc=pc, orientations=np.swapaxes(g, 1, 2))
    assert ncc(wrong[0], theirs.reshape(3, *shape)[0]) < 0.5


def test_errors(master):
    g = orientations(2)
    kw = dict(shape=(16, 16), pc=(0.5, 0.5, 0.6))
    with pytest.raises(ValueError, match="orientations must have shape"):
        sim.simulate_patterns(master, orientations=g[0], **kw)
    with pytest.raises(ValueError, match=r"orientations\[1\] is not a proper rotation"):
        sim.simulate_patterns(master, orientations=np.stack([g[0], -g[1]]), **kw)
    with pytest.raises(ValueError, match="pc must have shape"):
        sim.simulate_patterns(master, shape=(16, 16), pc=np.zeros((3, 3)) + 0.5, orientations=g)
    with pytest.raises(ValueError, match="PCz > 0"):
        sim.simulate_patterns(master, shape=(16, 16), pc=(0.5, 0.5, -0.1), orientations=g)
    with pytest.raises(ValueError, match="F must have shape"):
        sim.simulate_patterns(master, orientations=g, F=np.eye(2), **kw)
    with pytest.raises(ValueError, match="det"):
        sim.simulate_patterns(master, orientations=g, F=-np.eye(3), **kw)
    with pytest.raises(ValueError, match="master pattern must have shape"):
        sim.simulate_patterns(master[:, :10], orientations=g, **kw)


def test_speed_cpu(master):
    g = orientations(32, seed=5)
    t = time.perf_counter()
    sim.simulate_patterns(master, shape=(128, 128), pc=(0.5, 0.45, 0.6), orientations=g)
    rate = 32 / (time.perf_counter() - t)
    print(f"simulate_patterns, NumPy, 128 x 128: {rate:.0f} patterns/s")
    assert rate > 10  # about 100/s on 2 cores


@pytest.mark.gpu
def test_cupy_equals_numpy(master):
    cp = pytest.importorskip("cupy")
    B, shape = 64, (96, 128)
    g = orientations(B, seed=7)
    rng = np.random.default_rng(2)
    pc = np.array([0.45, 0.4, 0.6]) + rng.normal(0, 0.03, (B, 3))
    F = np.eye(3) + rng.normal(0, 0.01, (B, 3, 3))
    cpu = sim.simulate_patterns(master, shape=shape, pc=pc, orientations=g, F=F, sample_tilt=68, detector_tilt=5,
                                background=True)
    gpu = sim.simulate_patterns(cp.asarray(master), shape=shape, pc=cp.asarray(pc), orientations=cp.asarray(g),
                                F=cp.asarray(F), sample_tilt=68, detector_tilt=5, background=True)
    assert isinstance(gpu, cp.ndarray) and gpu.dtype == cp.float32
    np.testing.assert_allclose(cp.asnumpy(gpu), cpu, rtol=1e-5, atol=1e-5 * cpu.max())
    # a NumPy master is moved to the device; a float64 one gives the same result
    again = sim.simulate_patterns(master.astype(np.float64), shape=shape, pc=pc[0], orientations=cp.asarray(g))
    np.testing.assert_allclose(cp.asnumpy(again), sim.simulate_patterns(master, shape=shape, pc=pc[0],
                                                                        orientations=g), rtol=1e-5, atol=1e-3)
    # speed figure for the report: 256 x 256, 2048 patterns
    big = cp.asarray(orientations(2048, seed=8))
    lam = cp.asarray(master)
    sim.simulate_patterns(lam, shape=(256, 256), pc=(0.5, 0.45, 0.6), orientations=big[:8])
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    sim.simulate_patterns(lam, shape=(256, 256), pc=(0.5, 0.45, 0.6), orientations=big)
    cp.cuda.Device().synchronize()
    print(f"simulate_patterns, CuPy, 256 x 256: {2048 / (time.perf_counter() - t):.0f} patterns/s")
