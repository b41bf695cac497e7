"""The fused whole-IC-GN kernel for affine DIC subsets (ebsdxc.subset_icgn) against the float64
NumPy path of the general engine (ebsdxc.icgn via ebsdxc.dic on the CPU): the same warps, ZNCC,
iterations and statuses, on frames with exact affine fields, subsets that leave the frame and
subsets without contrast."""

from __future__ import annotations

import numpy as np
import pytest
from exact_warps import affine_pair

from ebsdxc import dic
from ebsdxc import status as st
from ebsdxc.subset_icgn import MAX_HALF, register_subsets

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


@pytest.mark.parametrize("subset", [21, 31, 61])
def test_kernel_matches_the_float64_engine(cp, subset):
    G = np.array([[6e-3, -2e-3], [3e-3, -4e-3]])
    t = (3.4, -2.2)
    ref, img = affine_pair(G, t, (200, 220))
    ref[20:60, 20:60] = 0.5  # flat: no contrast for the subsets wholly inside
    pts, inside = dic.subset_grid(ref.shape, subset=subset, step=9)
    cfg = dic.DicConfig(subset=subset, step=9, search=8, guess="search", tolerance_px=1e-4)
    host = dic.match_subsets(ref, img, pts.reshape(-1, 2), config=cfg, valid=inside.reshape(-1))
    dev = dic.match_subsets(cp.asarray(ref), cp.asarray(img), pts.reshape(-1, 2), config=cfg,
                            valid=inside.reshape(-1))
    np.testing.assert_array_equal(dev.status, host.status)
    assert {st.OK, st.OUTSIDE_MASK} <= set(np.unique(host.status).tolist())
    if subset == 21:
        assert st.CONSTANT_TILE in host.status
    ok = host.status == st.OK
    np.testing.assert_allclose(dev.displacement[ok], host.displacement[ok], atol=1e-4)
    np.testing.assert_allclose(dev.zncc[ok], host.zncc[ok], atol=1e-5)
    assert np.abs(dev.iterations[ok].astype(int) - host.iterations[ok]).max() <= 1
    # where the subset does not touch the flat patch (the frame is textured there), the truth
    P = pts.reshape(-1, 2)
    half = subset // 2
    clear = ok & ((P[:, 0] - half > 60) | (P[:, 0] + half < 20) | (P[:, 1] - half > 60) | (P[:, 1] + half < 20))
    truth = np.asarray(t) + P[clear] @ G.T
    assert clear.sum() > 50 and np.abs(dev.displacement[clear] - truth).max() < 0.01


def test_kernel_refuses_subsets_it_cannot_hold(cp):
    a = cp.zeros((100, 100), cp.float32)
    with pytest.raises(ValueError, match="subset"):
        register_subsets(a, a, a, np.zeros((1, 2)), subset=2 * MAX_HALF + 3, initial=np.eye(3)[None],
                         max_iterations=5, tolerance=1e-3)
