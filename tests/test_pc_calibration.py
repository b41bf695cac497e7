"""ebsdxc.pc_calibration: PC + orientation refinement against a master pattern, PC models."""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy.optimize import minimize, rosen

from ebsdxc import simulate as sim
from ebsdxc.crystal import euler_to_matrix, misorientation_angle
from ebsdxc.geometry import extrapolate_pc
from ebsdxc.pc_calibration import fit_pc_model, nelder_mead_batch, pattern_ncc, refine_pc


@pytest.fixture(scope="module")
def master():
    try:
        return sim.load_nickel_master_pattern()
    except ValueError as exc:
        pytest.skip(str(exc))


def rotation(w):
    from scipy.spatial.transform import Rotation

    return Rotation.from_rotvec(w).as_matrix()


def test_nelder_mead_batch_is_scipys():
    x0 = np.array([[1.3, 0.7, 0.8, 1.9, 1.2], [0.5, 0.6, 0.4, 0.5, 0.3]])
    calls = []

    def fun(owner, points):
        calls.append(len(points))
        return np.array([rosen(p) for p in points])

    x, f, iterations, converged, evaluations = nelder_mead_batch(fun, x0, 0.05 * x0, xatol=1e-4, fatol=1e-4,
                                                                 max_iterations=5000)
    for b in range(2):
        ref = minimize(rosen, x0[b], method="Nelder-Mead", options=dict(xatol=1e-4, fatol=1e-4, maxiter=5000))
        np.testing.assert_allclose(x[b], ref.x, rtol=1e-12)
        assert f[b] == pytest.approx(ref.fun, rel=1e-9) and evaluations[b] == ref.nfev and converged[b]
    # both searches ran in the same rounds: far fewer calls than evaluations
    assert len(calls) < 0.7 * evaluations.sum()
    _, _, it, conv, _ = nelder_mead_batch(fun, x0, 0.05 * x0, max_iterations=5)
    assert np.all(it == 5) and not conv.any()


def test_pattern_ncc():
    rng = np.random.default_rng(0)
    a = rng.random((2, 20, 30))
    assert pattern_ncc(a, 3 * a + 1) == pytest.approx([1.0, 1.0])
    assert pattern_ncc(a[0], -a[0]) == pytest.approx(-1.0)
    mask = np.zeros((20, 30), bool)
    mask[5:15, 5:25] = True
    b = a.copy()
    b[:, ~mask] = rng.random((2, (~mask).sum()))
    assert pattern_ncc(a, b, mask=mask) == pytest.approx([1.0, 1.0])
    assert np.isnan(pattern_ncc(np.ones((4, 4)), a[0, :4, :4]))


def _problem(master, B, shape, seed, counts=None):
    rng = np.random.default_rng(seed)
    g = euler_to_matrix(rng.uniform([0, 0, 0], [360, 90, 360], (B, 3)))
    pc = np.array([0.5, 0.45, 0.6]) + rng.normal(0, 0.01, (B, 3))
    pats = sim.simulate_patterns(master, shape=shape, pc=pc, orientations=g)
    if counts is not None:
        pats = np.stack([sim.poisson_noise(p, counts=counts, rng=rng) for p in pats]).astype(np.float32)
    # start: PC off by 1% of the detector in each component, orientation off by 1 degree
    dpc = 0.01 * rng.choice([-1.0, 1.0], (B, 3))
    axis = rng.normal(size=(B, 3))
    w = np.deg2rad(1.0) * axis / np.linalg.norm(axis, axis=1, keepdims=True)
    g0 = g @ rotation(w)
    return pats, pc, g, pc + dpc, g0


def test_refine_noise_free(master):
    pats, pc, g, pc0, g0 = _problem(master, 3, (96, 96), seed=0)
    t = time.perf_counter()
    res = refine_pc(pats, master, pc0=pc0, orientations0=g0)
    seconds = time.perf_counter() - t
    err = np.abs(res.pc - pc)
    angle = np.degrees(misorientation_angle(res.orientation, g, laue="-1"))
    print(f"noise-free 96x96: PC error max {err.max():.2e} (detector fractions), orientation {angle.max():.4f} deg, "
          f"{res.evaluations.mean():.0f} simulations per pattern, {seconds:.1f} s for 3")
    assert err.max() < 5e-4  # 0.05% of the detector
    assert angle.max() < 0.05
    assert np.all(res.converged) and np.all(res.ncc > 0.9999) and np.all(res.ncc_start < 0.9)
    # the start is really 1% / 1 degree off
    assert np.abs(pc0 - pc).min() == pytest.approx(0.01)


def test_refine_with_poisson_noise(master):
    pats, pc, g, pc0, g0 = _problem(master, 3, (96, 96), seed=1, counts=200)
    res = refine_pc(pats, master, pc0=pc0, orientations0=g0)
    err = np.abs(res.pc - pc)
    angle = np.degrees(misorientation_angle(res.orientation, g, laue="-1"))
    print(f"Poisson 200 counts/px, 96x96: PC error max {err.max():.2e}, orientation {angle.max():.4f} deg, "
          f"NCC {res.ncc.min():.3f}")
    assert err.max() < 1.5e-3
    assert angle.max() < 0.1


def test_refine_pc_only_and_mask(master):
    pats, pc, g, pc0, _ = _problem(master, 2, (64, 64), seed=2)
    yy, xx = np.indices((64, 64))
    mask = (xx - 31.5) ** 2 + (yy - 31.5) ** 2 <= 32**2
    # outside the screen the measured patterns hold nothing the simulation would explain
    pats = np.where(mask, pats, 7.0).astype(np.float32)
    res = refine_pc(pats, master, pc0=pc0, orientations0=g, mask=mask, refine_orientation=False)
    assert np.abs(res.pc - pc).max() < 5e-4
    np.testing.assert_array_equal(res.orientation, g)


def test_refine_errors(master):
    pats = np.ones((2, 16, 16), np.float32)
    g = np.broadcast_to(np.eye(3), (2, 3, 3))
    with pytest.raises(ValueError, match="constant"):
        refine_pc(pats, master, pc0=(0.5, 0.5, 0.6), orientations0=g)
    with pytest.raises(ValueError, match="pc0"):
        refine_pc(pats, master, pc0=(0.5, 0.5, -0.6), orientations0=g)
    with pytest.raises(ValueError, match="orientations0"):
        refine_pc(pats, master, pc0=(0.5, 0.5, 0.6), orientations0=np.eye(2))
    with pytest.raises(ValueError, match="patterns must have shape"):
        refine_pc(pats[0], master, pc0=(0.5, 0.5, 0.6), orientations0=g)
    with pytest.raises(ValueError, match="pc_step"):
        refine_pc(pats, master, pc0=(0.5, 0.5, 0.6), orientations0=g, pc_step=0)


# --------------------------------------------------------------------------- PC models


def test_fit_plane_and_extrapolation_models():
    kw = dict(grid_shape=(20, 30), step=(1.5, 2.0), pixel_size=20.0, binning=4, shape=(120, 160),
              sample_tilt=70.0, detector_tilt=4.0)
    truth = extrapolate_pc((0.48, 0.42, 0.61), **kw)  # linear in row and col: a plane too
    rc = np.array([(r, c) for r in (2, 10, 17) for c in (3, 15, 26)])
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 1e-4, (len(rc), 3))
    measured = truth[rc[:, 0], rc[:, 1]] + noise
    plane = fit_pc_model(rc, measured, grid_shape=(20, 30))
    assert plane.pc_map.shape == (20, 30, 3)
    assert np.abs(plane.pc_map - truth).max() < 3e-4
    np.testing.assert_allclose(plane.residual, measured - plane.pc_map[rc[:, 0], rc[:, 1]])
    extra = fit_pc_model(rc, measured, model="extrapolation", **kw)
    # only the PC at the map centre is fitted: the mean of the noise
    np.testing.assert_allclose(extra.pc_map - truth, np.broadcast_to(noise.mean(axis=0), truth.shape), atol=1e-12)
    assert extra.parameters["point"] == [9.5, 14.5]
    # a bad point left out by `use` does not move the fit
    bad = measured.copy()
    bad[4] += 0.05
    use = np.ones(len(rc), bool)
    use[4] = False
    again = fit_pc_model(rc, bad, grid_shape=(20, 30), use=use)
    assert np.abs(again.pc_map - truth).max() < 4e-4
    assert again.summary()["n_used"] == 8 and np.abs(again.residual[4]).max() > 0.04
    with pytest.raises(ValueError, match="at least 3 usable points"):
        fit_pc_model(rc[:2], measured[:2], grid_shape=(20, 30))
    with pytest.raises(ValueError, match="one line"):
        fit_pc_model(rc[:3], measured[:3], grid_shape=(20, 30))  # row 2 only
    with pytest.raises(ValueError, match="twice"):
        fit_pc_model(rc[[0, 0, 1]], measured[:3], grid_shape=(20, 30))
    with pytest.raises(ValueError, match="needs step"):
        fit_pc_model(rc, measured, grid_shape=(20, 30), model="extrapolation")
    with pytest.raises(ValueError, match="model must be"):
        fit_pc_model(rc, measured, grid_shape=(20, 30), model="cubic")


# --------------------------------------------------------------------------- real patterns, kikuchipy as oracle


@pytest.mark.slow
def test_real_nickel_patterns_agree_with_kikuchipy(master):
    """kikuchipy's 3 x 3 real Ni patterns (60 x 60): start orientations from a small kikuchipy dictionary
    (4 degrees), then kikuchipy's refine_orientation_projection_center and ours from the same start."""
    kp = pytest.importorskip("kikuchipy")
    from orix.quaternion import Rotation, symmetry
    from orix.sampling import get_sample_fundamental

    s = kp.data.nickel_ebsd_small()
    s.remove_static_background(show_progressbar=False)
    s.remove_dynamic_background(show_progressbar=False)
    mp = kp.data.nickel_ebsd_master_pattern_small(projection="lambert", energy=20)
    pc_start = (0.421, 0.221, 0.505)  # kikuchipy's documentation's PC of these patterns (Bruker)
    det = kp.detectors.EBSDDetector(shape=(60, 60), pc=pc_start, sample_tilt=70)
    dictionary = mp.get_patterns(get_sample_fundamental(resolution=4, point_group=symmetry.Oh), det, energy=20,
                                 compute=True, show_progressbar=False)
    xmap = s.dictionary_indexing(dictionary, keep_n=2)
    g0 = xmap.rotations.to_matrix().reshape(9, 2, 3, 3)[:, 0]
    xmap_kp, det_kp = s.refine_orientation_projection_center(
        xmap, det, mp, energy=20, method="minimize", method_kwargs=dict(method="Nelder-Mead", tol=1e-8),
        trust_region=[2, 2, 2, 0.05, 0.05, 0.05], compute=True)
    kp_pc = det_kp.pc.reshape(9, 3)
    kp_ncc = xmap_kp.scores.reshape(9)

    pats = s.data.reshape(9, 60, 60).astype(np.float32)
    ours = refine_pc(pats, master, pc0=pc_start, orientations0=g0, pc_step=0.02, angle_step=2.0)
    good = kp_ncc > 0.3  # 5 of the 9 points; the others are poor patterns (NCC ~0.13 for both)
    assert good.sum() >= 4
    assert np.all(ours.ncc[good] >= kp_ncc[good] - 1e-3)
    # kikuchipy's own projection scores our refined geometry as we do: the same objective, and as least as high
    for i in np.flatnonzero(good):
        d = kp.detectors.EBSDDetector(shape=(60, 60), pc=ours.pc[i], sample_tilt=70)
        theirs = mp.get_patterns(Rotation.from_matrix(ours.orientation[i][None]), d, energy=20, compute=True,
                                 show_progressbar=False, dtype_out=np.float64).data.reshape(60, 60)
        assert float(pattern_ncc(theirs, pats[i])) == pytest.approx(ours.ncc[i], abs=1e-4)
    # PCs: mean over the good points within 0.5% of the detector (0.3 px on these 60 px patterns),
    # each point within 1.5% (PCx and the rotation about the detector's vertical trade off on so few pixels)
    diff = ours.pc[good] - kp_pc[good]
    print(f"real Ni: PC ours - kikuchipy, mean {diff.mean(axis=0)}, max |.| {np.abs(diff).max(axis=0)}; "
          f"NCC ours {ours.ncc[good].round(4)}, kikuchipy {kp_ncc[good].round(4)}")
    assert np.abs(diff.mean(axis=0)).max() < 5e-3
    assert np.abs(diff).max() < 1.5e-2


@pytest.mark.gpu
def test_refine_on_cupy_equals_numpy(master):
    cp = pytest.importorskip("cupy")
    pats, pc, g, pc0, g0 = _problem(master, 4, (96, 96), seed=3)
    cpu = refine_pc(pats, master, pc0=pc0, orientations0=g0)
    gpu = refine_pc(cp.asarray(pats), cp.asarray(master), pc0=pc0, orientations0=g0)
    # float32 NCC sums on the device: the searches may part in the last steps, not in the result
    assert np.abs(gpu.pc - pc).max() < 5e-4
    assert np.abs(gpu.pc - cpu.pc).max() < 1e-4
