"""ebsdxc.gnd: the Nye tensor of rotation maps and lower-bound GND densities, against analytic
bent crystals, scipy's HiGHS, the simulated polycrystal's truth and orix (hcp indices)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from scipy.optimize import linprog
from scipy.spatial.transform import Rotation

from ebsdxc import crystal, geometry, gnd, materials, strain
from ebsdxc.io.source import ScanGrid

ALL9 = tuple((i, j) for i in range(3) for j in range(3))
II = [i for i, _ in gnd.MEASURED]
JJ = [j for _, j in gnd.MEASURED]
POLYCRYSTAL = os.path.join(os.path.dirname(__file__), os.pardir, "sample_data", "polycrystal", "truth.h5")


def _steps(kind, h=0.5e-6):
    return (h * np.sqrt(3) / 2 if kind == "hexagonal" else h), h


def _bent(rows, cols, kind, *, axis, grad, base=None):
    """Rotations R = exp((a X + b Y) [n]x) @ base on the map (X, Y in metres): rotations about one
    axis form a one-parameter group, so neighbour-to-neighbour rotations are exactly linear."""
    sy, sx = _steps(kind)
    xy = ScanGrid(rows, cols, step=(sy, sx), kind=kind).positions()
    n = np.asarray(axis, float) / np.linalg.norm(axis)
    angle = np.nan_to_num(xy[..., 0] * grad[0] + xy[..., 1] * grad[1])
    R = Rotation.from_rotvec((angle[..., None] * n).reshape(-1, 3)).as_matrix().reshape(rows, cols, 3, 3)
    return R if base is None else R @ base


def _analytic_nye(axis, grad):
    """alpha = kappa^T - tr(kappa) I, written out, for d theta/dX = a n, d theta/dY = b n, with the
    sample axes x_s = -Y, y_s = -X (test_map_axes_follow_the_beam) and d/dz = 0."""
    n = np.asarray(axis, float) / np.linalg.norm(axis)
    a, b = grad
    kappa = np.zeros((3, 3))
    kappa[:, 0] = -b * n  # d theta / d x_s
    kappa[:, 1] = -a * n  # d theta / d y_s
    return kappa.T - np.trace(kappa) * np.eye(3)


def _measured(alpha):
    return alpha[..., II, JJ]


# ----------------------------------------------------------------------------- frames


def test_map_axes_follow_the_beam():
    """Where the beam goes when the scan steps along the map's x and y, from how the pattern
    centre moves (geometry.extrapolate_pc) and the detector axes in the sample frame."""
    shape, f = (60, 80), 10.0  # detector (H, W); pixel size x binning, um
    for tilts in ((70.0, 0.0), (65.0, 8.0)):
        pc = geometry.extrapolate_pc((0.5, 0.4, 0.6), grid_shape=(3, 3), step=(2.0, 2.0), pixel_size=f,
                                     shape=shape, sample_tilt=tilts[0], detector_tilt=tilts[1])
        axes = geometry.detector_axes(*tilts)  # columns Xd, Yd, Zd in sample coordinates

        def source(p, axes=axes):  # the source point, sample frame, um: PC on the screen minus L along Zd
            x_pc, y_pc, L = geometry.pc_pixels(p, shape)
            return axes @ np.array([x_pc, -y_pc, -L]) * f

        step_x = (source(pc[1, 2]) - source(pc[1, 1])) / 2.0
        step_y = (source(pc[2, 1]) - source(pc[1, 1])) / 2.0
        np.testing.assert_allclose(step_x, gnd.MAP_AXES[:, 0], atol=1e-12)
        np.testing.assert_allclose(step_y, gnd.MAP_AXES[:, 1], atol=1e-12)
    # right-handed, z_s out of the surface: map z (into the surface) is -z_s
    np.testing.assert_allclose(np.cross(gnd.MAP_AXES[:, 0], gnd.MAP_AXES[:, 1]), gnd.MAP_AXES[:, 2])
    assert geometry.detector_axes()[2, 2] > 0  # the detector (Zd) lies on the +z_s side


# ----------------------------------------------------------------------------- Nye tensor


@pytest.mark.parametrize("kind", ["square", "hexagonal"])
@pytest.mark.parametrize("form", ["matrix", "log"])
def test_bent_crystal_gives_the_analytic_nye_tensor(kind, form):
    axis, grad = (0.3, -0.5, 0.8), (2.0e3, -1.3e3)
    base = Rotation.from_euler("zxz", [40, 70, 15], degrees=True).as_matrix()
    R = _bent(9, 11, kind, axis=axis, grad=grad, base=base)
    rot = R if form == "matrix" else strain.rotation_log(R)
    alpha = gnd.nye_tensor(rot, step=_steps(kind), grid_kind=kind, form=form)
    truth = _analytic_nye(axis, grad)
    slots = ScanGrid(9, 11, kind=kind).in_grid()
    assert np.isfinite(_measured(alpha[slots])).all()
    assert np.isnan(alpha[~slots]).all()  # hexagonal padding
    for i, j in gnd.UNMEASURED:
        assert np.isnan(alpha[..., i, j]).all()
    np.testing.assert_allclose(_measured(alpha[slots]), np.broadcast_to(_measured(truth), (slots.sum(), 5)),
                               rtol=0, atol=1e-9 * np.abs(truth).max())


def test_bending_about_the_surface_normal_is_an_edge_wall():
    # theta_3 grows down the rows (map Y = -x_s): kappa_31 = d theta_3 / d x_s = -k, so alpha_13 = -k,
    # the signature of edge dislocations with b along x_s and lines along z_s (rho = k / b)
    k = 1.5e3
    R = _bent(6, 7, "square", axis=(0, 0, 1), grad=(0.0, k))
    alpha = gnd.nye_tensor(R, step=0.5e-6)
    expected = np.zeros(5)
    expected[gnd.MEASURED.index((0, 2))] = -k
    np.testing.assert_allclose(_measured(alpha).reshape(-1, 5), np.broadcast_to(expected, (42, 5)), atol=1e-9)


def test_scalar_step_on_a_hexagonal_grid_is_a_regular_grid():
    axis, grad = (1.0, 0.2, -0.4), (800.0, 1500.0)
    R = _bent(8, 9, "hexagonal", axis=axis, grad=grad)  # built with step_y = step * sqrt(3) / 2
    alpha = gnd.nye_tensor(R, step=0.5e-6, grid_kind="hexagonal")
    ok = ScanGrid(8, 9, kind="hexagonal").in_grid()
    np.testing.assert_allclose(_measured(alpha[ok]), np.broadcast_to(_measured(_analytic_nye(axis, grad)),
                                                                      (ok.sum(), 5)), atol=1e-8)


@pytest.mark.parametrize("kind", ["square", "hexagonal"])
def test_gradients_never_cross_a_grain_boundary(kind):
    rows, cols = 8, 10
    left = np.arange(cols)[None, :] < 5
    grain = np.where(left, 3, 7) * np.ones((rows, 1), int)
    ga = Rotation.from_euler("zxz", [10, 20, 30], degrees=True).as_matrix()
    gb = Rotation.from_euler("zxz", [100, 50, 200], degrees=True).as_matrix()
    fields = [((0.2, 0.9, 0.1), (1.2e3, 0.4e3)), ((-0.6, 0.1, 0.7), (-0.5e3, 2.5e3))]
    Ra = _bent(rows, cols, kind, axis=fields[0][0], grad=fields[0][1], base=ga)
    Rb = _bent(rows, cols, kind, axis=fields[1][0], grad=fields[1][1], base=gb)
    R = np.where(left[..., None, None], Ra, Rb)
    truth = np.where(left[..., None], _measured(_analytic_nye(*fields[0])), _measured(_analytic_nye(*fields[1])))
    truth = np.broadcast_to(truth, (rows, cols, 5))
    ok = ScanGrid(rows, cols, kind=kind).in_grid()

    alpha = gnd.nye_tensor(R, step=_steps(kind), grid_kind=kind, grain_id=grain)
    np.testing.assert_allclose(_measured(alpha)[ok], truth[ok], atol=1e-8)
    by_angle = gnd.nye_tensor(R, step=_steps(kind), grid_kind=kind, max_angle=np.radians(5))
    np.testing.assert_allclose(_measured(by_angle)[ok], truth[ok], atol=1e-8)
    # without either, the boundary's misorientation reads as an enormous curvature
    crossing = gnd.nye_tensor(R, step=_steps(kind), grid_kind=kind)
    assert np.nanmax(np.abs(_measured(crossing) - truth)) > 1e5


def test_invalid_points_and_too_few_neighbours_give_nan():
    axis, grad = (0.0, 1.0, 1.0), (1e3, 2e3)
    R = _bent(7, 7, "square", axis=axis, grad=grad)
    truth = _measured(_analytic_nye(axis, grad))
    R[3, 3] = np.nan  # a failed fit: NaN itself, its neighbours fall back to one-sided differences
    valid = np.ones((7, 7), bool)
    valid[0, 1] = valid[1, 0] = False  # the corner (0, 0) keeps no usable neighbour
    valid[5, 6] = valid[6, 5] = False  # nor does (6, 6)
    alpha = gnd.nye_tensor(R, step=0.5e-6, valid=valid)
    bad = np.zeros((7, 7), bool)
    bad[3, 3] = bad[0, 0] = bad[6, 6] = True
    bad |= ~valid
    assert np.isnan(alpha[bad]).all()
    np.testing.assert_allclose(_measured(alpha[~bad]), np.broadcast_to(truth, ((~bad).sum(), 5)), atol=1e-8)
    # a point whose only neighbours lie on one line (a 1-row map) has no y gradient
    assert np.isnan(gnd.nye_tensor(R[:1], step=0.5e-6)).all()


def test_constant_rotation_gives_zero():
    g = Rotation.from_euler("zxz", [30, 40, 50], degrees=True).as_matrix()
    R = np.broadcast_to(g, (5, 6, 3, 3)).copy()
    alpha = gnd.nye_tensor(R, step=1e-6)
    np.testing.assert_allclose(_measured(alpha), 0.0, atol=1e-9)
    res = gnd.gnd_density(np.where(np.isfinite(alpha), 0.0, alpha), g, dislocations=materials.material("Ni"))
    assert (res.total == 0).all() and (res.density == 0).all()
    # the logs of ebsdxc's results: zero rotation everywhere is zero too
    assert np.nanmax(np.abs(gnd.nye_tensor(np.zeros((4, 4, 3, 3)), step=1e-6))) == 0


def test_rejects_bad_input():
    R = np.broadcast_to(np.eye(3), (4, 4, 3, 3))
    with pytest.raises(ValueError, match="rotation must have shape"):
        gnd.nye_tensor(np.zeros((4, 3, 3)), step=1e-6)
    with pytest.raises(ValueError, match="step must be positive"):
        gnd.nye_tensor(R, step=0)
    with pytest.raises(ValueError, match="step must be one number or"):
        gnd.nye_tensor(R, step=(1, 2, 3))
    with pytest.raises(ValueError, match="grid_kind"):
        gnd.nye_tensor(R, step=1e-6, grid_kind="triangular")
    with pytest.raises(ValueError, match="antisymmetric rotation tensors"):
        gnd.nye_tensor(np.ones((4, 4, 3, 3)), step=1e-6)
    with pytest.raises(ValueError, match="grain_id must have shape"):
        gnd.nye_tensor(R, step=1e-6, grain_id=np.zeros((3, 4), int))
    with pytest.raises(ValueError, match="max_angle"):
        gnd.nye_tensor(R, step=1e-6, max_angle=-1)
    alpha = np.zeros((2, 3, 3))
    with pytest.raises(ValueError, match="does not broadcast"):
        gnd.gnd_density(alpha, np.broadcast_to(np.eye(3), (3, 3, 3)), dislocations=gnd.fcc_dislocations(3.5e-10))
    with pytest.raises(ValueError, match="weighting"):
        gnd.gnd_density(alpha, np.eye(3), dislocations=gnd.fcc_dislocations(3.5e-10), weighting="cheapest")
    with pytest.raises(ValueError, match="components"):
        gnd.gnd_density(alpha, np.eye(3), dislocations=gnd.fcc_dislocations(3.5e-10), components=[(0, 3)])
    with pytest.raises(ValueError, match="no crystal structure"):
        gnd.dislocation_types(materials.material("cubic:200,100,80"))
    with pytest.raises(ValueError, match="metres"):
        gnd.fcc_dislocations(3.52)


# ----------------------------------------------------------------------------- dislocation types


@pytest.mark.parametrize("name, n_edge, n_screw, b", [
    ("Ni", 12, 6, [3.5238e-10 / np.sqrt(2)]),
    ("Fe", 12, 4, [2.8664e-10 * np.sqrt(3) / 2]),
    ("Si", 12, 6, [5.4307e-10 / np.sqrt(2)]),
    ("Ti", 24, 9, [2.9504e-10, np.hypot(2.9504e-10, 4.6833e-10)]),
])
def test_dislocation_types(name, n_edge, n_screw, b):
    t = gnd.dislocation_types(materials.material(name))
    assert len(t) == n_edge + n_screw == len(t.names)
    assert (~t.screw).sum() == n_edge and t.screw.sum() == n_screw
    blen = np.linalg.norm(t.burgers, axis=1)
    nearest = np.abs(blen[:, None] / np.asarray(b)[None] - 1)
    assert (nearest.min(axis=1) < 1e-9).all() and (nearest.min(axis=0) < 1e-9).all()
    np.testing.assert_allclose(np.linalg.norm(t.line, axis=1), 1.0)
    bu = t.burgers / blen[:, None]
    np.testing.assert_allclose((bu * t.line).sum(1)[~t.screw], 0.0, atol=1e-12)  # edges: l = n x b
    np.testing.assert_allclose(np.abs((bu * t.line).sum(1)[t.screw]), 1.0)  # screws: l = b
    # the set of b (x) l is closed under the crystal's symmetry (up to the sign of a type)
    K = t.nye().reshape(len(t), 9)
    for op in crystal.symmetry_operators(t.laue):
        moved = np.einsum("ia,jb,tab->tij", op, op, t.nye()).reshape(len(t), 9)
        d = np.minimum(np.abs(moved[:, None] - K[None]).max(-1), np.abs(moved[:, None] + K[None]).max(-1))
        assert (d.min(axis=1) < 1e-9 * np.abs(K).max()).all()


def test_line_energy_weights():
    ti = materials.material("Ti")
    t = gnd.dislocation_types(ti)
    ca = ti.a**2 + ti.c**2  # |b|^2 of <c+a>, the largest
    nu = 0.32
    w = t.weights("energy", poisson=nu)
    blen2 = (t.burgers**2).sum(1)
    is_a = np.isclose(blen2, ti.a**2, rtol=1e-9, atol=0)
    np.testing.assert_allclose(w[t.screw & is_a], ti.a**2 / ca)
    np.testing.assert_allclose(w[t.screw & ~is_a], 1.0)
    np.testing.assert_allclose(w[~t.screw & is_a], ti.a**2 / ca / (1 - nu))
    np.testing.assert_allclose(w[~t.screw & ~is_a], 1 / (1 - nu))
    assert (t.weights() == 1).all()
    with pytest.raises(ValueError, match="Poisson"):
        t.weights("energy", poisson=0.5)


def test_bcc_with_112_planes():
    t = gnd.bcc_dislocations(2.8664e-10, planes=("110", "112"))
    assert len(t) == 28 and t.screw.sum() == 4
    assert sum(n.startswith("{112}") for n in t.names) == 12
    with pytest.raises(ValueError, match="bcc slip planes"):
        gnd.bcc_dislocations(2.8664e-10, planes=("123",))


def test_hcp_slip_systems_match_orix():
    pytest.importorskip("orix")
    from diffpy.structure import Lattice, Structure
    from orix.crystal_map import Phase
    from orix.vector import Miller

    a, c = 2.9504, 4.6833  # Angstrom for orix, metres for ebsdxc
    phase = Phase(point_group="6/mmm", structure=Structure(lattice=Lattice(a, a, c, 90, 90, 120)))
    systems = gnd.read_slip_systems(gnd_file(), a=a * 1e-10, c=c * 1e-10)
    rows = [[0, 0, 0, 1, 2, -1, -1, 0], [1, 0, -1, 0, -1, 2, -1, 0], [1, 0, -1, 1, -1, 2, -1, 0],
            [1, 0, -1, 1, -1, -1, 2, 3]]
    for (family, n, b), row in zip(systems, rows):
        n_orix = Miller(hkil=row[:4], phase=phase).unit.data[0]
        b_orix = Miller(UVTW=row[4:], phase=phase).data[0] * 1e-10  # orix: [UVTW] without the 1/3
        np.testing.assert_allclose(n / np.linalg.norm(n), n_orix, atol=1e-12, err_msg=family)
        np.testing.assert_allclose(b, b_orix / 3, rtol=1e-12, atol=1e-22, err_msg=family)
    # the variants: orix's symmetrised <11-20> and <11-23> against the screw types, up to sign
    t = gnd.hcp_dislocations(a * 1e-10, c * 1e-10)
    for uvtw in ([2, -1, -1, 0], [1, 1, -2, 3]):
        dirs = Miller(UVTW=uvtw, phase=phase).symmetrise(unique=True).unit.data
        ours = [b / np.linalg.norm(b) for b in t.burgers[t.screw]]
        ours = [u for u in ours if abs(abs(u[2]) - abs(dirs[0, 2])) < 1e-9]
        assert len(ours) * 2 == len(dirs)
        for u in dirs:
            assert min(min(np.abs(u - v).max(), np.abs(u + v).max()) for v in ours) < 1e-9


def gnd_file():
    return os.path.join(os.path.dirname(__file__), os.pardir, "pipelines", gnd.DEFAULT_HCP_SLIP_FILE)


def test_slip_file_errors(tmp_path):
    p = tmp_path / "s.csv"
    for text, message in [
        ("family,h,k,l,u,v,w\nx,1,1,1,1,-1,0\n", "header must be"),
        ("family,h,k,i,l,u,v,t,w\nx,1,0,0,1,1,1,-2,0\n", "i = -\\(h \\+ k\\)"),
        ("family,h,k,i,l,u,v,t,w\nx,0,0,0,1,1,1,-2,3\n", "does not lie in the plane"),
        ("family,h,k,i,l,u,v,t,w\nx,0,0,0,1,a,1,-2,0\n", "must be numbers"),
        ("# only a comment\n", "no slip systems"),
    ]:
        p.write_text(text)
        with pytest.raises(ValueError, match=message):
            gnd.read_slip_systems(p, a=3e-10, c=5e-10)
    with pytest.raises(ValueError, match="cannot read"):
        gnd.read_slip_systems(tmp_path / "missing.csv", a=3e-10, c=5e-10)
    # a file with one family: basal <a> alone, 3 edge + 3 screw types, with Mg's lattice
    p.write_text("family,h,k,i,l,u,v,t,w\nbasal <a>,0,0,0,1,2,-1,-1,0\n")
    mg = materials.material("Mg")
    t = gnd.dislocation_types(mg, slip_file=p)
    assert len(t) == 6 and np.allclose(np.linalg.norm(t.burgers, axis=1), mg.a)


# ----------------------------------------------------------------------------- L1 densities


def _highs(K, rhs, w):
    """Reference L1 optimum with scipy's HiGHS, scaled to O(1) numbers for the solver."""
    A = K[:, II, JJ].T / 1e-10
    s = np.abs(rhs).max()
    r = linprog(np.r_[w, w], A_eq=np.hstack([A, -A]), b_eq=rhs / s, bounds=(0, None), method="highs")
    assert r.status == 0, r.message
    return r.fun * s / 1e-10


@pytest.mark.parametrize("name", ["Ni", "Fe", "Ti"])
@pytest.mark.parametrize("weighting", ["length", "energy"])
def test_l1_optimum_equals_highs(name, weighting):
    t = gnd.dislocation_types(materials.material(name))
    rng = np.random.default_rng(7)
    g = Rotation.random(40, random_state=8).as_matrix()
    alpha = rng.normal(scale=1e3, size=(40, 3, 3))
    alpha[3] = 0.0
    res = gnd.gnd_density(alpha, g, dislocations=t, weighting=weighting)
    w = t.weights(weighting)
    K = t.nye(g)
    ours = (w * np.abs(res.density)).sum(1)
    ref = np.array([_highs(K[p], alpha[p][II, JJ], w) if p != 3 else 0.0 for p in range(40)])
    np.testing.assert_allclose(ours, ref, rtol=1e-9)
    recon = np.einsum("nt,ntij->nij", res.density, K)
    np.testing.assert_allclose(_measured(recon), _measured(alpha), atol=1e-9 * np.abs(alpha).max())
    np.testing.assert_allclose(res.total, np.abs(res.density).sum(1))
    assert res.total[3] == 0


@pytest.mark.parametrize("name", ["Ni", "Fe", "Ti"])
def test_one_dislocation_type_is_recovered(name):
    t = gnd.dislocation_types(materials.material(name))
    rho = 3e13
    rng = np.random.default_rng(1)
    for k in range(len(t)):
        g = Rotation.random(6, random_state=100 + k).as_matrix()
        alpha = rho * t.nye(g)[:, k]
        # with all nine components (3-D data) the lone type is the L1 optimum
        full = gnd.gnd_density(alpha, g, dislocations=t, components=ALL9)
        expected = np.zeros((6, len(t)))
        expected[:, k] = rho
        np.testing.assert_allclose(full.density, expected, atol=1e-6 * rho)
        # threading the surface (line along z_s), a map's five components suffice
        spin = Rotation.from_rotvec(np.c_[np.zeros((6, 2)), rng.uniform(0, 2 * np.pi, 6)]).as_matrix()
        to_z = Rotation.align_vectors([t.line[k]], [[0, 0, 1]])[0].as_matrix()
        g2 = to_z @ spin
        threading = gnd.gnd_density(rho * t.nye(g2)[:, k], g2, dislocations=t)
        np.testing.assert_allclose(threading.density, expected, atol=1e-6 * rho)
        # any line: the five components give a lower bound of the true content
        bound = gnd.gnd_density(alpha, g, dislocations=t)
        assert (bound.total <= rho * (1 + 1e-9)).all() and (bound.total > 0).all()


def test_gnd_map_shapes_and_nan():
    R = _bent(6, 7, "square", axis=(1, 2, 3), grad=(2e3, 1e3))
    R[2, 2] = np.nan
    alpha = gnd.nye_tensor(R, step=0.5e-6)
    g = crystal.euler_to_matrix(np.array([20.0, 30.0, 40.0]))
    ni = materials.material("Ni")
    res = gnd.gnd_density(alpha, g, dislocations=ni, chunk=5)  # several batches
    assert res.density.shape == (6, 7, 18) and res.total.shape == (6, 7)
    assert np.isnan(res.total[2, 2]) and np.isnan(res.density[2, 2]).all()
    ok = np.isfinite(res.total)
    assert ok.sum() == 41 and (res.total[ok] > 0).all()
    # a uniform bend is one Nye tensor: the same density everywhere, whatever the batching
    np.testing.assert_allclose(res.total[ok], res.total[0, 0], rtol=1e-9)
    one = gnd.gnd_density(alpha[0, 0], g, dislocations=ni)
    np.testing.assert_allclose(one.total, res.total[0, 0], rtol=1e-12)
    assert res.types is gnd.gnd_density(alpha, g, dislocations=res.types).types


def test_simulated_polycrystal_truth():
    """The polycrystal sample's own truth (ebsdxc.simulate.POLYCRYSTAL_CONVENTIONS): its lattice
    rotations give its Nye tensor, to the second-order term the conventions state (|theta| / 2)."""
    h5py = pytest.importorskip("h5py")
    if not os.path.exists(POLYCRYSTAL):
        pytest.skip("sample_data/polycrystal/truth.h5 is not here")
    with h5py.File(POLYCRYSTAL, "r") as f:
        theta, gid, truth = f["lattice_rotation"][...], f["grain_id"][...], f["nye_tensor"][...]
        g, kind = f["orientation"][...], str(f.attrs["grid_kind"])
        step = np.asarray(f.attrs["step"], float) * {"um": 1e-6}[str(f.attrs["step_unit"])]
    R = Rotation.from_rotvec(np.nan_to_num(theta).reshape(-1, 3)).as_matrix().reshape(theta.shape[:2] + (3, 3))
    R[~np.isfinite(theta).all(-1)] = np.nan
    alpha = gnd.nye_tensor(R, step=step, grid_kind=kind, grain_id=gid)
    ok = np.isfinite(_measured(alpha)).all(-1)
    assert ok.sum() >= 0.9 * (gid >= 0).sum()
    err = np.linalg.norm(_measured(alpha - truth)[ok], axis=-1) / np.linalg.norm(_measured(truth)[ok], axis=-1)
    assert err.max() < 0.01 * max(1.0, np.nanmax(np.abs(theta)) / 0.02)
    ni = materials.material("Ni")
    ours = gnd.gnd_density(alpha, g, dislocations=ni).total
    exact = gnd.gnd_density(truth, g, dislocations=ni).total
    np.testing.assert_allclose(ours[ok], exact[ok], rtol=0.02)


# ----------------------------------------------------------------------------- noise floor


@pytest.mark.parametrize("kind", ["square", "hexagonal"])
def test_noise_floor(kind):
    sigma, h = 1e-4, 0.5e-6
    ni = materials.material("Ni")
    a = gnd.noise_floor(sigma, h, ni, grid_kind=kind, shape=(40, 40))
    # Monte Carlo RMS of the measured Nye components matches the propagated noise
    assert a.nye_rms == pytest.approx(a.nye_rms_expected, rel=0.06)
    assert a.nye_rms_expected == pytest.approx((np.sqrt(3) if kind == "square" else np.sqrt(2)) * sigma / h)
    assert 0 < a.gnd_median <= a.gnd_p90 and a.points > 1000
    # the same noise at twice the step: Nye and the L1 bound are both linear in 1/step
    b = gnd.noise_floor(sigma, 2 * h, ni, grid_kind=kind, shape=(40, 40))
    assert b.gnd_mean == pytest.approx(a.gnd_mean / 2, rel=1e-9)
    assert b.nye_rms == pytest.approx(a.nye_rms / 2, rel=1e-9)


# ----------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_cupy_matches_numpy():
    cp = pytest.importorskip("cupy")
    axis, grad = (0.3, -0.5, 0.8), (2.0e3, -1.3e3)
    R = _bent(20, 24, "hexagonal", axis=axis, grad=grad,
              base=Rotation.from_euler("zxz", [40, 70, 15], degrees=True).as_matrix())
    rng = np.random.default_rng(0)
    R = R @ Rotation.from_rotvec(rng.normal(scale=1e-4, size=(20 * 24, 3))).as_matrix().reshape(20, 24, 3, 3)
    gid = (np.arange(24)[None, :] < 11) * np.ones((20, 1), int)
    a_np = gnd.nye_tensor(R, step=_steps("hexagonal"), grid_kind="hexagonal", grain_id=gid)
    a_cp = gnd.nye_tensor(cp.asarray(R), step=_steps("hexagonal"), grid_kind="hexagonal", grain_id=cp.asarray(gid))
    assert isinstance(a_cp, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(a_cp), a_np, rtol=1e-12, atol=1e-6)
    g = Rotation.random(20 * 24, random_state=3).as_matrix().reshape(20, 24, 3, 3)
    for name in ("Ni", "Ti"):
        t = gnd.dislocation_types(materials.material(name))
        r_np = gnd.gnd_density(a_np, g, dislocations=t)
        r_cp = gnd.gnd_density(cp.asarray(a_np), cp.asarray(g), dislocations=t)
        np.testing.assert_allclose(cp.asnumpy(r_cp.total), r_np.total, rtol=1e-9)
