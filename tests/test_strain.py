"""The strain fit, the stiffness presets and remapping, against exact synthetic shifts."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq

from ebsdxc import materials, strain
from ebsdxc.crystal import rotation_from_vector
from ebsdxc.rois import grid_layout
from ebsdxc.simulate import bunge_to_matrix, displacement_truth

SHAPE = (240, 320)
PC_REF = np.array([0.52, 0.42, 0.62])
G = bunge_to_matrix(160.0, 40.0, 20.0)
C_NI = materials.stiffness_tensor(materials.cubic_stiffness(*materials.CUBIC_PRESETS["Ni"]))


def _sigma33(F, g, C):
    """sigma_33 in the sample frame by the long route: full tensor rotation, explicit polar."""
    V, R = strain.polar_decomposition(F)
    Cs = materials.rotate_stiffness(C, g @ R.T)
    return np.einsum("kl,kl->", Cs[2, 2], V - np.eye(3))


def traction_free(F0, g=G, C=C_NI):
    """The multiple s F0 with sigma_33 = 0 (root of a scalar function; independent of the fit's algebra)."""
    s = brentq(lambda s: _sigma33(s * F0, g, C), 0.9, 1.1, xtol=1e-15)
    return s * F0


def random_F(rng, strain_mag=1e-3, rot_mag=1e-3, n=1):
    out = []
    for _ in range(n):
        e = rng.normal(scale=strain_mag, size=(3, 3))
        e = (e + e.T) / 2
        w = rng.normal(scale=rot_mag, size=3)
        out.append(traction_free((np.eye(3) + e) @ rotation_from_vector(w)))
    return np.array(out)


def exact_case(F, pc, *, tilts=(70.0, 0.0), grid=(5, 5), size=48):
    layout = grid_layout(SHAPE, grid=grid, size=size)
    c = layout.centres
    q = displacement_truth(c, shape=SHAPE, pc_ref=PC_REF, pc=pc, F=F, sample_tilt=tilts[0],
                           detector_tilt=tilts[1])
    B, n = q.shape[:2]
    return c, q, np.full((B, n), 0.9), np.zeros((B, n), np.uint8)


def fit(c, q, h, s, pc, **kw):
    kw.setdefault("sample_tilt", 70.0)
    kw.setdefault("detector_tilt", 0.0)
    return strain.fit_strain(q, h, s, centres=c, shape=SHAPE, pc=pc, pc_ref=PC_REF, stiffness=C_NI,
                             orientation=G, **kw)


@pytest.mark.parametrize("tilts", [(70.0, 0.0), (65.0, 10.0)])
def test_exact_shifts_give_F_strain_rotation(tilts):
    rng = np.random.default_rng(3)
    F = random_F(rng, n=6)
    pc = PC_REF + rng.normal(scale=[2e-3, 2e-3, 1e-3], size=(6, 3))  # the beam moved: PC differs per point
    c, q, h, s = exact_case(F, pc, tilts=tilts)
    r = fit(c, q, h, s, pc, sample_tilt=tilts[0], detector_tilt=tilts[1])
    assert (r.status == strain.FIT_OK).all()
    np.testing.assert_allclose(r.F, F, atol=1e-9)
    V, R = strain.polar_decomposition(F)
    np.testing.assert_allclose(r.strain, V - np.eye(3), atol=1e-9)
    w = strain.rotation_log(R)
    np.testing.assert_allclose(r.rotation, w, atol=1e-9)
    np.testing.assert_allclose(r.rotation, -np.swapaxes(r.rotation, 1, 2), atol=1e-15)
    assert np.abs(r.rotation).max() > 5e-4  # the test has rotations to find
    # crystal frame: g' eps g'^T with g' = g R^T, and g w g^T
    gd = G @ np.swapaxes(R, 1, 2)
    np.testing.assert_allclose(r.strain_crystal, gd @ (V - np.eye(3)) @ np.swapaxes(gd, 1, 2), atol=1e-9)
    np.testing.assert_allclose(r.rotation_crystal, G @ w @ G.T, atol=1e-9)
    assert r.residual_px.max() < 1e-6 and r.angular_error.max() < 1e-8
    assert (r.n_used == 25).all()


def test_pc_shift_alone_is_not_strain():
    pc = PC_REF + np.array([[0.01, -0.008, 0.004]])  # 3 px of pattern shift, no deformation
    c, q, h, s = exact_case(np.eye(3)[None], pc)
    assert np.abs(q).max() > 2
    r = fit(c, q, h, s, pc)
    np.testing.assert_allclose(r.F[0], np.eye(3), atol=1e-9)
    # ...while ignoring the PC change would call it strain and rotation
    wrong = fit(c, q, h, s, PC_REF)
    assert np.abs(wrong.strain).max() > 1e-3 or np.abs(wrong.rotation).max() > 1e-3


def test_large_rotation_is_exact():
    R = rotation_from_vector(np.deg2rad(3.0) * np.array([0.6, -0.48, 0.64]))
    F = traction_free((np.eye(3) + np.diag([1e-3, -5e-4, 0])) @ R)
    c, q, h, s = exact_case(F[None], PC_REF[None])
    r = fit(c, q, h, s, PC_REF[None])
    np.testing.assert_allclose(r.F[0], F, atol=1e-9)
    assert np.degrees(np.linalg.norm(r.rotation[0][[2, 0, 1], [1, 2, 0]])) == pytest.approx(3.0, abs=1e-6)


def test_sigma33_is_zero_and_scale_does_not_matter():
    rng = np.random.default_rng(7)
    F = random_F(rng, n=3)
    c, q, h, s = exact_case(F, np.broadcast_to(PC_REF, (3, 3)))
    r = fit(c, q, h, s, PC_REF)
    for Fi in r.F:
        assert abs(_sigma33(Fi, G, C_NI)) < 1e-6  # GPa
    # Another material changes only the volumetric part: deviatoric strain and rotation stay.
    C_al = materials.stiffness_tensor(materials.cubic_stiffness(*materials.CUBIC_PRESETS["Al"]))
    r2 = strain.fit_strain(q, h, s, centres=c, shape=SHAPE, pc=PC_REF, pc_ref=PC_REF, stiffness=C_al, orientation=G)

    def dev(e):
        return e - np.trace(e, axis1=1, axis2=2)[:, None, None] * np.eye(3) / 3

    # dev(s V - I) = s dev(V): equal to second order (|dev| * (s - 1) ~ 1e-3 * 1e-5)
    np.testing.assert_allclose(dev(r2.strain), dev(r.strain), atol=1e-7)
    np.testing.assert_allclose(r2.rotation, r.rotation, atol=2e-9)
    assert np.abs(np.trace(r2.strain, axis1=1, axis2=2) - np.trace(r.strain, axis1=1, axis2=2)).max() > 1e-6


def test_outliers_are_rejected_by_the_rule():
    rng = np.random.default_rng(11)
    F = random_F(rng, n=4)
    c, q, h, s = exact_case(F, np.broadcast_to(PC_REF, (4, 3)))
    q = q + rng.normal(scale=0.02, size=q.shape)
    bad = [(0, 3), (0, 17), (2, 8)]
    for b, k in bad:
        q[b, k] += [1.5, -1.0]  # a false match, 1.8 px off
    r = fit(c, q, h, s, PC_REF)
    for b, k in bad:
        assert not r.used[b, k]
    assert r.n_used.tolist() == [23, 25, 24, 25]
    V, R = strain.polar_decomposition(F)
    assert np.abs(r.strain - (V - np.eye(3))).max() < 2e-4
    assert 0.01 < np.median(r.residual_px) < 0.05
    # no rejection at all: the false matches pull the strain
    keep = fit(c, q, h, s, PC_REF, options=strain.FitOptions(outlier_sigma=1e9))
    assert np.abs(keep.strain[0] - (V[0] - np.eye(3))).max() > 3 * np.abs(r.strain[0] - (V[0] - np.eye(3))).max()


def test_low_peaks_bad_status_and_too_few_rois():
    F = random_F(np.random.default_rng(2), n=3)
    c, q, h, s = exact_case(F, np.broadcast_to(PC_REF, (3, 3)))
    h[0, :22] = 0.05  # point 0: only 3 ROIs with a usable peak
    s[1, :] = 4  # point 1: not processed
    q[1] = np.nan
    s[2, :10] = 1  # point 2: 10 ROIs on the search border, 15 left
    q[2, :10] = np.nan
    r = fit(c, q, h, s, PC_REF)
    assert r.status.tolist() == [strain.FIT_TOO_FEW_ROIS, strain.FIT_NOT_PROCESSED, strain.FIT_OK]
    assert np.isnan(r.strain[:2]).all() and np.isnan(r.residual_px[:2]).all()
    assert r.n_used.tolist() == [0, 0, 15]
    np.testing.assert_allclose(r.F[2], F[2], atol=1e-9)
    ok4 = fit(c, q, h, s, PC_REF, options=strain.FitOptions(min_peak_height=0.01))
    assert ok4.status[0] == strain.FIT_OK


# ROI layouts (indices into the 5 x 5 grid) that do not fix F, and some that do
_NOT_FIXED = {"one row": list(range(10, 15)), "one column": [2, 7, 12, 17, 22], "a diagonal": [0, 6, 12, 18, 24],
              "a row and one more": list(range(10, 15)) + [0], "a row and its neighbour": list(range(10, 15)) + [17],
              "four, three on a line": [10, 11, 12, 0]}
_FIXED = {"two rows": list(range(5, 15)), "four corners": [0, 4, 20, 24], "five at random": [1, 8, 13, 19, 21]}


def _layout_batch(xp=np):
    """One point per layout of _NOT_FIXED and _FIXED, the other ROIs off the mask, 0.05 px noise."""
    rng = np.random.default_rng(8)
    layouts = [*_NOT_FIXED.values(), *_FIXED.values()]
    F = random_F(rng, n=len(layouts))
    pc = np.broadcast_to(PC_REF, (len(layouts), 3)).copy()
    c, q, h, s = exact_case(F, pc)
    for i, rois in enumerate(layouts):
        s[i] = 6
        s[i, rois] = 0
    q = q + rng.normal(scale=0.05, size=q.shape)
    return F, pc, c, xp.asarray(q), xp.asarray(h), xp.asarray(s)


def test_rois_that_do_not_fix_F_are_not_fitted():
    """ROI centres all (or all but one) on one line do not fix F however many they are (a row of
    ROIs left by a mask): such a point is flagged FAILED, NaN, where it was fitted as OK with
    strain off by 1 (or NumPy raised for the whole batch); the other points of the batch are
    fitted as ever."""
    F, pc, c, q, h, s = _layout_batch()
    r = fit(c, q, h, s, pc)
    k = len(_NOT_FIXED)
    assert (r.status[:k] == strain.FIT_FAILED).all() and np.isnan(r.strain[:k]).all()
    assert (r.n_used[:k] == 0).all() and not r.used[:k].any()
    assert (r.status[k:] == strain.FIT_OK).all()
    V = strain.polar_decomposition(F[k:])[0]
    assert np.abs(r.strain[k:] - (V - np.eye(3))).max() < 3e-3  # 0.05 px of noise on 4 to 10 ROIs


def test_fit_options_are_checked():
    with pytest.raises(ValueError, match="min_rois"):
        strain.FitOptions(min_rois=3)
    with pytest.raises(ValueError, match="outlier_sigma"):
        strain.FitOptions(outlier_sigma=0)
    with pytest.raises(ValueError, match="centres"):
        strain.fit_strain(np.zeros((2, 5, 2)), np.ones((2, 5)), np.zeros((2, 5)), centres=np.zeros((4, 2)),
                          shape=SHAPE, pc=PC_REF, pc_ref=PC_REF, stiffness=C_NI, orientation=G)


# ---------------------------------------------------------------------------- materials


def test_presets_and_parsing(tmp_path):
    name, c = materials.parse_material("nickel")
    assert name == "Ni" and c[0, 0] == 246.5 and c[0, 1] == 147.3 and c[3, 3] == 124.7
    for key in ("Fe", "al", "Cu", "SI"):
        assert materials.parse_material(key)[1][0, 0] == materials.CUBIC_PRESETS[key.capitalize()][0]
    np.testing.assert_array_equal(materials.parse_material("cubic:200,100,80")[1],
                                  materials.cubic_stiffness(200, 100, 80))
    p = tmp_path / "c.txt"
    np.savetxt(p, c)
    assert np.array_equal(materials.parse_material(str(p))[1], c)
    with pytest.raises(ValueError, match="unknown material 'unobtainium'"):
        materials.parse_material("unobtainium")
    with pytest.raises(ValueError, match="symmetric"):
        bad = c.copy()
        bad[0, 1] += 10
        materials.parse_material(bad)
    with pytest.raises(ValueError, match="positive definite"):
        materials.parse_material("cubic:100,200,50")
    p.write_text("1 2 3")
    with pytest.raises(ValueError, match="expected 36 numbers"):
        materials.parse_material(str(p))


def test_rotate_stiffness():
    C = C_NI
    # cubic symmetry: a 90-degree turn about a cube axis changes nothing
    q = rotation_from_vector(np.array([0, 0, np.pi / 2]))
    np.testing.assert_allclose(materials.rotate_stiffness(C, q), C, atol=1e-9)
    # but a general orientation does, and keeps the invariants (trace of C_iijj, C_ijij)
    Cs = materials.rotate_stiffness(C, G)
    assert np.abs(Cs - C).max() > 10
    assert np.einsum("iijj", Cs) == pytest.approx(np.einsum("iijj", C))
    assert np.einsum("ijij", Cs) == pytest.approx(np.einsum("ijij", C))
    # Voigt round trip: C_1111 = C11, C_1122 = C12, C_2323 = C44
    assert (C[0, 0, 0, 0], C[0, 0, 1, 1], C[1, 2, 1, 2]) == (246.5, 147.3, 124.7)


# ---------------------------------------------------------------------------- remapping


def test_remap_identity_and_rotation():
    from ebsdxc.simulate import load_nickel_master_pattern, simulate_pattern

    pytest.importorskip("kikuchipy")
    master = load_nickel_master_pattern()
    shape = (120, 160)
    pc = np.array([0.5, 0.45, 0.6])
    ref = simulate_pattern(master, shape=shape, pc=pc, orientation=G, background=False)
    same = strain.remap_pattern(ref, np.eye(3), pc=pc)
    np.testing.assert_allclose(same, ref, rtol=1e-5, atol=1e-3)
    R = rotation_from_vector(np.deg2rad(3.0) * np.array([0.3, 0.8, -0.52]))
    want = simulate_pattern(master, shape=shape, pc=pc, orientation=G, F=R, background=False)
    got = strain.remap_pattern(ref, R, pc=pc)
    inner = np.s_[12:-12, 12:-12]  # the edges take nearest values: not comparable
    err = np.abs(got - want)[inner].mean() / want[inner].std()
    # as good as cubic interpolation of these sharp simulated bands gets (a half-pixel shift
    # of the same pattern errs by 0.10); R^T instead of R would give 1.0
    assert err < 0.09
    assert np.abs(ref - want)[inner].mean() / want[inner].std() > 10 * err  # the rotation is visible
    stack = strain.remap_pattern(ref, np.stack([np.eye(3), R, R.T]), pc=pc)  # one call, three patterns
    assert stack.shape == (3, *shape)
    np.testing.assert_allclose(stack[1], got, atol=1e-4)
    np.testing.assert_allclose(stack[2], strain.remap_pattern(ref, R.T, pc=pc), atol=1e-4)


def _sources_by_directions(F, shape, pc, **tilts):
    """The oracle of :func:`strain.source_coordinates`: each pixel's unit direction, turned by
    F^-1 and projected back (:mod:`ebsdxc.geometry`), as remap_pattern computed it before."""
    from ebsdxc import geometry

    H, W = shape
    yy, xx = np.meshgrid(np.arange(H, dtype=float), np.arange(W, dtype=float), indexing="ij")
    r = geometry.pixel_directions(np.stack([xx, yy], axis=-1), shape, pc, **tilts)
    src = geometry.project(r @ np.swapaxes(np.linalg.inv(F), -1, -2)[..., None, :, :], shape, pc, **tilts)
    coords = np.stack([np.clip(src[..., 1], 0, H - 1), np.clip(src[..., 0], 0, W - 1)])
    nearest = np.rint(coords)
    return np.where(np.abs(coords - nearest) < 1e-6, nearest, coords)


def _turns(rng):
    """Rotations of 0, 3, 20 and 100 degrees (the last turns part of the screen away from the
    source: NaN sources) and a strained one."""
    Rs = [rotation_from_vector(np.deg2rad(a) * rng.normal(size=3) / np.sqrt(3)) for a in (0, 3, 20, 100)]
    return np.stack([*Rs, random_F(rng, strain_mag=1e-2, rot_mag=5e-2)[0]])


@pytest.mark.parametrize("shape,tilts", [((70, 91), {}), ((64, 48), {"sample_tilt": 60.0, "detector_tilt": 5.0})])
def test_source_coordinates_are_the_projected_directions(shape, tilts):
    rng = np.random.default_rng(3)
    F = _turns(rng)
    pc = np.array([0.47, 0.41, 0.63])
    want = _sources_by_directions(F, shape, pc, **tilts)
    got = strain.source_coordinates(F, shape, pc, **tilts)
    assert got.shape == (2, len(F), *shape) and got.dtype == np.float64
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(want[:, 3]).any() and not np.isnan(want[:, :3]).any()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9, equal_nan=True)
    # the identity samples each pixel at itself, exactly (the snap to integers)
    yy, xx = np.mgrid[:shape[0], :shape[1]]
    np.testing.assert_array_equal(got[:, 0], np.stack([yy, xx]).astype(float))
    np.testing.assert_array_equal(strain.source_coordinates(F[1], shape, pc, **tilts), got[:, 1])


@pytest.mark.parametrize("workers", [1, 3])
def test_remap_stack_in_parts_and_threads_is_each_pattern_remapped(monkeypatch, workers):
    """A stack made a few patterns at a time, on threads, is bit for bit each pattern remapped
    alone (NaN where the source turned away from the screen included)."""
    rng = np.random.default_rng(8)
    img = rng.random((40, 52)).astype(np.float32)
    F = np.concatenate([_turns(rng), _turns(rng)])
    pc = np.array([0.47, 0.41, 0.63])
    monkeypatch.setattr(strain, "_HOST_REMAP_PIXELS", 3 * 40 * 52)  # parts of 3 patterns: 3, 3, 3, 1
    got = strain.remap_pattern(img, F, pc=pc, workers=workers)
    assert got.shape == (10, 40, 52) and got.dtype == np.float32
    for k in range(len(F)):
        np.testing.assert_array_equal(got[k], strain.remap_pattern(img, F[k], pc=pc), err_msg=str(k))
    assert np.isnan(got[3]).any() and np.ptp(got[0] - got[1]) > 0.1


# ---------------------------------------------------------------------------- GPU against the CPU oracle


@pytest.mark.gpu
@pytest.mark.parametrize("n_points", [1, 7, 300])
def test_gpu_fit_equals_numpy(n_points):
    import cupy as cp

    rng = np.random.default_rng(n_points)
    F = random_F(rng, n=n_points)
    pc = PC_REF + rng.normal(scale=1e-3, size=(n_points, 3))
    c, q, h, s = exact_case(F, pc)
    q = q + rng.normal(scale=0.03, size=q.shape)
    q[0, 4] += [2.0, 1.0]  # an outlier to reject on both
    h[-1, :22] = 0.0  # a point with too few ROIs
    want = fit(c, q, h, s, pc)
    got = strain.fit_strain(cp.asarray(q), cp.asarray(h), cp.asarray(s), centres=c, shape=SHAPE, pc=cp.asarray(pc),
                              pc_ref=PC_REF, stiffness=C_NI, orientation=G)
    for k in ("F", "strain", "rotation", "strain_crystal", "rotation_crystal", "residual_px", "angular_error"):
        np.testing.assert_allclose(cp.asnumpy(getattr(got, k)), getattr(want, k), atol=1e-12, rtol=1e-9,
                                   equal_nan=True, err_msg=k)
    for k in ("n_used", "used", "status"):
        np.testing.assert_array_equal(cp.asnumpy(getattr(got, k)), getattr(want, k), err_msg=k)
    assert not want.used[0, 4] and want.status[-1] == strain.FIT_TOO_FEW_ROIS


@pytest.mark.gpu
def test_gpu_rois_that_do_not_fix_F_are_not_fitted():
    import cupy as cp

    F, pc, c, q, h, s = _layout_batch(cp)
    r = fit(c, q, h, s, pc)
    want = fit(c, q.get(), h.get(), s.get(), pc)
    np.testing.assert_array_equal(cp.asnumpy(r.status), want.status)
    k = len(_NOT_FIXED)
    assert (want.status[:k] == strain.FIT_FAILED).all() and bool(cp.isnan(r.strain[:k]).all())
    np.testing.assert_allclose(cp.asnumpy(r.strain[k:]), want.strain[k:], atol=1e-12)


@pytest.mark.gpu
def test_gpu_remap_equals_numpy():
    import cupy as cp

    rng = np.random.default_rng(0)
    img = rng.random((70, 90)).astype(np.float32)
    R = rotation_from_vector(np.deg2rad(2.0) * np.array([0.3, 0.8, -0.52]))
    pc = np.array([0.5, 0.45, 0.6])
    want = strain.remap_pattern(img, R, pc=pc)
    got = strain.remap_pattern(cp.asarray(img), cp.asarray(R), pc=cp.asarray(pc))
    np.testing.assert_allclose(cp.asnumpy(got), want, atol=2e-5)
    Rs = np.stack([R, R.T, np.eye(3)])
    np.testing.assert_allclose(cp.asnumpy(strain.remap_pattern(cp.asarray(img), cp.asarray(Rs), pc=cp.asarray(pc))),
                               strain.remap_pattern(img, Rs, pc=pc), atol=2e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(70, 91), (256, 256)])
def test_gpu_source_coordinates_equal_the_float64_oracle(shape):
    import cupy as cp

    rng = np.random.default_rng(5)
    F = _turns(rng)
    pc = np.array([0.47, 0.41, 0.63])
    want = _sources_by_directions(F, shape, pc, sample_tilt=65.0, detector_tilt=3.0)
    got = cp.asnumpy(strain.source_coordinates(cp.asarray(F), shape, cp.asarray(pc), sample_tilt=65.0,
                                               detector_tilt=3.0, xp=cp))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9, equal_nan=True)
    one = cp.asnumpy(strain.source_coordinates(cp.asarray(F[2]), shape, pc, sample_tilt=65.0, detector_tilt=3.0,
                                               xp=cp))
    np.testing.assert_allclose(one, want[:, 2], rtol=0, atol=1e-9)
