"""Tests of ebsdxc.simulate: geometry, kikuchipy agreement, ground truth, and the sample data."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from ebsdxc import simulate as sim

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "sample_data")

GEOMETRIES = [
    # (shape (H, W), PC (Bruker), sample tilt, detector tilt)
    ((160, 160), (0.5, 0.45, 0.6), 70.0, 0.0),
    ((60, 80), (0.42, 0.31, 0.55), 70.0, 0.0),
    ((100, 120), (0.55, 0.6, 0.5), 65.0, 8.0),
]


def bunge(phi1, Phi, phi2):
    """Sample -> crystal matrix of Bunge Euler angles (degrees), via scipy."""
    from scipy.spatial.transform import Rotation

    return Rotation.from_euler("ZXZ", [phi1, Phi, phi2], degrees=True).as_matrix().T


def rotation_about(axis, angle):
    from scipy.spatial.transform import Rotation

    axis = np.asarray(axis, float)
    return Rotation.from_rotvec(angle * axis / np.linalg.norm(axis)).as_matrix()


def detector_axes(sample_tilt, detector_tilt):
    """Xd, Yd, Zd in sample coordinates, written out from kikuchipy's documented geometry."""
    beta = np.deg2rad(90 - sample_tilt + detector_tilt)
    return (
        np.array([0.0, 1.0, 0.0]),
        np.array([-np.cos(beta), 0.0, np.sin(beta)]),
        np.array([np.sin(beta), 0.0, np.cos(beta)]),
    )


def ncc(a, b):
    a = (a - a.mean()) / a.std()
    b = (b - b.mean()) / b.std()
    return float((a * b).mean())


@pytest.fixture(scope="module")
def master():
    try:
        return sim.load_nickel_master_pattern()
    except ValueError as exc:  # kikuchipy (its data file) not installed
        pytest.skip(str(exc))


# --------------------------------------------------------------------------- master pattern


def test_master_pattern_loads_without_importing_kikuchipy():
    pytest.importorskip("h5py")
    code = (
        "import sys; from ebsdxc.simulate import load_nickel_master_pattern as f; m = f(); "
        "assert 'kikuchipy' not in sys.modules, 'kikuchipy was imported'; "
        "assert m.shape == (2, 401, 401) and m.dtype.name == 'float32', (m.shape, m.dtype); "
        "assert 0 <= m.min() and m.max() == 255"
    )
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if "not installed" in res.stderr:
        pytest.skip("kikuchipy not installed")
    assert res.returncode == 0, res.stderr


@pytest.mark.slow
def test_master_pattern_equals_kikuchipy(master):
    kp = pytest.importorskip("kikuchipy")
    mp = kp.data.nickel_ebsd_master_pattern_small(projection="lambert", hemisphere="both")
    # same arrays, no flip or transpose, [north, south] order
    assert mp.hemisphere == "both"
    np.testing.assert_array_equal(master, mp.data.astype(np.float32))


# --------------------------------------------------------------------------- kikuchipy agreement


@pytest.mark.slow
@pytest.mark.parametrize("shape, pc, sample_tilt, detector_tilt", GEOMETRIES)
def test_identity_pattern_matches_kikuchipy(master, shape, pc, sample_tilt, detector_tilt):
    kp = pytest.importorskip("kikuchipy")
    from orix.quaternion import Rotation

    mp = kp.data.nickel_ebsd_master_pattern_small(projection="lambert", hemisphere="both")
    det = kp.detectors.EBSDDetector(shape=shape, pc=pc, sample_tilt=sample_tilt,
                                    tilt=detector_tilt)
    rot = Rotation.from_euler(np.deg2rad([[35.0, 52.0, 17.0]]))
    theirs = mp.get_patterns(rot, det, compute=True, dtype_out=np.float64,
                             show_progressbar=False).data.reshape(shape)
    g = rot.to_matrix()[0]
    np.testing.assert_allclose(g, bunge(35.0, 52.0, 17.0), atol=1e-12)
    ours = sim.simulate_pattern(master, shape=shape, pc=pc, orientation=g,
                                sample_tilt=sample_tilt, detector_tilt=detector_tilt,
                                background=False)
    assert ncc(ours, theirs) > 0.99
    # the test can tell conventions apart: the inverse rotation gives an unrelated pattern
    wrong = sim.simulate_pattern(master, shape=shape, pc=pc, orientation=g.T,
                                 sample_tilt=sample_tilt, detector_tilt=detector_tilt,
                                 background=False)
    assert ncc(wrong, theirs) < 0.5


@pytest.mark.slow
def test_asymmetric_master_matches_kikuchipy():
    # Nickel's master pattern is symmetric under transposition and has equal hemispheres, so it
    # cannot catch a transposed Lambert square or swapped hemispheres; a random one can.
    kp = pytest.importorskip("kikuchipy")
    from orix.quaternion import Rotation
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(0)
    master = gaussian_filter(rng.random((2, 401, 401)), (0, 4, 4))
    master = (master + np.linspace(0.0, 0.2, 401)).astype(np.float32)
    mp = kp.data.nickel_ebsd_master_pattern_small(projection="lambert", hemisphere="both")
    mp.data = master
    shape, pc = (60, 80), (0.42, 0.31, 0.55)
    det = kp.detectors.EBSDDetector(shape=shape, pc=pc, sample_tilt=70.0, tilt=0.0)
    rot = Rotation.from_euler(np.deg2rad([[10.0, 150.0, 40.0]]))  # sees both hemispheres
    theirs = mp.get_patterns(rot, det, compute=True, dtype_out=np.float64,
                             show_progressbar=False).data.reshape(shape)
    kw = dict(shape=shape, pc=pc, orientation=rot.to_matrix()[0], background=False)
    assert ncc(sim.simulate_pattern(master, **kw), theirs) > 0.999
    assert ncc(sim.simulate_pattern(np.swapaxes(master, 1, 2), **kw), theirs) < 0.9
    assert ncc(sim.simulate_pattern(master[::-1], **kw), theirs) < 0.9


def test_lambert_square_projection():
    # known points: poles at the centre, equator on the edge, (1, 1, 0) in a corner
    v = np.array([[0, 0, 1], [0, 0, -1], [1, 0, 0], [0, -1, 0], [1, 1, 0], [1, 0, 1]], float)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    big_x, big_y = sim._lambert_square(v)
    s = np.sqrt(1 - 1 / np.sqrt(2))
    np.testing.assert_allclose(big_x, [0, 0, 1, 0, 1, s], atol=1e-12)
    np.testing.assert_allclose(big_y, [0, 0, 0, -1, 1, 0], atol=1e-12)
    # equal area: uniform directions on the sphere fill the square uniformly
    u = np.random.default_rng(0).normal(size=(400_000, 3))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    big_x, big_y = sim._lambert_square(u)
    hist = np.histogram2d(big_x, big_y, bins=8, range=[[-1, 1], [-1, 1]])[0]
    expected = len(u) / 64
    assert np.abs(hist - expected).max() < 5 * np.sqrt(expected)


# --------------------------------------------------------------------------- geometry


@pytest.mark.parametrize("shape, pc, sample_tilt, detector_tilt", GEOMETRIES)
def test_directions_round_trip(shape, pc, sample_tilt, detector_tilt):
    tilts = dict(sample_tilt=sample_tilt, detector_tilt=detector_tilt)
    r = sim.detector_directions(shape, pc, **tilts)
    assert r.shape == shape + (3,)
    np.testing.assert_allclose(np.linalg.norm(r, axis=-1), 1.0, atol=1e-12)
    xy = sim.project_to_detector(r, shape, pc, **tilts)
    yy, xx = np.mgrid[: shape[0], : shape[1]]
    assert np.abs(xy[..., 0] - xx).max() < 1e-9
    assert np.abs(xy[..., 1] - yy).max() < 1e-9
    # unnormalised vectors project to the same place; vectors pointing away are NaN
    np.testing.assert_allclose(sim.project_to_detector(3.5 * r, shape, pc, **tilts), xy,
                               atol=1e-9)
    assert np.all(np.isnan(sim.project_to_detector(-r[0, 0], shape, pc, **tilts)))


def test_pattern_centre_convention():
    # Bruker PC as kikuchipy: the PC pixel (PCx W - 0.5, PCy H - 0.5) looks along the detector
    # normal Zd; one pixel to the right/up/along L are the other detector axes.
    shape, pc = (60, 80), (0.4, 0.3, 0.6)
    h, w = shape
    x_pc, y_pc, dist = 0.4 * w - 0.5, 0.3 * h - 0.5, 0.6 * h
    xd, yd, zd = detector_axes(70.0, 0.0)
    xy = sim.project_to_detector(np.stack([zd, zd * dist + xd, zd * dist + yd]), shape, pc)
    np.testing.assert_allclose(xy[0], [x_pc, y_pc], atol=1e-12)
    np.testing.assert_allclose(xy[1], [x_pc + 1, y_pc], atol=1e-12)  # Xd: right
    np.testing.assert_allclose(xy[2], [x_pc, y_pc - 1], atol=1e-12)  # Yd: up = -y
    # detector normal at 90 - 70 = 20 deg from the sample normal (sample z), tilted to +x
    assert np.isclose(zd[2], np.cos(np.deg2rad(20))) and zd[0] > 0


@pytest.mark.parametrize("angle", [2e-3, -0.01, 0.05])
def test_rotation_about_detector_normal(angle):
    # F = rotation by `angle` about Zd: in detector coordinates (u right, v up, from the PC) the
    # gnomonic image of every direction rotates by `angle` about the PC, counter-clockwise as
    # seen on the screen (u, v) with v up, i.e. (u, v) -> (u cos a - v sin a, u sin a + v cos a).
    shape, pc = (160, 160), np.array([0.5, 0.45, 0.6])
    x_pc, y_pc = 0.5 * 160 - 0.5, 0.45 * 160 - 0.5
    F = rotation_about(detector_axes(70.0, 0.0)[2], angle)
    pts = np.array([[10.0, 20.0], [150.0, 30.0], [x_pc, y_pc], [80.0, 140.0], [3.0, 155.0]])
    d = sim.displacement_truth(pts, shape=shape, pc_ref=pc, pc=pc, F=F)
    u, v = pts[:, 0] - x_pc, -(pts[:, 1] - y_pc)
    c, s = np.cos(angle), np.sin(angle)
    expected = np.stack([x_pc + (c * u - s * v), y_pc - (s * u + c * v)], axis=1) - pts
    np.testing.assert_allclose(d, expected, atol=1e-9)
    assert np.allclose(d[2], 0.0)  # the PC itself does not move
    assert np.abs(d).max() > 80 * abs(angle)  # not trivially zero


def test_rotation_about_detector_horizontal():
    # F = rotation by a about Xd: the direction seen at the PC, (0, 0, L) in (u, v, w), becomes
    # (0, -L sin a, L cos a), i.e. v = -L tan a: it moves DOWN the screen by L tan a pixels.
    shape, pc = (160, 160), np.array([0.5, 0.45, 0.6])
    x_pc, y_pc, dist = 79.5, 71.5, 96.0
    a = 3e-3
    F = rotation_about(detector_axes(70.0, 0.0)[0], a)
    d = sim.displacement_truth([[x_pc, y_pc]], shape=shape, pc_ref=pc, pc=pc, F=F)
    np.testing.assert_allclose(d[0], [0.0, dist * np.tan(a)], atol=1e-9)


def test_pattern_centre_shift():
    # F = I: every feature keeps its direction r; its pixel is x = x_pc + L r_u / r_w with
    # x_pc = PCx W - 0.5. Raising PCx by 1/W raises x_pc by exactly one pixel, and with it
    # every feature: dx = +1, dy = 0 everywhere (the pattern is rigidly tied to its PC).
    # Likewise PCy + 1/H moves everything one pixel down (dy = +1, rows grow downwards), and
    # PCz + 1/H (L one pixel longer) magnifies about the PC: d = (p - pc_px) / L.
    shape = (160, 200)
    h, w = shape
    pc_ref = np.array([0.5, 0.45, 0.6])
    pts = np.array([[5.0, 7.0], [190.0, 20.0], [100.0, 100.0], [30.0, 150.0]])
    kw = dict(shape=shape, pc_ref=pc_ref)
    d = sim.displacement_truth(pts, pc=pc_ref + [1 / w, 0, 0], **kw)
    np.testing.assert_allclose(d, np.tile([1.0, 0.0], (4, 1)), atol=1e-9)
    d = sim.displacement_truth(pts, pc=pc_ref + [0, 1 / h, 0], **kw)
    np.testing.assert_allclose(d, np.tile([0.0, 1.0], (4, 1)), atol=1e-9)
    d = sim.displacement_truth(pts, pc=pc_ref + [0, 0, 1 / h], **kw)
    pc_px = np.array([0.5 * w - 0.5, 0.45 * h - 0.5])
    np.testing.assert_allclose(d, (pts - pc_px) / (0.6 * h), atol=1e-9)


def test_dilatation_and_identity_give_no_displacement():
    pc = (0.5, 0.45, 0.6)
    pts = np.array([[0.0, 0.0], [159.0, 159.0], [40.0, 120.0]])
    kw = dict(shape=(160, 160), pc_ref=pc, pc=pc)
    np.testing.assert_allclose(sim.displacement_truth(pts, F=1.003 * np.eye(3), **kw), 0,
                               atol=1e-9)
    np.testing.assert_allclose(sim.displacement_truth(pts, **kw), 0, atol=1e-12)


def test_displacement_truth_broadcasts_over_scan_points():
    F = sim.smooth_deformation_field(3, 4, strain=2e-3, rotation=2e-3, seed=3)
    pc = np.array([0.5, 0.45, 0.6]) + np.random.default_rng(1).normal(0, 0.003, (3, 4, 3))
    pts = np.array([[10.0, 10.0], [80.0, 70.0], [150.0, 140.0]])
    kw = dict(shape=(160, 160), pc_ref=(0.5, 0.45, 0.6), sample_tilt=68.0, detector_tilt=3.0)
    d = sim.displacement_truth(pts, pc=pc, F=F, **kw)
    assert d.shape == (3, 4, 3, 2)
    for i in range(3):
        for j in range(4):
            np.testing.assert_allclose(
                d[i, j], sim.displacement_truth(pts, pc=pc[i, j], F=F[i, j], **kw), atol=1e-12
            )


# --------------------------------------------------------------------------- patterns


def test_rotation_F_equals_rotated_orientation(master):
    # a pure lattice rotation R seen through F is the same as the orientation g R^T
    g = bunge(160.0, 40.0, 20.0)
    R = rotation_about([0.3, -1.0, 0.5], 0.02)
    kw = dict(shape=(80, 96), pc=(0.5, 0.45, 0.6), background=False)
    a = sim.simulate_pattern(master, orientation=g, F=R, **kw)
    b = sim.simulate_pattern(master, orientation=g @ R.T, **kw)
    np.testing.assert_allclose(a, b, atol=1e-9)
    c = sim.simulate_pattern(master, orientation=g, **kw)
    assert np.abs(a - c).max() > 10  # the rotation does change the pattern


def test_background(master):
    kw = dict(shape=(120, 160), pc=(0.5, 0.45, 0.6), orientation=bunge(10, 30, 60))
    plain = sim.simulate_pattern(master, background=False, **kw)
    withbg = sim.simulate_pattern(master, background=True, **kw)
    ratio = withbg / np.where(plain > 0, plain, np.nan)
    assert np.nanmin(ratio) >= 0.25 - 1e-12 and np.nanmax(ratio) <= 1 + 1e-12
    assert np.nanmax(ratio) > 0.95 and np.nanmin(ratio) < 0.5  # strong, not a constant
    assert ratio[60, 80] > ratio[2, 2] and ratio[60, 80] > ratio[117, 157]  # brighter middle


def test_simulation_speed(master):
    kw = dict(shape=(256, 256), pc=(0.5, 0.45, 0.6), orientation=bunge(10, 30, 60),
              F=np.diag([1.001, 0.999, 1.0]))
    sim.simulate_pattern(master, **kw)
    best = np.inf
    for _ in range(3):
        t = time.perf_counter()
        sim.simulate_pattern(master, **kw)
        best = min(best, time.perf_counter() - t)
    assert best < 0.1


def _register(a, b, upsample=200):
    """Displacement [dx, dy] of b's content relative to a (Hann-windowed cross-correlation)."""
    from skimage.registration import phase_cross_correlation

    win = np.outer(np.hanning(a.shape[0]), np.hanning(a.shape[1]))
    a = (a - a.mean()) * win
    b = (b - b.mean()) * win
    shift = phase_cross_correlation(a, b, upsample_factor=upsample, normalization=None)[0]
    # skimage returns the (row, col) shift that moves b back onto a: the negative of ours
    return -shift[::-1]


def test_displacement_truth_matches_registration(master):
    pytest.importorskip("skimage")
    shape = (256, 256)
    pc_ref = np.array([0.5, 0.45, 0.6])
    pc = pc_ref + [0.8 / 256, -0.5 / 256, 0.0]
    F = (np.eye(3) + np.array([[1e-3, 5e-4, 0], [5e-4, -1e-3, 3e-4], [0, 3e-4, 2e-4]])) @ \
        rotation_about([1.0, -1.5, 2.0], 4e-3)
    g = bunge(160.0, 40.0, 20.0)
    ref = sim.simulate_pattern(master, shape=shape, pc=pc_ref, orientation=g, background=False)
    dfm = sim.simulate_pattern(master, shape=shape, pc=pc, orientation=g, F=F, background=False)
    s = 96
    starts = [(16, 16), (144, 16), (80, 80), (16, 144), (144, 144)]
    centres = np.array([[x + (s - 1) / 2, y + (s - 1) / 2] for x, y in starts])
    truth = sim.displacement_truth(centres, shape=shape, pc_ref=pc_ref, pc=pc, F=F)
    measured = np.array([_register(ref[y:y + s, x:x + s], dfm[y:y + s, x:x + s])
                         for x, y in starts])
    assert np.abs(truth).max() > 0.5  # displacements large enough to tell signs apart
    assert np.ptp(truth[:, 0]) > 0.2 or np.ptp(truth[:, 1]) > 0.2  # and not uniform
    np.testing.assert_allclose(measured, truth, atol=0.05)


# --------------------------------------------------------------------------- noise and fields


def test_poisson_noise():
    pattern = np.linspace(0.0, 3.0, 200 * 300).reshape(200, 300)
    a = sim.poisson_noise(pattern, counts=1000, rng=np.random.default_rng(5))
    b = sim.poisson_noise(pattern, counts=1000, rng=5)
    assert a.dtype == np.uint16 and a.shape == pattern.shape
    np.testing.assert_array_equal(a, b)
    assert abs(a.mean() - 1000) < 2
    expected = pattern * 1000 / pattern.mean()
    resid = (a - expected)[:, 150:] / np.sqrt(expected[:, 150:])
    assert 0.95 < resid.std() < 1.05  # Poisson: variance = mean
    hot = sim.poisson_noise(pattern, counts=60000, rng=0)
    assert hot.max() == 65535  # clipped, not wrapped
    with pytest.raises(ValueError):
        sim.poisson_noise(-pattern, counts=10, rng=0)
    with pytest.raises(ValueError):
        sim.poisson_noise(pattern, counts=0, rng=0)


def test_smooth_deformation_field():
    F = sim.smooth_deformation_field(10, 12, strain=1e-3, rotation=2e-3, seed=7)
    assert F.shape == (10, 12, 3, 3)
    np.testing.assert_array_equal(F, sim.smooth_deformation_field(10, 12, strain=1e-3,
                                                                  rotation=2e-3, seed=7))
    assert not np.allclose(F, sim.smooth_deformation_field(10, 12, strain=1e-3,
                                                           rotation=2e-3, seed=8))
    assert np.all(np.linalg.det(F) > 0)
    # polar decomposition F = V R: strain from V, rotation angle from R
    u, s, vt = np.linalg.svd(F)
    R = u @ vt
    V = u @ (s[..., None] * np.swapaxes(u, -1, -2))
    eps = V - np.eye(3)
    dev = eps - np.trace(eps, axis1=-2, axis2=-1)[..., None, None] * np.eye(3) / 3
    angle = np.arccos(np.clip((np.trace(R, axis1=-2, axis2=-1) - 1) / 2, -1, 1))
    assert 3e-4 < np.sqrt((dev**2).mean()) * 3 < 3e-3  # component size ~ strain
    assert 1e-3 < np.median(angle) < 8e-3 and angle.max() < 1.5e-2
    vol = np.trace(eps, axis1=-2, axis2=-1)
    assert np.abs(vol).max() > 1e-4  # some volumetric strain
    # smooth: neighbouring points differ much less than the field's range
    step = np.abs(np.diff(F, axis=1)).max()
    assert step < 0.5 * np.ptp(F, axis=(0, 1)).max()
    np.testing.assert_allclose(sim.smooth_deformation_field(4, 4, strain=0, rotation=0),
                               np.broadcast_to(np.eye(3), (4, 4, 3, 3)), atol=1e-15)


def test_errors(master):
    kw = dict(shape=(20, 20), pc=(0.5, 0.5, 0.6), orientation=np.eye(3))
    with pytest.raises(ValueError):
        sim.simulate_pattern(master, **dict(kw, pc=(0.5, 0.5, -1)))
    with pytest.raises(ValueError):
        sim.simulate_pattern(master, **dict(kw, orientation=2 * np.eye(3)))
    with pytest.raises(ValueError):
        sim.simulate_pattern(master, **dict(kw, F=-np.eye(3)))
    with pytest.raises(ValueError):
        sim.simulate_pattern(master, **dict(kw, shape=(20,)))
    with pytest.raises(ValueError):
        sim.simulate_pattern(master[0, :10, :12], **kw)
    with pytest.raises(ValueError):
        sim.displacement_truth([1.0, 2.0], shape=(20, 20), pc_ref=(0.5, 0.5, 0.6),
                               pc=(0.5, 0.5, 0.6))
    with pytest.raises(ValueError):
        sim.detector_directions((20, 20), (0.5, 0.5))
    with pytest.raises(ValueError):
        sim.project_to_detector(np.ones((4, 2)), (20, 20), (0.5, 0.5, 0.6))


# --------------------------------------------------------------------------- sample data


def _sample_files():
    names = ["scan.h5", "ref.tif", "truth.h5"]
    paths = [os.path.join(SAMPLE, n) for n in names]
    if not all(os.path.isfile(p) for p in paths):
        pytest.skip("sample_data not generated")
    return paths


def test_sample_data_layout():
    h5py = pytest.importorskip("h5py")
    tifffile = pytest.importorskip("tifffile")
    scan, ref, truth = _sample_files()
    with h5py.File(scan, "r") as f:
        ds = f["patterns"]
        assert ds.shape == (10, 10, 160, 160) and ds.dtype == np.uint16
        assert ds.compression == "gzip" and ds.shuffle and ds.chunks == (1, 10, 160, 160)
        assert ds.attrs["pattern_centre"].shape == (10, 10, 3)
        assert ds.attrs["step_x"] > 0 and ds.attrs["step_y"] > 0
        assert "simulated" in f.attrs["note"].lower()
        mean = ds[0].mean()
    assert 900 < mean < 1100
    r = tifffile.imread(ref)
    assert r.shape == (160, 160) and r.dtype == np.uint16 and r.max() < 65535
    with h5py.File(truth, "r") as f:
        assert f["F"].shape == (10, 10, 3, 3) and f["orientation"].shape == (3, 3)
        assert f["pattern_centre_ref"].shape == (3,)
        assert "conventions" in f.attrs and "parameters" in f.attrs
    total = sum(os.path.getsize(os.path.join(SAMPLE, n)) for n in os.listdir(SAMPLE)
                if os.path.isfile(os.path.join(SAMPLE, n)))
    assert total < 8e6


def test_sample_data_truth_matches_registration():
    h5py = pytest.importorskip("h5py")
    tifffile = pytest.importorskip("tifffile")
    pytest.importorskip("skimage")
    from scipy.ndimage import gaussian_filter

    scan, ref, truth = _sample_files()
    with h5py.File(truth, "r") as f:
        F, pc = f["F"][()], f["pattern_centre"][()]
        pc_ref = f["pattern_centre_ref"][()]
        tilts = dict(sample_tilt=f.attrs["sample_tilt"], detector_tilt=f.attrs["detector_tilt"])
    with h5py.File(scan, "r") as f:
        patterns = f["patterns"]
        points = [(0, 0), (0, 9), (9, 0), (9, 9), (4, 5)]
        scan_patterns = [patterns[i, j].astype(float) for i, j in points]

    def flatten(a):  # divide out the smooth background
        return a / gaussian_filter(a, 15)

    reference = flatten(tifffile.imread(ref).astype(float))
    s = 64
    starts = [(8, 8), (88, 8), (48, 48), (8, 88), (88, 88)]
    centres = np.array([[x + (s - 1) / 2, y + (s - 1) / 2] for x, y in starts])
    errors = []
    for (i, j), pattern in zip(points, scan_patterns):
        pattern = flatten(pattern)
        expected = sim.displacement_truth(centres, shape=(160, 160), pc_ref=pc_ref,
                                          pc=pc[i, j], F=F[i, j], **tilts)
        for (x, y), t in zip(starts, expected):
            m = _register(reference[y:y + s, x:x + s], pattern[y:y + s, x:x + s], upsample=100)
            errors.append(m - t)
    # noisy patterns (1000 counts/px), yet the truth holds to a few hundredths of a pixel
    assert np.abs(errors).max() < 0.08


@pytest.mark.slow
def test_sample_data_regenerates_identically(tmp_path):
    h5py = pytest.importorskip("h5py")
    tifffile = pytest.importorskip("tifffile")
    scan, ref, truth = _sample_files()
    script = os.path.join(SAMPLE, "make_sample_data.py")
    res = subprocess.run([sys.executable, script, "--out", str(tmp_path), "-q"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    with h5py.File(scan, "r") as a, h5py.File(tmp_path / "scan.h5", "r") as b:
        np.testing.assert_array_equal(a["patterns"][()], b["patterns"][()])
        np.testing.assert_array_equal(a.attrs["pattern_centre"], b.attrs["pattern_centre"])
    np.testing.assert_array_equal(tifffile.imread(ref), tifffile.imread(tmp_path / "ref.tif"))
    with h5py.File(truth, "r") as a, h5py.File(tmp_path / "truth.h5", "r") as b:
        for name in ("F", "pattern_centre", "pattern_centre_ref", "orientation"):
            np.testing.assert_array_equal(a[name][()], b[name][()])
