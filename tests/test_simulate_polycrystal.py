"""Tests of ebsdxc.simulate.simulate_polycrystal: grains, truth, patterns, files and the sample."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from ebsdxc import simulate as sim

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "sample_data", "polycrystal")
SCRIPT = os.path.join(REPO, "sample_data", "make_polycrystal.py")


@pytest.fixture(scope="module")
def master():
    try:
        return sim.load_nickel_master_pattern()
    except ValueError as exc:  # kikuchipy (its data file) not installed
        pytest.skip(str(exc))


def small(master, *, rows=14, cols=15, **kw):
    """A cheap polycrystal: small patterns unless a test needs more."""
    args = dict(n_grains=4, shape=(48, 48), seed=7, master=master)
    args.update(kw)
    return sim.simulate_polycrystal(rows, cols, **args)


@pytest.fixture(scope="module")
def square(master):
    return small(master)


@pytest.fixture(scope="module")
def hexagonal(master):
    return small(master, rows=15, cols=14, n_grains=5, grid_kind="hexagonal", seed=11, curvature=3e3)


def axial(w):
    """Rotation vector of antisymmetric matrices (..., 3, 3): w_ij = -e_ijk theta_k."""
    return np.stack([w[..., 2, 1], w[..., 0, 2], w[..., 1, 0]], axis=-1)


def log_rotation(R):
    from scipy.spatial.transform import Rotation

    return Rotation.from_matrix(R.reshape(-1, 3, 3)).as_rotvec().reshape(R.shape[:-1])


def neighbour_graph(grid):
    """Pairs of scan points at the nearest-neighbour distance, from the grid's positions alone
    (independent of the generator's index arithmetic)."""
    pos = grid.positions().reshape(-1, 2)
    ok = np.all(np.isfinite(pos), axis=1)
    idx = np.flatnonzero(ok)
    d = np.linalg.norm(pos[idx, None] - pos[None, idx], axis=-1)
    nearest = np.min(np.where(d > 0, d, np.inf))
    a, b = np.nonzero(np.triu(d <= nearest * 1.01 + 1e-9, k=1))
    return idx[a], idx[b]


# --------------------------------------------------------------------------- grains


@pytest.mark.parametrize("which", ["square", "hexagonal"])
def test_voronoi_grains_cover_the_grid_and_are_contiguous(which, request):
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    s = request.getfixturevalue(which)
    grid, gid = s.grid, s.grain_id
    ok = grid.in_grid()
    assert gid.shape == (grid.rows, grid.cols) and gid.dtype == np.int32
    assert np.all(gid[~ok] == -1) and np.all(gid[ok] >= 0)
    assert set(np.unique(gid[ok])) == set(range(s.n_grains))
    a, b = neighbour_graph(grid)
    if which == "hexagonal":  # six neighbours inside the grid
        assert np.bincount(np.r_[a, b]).max() == 6
    flat = gid.ravel()
    for k in range(s.n_grains):
        same = (flat[a] == k) & (flat[b] == k)
        n = grid.size
        graph = coo_matrix((np.ones(same.sum()), (a[same], b[same])), shape=(n, n))
        labels = connected_components(graph, directed=False)[1]
        assert np.unique(labels[flat == k]).size == 1, f"grain {k} is not connected"
    # Voronoi: each point is nearest to its own grain's seed (positions in micrometres)
    pos = grid.positions()[ok]
    d = np.linalg.norm(pos[:, None] - s.seeds[None], axis=-1)
    np.testing.assert_array_equal(np.argmin(d, axis=1), gid[ok])
    # numbered by first point in row-major order, as ebsdxc.grains numbers a segmentation
    firsts = [np.flatnonzero(flat == k)[0] for k in range(s.n_grains)]
    assert firsts == sorted(firsts)


def test_grain_orientations_well_apart(square, hexagonal):
    orix = pytest.importorskip("orix")
    from orix.quaternion import Orientation, symmetry

    for s in (square, hexagonal):
        # orix's rotation of a matrix g (sample -> crystal) is g itself, as kikuchipy uses it
        o = Orientation.from_matrix(s.grain_orientation, symmetry=symmetry.Oh)
        angles = np.rad2deg(o.angle_with_outer(o))
        off = angles[~np.eye(s.n_grains, dtype=bool)]
        assert off.min() > sim.MIN_GRAIN_MISORIENTATION_DEG, off.min()
    assert orix  # the oracle was used


def test_given_orientations_are_used(master):
    euler = np.array([[10.0, 20.0, 30.0], [100.0, 45.0, 200.0], [250.0, 80.0, 5.0]])
    s = small(master, n_grains=3, orientations=euler, shape=(32, 32), counts=None)
    from ebsdxc.crystal import euler_to_matrix

    np.testing.assert_allclose(s.grain_orientation, euler_to_matrix(euler), atol=1e-12)


# --------------------------------------------------------------------------- truth


@pytest.mark.parametrize("which", ["square", "hexagonal"])
def test_truth_fields_are_consistent(which, request):
    from ebsdxc.materials import parse_material, rotate_stiffness, stiffness_tensor

    s = request.getfixturevalue(which)
    ok = s.grain_id >= 0
    k = s.grain_id[ok]
    F, g, theta = s.F[ok], s.orientation[ok], s.lattice_rotation[ok]
    # F = (I + eps) R with R = exp([theta]x), and g = g0 R^T
    from scipy.spatial.transform import Rotation

    R = Rotation.from_rotvec(theta).as_matrix()
    np.testing.assert_allclose(F, (np.eye(3) + s.grain_strain[k]) @ R, atol=1e-14)
    np.testing.assert_allclose(g, s.grain_orientation[k] @ np.swapaxes(R, 1, 2), atol=1e-14)
    # strain: symmetric, deviatoric part of largest principal value `strain`, free surface
    eps = s.grain_strain
    np.testing.assert_allclose(eps, np.swapaxes(eps, 1, 2), atol=0)
    dev = eps - np.trace(eps, axis1=1, axis2=2)[:, None, None] / 3 * np.eye(3)
    np.testing.assert_allclose(np.abs(np.linalg.eigvalsh(dev)).max(axis=1), 1e-3, rtol=1e-12)
    C = stiffness_tensor(parse_material("Ni")[1])
    for gk, ek in zip(s.grain_orientation, eps):
        sigma = np.einsum("ijkl,kl->ij", rotate_stiffness(C, gk), ek)
        assert abs(sigma[2, 2]) < 1e-12 and np.abs(sigma).max() > 0.05  # GPa
    # curvature: only x and y columns, Frobenius norm `curvature`; Nye = K^T - tr(K) I
    K = s.grain_curvature
    curvature = s.parameters["curvature"]
    assert np.all(K[:, :, 2] == 0)
    np.testing.assert_allclose(np.linalg.norm(K, axis=(1, 2)), curvature, rtol=1e-12)
    alpha = np.swapaxes(K, 1, 2) - np.trace(K, axis1=1, axis2=2)[:, None, None] * np.eye(3)
    np.testing.assert_allclose(s.nye[ok], alpha[k], atol=0)
    # theta = 0 at each grain's centroid: the grain's mean orientation is g0
    for j in range(s.n_grains):
        np.testing.assert_allclose(theta[k == j].mean(axis=0), 0.0, atol=1e-15)
    assert np.isnan(s.F[~ok]).all() and np.isnan(s.nye[~ok]).all()
    assert np.all(np.isfinite(s.pc))


@pytest.mark.parametrize("which", ["square", "hexagonal"])
def test_nye_tensor_equals_finite_differences_of_the_orientations(which, request):
    """alpha from the per-point orientations alone: Delta theta of neighbour pairs (sample frame,
    log of g_b^T g_a) against their map separation, least squares per grain."""
    s = request.getfixturevalue(which)
    a, b = neighbour_graph(s.grid)
    flat_g = s.orientation.reshape(-1, 3, 3)
    flat_id = s.grain_id.ravel()
    pos = s.grid.positions().reshape(-1, 2) * 1e-6  # map [X, Y], metres
    same = flat_id[a] == flat_id[b]
    a, b = a[same], b[same]
    dtheta = log_rotation(np.swapaxes(flat_g[b], 1, 2) @ flat_g[a])  # R_b R_a^T
    dX, dY = (pos[b] - pos[a]).T
    dx = np.stack([-dY, -dX], axis=1)  # sample (x_s, y_s): map X is -y_s, map Y is -x_s
    for k in range(s.n_grains):
        m = flat_id[a] == k
        kappa_xy = np.linalg.lstsq(dx[m], dtheta[m], rcond=None)[0].T  # (3, 2): d theta_i / d x_j
        kappa = np.zeros((3, 3))
        kappa[:, :2] = kappa_xy
        alpha = kappa.T - np.trace(kappa) * np.eye(3)
        truth = s.nye[s.grain_id == k][0]
        # exact to first order in theta (|theta| < 0.02 rad here): within 2 %
        assert np.linalg.norm(alpha - truth) < 0.02 * np.linalg.norm(truth)
        # and not the transposed or sign-flipped convention
        assert np.linalg.norm(kappa - alpha) > 0.3 * np.linalg.norm(truth)


def test_map_axes_and_nye_agree_with_the_gnd_module(square, hexagonal):
    """ebsdxc.gnd (its own map axes and gradients) gives the truth Nye tensor from the truth
    rotations, on the components a map measures: both modules map the scan onto the sample
    frame alike."""
    gnd = pytest.importorskip("ebsdxc.gnd")
    for s in (square, hexagonal):
        ok = s.grain_id >= 0
        R = np.full(s.F.shape, np.nan)
        R[ok] = np.swapaxes(s.orientation[ok], 1, 2) @ s.grain_orientation[s.grain_id[ok]]  # g^T g0
        step = np.asarray(s.grid.step) * 1e-6
        alpha = gnd.nye_tensor(R, step=tuple(step), grid_kind=s.grid.kind, grain_id=s.grain_id)
        measured = tuple(zip(*gnd.MEASURED))
        got, want = alpha[ok][:, measured[0], measured[1]], s.nye[ok][:, measured[0], measured[1]]
        use = np.all(np.isfinite(got), axis=1)
        assert use.mean() > 0.9
        err = np.linalg.norm(got[use] - want[use], axis=1) / np.linalg.norm(want[use], axis=1)
        assert np.median(err) < 0.02 and err.max() < 0.05


def test_pattern_centres_move_as_extrapolate_pc(master):
    from ebsdxc.geometry import extrapolate_pc

    s = small(master, rows=7, cols=9, n_grains=2, shape=(32, 40), counts=None, pc_shift_px=1.5, step=0.7)
    half_x = 0.5 * (9 - 1) * 0.7
    pixel = half_x / 1.5  # um per detector pixel for a 1.5 px shift of PCx at the edges
    pc = extrapolate_pc(s.pc_ref, grid_shape=(7, 9), step=(0.7, 0.7), pixel_size=pixel, shape=(32, 40))
    np.testing.assert_allclose(s.pc, pc, atol=1e-14)
    np.testing.assert_allclose(np.abs(s.pc[:, [0, -1], 0] - s.pc_ref[0]) * 40, 1.5)
    fixed = small(master, rows=4, cols=4, n_grains=1, shape=(32, 32), counts=None, pc_shift_px=0)
    np.testing.assert_array_equal(fixed.pc, np.broadcast_to(fixed.pc_ref, (4, 4, 3)))


def test_unbent_grains_have_no_curvature(master):
    s = small(master, curvature=0.0, shape=(32, 32), counts=None, n_grains=3)
    ok = s.grain_id >= 0
    assert np.all(s.nye[ok] == 0) and np.all(s.lattice_rotation[ok] == 0)
    np.testing.assert_array_equal(s.orientation[ok], s.grain_orientation[s.grain_id[ok]])


def test_truth_relative_matches_strain_definitions(square):
    from ebsdxc.strain import polar_decomposition, rotation_log

    s = square
    refs = np.array([np.argwhere(s.grain_id == k)[-1] for k in range(s.n_grains)])
    rel = s.truth_relative(refs)
    rows, cols = s.grain_id.shape
    flat_refs = refs[:, 0] * cols + refs[:, 1]
    rel_flat = s.truth_relative(flat_refs)
    np.testing.assert_array_equal(rel.F, rel_flat.F)
    ok = s.grain_id >= 0
    ref_of = flat_refs[s.grain_id[ok]]
    np.testing.assert_array_equal(rel.reference_index[ok], ref_of)
    Fr = s.F.reshape(-1, 3, 3)[ref_of]
    np.testing.assert_allclose(rel.F[ok] @ Fr, s.F[ok], atol=1e-14)
    V, R = polar_decomposition(rel.F[ok])
    np.testing.assert_allclose(rel.strain[ok], V - np.eye(3), atol=1e-15)
    np.testing.assert_allclose(rel.rotation[ok], rotation_log(R), atol=1e-15)
    gr = s.orientation.reshape(-1, 3, 3)[ref_of]
    gdef = gr @ np.swapaxes(R, 1, 2)
    np.testing.assert_allclose(rel.strain_crystal[ok], gdef @ (V - np.eye(3)) @ np.swapaxes(gdef, 1, 2), atol=1e-15)
    np.testing.assert_allclose(rel.rotation_crystal[ok], gr @ rotation_log(R) @ np.swapaxes(gr, 1, 2), atol=1e-15)
    # at the reference points: identity; elsewhere the relative rotation is the curvature's
    np.testing.assert_allclose(rel.F.reshape(-1, 3, 3)[flat_refs], np.broadcast_to(np.eye(3), (s.n_grains, 3, 3)),
                               atol=1e-15)
    theta = s.lattice_rotation.reshape(-1, 3)
    expected = log_rotation(s.orientation.reshape(-1, 3, 3)[ok.ravel()].swapaxes(1, 2) @ gr)
    np.testing.assert_allclose(axial(rel.rotation[ok]), expected, atol=1e-7)  # V R V^-1: O(eps theta^2)
    assert np.abs(axial(rel.rotation[ok])).max() > 3e-3
    # uniform strain per grain: the relative strain is second order (strain x rotation)
    assert np.abs(rel.strain[ok]).max() < 2e-5
    assert np.isnan(rel.F[~ok]).all() and theta.shape == (rows * cols, 3)


def test_truth_relative_rejects_bad_references(square):
    s = square
    refs = np.array([np.argwhere(s.grain_id == k)[0] for k in range(s.n_grains)])
    with pytest.raises(ValueError, match="grain 0"):
        s.truth_relative(refs[::-1])
    with pytest.raises(ValueError, match="one point per grain"):
        s.truth_relative(refs[:2])
    with pytest.raises(ValueError, match="outside"):
        s.truth_relative(refs + 100)
    with pytest.raises(ValueError, match="integers"):
        s.truth_relative(refs.astype(float))


def test_fit_strain_recovers_the_relative_truth(square):
    """The truth displacements of ROI centres, fitted by ebsdxc.strain, give back the relative
    truth: rotations and deviatoric strain exactly, the volumetric part to the traction-free
    condition's approximation (the relative F of a strained grain is not exactly traction-free)."""
    from ebsdxc.materials import parse_material, stiffness_tensor
    from ebsdxc.strain import fit_strain

    s = square
    C = stiffness_tensor(parse_material("Ni")[1])
    refs = np.array([np.argwhere(s.grain_id == k)[len(np.argwhere(s.grain_id == k)) // 2]
                     for k in range(s.n_grains)])
    rel = s.truth_relative(refs)
    xs = np.linspace(5, 42, 5)
    centres = np.array([[x, y] for x in xs for y in xs])
    disp = s.truth_displacement(centres, refs)
    assert np.nanmax(np.abs(disp)) > 0.2
    for k in range(s.n_grains):
        m = s.grain_id == k
        r, c = refs[k]
        fit = fit_strain(disp[m], np.ones(disp[m].shape[:2]), np.zeros(disp[m].shape[:2], np.uint8),
                         centres=centres, shape=(48, 48), pc=s.pc[m], pc_ref=s.pc[r, c], stiffness=C,
                         orientation=s.orientation[r, c])
        np.testing.assert_allclose(fit.rotation, rel.rotation[m], atol=1e-9)

        def dev(e):
            return e - np.trace(e, axis1=-2, axis2=-1)[..., None, None] / 3 * np.eye(3)

        np.testing.assert_allclose(dev(fit.strain), dev(rel.strain[m]), atol=1e-8)
        np.testing.assert_allclose(fit.strain, rel.strain[m], atol=2e-5)


# --------------------------------------------------------------------------- patterns


def _register(a, b, upsample=100):
    """Displacement [dx, dy] of b's content relative to a (Hann-windowed cross-correlation)."""
    from skimage.registration import phase_cross_correlation

    win = np.outer(np.hanning(a.shape[0]), np.hanning(a.shape[1]))
    a = (a - a.mean()) * win
    b = (b - b.mean()) * win
    shift = phase_cross_correlation(a, b, upsample_factor=upsample, normalization=None)[0]
    return -shift[::-1]


def test_patterns_of_one_grain_differ_by_the_relative_deformation(master):
    """Two points of a bent grain: the measured shifts of their patterns' ROIs are the truth's,
    with the PC held fixed so that only the lattice rotation moves the bands."""
    pytest.importorskip("skimage")
    from scipy.ndimage import gaussian_filter

    s = sim.simulate_polycrystal(8, 8, n_grains=2, shape=(128, 128), counts=None, curvature=6e3,
                                 pc_shift_px=0.0, seed=3, master=master)
    k = int(np.argmax(np.bincount(s.grain_id.ravel())))
    pts = np.argwhere(s.grain_id == k)
    refs = np.array([np.argwhere(s.grain_id == j)[0] for j in range(s.n_grains)])
    a = refs[k]
    b = pts[np.argmax(np.linalg.norm(pts - a, axis=1))]
    S = 48
    starts = [(8, 8), (72, 8), (40, 40), (8, 72), (72, 72)]
    centres = np.array([[x + (S - 1) / 2, y + (S - 1) / 2] for x, y in starts])
    truth = s.truth_displacement(centres, refs)[tuple(b)]

    def flatten(p):  # the detector background is not deformed: divide it out
        p = p.astype(np.float64)
        return p / gaussian_filter(p, 10)

    A, B = flatten(s.patterns[tuple(a)]), flatten(s.patterns[tuple(b)])
    measured = np.array([_register(A[y:y + S, x:x + S], B[y:y + S, x:x + S]) for x, y in starts])
    assert np.abs(truth).max() > 0.8 and np.ptp(truth, axis=0).max() > 0.3  # large and not uniform
    np.testing.assert_allclose(measured, truth, atol=0.06)


def test_pattern_is_the_point_orientation_under_its_stretch(master):
    """simulate_pattern(g0, F = V R) is the pattern of the point's own orientation g = g0 R^T under V."""
    s = small(master, rows=6, cols=6, n_grains=2, counts=None, shape=(40, 40), curvature=2e4)
    i, j = 5, 4
    V = np.eye(3) + s.grain_strain[s.grain_id[i, j]]
    p = sim.simulate_pattern(master, shape=(40, 40), pc=s.pc[i, j], orientation=s.orientation[i, j], F=V)
    np.testing.assert_allclose(s.patterns[i, j], p * 1000, rtol=1e-5, atol=1e-3)
    assert s.patterns.dtype == np.float32


def test_noise_and_padding(hexagonal):
    s = hexagonal
    ok = s.grain_id >= 0
    assert s.patterns.dtype == np.uint16
    assert np.all(s.patterns[~ok] == 0)
    means = s.patterns[ok].mean(axis=(1, 2))
    np.testing.assert_allclose(means, 1000, rtol=0.01)
    assert np.all(s.image_quality[ok] > 0.1) and np.all(s.image_quality[~ok] == 0)
    np.testing.assert_allclose(s.grid.step, (np.sqrt(3) / 2 * 0.5, 0.5))
    assert s.grid.kind == "hexagonal"


def test_deterministic_by_seed(master):
    kw = dict(n_grains=3, shape=(32, 32))
    a = small(master, seed=5, **kw)
    b = small(master, seed=5, **kw)
    c = small(master, seed=6, **kw)
    for name in ("patterns", "grain_id", "orientation", "F", "nye", "pc", "image_quality"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.grain_id, c.grain_id)
    assert not np.allclose(a.grain_orientation, c.grain_orientation)
    # the counts change the noise only, not the microstructure
    d = small(master, seed=5, counts=400, **kw)
    np.testing.assert_array_equal(a.grain_id, d.grain_id)
    np.testing.assert_array_equal(a.F, d.F)


def test_errors(master):
    with pytest.raises(ValueError, match="n_grains"):
        sim.simulate_polycrystal(4, 4, n_grains=20, master=master)
    with pytest.raises(ValueError, match="step"):
        sim.simulate_polycrystal(4, 4, n_grains=2, step=-1, master=master)
    with pytest.raises(ValueError, match="orientations"):
        sim.simulate_polycrystal(6, 6, n_grains=2, orientations=np.zeros((3, 3)), master=master)
    with pytest.raises(ValueError, match="strain"):
        sim.simulate_polycrystal(6, 6, n_grains=2, strain=0.2, master=master)
    with pytest.raises(ValueError, match="curvature"):
        sim.simulate_polycrystal(6, 6, n_grains=2, curvature=-1.0, master=master)
    with pytest.raises(ValueError, match="grid_kind"):
        sim.simulate_polycrystal(6, 6, n_grains=2, grid_kind="triangular", master=master)


def test_speed(master):
    """Patterns of 128 x 128 px: a 30 x 30 scan must take well under a minute on 2 cores."""
    sim.simulate_polycrystal(2, 2, n_grains=1, shape=(128, 128), master=master)
    t = time.perf_counter()
    sim.simulate_polycrystal(6, 10, n_grains=2, shape=(128, 128), master=master)
    per_point = (time.perf_counter() - t) / 60
    assert per_point * 900 < 30, f"{per_point * 1e3:.1f} ms per point"


# --------------------------------------------------------------------------- files


def test_save_round_trip(tmp_path, master):
    h5py = pytest.importorskip("h5py")
    from ebsdxc.io import open_scan

    s = small(master, rows=5, cols=6, n_grains=2, shape=(32, 32))
    scan, ang, truth = s.save(tmp_path)
    with open_scan(scan) as src:
        assert (src.grid.rows, src.grid.cols) == (5, 6)
        assert src.grid.step == pytest.approx(s.grid.step)
        assert src.pattern_shape == (32, 32)
        np.testing.assert_allclose(src.metadata["pattern_centre"], s.pc)
        assert src.metadata["sample_tilt"] == 70.0 and "euler_angles" not in src.metadata
    with h5py.File(scan, "r") as f:
        np.testing.assert_array_equal(f["patterns"][()], s.patterns)
        assert f["patterns"].compression == "gzip" and f.attrs["grid_kind"] == "square"
    with h5py.File(truth, "r") as f:
        np.testing.assert_array_equal(f["grain_id"][()], s.grain_id)
        np.testing.assert_array_equal(f["F"][()], s.F)
        np.testing.assert_array_equal(f["nye_tensor"][()], s.nye)
        np.testing.assert_array_equal(f["grains/curvature"][()], s.grain_curvature)
        assert "kappa" in f.attrs["conventions"]
    _check_orientation_file(ang, s)


def test_save_hexagonal(tmp_path, hexagonal):
    h5py = pytest.importorskip("h5py")
    scan, ang, truth = hexagonal.save(tmp_path, truth_name=None)
    assert truth is None and not (tmp_path / "truth.h5").exists()
    with h5py.File(scan, "r") as f:
        assert f.attrs["grid_kind"] == "hexagonal"
        np.testing.assert_allclose(f.attrs["step_y"], 0.5 * np.sqrt(3) / 2)
        np.testing.assert_array_equal(f["patterns"][()], hexagonal.patterns)
    _check_orientation_file(ang, hexagonal)
    with pytest.raises(ValueError, match="compression_level"):
        hexagonal.save(tmp_path, compression_level=12)


def _check_orientation_file(path, s):
    """The .ang file holds the per-point orientations: ebsdxc's reader and orix (oracle) agree."""
    from ebsdxc.crystal import euler_to_matrix, rotation_angle
    from ebsdxc.io.ang import read_ang

    ok = s.grain_id >= 0
    omap = read_ang(path)
    assert (omap.grid.rows, omap.grid.cols, omap.grid.kind) == (s.grid.rows, s.grid.cols, s.grid.kind)
    assert omap.grid.step == pytest.approx(s.grid.step, abs=1e-6)
    assert [(p.name, p.laue) for p in omap.phases] == [("Ni", "m-3m")]
    np.testing.assert_array_equal(omap.phase, np.where(ok, 0, -1))
    g = euler_to_matrix(omap.euler_deg[ok])
    # .ang stores radians to 5 decimals: the same orientations to ~1e-5 rad (no symmetry applied)
    assert rotation_angle(g @ np.swapaxes(s.orientation[ok], 1, 2)).max() < 3e-5
    np.testing.assert_allclose(omap.quality["iq"][ok], s.image_quality[ok], atol=1e-5)
    pytest.importorskip("orix")
    from orix import io as orix_io

    xmap = orix_io.load(path)
    rot = xmap.rotations.to_matrix().reshape(-1, 3, 3)
    assert rot.shape[0] == s.grid.n_points
    # orix keeps EDAX .ang Euler angles as they are: its rotation matrix is g (file order = row-major)
    assert rotation_angle(rot @ np.swapaxes(s.orientation[ok], 1, 2)).max() < 3e-5


# --------------------------------------------------------------------------- the sample


def _sample_files():
    names = ["scan.h5", "scan.ang", "truth.h5"]
    paths = [os.path.join(SAMPLE, n) for n in names]
    if not all(os.path.isfile(p) for p in paths):
        pytest.skip("sample_data/polycrystal not generated")
    return paths


def test_sample_folder_layout_and_truth():
    h5py = pytest.importorskip("h5py")
    scan, ang, truth = _sample_files()
    total = sum(os.path.getsize(os.path.join(SAMPLE, n)) for n in os.listdir(SAMPLE))
    assert total < 3.5e6
    with h5py.File(scan, "r") as f:
        ds = f["patterns"]
        assert ds.dtype == np.uint16 and ds.shape[2:] == (128, 128) and ds.compression == "gzip"
        rows, cols = ds.shape[:2]
        assert ds.chunks == (1, cols, 128, 128)
        assert ds.attrs["pattern_centre"].shape == (rows, cols, 3)
        assert "simulated" in f.attrs["note"].lower()
        assert 950 < ds[0].mean() < 1050
    with h5py.File(truth, "r") as f:
        gid, F, g, nye = f["grain_id"][()], f["F"][()], f["orientation"][()], f["nye_tensor"][()]
        K, g0, eps = f["grains/curvature"][()], f["grains/orientation"][()], f["grains/strain"][()]
        theta = f["lattice_rotation"][()]
        assert "kappa" in f.attrs["conventions"] and "parameters" in f.attrs
    n = len(K)
    assert n >= 3 and set(np.unique(gid)) == set(range(n))
    from scipy.spatial.transform import Rotation

    R = Rotation.from_rotvec(theta.reshape(-1, 3)).as_matrix().reshape(F.shape)
    np.testing.assert_allclose(F, (np.eye(3) + eps[gid]) @ R, atol=1e-14)
    np.testing.assert_allclose(g, g0[gid] @ np.swapaxes(R, -1, -2), atol=1e-14)
    alpha = np.swapaxes(K, 1, 2) - np.trace(K, axis1=1, axis2=2)[:, None, None] * np.eye(3)
    np.testing.assert_allclose(nye, alpha[gid], atol=0)
    assert np.all((np.linalg.norm(K, axis=(1, 2)) >= 1e3) & (np.linalg.norm(K, axis=(1, 2)) <= 3e3))


def test_sample_regenerates_identically(tmp_path):
    h5py = pytest.importorskip("h5py")
    scan, ang, truth = _sample_files()
    res = subprocess.run([sys.executable, SCRIPT, "--out", str(tmp_path), "-q"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    with h5py.File(scan, "r") as a, h5py.File(tmp_path / "scan.h5", "r") as b:
        np.testing.assert_array_equal(a["patterns"][()], b["patterns"][()])
        np.testing.assert_array_equal(a.attrs["pattern_centre"], b.attrs["pattern_centre"])
    with h5py.File(truth, "r") as a, h5py.File(tmp_path / "truth.h5", "r") as b:
        assert set(a) == set(b)
        np.testing.assert_array_equal(a["grain_id"][()], b["grain_id"][()])
        # the last bit of float64 results moves with the NumPy/SciPy build (linear algebra, rotations)
        for name in ("orientation", "F", "nye_tensor", "lattice_rotation", "pattern_centre"):
            np.testing.assert_allclose(a[name][()], b[name][()], rtol=1e-12, atol=1e-15)
    with open(ang) as fa, open(tmp_path / "scan.ang") as fb:
        assert fa.read() == fb.read()
