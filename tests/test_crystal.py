"""ebsdxc.crystal: Euler angles, Laue group operators and misorientation (orix checks are in
test_crystal_orix.py)."""

import numpy as np
import pytest

from ebsdxc import crystal
from ebsdxc.simulate import bunge_to_matrix

SIZES = {"-1": 1, "2/m": 2, "mmm": 4, "4/m": 4, "4/mmm": 8, "-3": 3, "-3m": 6, "6/m": 6, "6/mmm": 12,
         "m-3": 12, "m-3m": 24}


def _rz(deg):
    t = np.radians(deg)
    return np.array([[np.cos(t), -np.sin(t), 0], [np.sin(t), np.cos(t), 0], [0, 0, 1]])


@pytest.mark.parametrize("laue", crystal.LAUE_GROUPS)
def test_operators_are_a_group_of_proper_rotations(laue):
    S = crystal.symmetry_operators(laue)
    assert len(S) == SIZES[laue]
    np.testing.assert_allclose(S[0], np.eye(3))
    np.testing.assert_allclose(S @ np.swapaxes(S, 1, 2), np.broadcast_to(np.eye(3), S.shape), atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(S), 1.0)
    products = (S[:, None] @ S[None]).reshape(-1, 9)
    # closed: every product is one of the operators
    d = np.abs(products[:, None, :] - S.reshape(1, -1, 9)).max(axis=-1)
    assert (d.min(axis=1) < 1e-9).all()


def test_laue_group_names():
    assert crystal.laue_group("fcc") == crystal.laue_group("432") == crystal.laue_group(43) == "m-3m"
    assert crystal.laue_group("ctf:9") == crystal.laue_group("hcp") == crystal.laue_group("tsl:62") == "6/mmm"
    assert crystal.laue_group(" M-3M ") == "m-3m"
    assert crystal.laue_group("112") == "2/m"  # as orix writes a monoclinic phase into .ang files
    with pytest.raises(ValueError, match="laue: 'quasicrystal' names no Laue group"):
        crystal.laue_group("quasicrystal")
    with pytest.raises(ValueError, match="names no Laue group"):
        crystal.laue_group(99)


def test_euler_matches_the_simulation_and_round_trips():
    rng = np.random.default_rng(3)
    e = rng.uniform([0, 0, 0], [360, 180, 360], (200, 3))
    g = crystal.euler_to_matrix(e)
    # phi1 = 90: the sample's x is the crystal's -y (a passive rotation about z); orix agrees
    # (test_crystal_orix.py), and simulate.bunge_to_matrix is this function for one orientation
    np.testing.assert_allclose(crystal.euler_to_matrix([90.0, 0.0, 0.0]), [[0, 1, 0], [-1, 0, 0], [0, 0, 1]],
                               atol=1e-15)
    np.testing.assert_allclose(bunge_to_matrix(*e[7]), g[7], atol=0)
    np.testing.assert_allclose(crystal.matrix_to_euler(g), e, atol=1e-9)
    # Phi = 0: only phi1 + phi2 is defined, and the matrix survives the round trip
    g0 = crystal.euler_to_matrix([[30.0, 0.0, 50.0]])
    np.testing.assert_allclose(crystal.euler_to_matrix(crystal.matrix_to_euler(g0)), g0, atol=1e-12)


def test_misorientation_of_known_rotations():
    g = crystal.euler_to_matrix([120.0, 35.0, 250.0])
    # 60 deg about the cube axis z is 30 deg modulo the 4-fold
    assert crystal.misorientation_angle(g, _rz(60) @ g) == pytest.approx(np.radians(30), abs=1e-12)
    assert crystal.misorientation_angle(g, _rz(60) @ g, "-1") == pytest.approx(np.radians(60), abs=1e-12)
    # about the crystal's c axis: hexagonal 6-fold, so 70 deg is 10 deg
    assert crystal.misorientation_angle(g, _rz(70) @ g, "6/mmm") == pytest.approx(np.radians(10), abs=1e-12)
    # symmetric equivalents are the same orientation, and small angles keep their digits
    S = crystal.symmetry_operators("m-3m")
    assert crystal.misorientation_angle(g, S[17] @ g) < 1e-7
    assert crystal.misorientation_angle(g, _rz(1e-5) @ g) == pytest.approx(np.radians(1e-5), rel=1e-6)


def test_misorientation_broadcasts_and_is_symmetric():
    rng = np.random.default_rng(4)
    g = crystal.euler_to_matrix(rng.uniform([0, 0, 0], [360, 180, 360], (50, 3)))
    a = crystal.misorientation_angle(g[:, None], g[None, :])
    assert a.shape == (50, 50)
    np.testing.assert_allclose(a, a.T, atol=1e-12)
    assert a.max() <= np.radians(62.8)  # the largest cubic disorientation angle
    with pytest.raises(ValueError, match="g1 and g2 must have shape"):
        crystal.misorientation_angle(g[:, :2], g)


@pytest.mark.gpu
def test_gpu_matches_numpy_float64():
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(5)
    e = rng.uniform([0, 0, 0], [360, 180, 360], (1000, 3))
    g = crystal.euler_to_matrix(e)
    for laue in ("m-3m", "6/mmm", "mmm"):
        got = crystal.misorientation_angle(cp.asarray(g[:500]), cp.asarray(g[500:]), laue)
        np.testing.assert_allclose(cp.asnumpy(got), crystal.misorientation_angle(g[:500], g[500:], laue),
                                   atol=1e-12)
    np.testing.assert_allclose(cp.asnumpy(crystal.euler_to_matrix(cp.asarray(e))), g, atol=1e-12)
    np.testing.assert_allclose(cp.asnumpy(crystal.matrix_to_euler(cp.asarray(g))), e, atol=1e-9)


def test_rotation_from_vector_is_scipys_rotvec():
    from scipy.spatial.transform import Rotation

    from ebsdxc.crystal import rotation_from_vector

    w = np.random.default_rng(3).normal(size=(20, 3))
    w[0] = 0.0  # the identity, without a division by zero
    np.testing.assert_allclose(rotation_from_vector(w), Rotation.from_rotvec(w).as_matrix(), atol=1e-13)
    assert rotation_from_vector(w[1]).shape == (3, 3)
