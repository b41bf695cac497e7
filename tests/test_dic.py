"""Subset DIC (ebsdxc.dic): grid, rigid start, integer search, subset IC-GN, against images whose
deformation is known exactly (an analytic texture evaluated at the inverse-mapped positions)."""

from __future__ import annotations

import numpy as np
import pytest
from exact_warps import affine_pair

from ebsdxc import dic
from ebsdxc import status as st

H, W = 180, 220


def _pair(G, t, shape=(H, W), seed=0):
    return affine_pair(G, t, shape, seed=seed)


CFG = dic.DicConfig(enabled=True, subset=31, step=12)


@pytest.mark.parametrize("G, t", [
    (np.zeros((2, 2)), (0.3, -0.45)),
    (np.zeros((2, 2)), (23.6, -17.2)),  # beyond the subset search: the whole-image start finds it
    (np.diag([1e-3, 1e-3]), (1.2, 0.7)),
    (np.array([[1e-2, 3e-3], [-2e-3, -5e-3]]), (-2.5, 4.1)),
])
def test_displacements_match_the_truth(G, t):
    ref, img = _pair(G, t)
    pts, inside = dic.subset_grid(ref.shape, subset=31, step=12)
    m = dic.match_subsets(ref, img, pts.reshape(-1, 2), config=CFG, valid=inside.reshape(-1))
    truth = np.asarray(t) + pts.reshape(-1, 2) @ np.asarray(G).T
    ok = m.status == st.OK
    # measured exactly where the deformed subset stays in the frame; the others are OUTSIDE_MASK
    corners = pts.reshape(-1, 1, 2) + np.array([[-15, -15], [15, -15], [15, 15], [-15, 15]])
    moved = corners + np.asarray(t) + corners @ np.asarray(G).T
    stays = ((moved >= 0) & (moved <= [W - 1, H - 1])).all(axis=(1, 2))
    np.testing.assert_array_equal(ok, stays)
    assert set(np.unique(m.status[~ok])) <= {st.OUTSIDE_MASK}
    err = m.displacement[ok] - truth[ok]
    assert np.sqrt((err**2).mean()) < 0.002 and np.abs(err).max() < 0.01
    assert np.isnan(m.displacement[~ok]).all()
    assert (m.zncc[ok] > 0.999).all() and (m.iterations[ok] >= 1).all()


def test_rigid_shift_of_a_hundred_pixels():
    ref, img = _pair(np.zeros((2, 2)), (131.0, -47.0), shape=(300, 400))
    assert np.allclose(dic.coarse_shift(ref, img), (131, -47), atol=1.0)


def test_grid_and_mask():
    pts, inside = dic.subset_grid((100, 120), subset=21, step=10)
    # centres from half a subset in to the last one whose subset fits (x <= 109, y <= 89)
    assert pts[0, 0].tolist() == [10.0, 10.0] and pts[-1, -1].tolist() == [100.0, 80.0] and inside.all()
    mask = np.ones((100, 120), bool)
    mask[40:60, 50:70] = False
    _, inside = dic.subset_grid((100, 120), subset=21, step=10, mask=mask)
    want = np.array([[mask[int(y) - 10:int(y) + 11, int(x) - 10:int(x) + 11].all() for x, y in row] for row in pts])
    np.testing.assert_array_equal(inside, want)
    assert not inside.all() and inside.any()
    with pytest.raises(ValueError, match="dic.subset"):
        dic.subset_grid((20, 20), subset=31, step=5)


def test_flat_subsets_and_no_match_are_flagged():
    ref, img = _pair(np.zeros((2, 2)), (1.0, 0.0))
    ref[:60, :60] = 5.0  # no contrast: nothing to match
    pts, _ = dic.subset_grid(ref.shape, subset=31, step=12)
    flat = (pts.reshape(-1, 2) + 15 < 60).all(axis=1)
    m = dic.match_subsets(ref, img, pts.reshape(-1, 2), config=CFG)
    assert (m.status[flat] == st.CONSTANT_TILE).all() and np.isnan(m.displacement[flat]).all()
    # a frame that holds nothing of the reference: no point is reported
    m = dic.match_subsets(ref, np.random.default_rng(2).normal(size=img.shape), pts.reshape(-1, 2), config=CFG)
    assert (m.status != st.OK).all() and np.isnan(m.displacement).all()


def test_config_rules():
    for kw, word in (({"subset": 30}, "dic.subset"), ({"step": 0}, "dic.step"), ({"search": 0}, "dic.search"),
                     ({"shape_function": "cubic"}, "dic.shape_function"), ({"strain_window": 4}, "strain_window"),
                     ({"min_zncc": 1.5}, "dic.min_zncc")):
        with pytest.raises(ValueError, match=word):
            dic.DicConfig(**kw)


@pytest.mark.gpu
def test_gpu_matches_cpu():
    cp = pytest.importorskip("cupy")
    ref, img = _pair(np.array([[1e-2, 3e-3], [-2e-3, -5e-3]]), (-2.5, 4.1))
    pts, inside = dic.subset_grid(ref.shape, subset=31, step=12)
    cpu = dic.match_subsets(ref, img, pts.reshape(-1, 2), config=CFG, valid=inside.reshape(-1))
    gpu = dic.match_subsets(cp.asarray(ref), cp.asarray(img), pts.reshape(-1, 2), config=CFG,
                            valid=inside.reshape(-1))
    np.testing.assert_array_equal(gpu.status, cpu.status)
    np.testing.assert_allclose(gpu.displacement, cpu.displacement, atol=2e-4)
