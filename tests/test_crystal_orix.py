"""ebsdxc.crystal against orix (GPL-3, a test oracle only): Euler angles, symmetry, misorientation.

orix's ``Rotation.from_euler(radians).to_matrix()`` is the orientation matrix ``g`` (sample ->
crystal) of Bunge angles; its Laue groups' proper rotations and its symmetry-reduced
misorientation angles are what ``euler_to_matrix``, ``symmetry_operators`` and
``misorientation_angle`` must reproduce on random samples.
"""

from __future__ import annotations

import numpy as np
import pytest

from ebsdxc.crystal import (
    LAUE_GROUPS,
    euler_to_matrix,
    laue_group,
    matrix_to_euler,
    misorientation_angle,
    rotation_angle,
    symmetry_operators,
)

orix = pytest.importorskip("orix")
from orix.quaternion import Orientation, Rotation, symmetry  # noqa: E402

# ebsdxc Laue group name -> orix's point group of that Laue class
ORIX_LAUE = {"-1": symmetry.Ci, "2/m": symmetry.C2h, "mmm": symmetry.D2h, "4/m": symmetry.C4h,
             "4/mmm": symmetry.D4h, "-3": symmetry.S6, "-3m": symmetry.D3d, "6/m": symmetry.C6h,
             "6/mmm": symmetry.D6h, "m-3": symmetry.Th, "m-3m": symmetry.Oh}


def _random_matrices(rng, n):
    q = rng.normal(size=(n, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return Rotation(q).to_matrix()


def test_laue_names_are_orix_laue_classes():
    assert set(ORIX_LAUE) == set(LAUE_GROUPS)
    for name, group in ORIX_LAUE.items():
        assert group.laue.name == name
        assert laue_group(name) == name


def test_euler_to_matrix_is_orix_rotation_matrix(rng):
    euler = rng.uniform([0, 0, 0], [360, 180, 360], size=(2000, 3))
    expected = Rotation.from_euler(np.radians(euler)).to_matrix()
    np.testing.assert_allclose(euler_to_matrix(euler), expected, atol=1e-12)
    # broadcasting over leading axes, and one orientation alone
    np.testing.assert_allclose(euler_to_matrix(euler.reshape(40, 50, 3)), expected.reshape(40, 50, 3, 3),
                               atol=1e-12)
    np.testing.assert_allclose(euler_to_matrix(euler[7]), expected[7], atol=1e-12)


def test_matrix_to_euler_matches_orix(rng):
    g = _random_matrices(rng, 2000)
    ours = matrix_to_euler(g)
    theirs = np.degrees(Rotation.from_matrix(g).to_euler())
    assert ours.min() >= 0 and ours[:, [0, 2]].max() < 360 and ours[:, 1].max() <= 180
    # away from Phi = 0 and 180 the angles are unique: the same numbers as orix
    regular = (theirs[:, 1] > 1e-3) & (theirs[:, 1] < 180 - 1e-3)
    assert regular.sum() > 1990
    diff = (ours[regular] - theirs[regular] + 180.0) % 360.0 - 180.0
    np.testing.assert_allclose(diff, 0, atol=1e-9)
    # and always the same rotation
    np.testing.assert_allclose(euler_to_matrix(ours), g, atol=1e-12)


@pytest.mark.parametrize("Phi", [0.0, 180.0])
def test_matrix_to_euler_at_gimbal_lock_keeps_the_rotation(Phi):
    euler = np.array([[30.0, Phi, 50.0], [300.0, Phi, 100.0]])
    g = Rotation.from_euler(np.radians(euler)).to_matrix()
    back = matrix_to_euler(g)
    np.testing.assert_allclose(back[:, 2], 0.0)
    ours = Rotation.from_euler(np.radians(back))
    theirs = Rotation.from_matrix(g)
    np.testing.assert_allclose(np.abs(np.sum(ours.data * theirs.data, axis=-1)), 1.0, atol=1e-12)


@pytest.mark.parametrize("laue", LAUE_GROUPS)
def test_symmetry_operators_are_orix_proper_rotations(laue):
    ours = symmetry_operators(laue)
    theirs = ORIX_LAUE[laue].proper_subgroup.to_matrix()
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours[0], np.eye(3))
    # the same set of matrices, in any order
    d = np.abs(ours[:, None] - theirs[None]).max(axis=(-2, -1))
    assert (d.min(axis=1) < 1e-9).all() and (d.min(axis=0) < 1e-9).all()


def orix_misorientation(e1, e2, laue):
    pg = ORIX_LAUE[laue]
    o1 = Orientation.from_euler(np.radians(e1), symmetry=pg)
    o2 = Orientation.from_euler(np.radians(e2), symmetry=pg)
    return o1.angle_with(o2)


@pytest.mark.parametrize("laue", ["m-3m", "6/mmm", "4/mmm", "mmm", "m-3", "-3m", "2/m", "-1"])
def test_misorientation_angle_matches_orix(laue, rng):
    n = 3000
    e1 = rng.uniform([0, 0, 0], [360, 180, 360], size=(n, 3))
    e2 = rng.uniform([0, 0, 0], [360, 180, 360], size=(n, 3))
    # and pairs close to each other, where HR-EBSD works, and equal up to a symmetry operator
    e2[: n // 3] = e1[: n // 3] + rng.normal(scale=0.5, size=(n // 3, 3))
    g1, g2 = euler_to_matrix(e1), euler_to_matrix(e2)
    S = symmetry_operators(laue)
    g2[n // 3: n // 3 + 100] = S[rng.integers(0, len(S), 100)] @ g1[n // 3: n // 3 + 100]
    ours = misorientation_angle(g1, g2, laue)
    theirs = orix_misorientation(e1, matrix_to_euler(g2), laue)
    np.testing.assert_allclose(ours, theirs, atol=1e-6)
    assert ours[n // 3: n // 3 + 100].max() < 1e-6
    assert ours.max() <= np.pi + 1e-12
    # symmetric in its arguments
    np.testing.assert_allclose(misorientation_angle(g2, g1, laue), ours, atol=1e-9)


def test_misorientation_broadcasts_and_small_angles_keep_precision(rng):
    g = euler_to_matrix(rng.uniform([0, 0, 0], [360, 180, 360], size=(5, 3)))
    tiny = Rotation.from_axes_angles([1, 2, 3], 1e-7).to_matrix()[0]
    angles = misorientation_angle(g[:, None], (g @ tiny)[None, :], "m-3m")
    assert angles.shape == (5, 5)
    np.testing.assert_allclose(np.diag(angles), 1e-7, rtol=1e-6)
    np.testing.assert_allclose(rotation_angle(tiny), 1e-7, rtol=1e-9)


@pytest.mark.parametrize("laue", ["m-3m", "6/mmm", "4/mmm", "mmm"])
def test_cubic_misorientations_never_exceed_the_fundamental_zone(laue, rng):
    # the largest misorientation of a Laue group (62.8 deg for m-3m, 93.8 deg for 6/mmm and
    # 4/mmm, 120 deg for mmm) bounds orix's angles and ours alike
    bound = {"m-3m": 62.81, "6/mmm": 93.84, "4/mmm": 98.43, "mmm": 120.0}[laue]
    e = rng.uniform([0, 0, 0], [360, 180, 360], size=(4000, 3))
    ours = np.degrees(misorientation_angle(euler_to_matrix(e[:2000]), euler_to_matrix(e[2000:]), laue))
    theirs = np.degrees(orix_misorientation(e[:2000], e[2000:], laue))
    assert ours.max() <= bound + 1e-6
    assert theirs.max() <= bound + 1e-6
    np.testing.assert_allclose(np.sort(ours), np.sort(theirs), atol=1e-6)
