"""ebsdxc.grains: adjacency, segmentation (orientations, pattern similarity, files), KAM, boundary
distance and the reference point of each grain, against maps whose grains are known."""

import math

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from scipy.spatial.transform import Rotation

from ebsdxc import crystal, grains
from ebsdxc.errors import InputError
from ebsdxc.io import ScanGrid

HEX_STEP = (math.sqrt(3) / 2, 1.0)  # a regular hexagonal grid: all 6 neighbours one step away


# --------------------------------------------------------------------------- helpers


def _grid(rows, cols, kind):
    return ScanGrid(rows, cols, step=HEX_STEP if kind == "hexagonal" else (1.0, 1.0), kind=kind)


def _voronoi(rows, cols, n, rng, kind="square"):
    """(rows, cols) truth labels: nearest of n random seeds on the grid's real positions;
    -1 on padding slots."""
    pos = _grid(rows, cols, kind).positions()
    seeds = rng.uniform([0, 0], [pos[..., 0][np.isfinite(pos[..., 0])].max(),
                                 pos[..., 1][np.isfinite(pos[..., 1])].max()], (n, 2))
    d = ((np.nan_to_num(pos, nan=-1e9)[:, :, None, :] - seeds) ** 2).sum(-1)
    truth = np.argmin(d, axis=-1)
    truth[~_grid(rows, cols, kind).in_grid()] = -1
    return truth


def _scatter(g, deg, rng):
    """g with a random rotation of about ``deg`` (per-axis standard deviation) in front."""
    w = rng.normal(0.0, math.radians(deg), g.shape[:-2] + (3,))
    return Rotation.from_rotvec(w.reshape(-1, 3)).as_matrix().reshape(g.shape) @ g


def _grain_orientations(truth, rng, *, noise_deg=0.5, symmetric=True, laue="m-3m"):
    """(rows, cols, 3, 3) orientations: one random orientation per truth grain, noise, and a
    random symmetric equivalent S @ g at every point (the same orientation, another matrix)."""
    n = truth.max() + 1
    g0 = Rotation.random(n, random_state=rng).as_matrix()
    g = _scatter(g0[np.maximum(truth, 0)], noise_deg, rng)
    if symmetric:
        S = crystal.symmetry_operators(laue)
        g = S[rng.integers(0, len(S), truth.shape)] @ g
    return g, g0


def _adjacent_grains_differ(truth, g0, kind, laue="m-3m", min_deg=10.0):
    pairs = grains.neighbour_pairs(*truth.shape, kind=kind)
    t = truth.reshape(-1)
    a, b = t[pairs[:, 0]], t[pairs[:, 1]]
    cross = (a != b) & (a >= 0) & (b >= 0)
    ang = crystal.misorientation_angle(g0[a[cross]], g0[b[cross]], laue)
    return np.degrees(ang).min() > min_deg


def _agreement(seg, truth):
    """Fraction of the truth's points in the found grain matched one-to-one to their truth
    grain (a merge or a split costs the smaller part; no grain never agrees)."""
    m = truth >= 0
    t, s = truth[m], seg[m] + 1
    cont = np.zeros((t.max() + 1, s.max() + 1))
    np.add.at(cont, (t, s), 1)
    cont[:, 0] = 0
    r, c = linear_sum_assignment(-cont)
    return cont[r, c].sum() / m.sum()


# --------------------------------------------------------------------------- adjacency


def _pairs_by_distance(rows, cols, kind):
    pos = _grid(rows, cols, kind).positions().reshape(-1, 2)
    d = np.sqrt(((pos[:, None] - pos[None]) ** 2).sum(-1))
    i, j = np.nonzero(np.abs(d - 1.0) < 1e-9)  # NaN positions (padding) never match
    keep = i < j
    return {(int(a), int(b)) for a, b in zip(i[keep], j[keep])}


@pytest.mark.parametrize("kind", ["square", "hexagonal"])
@pytest.mark.parametrize("shape", [(1, 5), (2, 2), (5, 4), (6, 7), (7, 2)])
def test_neighbour_pairs_are_the_points_one_step_apart(kind, shape):
    pairs = grains.neighbour_pairs(*shape, kind=kind)
    assert pairs.dtype == np.int64 and pairs.shape[1] == 2
    assert {tuple(p) for p in pairs.tolist()} == _pairs_by_distance(*shape, kind)
    assert len({tuple(p) for p in pairs.tolist()}) == len(pairs)
    # sorted by first then second point, first < second: blocks of rows are contiguous
    assert (pairs[:, 0] < pairs[:, 1]).all()
    key = pairs[:, 0] * shape[0] * shape[1] + pairs[:, 1]
    assert (np.diff(key) > 0).all()


def test_hexagonal_interior_points_have_six_neighbours_and_padding_none():
    rows, cols = 8, 9
    pairs = grains.neighbour_pairs(rows, cols, kind="hexagonal")
    count = np.bincount(pairs.ravel(), minlength=rows * cols).reshape(rows, cols)
    assert (count[1:-1, 1:-2] == 6).all()
    assert (count[1::2, -1] == 0).all()  # padding slots
    with pytest.raises(ValueError, match="grid kind"):
        grains.neighbour_pairs(3, 3, kind="triangular")


# --------------------------------------------------------------------------- segmentation


@pytest.mark.parametrize("kind", ["square", "hexagonal"])
def test_segment_recovers_voronoi_grains_with_symmetric_equivalents(kind):
    rng = np.random.default_rng(7)
    truth = _voronoi(48, 52, 20, rng, kind)
    g, g0 = _grain_orientations(truth, rng, noise_deg=0.5)
    assert _adjacent_grains_differ(truth, g0, kind)
    seg = grains.segment(g, laue="m-3m", tolerance_deg=5.0, kind=kind)
    assert seg.dtype == np.int32 and seg.shape == truth.shape
    assert _agreement(seg, truth) >= 0.99
    assert seg.max() + 1 == len(np.unique(truth[truth >= 0]))
    if kind == "hexagonal":
        assert (seg[1::2, -1] == -1).all()
    # without the crystal's symmetry every point's random equivalent splits its grain
    assert _agreement(grains.segment(g, laue="-1", kind=kind), truth) < 0.2


def test_segment_numbers_grains_by_first_point_and_leaves_invalid_points_out():
    rng = np.random.default_rng(8)
    truth = np.zeros((10, 12), dtype=int)
    truth[:, 6:] = 1
    truth[6:, :] = 2
    g, g0 = _grain_orientations(truth, rng, noise_deg=0.2)
    g[0, 0] = np.nan  # not indexed
    valid = np.ones(truth.shape, dtype=bool)
    valid[9, 11] = False
    seg = grains.segment(g, valid=valid)
    assert seg[0, 0] == -1 and seg[9, 11] == -1
    assert seg[0, 1] == 0 and seg[0, 6] == 1 and seg[6, 0] == 2
    expected = truth.copy()
    expected[0, 0] = expected[9, 11] = -1
    np.testing.assert_array_equal(seg, expected)
    # Bunge angles give the same grains as the matrices
    euler = crystal.matrix_to_euler(np.where(np.isfinite(g), g, 0.0))
    euler[0, 0] = np.nan
    np.testing.assert_array_equal(grains.segment(euler, valid=valid), seg)


def test_segment_tolerance_is_a_strict_upper_bound():
    g = np.broadcast_to(crystal.euler_to_matrix([30.0, 40.0, 50.0]), (6, 8, 3, 3)).copy()
    # right half turned 4 deg about the sample z axis
    rz = Rotation.from_euler("z", 4.0, degrees=True).as_matrix()
    g[:, 4:] = g[:, 4:] @ rz
    assert grains.segment(g, tolerance_deg=5.0).max() == 0
    seg = grains.segment(g, tolerance_deg=3.0)
    assert (seg[:, :4] == 0).all() and (seg[:, 4:] == 1).all()


def test_small_grains_are_left_out_and_reported_not_merged():
    rng = np.random.default_rng(9)
    truth = np.zeros((12, 12), dtype=int)
    truth[4:6, 5:7] = 1  # 4 points
    truth[9, 2:5] = 2    # 3 points
    g, g0 = _grain_orientations(truth, rng, noise_deg=0.2)
    assert _adjacent_grains_differ(truth, g0, "square")
    np.testing.assert_array_equal(grains.segment(g, min_grain_size=3), truth)
    seg = grains.segment(g, min_grain_size=4)
    assert (seg[9, 2:5] == -1).all()  # not the surrounding grain 0
    assert (seg[4:6, 5:7] == 1).all() and seg.max() == 1
    kept, removed = grains.remove_small_grains(truth, 5)
    np.testing.assert_array_equal(removed, [[4, 5, 4], [9, 2, 3]])
    assert (kept[truth > 0] == -1).all() and (kept[truth == 0] == 0).all()
    with pytest.raises(ValueError, match="min_grain_size"):
        grains.segment(g, min_grain_size=0)


def test_points_of_different_phases_never_join():
    rows, cols = 8, 10
    g = np.broadcast_to(crystal.euler_to_matrix([10.0, 20.0, 30.0]), (rows, cols, 3, 3)).copy()
    phase = np.ones((rows, cols), dtype=int)
    phase[:, 5:] = 2
    # in the hexagonal phase a 60 deg turn about c is the same orientation: no boundary
    g[:, 8:] = Rotation.from_euler("z", 60, degrees=True).as_matrix().T @ g[:, 8:]
    seg = grains.segment(g, laue={1: "m-3m", 2: "6/mmm"}, phase=phase)
    assert (seg[:, :5] == 0).all() and (seg[:, 5:] == 1).all()
    # one Laue group for both phases: still two grains (same orientation, different phases)
    seg1 = grains.segment(g, laue="6/mmm", phase=phase)
    assert (seg1[:, :5] == 0).all() and (seg1[:, 5:] == 1).all()
    # cubic symmetry in the second phase: 60 deg about c is 30 deg, a boundary
    assert grains.segment(g, laue=["-1", "m-3m", "m-3m"], phase=phase).max() == 2
    phase[0, 0] = -1  # not indexed
    assert grains.segment(g, laue={1: "m-3m", 2: "6/mmm"}, phase=phase)[0, 0] == -1
    with pytest.raises(ValueError, match="no Laue group for phase 2"):
        grains.segment(g, laue={1: "m-3m"}, phase=phase)
    with pytest.raises(ValueError, match="needs the phase map"):
        grains.segment(g, laue={1: "m-3m"})


def test_segment_rejects_bad_arguments():
    g = np.broadcast_to(np.eye(3), (4, 4, 3, 3))
    with pytest.raises(ValueError, match="orientations must be"):
        grains.segment(np.zeros((4, 4, 2)))
    with pytest.raises(ValueError, match="tolerance_deg"):
        grains.segment(g, tolerance_deg=0)
    with pytest.raises(ValueError, match=r"valid must have shape \(4, 4\)"):
        grains.segment(g, valid=np.ones((3, 4), dtype=bool))
    with pytest.raises(ValueError, match="names no Laue group"):
        grains.segment(g, laue="quasicrystal")


# --------------------------------------------------------------------------- KAM


def _gradient_map(rows, cols, deg_per_col, kind):
    """Orientations turned about the sample z axis by deg_per_col per unit of x."""
    x = _grid(rows, cols, kind).positions()[..., 0]
    x = np.nan_to_num(x)
    rz = Rotation.from_euler("z", (deg_per_col * x).reshape(-1, 1), degrees=True).as_matrix().reshape(rows, cols, 3, 3)
    return crystal.euler_to_matrix([40.0, 30.0, 20.0]) @ rz


def test_kam_of_an_orientation_gradient_is_analytic_square():
    theta = 0.4
    rng = np.random.default_rng(10)
    g = _gradient_map(6, 9, theta, "square")
    S = crystal.symmetry_operators("m-3m")
    g = S[rng.integers(0, 24, (6, 9))] @ g  # symmetric equivalents must not inflate the KAM
    gid = np.zeros((6, 9), dtype=int)
    kam = np.degrees(grains.kernel_average_misorientation(g, gid))
    # left/right neighbours theta away, up/down 0: interior theta * 2/4, edges 2/3 or 1/3
    assert kam[2, 4] == pytest.approx(theta / 2, abs=1e-9)
    assert kam[0, 4] == pytest.approx(2 * theta / 3, abs=1e-9)
    assert kam[3, 0] == pytest.approx(theta / 3, abs=1e-9)
    assert kam[0, 0] == pytest.approx(theta / 2, abs=1e-9)


def test_kam_of_an_orientation_gradient_is_analytic_hexagonal():
    theta = 0.3
    g = _gradient_map(7, 8, theta, "hexagonal")
    gid = np.where(ScanGrid(7, 8, kind="hexagonal").in_grid(), 0, -1)
    kam = np.degrees(grains.kernel_average_misorientation(g, gid, kind="hexagonal"))
    # 2 neighbours in the row, theta away; 4 diagonal ones, theta / 2 away
    assert kam[3, 3] == pytest.approx((2 * theta + 4 * theta / 2) / 6, abs=1e-9)
    assert np.isnan(kam[1, -1])  # padding


def test_kam_stays_inside_grains_and_is_nan_without_neighbours():
    rng = np.random.default_rng(11)
    truth = np.zeros((8, 8), dtype=int)
    truth[:, 4:] = 1
    g, g0 = _grain_orientations(truth, rng, noise_deg=0.0)
    gid = truth.copy()
    gid[0, 0] = -1
    gid[7, 7] = 5  # a one-point grain
    kam = grains.kernel_average_misorientation(g, gid)
    assert np.nanmax(kam) < 1e-6  # no boundary misorientation in the average
    assert np.isnan(kam[0, 0]) and np.isnan(kam[7, 7])
    # max_deg leaves large misorientations out: one grain over the boundary
    one = np.zeros_like(truth)
    across = crystal.misorientation_angle(g0[0], g0[1])
    assert across > math.radians(5)
    assert grains.kernel_average_misorientation(g, one)[3, 3] == pytest.approx(across / 4, abs=1e-9)
    assert np.nanmax(grains.kernel_average_misorientation(g, one, max_deg=5.0)) < 1e-6


def test_kam_against_orix():
    orix = pytest.importorskip("orix")
    from orix.quaternion import Orientation
    from orix.quaternion.symmetry import D6h, Oh

    rng = np.random.default_rng(12)
    truth = _voronoi(20, 24, 4, rng, "hexagonal")
    for laue, sym in (("m-3m", Oh), ("6/mmm", D6h)):
        g, _ = _grain_orientations(truth, rng, noise_deg=1.0, laue=laue)
        kam = grains.kernel_average_misorientation(g, truth, laue=laue, kind="hexagonal")
        pairs = grains.neighbour_pairs(20, 24, kind="hexagonal")
        t = truth.reshape(-1)
        same = (t[pairs[:, 0]] == t[pairs[:, 1]]) & (t[pairs[:, 0]] >= 0)
        p = pairs[same]
        o = Orientation.from_matrix(g.reshape(-1, 3, 3), symmetry=sym)
        ang = o[p[:, 0]].angle_with(o[p[:, 1]])
        ends = np.concatenate([p[:, 0], p[:, 1]])
        total = np.bincount(ends, np.concatenate([ang, ang]), minlength=t.size)
        count = np.bincount(ends, minlength=t.size)
        with np.errstate(invalid="ignore"):
            expected = (total / count).reshape(truth.shape)
        np.testing.assert_allclose(kam, expected, atol=1e-7, equal_nan=True)
        assert np.isfinite(kam[truth >= 0]).all()
    assert orix.__version__


# --------------------------------------------------------------------------- boundary distance


def test_boundary_distance_square_is_the_taxicab_distance_to_another_grain():
    from scipy.ndimage import distance_transform_cdt

    rng = np.random.default_rng(13)
    gid = np.zeros((30, 40), dtype=int)
    holes = rng.random(gid.shape) < 0.01
    gid[holes] = -1
    d = grains.boundary_distance(gid)
    expected = distance_transform_cdt(~holes, metric="taxicab").astype(float)
    np.testing.assert_array_equal(d[~holes], expected[~holes])
    assert (d[holes] == 0).all()


def test_boundary_distance_steps_inside_the_grain():
    # two halves: the map edge is no boundary, the line between the halves is
    gid = np.zeros((6, 10), dtype=int)
    gid[:, 5:] = 1
    d = grains.boundary_distance(gid)
    np.testing.assert_array_equal(d[2], [5, 4, 3, 2, 1, 1, 2, 3, 4, 5])
    # hexagonal, boundary between rows 3 and 4: one step per row
    gh = np.where(np.arange(8)[:, None] < 4, 0, 1) * np.ones((8, 6), dtype=int)
    gh[1::2, -1] = -1
    dh = grains.boundary_distance(gh, kind="hexagonal")
    np.testing.assert_array_equal(dh[:, 2], [4, 3, 2, 1, 1, 2, 3, 4])
    # a grain touching nothing else is infinitely far from a boundary
    assert np.isinf(grains.boundary_distance(np.zeros((3, 3), dtype=int))).all()


# --------------------------------------------------------------------------- references


def _island(rows=21, cols=21, box=(3, 18, 3, 18)):
    """Grain 0 around, grain 1 a square island."""
    gid = np.zeros((rows, cols), dtype=int)
    r0, r1, c0, c1 = box
    gid[r0:r1, c0:c1] = 1
    return gid


def test_kam_rule_takes_the_least_deformed_point_away_from_the_boundary():
    gid = _island()
    rr, cc = np.mgrid[0:21, 0:21]
    kam = 1.0 + 0.01 * np.hypot(rr - 9, cc - 11)  # low-KAM spot near the island's centre
    refs, reasons = grains.choose_references(gid, kam=kam)
    assert refs.dtype == np.int64 and refs.shape == (2, 2)
    np.testing.assert_array_equal(refs[1], [9, 11])
    assert reasons == [None, None]
    # a spot on the island's boundary is not taken: the lowest KAM two steps in is
    kam = 1.0 + 0.01 * np.hypot(rr - 3, cc - 10)
    refs, _ = grains.choose_references(gid, kam=kam, min_boundary_distance=2)
    np.testing.assert_array_equal(refs[1], [4, 10])
    refs, _ = grains.choose_references(gid, kam=kam, min_boundary_distance=4)
    np.testing.assert_array_equal(refs[1], [6, 10])
    for anywhere in (0, 1):
        refs, _ = grains.choose_references(gid, kam=kam, min_boundary_distance=anywhere)
        np.testing.assert_array_equal(refs[1], [3, 10])


def test_ties_go_to_the_point_farthest_from_the_boundary_then_the_first():
    gid = _island()
    refs, _ = grains.choose_references(gid, kam=np.zeros(gid.shape))  # noise-free: KAM 0 everywhere
    np.testing.assert_array_equal(refs[1], [10, 10])  # the island's innermost point
    gid = _island(box=(3, 17, 3, 17))  # even sides: four innermost points, the first wins
    refs, _ = grains.choose_references(gid, kam=np.zeros(gid.shape))
    np.testing.assert_array_equal(refs[1], [9, 9])


def test_centre_is_that_of_the_whole_grain():
    gid = np.zeros((19, 40), dtype=int)
    gid[5:14, 2:11] = 1   # a 9 x 9 block
    gid[9, 11:39] = 1     # and a thin tail to the right: no candidates there, but part of the grain
    refs, _ = grains.choose_references(gid, rule="centre")
    # centroid x = (81 * 6 + 28 * 24.5) / 109 = 10.75: the block's point on the tail's row at its edge
    np.testing.assert_array_equal(refs[1], [9, 10])


def test_thin_grains_relax_the_boundary_distance_instead_of_failing():
    gid = np.zeros((9, 9), dtype=int)
    gid[4, 1:8] = 1  # one row: every point is next to grain 0
    kam = np.full(gid.shape, 1.0)
    kam[4, 6] = 0.2
    refs, reasons = grains.choose_references(gid, kam=kam, min_boundary_distance=3)
    np.testing.assert_array_equal(refs[1], [4, 6])
    assert reasons[1] is None


def test_quality_filter_skips_poor_patterns():
    gid = _island()
    kam = np.full(gid.shape, 1.0)
    quality = np.full(gid.shape, 100.0)
    kam[10, 10], quality[10, 10] = 0.1, 30.0   # lowest KAM, poor pattern
    kam[8, 12], quality[8, 12] = 0.2, 60.0     # next lowest, good enough (>= 0.5 * 100)
    refs, _ = grains.choose_references(gid, kam=kam, quality=quality)
    np.testing.assert_array_equal(refs[1], [8, 12])
    refs, _ = grains.choose_references(gid, kam=kam, quality=quality, quality_fraction=0.2)
    np.testing.assert_array_equal(refs[1], [10, 10])
    refs, _ = grains.choose_references(gid, kam=kam)  # no quality map: no filter
    np.testing.assert_array_equal(refs[1], [10, 10])


def test_quality_rule_takes_the_best_pattern_away_from_the_boundary():
    gid = _island()
    quality = np.full(gid.shape, 10.0)
    quality[3, 3] = 99.0   # on the boundary
    quality[12, 7] = 50.0
    refs, _ = grains.choose_references(gid, rule="quality", quality=quality)
    np.testing.assert_array_equal(refs[1], [12, 7])
    with pytest.raises(ValueError, match="rule quality needs the quality map"):
        grains.choose_references(gid, rule="quality")


@pytest.mark.parametrize("kind", ["square", "hexagonal"])
def test_centre_rule_takes_an_inner_point_nearest_the_centroid(kind):
    rows, cols = 20, 20
    gid = np.zeros((rows, cols), dtype=int)
    gid[2:18, 2:6] = 1     # a C-shaped grain: its centroid lies outside it
    gid[2:5, 2:16] = 1
    gid[15:18, 2:16] = 1
    if kind == "hexagonal":
        gid[1::2, -1] = -1
    refs, _ = grains.choose_references(gid, rule="centre", kind=kind, min_boundary_distance=2)
    r, c = refs[1]
    assert gid[r, c] == 1
    d = grains.boundary_distance(gid, kind=kind)
    pos = _grid(rows, cols, kind).positions()
    centroid = pos[gid == 1].mean(axis=0)
    cand = (gid == 1) & (d >= 2)
    dist2 = ((pos - centroid) ** 2).sum(-1)
    assert dist2[r, c] == pytest.approx(dist2[cand].min())
    assert d[r, c] >= 2
    # the slot nearest the centroid is not in the grain: the rule did not just take it
    assert gid.reshape(-1)[np.nanargmin(dist2)] != 1


def test_grains_without_a_usable_point_are_flagged():
    gid = np.full((10, 10), 0)
    gid[0, 0:3] = 1           # 3 points
    gid[9, 9] = 3             # grain 2 has no points
    gid[5:8, 5:8] = 4
    kam = np.full(gid.shape, 0.5)
    kam[5:8, 5:8] = np.nan    # grain 4 has no finite KAM
    refs, reasons = grains.choose_references(gid, kam=kam, min_grain_size=4)
    np.testing.assert_array_equal(refs[1:], [[-1, -1]] * 4)
    assert reasons[1] == "grain 1: 3 points, fewer than min_grain_size 4"
    assert reasons[2] == "grain 2: no points"
    assert reasons[3] == "grain 3: 1 point, fewer than min_grain_size 4"
    assert reasons[4] == "grain 4: no point with a finite KAM"
    assert reasons[0] is None and (refs[0] >= 0).all()
    with pytest.raises(ValueError, match="rule kam needs the kam map"):
        grains.choose_references(gid)
    with pytest.raises(ValueError, match="rule must be one of"):
        grains.choose_references(gid, rule="median", kam=kam)


def test_references_from_a_polycrystal_end_to_end():
    rng = np.random.default_rng(14)
    truth = _voronoi(40, 40, 8, rng)
    g, g0 = _grain_orientations(truth, rng, noise_deg=1.0)
    # every grain is deformed (1 deg scatter) but for a quiet disc of radius 2 around its
    # innermost point: the reference is at that disc's centre or next to it
    depth = grains.boundary_distance(truth)
    rr, cc = np.mgrid[0:40, 0:40]
    centres = []
    for k in range(8):
        flat = np.flatnonzero((truth == k).ravel())
        centre = flat[np.argmax(depth.ravel()[flat])]
        centres.append(divmod(int(centre), 40))
        quiet = (truth == k) & (np.hypot(rr - centres[k][0], cc - centres[k][1]) <= 2)
        g[quiet] = _scatter(np.broadcast_to(g0[k], (quiet.sum(), 3, 3)), 0.02, rng)
    seg = grains.segment(g, min_grain_size=10)
    assert _agreement(seg, truth) >= 0.99
    kam = grains.kernel_average_misorientation(g, seg)
    refs, reasons = grains.choose_references(seg, kam=kam, min_grain_size=10)
    assert reasons == [None] * 8
    for r, c in refs:
        k = truth[r, c]
        assert abs(r - centres[k][0]) + abs(c - centres[k][1]) <= 1


# --------------------------------------------------------------------------- files


def test_references_from_file(tmp_path):
    gid = np.zeros((6, 6), dtype=int)
    gid[:, 3:] = 1
    gid[5, 5] = 2
    gid[0, 0] = -1
    path = tmp_path / "refs.csv"
    path.write_text("row,col\n# reference points\n2, 1\n\n3\t4   # grain 1\n")
    refs, reasons = grains.references_from_file(path, gid)
    np.testing.assert_array_equal(refs, [[2, 1], [3, 4], [-1, -1]])
    assert reasons == [None, None, "grain 2: no point listed in refs.csv"]
    bad = {
        "1,1\n2,2\n": r"line 2: point \(2, 2\) lies in grain 0, which line 1 already",
        "0,0\n": r"line 1: point \(0, 0\) lies in no grain",
        "1,1\n7,1\n": r"line 2: point \(7, 1\) lies outside the 6 x 6 scan",
        "1,1\n1.5,2\n": r"line 2: expected two whole numbers row,col",
        "1,1,1\n": r"line 1: expected two whole numbers",
    }
    for text, message in bad.items():
        path.write_text(text)
        with pytest.raises(InputError, match=message) as err:
            grains.references_from_file(path, gid)
        assert err.value.path == str(path)
    with pytest.raises(InputError, match="no such file|cannot read"):
        grains.references_from_file(tmp_path / "missing.csv", gid)


def test_grain_ids_from_files(tmp_path):
    import h5py

    ids = np.array([[5, 5, 7], [5, 9, 7], [-1, 9, 9], [3, 3, 3]])
    expected = np.array([[0, 0, 1], [0, 2, 1], [-1, 2, 2], [3, 3, 3]], dtype=np.int32)
    csv = tmp_path / "ids.csv"
    csv.write_text("# grain ids\n" + "\n".join(",".join(str(v) for v in row) for row in ids) + "\n")
    np.testing.assert_array_equal(grains.grain_ids_from_file(csv, 4, 3), expected)
    column = tmp_path / "ids.txt"
    column.write_text("\n".join(str(v) for v in ids.ravel()))
    np.testing.assert_array_equal(grains.grain_ids_from_file(column, 4, 3), expected)
    npy = tmp_path / "ids.npy"
    np.save(npy, ids.astype(np.int16))
    out = grains.grain_ids_from_file(npy, 4, 3)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, expected)
    h5 = tmp_path / "scan.h5"
    with h5py.File(h5, "w") as f:
        f["grains/id"] = ids.astype(float)
    np.testing.assert_array_equal(grains.grain_ids_from_file(f"{h5}:/grains/id", 4, 3), expected)
    # padding slots of a hexagonal grid get no grain
    hexed = grains.grain_ids_from_file(npy, 4, 3, kind="hexagonal")
    assert hexed[1, 2] == -1 and hexed[3, 2] == -1
    with pytest.raises(InputError, match=r"shape \(4, 3\), the scan is 3 x 4") as err:
        grains.grain_ids_from_file(npy, 3, 4)
    assert err.value.path == str(npy)
    with pytest.raises(InputError, match="has no dataset"):
        grains.grain_ids_from_file(f"{h5}:/nothing", 4, 3)
    with pytest.raises(InputError, match="name the dataset"):
        grains.grain_ids_from_file(h5, 4, 3)
    csv.write_text("1.5 2 3\n1 2 3\n1 2 3\n1 2 3\n")
    with pytest.raises(InputError, match="whole numbers"):
        grains.grain_ids_from_file(csv, 4, 3)
    csv.write_text("a b c\n")
    with pytest.raises(InputError, match="cannot read grain IDs"):
        grains.grain_ids_from_file(csv, 4, 3)
    with pytest.raises(InputError, match="no such file"):
        grains.grain_ids_from_file(tmp_path / "none.csv", 4, 3)


# --------------------------------------------------------------------------- pattern similarity


def test_pattern_similarity_is_the_ncc():
    rng = np.random.default_rng(15)
    a = rng.random((5, 16, 12))
    b = 0.5 * a + rng.random((5, 16, 12))
    got = grains.pattern_similarity(a, b)
    expected = [np.corrcoef(x.ravel(), y.ravel())[0, 1] for x, y in zip(a, b)]
    np.testing.assert_allclose(got, expected, atol=1e-12)
    # invariant to gain and offset; float32 stays float32
    np.testing.assert_allclose(grains.pattern_similarity(3 * a + 7, b), expected, atol=1e-12)
    b16 = (b * 1000).astype(np.uint16)
    f32 = grains.pattern_similarity(a.astype(np.float32), b16)
    assert f32.dtype == np.float32
    np.testing.assert_allclose(f32, grains.pattern_similarity(a, b16.astype(np.float64)), atol=1e-5)
    # constant patterns have no similarity
    a[2] = 4.0
    assert np.isnan(grains.pattern_similarity(a, b)[2])
    mask = np.zeros((16, 12), dtype=bool)
    mask[2:10, 3:9] = True
    np.testing.assert_allclose(grains.pattern_similarity(b, b * 2 + rng.random(b.shape) * mask, mask=~mask), 1.0)
    with pytest.raises(ValueError, match="mask must be"):
        grains.pattern_similarity(a, b, mask=mask[:5])
    with pytest.raises(ValueError, match="two \\(n, H, W\\) stacks"):
        grains.pattern_similarity(a, b[:3])


def _pair_values(truth, inside, across, kind="square"):
    pairs = grains.neighbour_pairs(*truth.shape, kind=kind)
    t = truth.reshape(-1)
    same = t[pairs[:, 0]] == t[pairs[:, 1]]
    return pairs, np.where(same, np.asarray(inside)[t[pairs[:, 0]]], across)


def test_similarity_segmentation_adapts_to_each_grains_pattern_quality():
    truth = np.zeros((12, 12), dtype=int)
    truth[:, 6:] = 1
    truth[8:, :] = 2
    rng = np.random.default_rng(16)
    # grain 1's patterns are poor: its in-grain NCC is below half the scan's median
    pairs, s = _pair_values(truth, [0.9, 0.15, 0.85], 0.03)
    s = s + rng.normal(0, 0.01, s.shape)
    seg = grains.segment_by_similarity(s, rows=12, cols=12)
    np.testing.assert_array_equal(seg, truth)
    # a fixed level between the grains' own levels splits the poor grain into single points
    fixed = grains.segment_by_similarity(s, rows=12, cols=12, min_similarity=0.5)
    assert (fixed[truth == 1] >= 0).all() and len(np.unique(fixed[truth == 1])) == (truth == 1).sum()
    np.testing.assert_array_equal(grains.segment_by_similarity(s, rows=12, cols=12, min_similarity=0.1), truth)
    with pytest.raises(ValueError, match="min_similarity"):
        grains.segment_by_similarity(s, rows=12, cols=12, min_similarity=1.0)


def test_a_point_like_no_other_does_not_bridge_two_grains():
    truth = np.zeros((8, 8), dtype=int)
    truth[:, 4:] = 1
    pairs, s = _pair_values(truth, [0.8, 0.8], 0.05)
    bad = 3 * 8 + 4  # on the boundary, as unlike its grain as the other grain
    touches = (pairs == bad).any(axis=1)
    s[touches] = 0.05
    seg = grains.segment_by_similarity(s, rows=8, cols=8, min_grain_size=2)
    expected = truth.copy()
    expected[3, 4] = -1
    np.testing.assert_array_equal(seg, expected)
    # NaN similarities (no pattern) leave a point out; so does valid
    s[touches] = np.nan
    assert grains.segment_by_similarity(s, rows=8, cols=8)[3, 4] == -1
    valid = np.ones((8, 8), dtype=bool)
    valid[0, 0] = False
    assert grains.segment_by_similarity(s, rows=8, cols=8, valid=valid)[0, 0] == -1
    with pytest.raises(ValueError, match="one value per neighbour pair"):
        grains.segment_by_similarity(s[:-1], rows=8, cols=8)
    with pytest.raises(ValueError, match="threshold"):
        grains.segment_by_similarity(s, rows=8, cols=8, threshold=1.5)


def test_mean_neighbour_similarity_averages_in_grain_pairs():
    truth = np.zeros((6, 7), dtype=int)
    truth[:, 4:] = 1
    pairs, s = _pair_values(truth, [0.8, 0.4], 0.05)
    s[(pairs == 3 * 7 + 1).any(axis=1)] = 0.2  # (3, 1): 0.2 to each of its 4 neighbours
    s[(pairs[:, 0] == 4 * 7 + 6) & (pairs[:, 1] == 5 * 7 + 6)] = np.nan  # not comparable
    gid = truth.copy()
    gid[0, 0] = -1
    q = grains.mean_neighbour_similarity(s, gid)
    assert q[3, 1] == pytest.approx(0.2)
    assert q[2, 1] == pytest.approx((0.2 + 0.8 * 3) / 4)
    assert q[1, 3] == pytest.approx(0.8)                   # the pair across the boundary left out
    assert q[0, 1] == pytest.approx(0.8) and np.isnan(q[0, 0])  # and the pair with no grain
    assert q[2, 5] == pytest.approx(0.4)
    assert q[5, 6] == pytest.approx(0.4)                   # its NaN pair left out
    gid[5, 5] = 2
    gid[4, 6] = 3
    assert np.isnan(grains.mean_neighbour_similarity(s, gid)[5, 6])  # no comparable in-grain neighbour
    with pytest.raises(ValueError, match="one value per neighbour pair"):
        grains.mean_neighbour_similarity(s[:-1], gid)


@pytest.fixture(scope="module", params=["square", "hexagonal"])
def simulated_polycrystal(request):
    """A 36 x 36 Ni scan of 3 grains (Voronoi), 0.1 deg orientation scatter, Poisson noise, one
    grain at 1 count per pixel (in-grain NCC 0.3 where the others have 0.9)."""
    from ebsdxc.simulate import load_nickel_master_pattern, poisson_noise, simulate_pattern

    kind = request.param
    rng = np.random.default_rng(17)
    rows = cols = 36
    truth = _voronoi(rows, cols, 3, rng, kind)
    g0 = crystal.euler_to_matrix([[10.0, 20.0, 30.0], [100.0, 50.0, 200.0], [60.0, 35.0, 140.0]])
    assert _adjacent_grains_differ(truth, g0, kind)
    counts = [30.0, 30.0, 1.0]
    master = load_nickel_master_pattern()
    g = _scatter(g0[np.maximum(truth, 0)], 0.1, rng)
    pats = np.zeros((rows, cols, 48, 48), dtype=np.uint16)  # padding slots read as zeros
    for r, c in zip(*np.nonzero(truth >= 0)):
        p = simulate_pattern(master, shape=(48, 48), pc=(0.5, 0.45, 0.6), orientation=g[r, c])
        pats[r, c] = poisson_noise(p, counts=counts[truth[r, c]], rng=rng)
    return kind, truth, pats


def test_similarity_segmentation_of_simulated_patterns(simulated_polycrystal):
    kind, truth, pats = simulated_polycrystal
    rows, cols = truth.shape
    pairs = grains.neighbour_pairs(rows, cols, kind=kind)
    flat = pats.reshape(rows * cols, *pats.shape[2:])
    s = np.concatenate([grains.pattern_similarity(flat[p[:, 0]], flat[p[:, 1]])
                        for p in np.array_split(pairs, 4)])  # per block of pairs, as the run does
    t = truth.reshape(-1)
    poor = (t[pairs[:, 0]] == 2) & (t[pairs[:, 1]] == 2)
    assert np.median(s[poor]) < 0.5 * np.median(s)  # a scan-wide threshold would shatter grain 2
    seg = grains.segment_by_similarity(s, rows=rows, cols=cols, kind=kind, min_grain_size=5)
    assert _agreement(seg, truth) >= 0.98
    assert seg.max() + 1 == 3


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_gpu_matches_numpy_float64():
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(18)
    truth = _voronoi(30, 32, 6, rng, "hexagonal")
    g, _ = _grain_orientations(truth, rng, noise_deg=0.5)
    seg = grains.segment(g, kind="hexagonal")
    np.testing.assert_array_equal(grains.segment(cp.asarray(g), kind="hexagonal"), seg)
    kam = grains.kernel_average_misorientation(g, seg, kind="hexagonal")
    kam_gpu = grains.kernel_average_misorientation(cp.asarray(g), seg, kind="hexagonal")
    assert isinstance(kam_gpu, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(kam_gpu), kam, atol=1e-12, equal_nan=True)
    a = rng.random((20, 40, 40))
    b = a + rng.random((20, 40, 40))
    np.testing.assert_allclose(cp.asnumpy(grains.pattern_similarity(cp.asarray(a), cp.asarray(b))),
                               grains.pattern_similarity(a, b), atol=1e-12)


@pytest.mark.parametrize("kind", ["square", "hexagonal"])
def test_references_keep_off_the_map_edge(kind):
    # one grain covering the map with noisy, otherwise uniform KAM: the edge's fewer neighbours
    # must not win the minimum; the map edge counts as a boundary for the reference only
    rng = np.random.default_rng(0)
    gid = np.zeros((9, 9), dtype=np.int32)
    if kind == "hexagonal":
        gid[1::2, -1] = -1
    kam = 1.0 + 0.01 * rng.standard_normal(gid.shape)
    kam[0, 4] = kam[4, 0] = 0.5  # the lowest KAM of the map lies on its edge
    ref, _ = grains.choose_references(gid, kam=kam, kind=kind, min_boundary_distance=2)
    r, c = ref[0]
    assert 1 <= r <= 7 and 1 <= c <= 6
    dist = grains.boundary_distance(gid, kind=kind, map_edge=True)
    assert dist[r, c] >= 2 and dist[0, 4] == 1
    assert np.isinf(grains.boundary_distance(gid, kind=kind)[gid >= 0]).all()
