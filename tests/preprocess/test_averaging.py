"""Neighbour pattern averaging over the scan grid, against loops and against kikuchipy."""

from __future__ import annotations

import numpy as np
import pytest
from preprocess_oracles import bin_oracle, host, seeded

from ebsdxc.preprocess import PatternPreprocessor, PreprocessConfig, average_neighbours, neighbour_weights


def average_oracle(patterns, cols, weights, present=None):
    """float64 loops over every point and every neighbour."""
    x = np.asarray(patterns, dtype=np.float64)
    N = len(x)
    R = N // cols
    p = np.ones(N, bool) if present is None else np.asarray(present, bool)
    k = weights.shape[0] // 2
    out = x.copy()
    for r in range(R):
        for c in range(cols):
            if not p[r * cols + c]:
                continue
            num, den = 0.0, 0.0
            for di in range(-k, k + 1):
                for dj in range(-k, k + 1):
                    rr, cc = r + di, c + dj
                    if 0 <= rr < R and 0 <= cc < cols and p[rr * cols + cc]:
                        wt = weights[di + k, dj + k]
                        num = num + wt * x[rr * cols + cc]
                        den += wt
            out[r * cols + c] = num / den
    return out


def test_neighbour_weights():
    np.testing.assert_array_equal(neighbour_weights("box", 3), np.ones((3, 3)))
    np.testing.assert_array_equal(neighbour_weights("circular", 3), [[0, 1, 0], [1, 1, 1], [0, 1, 0]])
    c5 = neighbour_weights("circular", 5)
    assert c5.sum() == 13 and c5[0, 0] == 0 and c5[0, 2] == 1 and c5[1, 1] == 1
    g = neighbour_weights("gaussian", 5, 1.5)
    d = np.arange(-2, 3)
    np.testing.assert_allclose(g, np.exp(-(d[:, None] ** 2 + d[None, :] ** 2) / (2 * 1.5 ** 2)), rtol=1e-15)
    assert neighbour_weights("gaussian", 1).tolist() == [[1.0]]


@pytest.mark.parametrize("grid", [(1, 1), (1, 5), (4, 1), (3, 4), (5, 7), (2, 2)])
@pytest.mark.parametrize("kernel,size,sigma", [("gaussian", 3, 1.0), ("gaussian", 5, 1.5), ("gaussian", 3, 0.6),
                                               ("box", 3, 1.0), ("box", 5, 1.0), ("circular", 3, 1.0),
                                               ("circular", 5, 1.0), ("gaussian", 1, 1.0)])
@pytest.mark.parametrize("with_present", [False, True])
def test_average_neighbours_matches_oracle(xp, grid, kernel, size, sigma, with_present):
    R, C = grid
    rng = seeded("avg", grid, kernel, size, sigma, with_present)
    pats = rng.uniform(0, 4000, (R * C, 5, 3))
    present = None
    if with_present:
        present = rng.random(R * C) > 0.3
        present[0] = True
        pats[~present] = 0.0  # as the reader gives absent points
    before = pats.copy()
    out = average_neighbours(xp.asarray(pats), cols=C, kernel=kernel, size=size, sigma=sigma,
                             present=None if present is None else xp.asarray(present))
    assert type(out) is xp.ndarray and out.dtype == np.float32 and out.shape == pats.shape
    want = average_oracle(pats, C, neighbour_weights(kernel, size, sigma), present)
    np.testing.assert_allclose(host(out), want, rtol=2e-6, atol=1e-3)
    np.testing.assert_array_equal(pats, before)  # input untouched


def test_average_neighbours_absent_points_contribute_nothing(xp):
    R, C = 4, 5
    rng = seeded("absent")
    pats = rng.uniform(0, 100, (R * C, 6, 7)).astype(np.float32)
    present = np.ones(R * C, bool)
    present[[3, 7, 12, 19]] = False
    junk = pats.copy()
    junk[~present] = 1e6  # absent points holding garbage
    a = host(average_neighbours(xp.asarray(pats), cols=C, present=xp.asarray(present)))
    b = host(average_neighbours(xp.asarray(junk), cols=C, present=xp.asarray(present)))
    np.testing.assert_array_equal(a[present], b[present])
    np.testing.assert_array_equal(b[~present], junk[~present])  # absent points stay as they were
    assert np.abs(b[present]).max() < 200


def test_average_neighbours_constant_and_uniform_weights(xp):
    # a constant map stays constant (the weights are renormalised everywhere, edges included)
    pats = np.full((12, 4, 4), 7.0, np.float32)
    for kernel in ("gaussian", "box", "circular"):
        out = host(average_neighbours(xp.asarray(pats), cols=4, kernel=kernel, size=5, sigma=0.8))
        np.testing.assert_allclose(out, 7.0, rtol=1e-6)
    # a 3x3 box on a 3x3 map: the centre point is the mean of all nine
    x = np.arange(9, dtype=np.float32)[:, None, None] * np.ones((1, 2, 2), np.float32)
    out = host(average_neighbours(xp.asarray(x), cols=3, kernel="box", size=3))
    assert out[4, 0, 0] == pytest.approx(4.0) and out[0, 0, 0] == pytest.approx((0 + 1 + 3 + 4) / 4)


@pytest.mark.parametrize("size", [3, 5])
@pytest.mark.parametrize("kernel", ["gaussian", "circular"])
def test_average_neighbours_halo_contract(xp, size, kernel):
    """Averaging row chunks with size // 2 halo rows and dropping them equals averaging the whole scan."""
    R, C, halo = 11, 6, size // 2
    rng = seeded("halo", size, kernel)
    pats = rng.uniform(0, 1000, (R * C, 4, 5)).astype(np.float32)
    present = rng.random(R * C) > 0.1
    pats[~present] = 0
    whole = host(average_neighbours(xp.asarray(pats), cols=C, kernel=kernel, size=size, present=present))
    parts = []
    for r0 in range(0, R, 4):  # chunks of 4 rows (the last one shorter)
        r1 = min(R, r0 + 4)
        a, b = max(0, r0 - halo), min(R, r1 + halo)
        blk = average_neighbours(xp.asarray(pats[a * C:b * C]), cols=C, kernel=kernel, size=size,
                                 present=present[a * C:b * C])
        parts.append(host(blk)[(r0 - a) * C:(r1 - a) * C])
    np.testing.assert_allclose(np.concatenate(parts), whole, rtol=1e-6, atol=1e-4)
    # without the halo the chunk borders differ (the test can tell)
    no_halo = host(average_neighbours(xp.asarray(pats[4 * C:8 * C]), cols=C, kernel=kernel, size=size,
                                      present=present[4 * C:8 * C]))
    assert np.abs(no_halo - whole[4 * C:8 * C]).max() > 1


@pytest.mark.parametrize("kwargs", [dict(cols=4), dict(cols=0), dict(cols=2.0), dict(cols=3, size=2),
                                    dict(cols=3, size=0), dict(cols=3, kernel="hann"), dict(cols=3, sigma=0),
                                    dict(cols=3, sigma=float("nan")), dict(cols=3, present=np.ones(5, bool))])
def test_average_neighbours_bad_options(kwargs):
    with pytest.raises(ValueError):
        average_neighbours(np.zeros((6, 3, 3), np.float32), **kwargs)
    with pytest.raises(ValueError):
        average_neighbours(np.zeros((6, 9), np.float32), cols=3)


def test_preprocessor_average_neighbours_method(be):
    xp = be.xp
    pats = seeded("ppavg").uniform(0, 100, (12, 8, 8))
    off = PatternPreprocessor(PreprocessConfig(), be)
    assert off.halo_rows == 0
    x = off.convert(xp.asarray(pats))
    np.testing.assert_array_equal(host(off.average_neighbours(x, cols=4)), pats.astype(np.float32))
    cfg = PreprocessConfig(binning=2, average_neighbours=5, average_kernel="box")
    pp = PatternPreprocessor(cfg, be)
    assert pp.halo_rows == 2 and pp.is_identity is False
    x = pp.convert(xp.asarray(pats))
    assert x.shape == (12, 4, 4)
    got = host(pp.average_neighbours(x, cols=4))
    np.testing.assert_allclose(got, average_oracle(bin_oracle(pats, 2), 4, np.ones((5, 5))), rtol=2e-6)
    # __call__ = correct(convert(x)) and never averages
    np.testing.assert_array_equal(host(pp(xp.asarray(pats))), host(pp.correct(pp.convert(xp.asarray(pats)))))
    np.testing.assert_allclose(host(pp(xp.asarray(pats))), bin_oracle(pats, 2), rtol=1e-6)


# ================================================================ kikuchipy

@pytest.fixture(scope="module")
def nickel():
    kp = pytest.importorskip("kikuchipy")
    s = kp.data.nickel_ebsd_small()
    return kp, s.data.astype(np.float32)  # (3, 3, 60, 60)


@pytest.mark.parametrize("window,kw,mine", [
    ("gaussian", {"std": 1.0}, ("gaussian", 1.0)),
    ("gaussian", {"std": 0.7}, ("gaussian", 0.7)),
    ("circular", {}, ("circular", 1.0)),
    ("rectangular", {}, ("box", 1.0)),
])
@pytest.mark.parametrize("size", [3, 5])
@pytest.mark.parametrize("nav", ["small", "tiled"])
def test_average_neighbours_matches_kikuchipy(nickel, window, kw, mine, size, nav):
    """kikuchipy's EBSD.average_neighbour_patterns, up to its per-pattern rescaling to [-1, 1]."""
    kp, data = nickel
    if nav == "tiled":  # a 4 x 5 map of the sample's patterns, scaled differently
        rng = seeded("tile")
        idx = rng.integers(0, 9, (4, 5))
        data = data.reshape(9, 60, 60)[idx] * rng.uniform(0.5, 2.0, (4, 5, 1, 1)).astype(np.float32)
    R, C = data.shape[:2]
    s = kp.signals.EBSD(data.copy())
    theirs = s.average_neighbour_patterns(window=window, window_shape=(size, size), inplace=False,
                                          show_progressbar=False, **kw).data.astype(np.float64)
    ours = average_neighbours(data.reshape(R * C, 60, 60), cols=C, kernel=mine[0], size=size, sigma=mine[1])
    ours = ours.reshape(R, C, 60, 60).astype(np.float64)
    lo, hi = ours.min(axis=(-2, -1), keepdims=True), ours.max(axis=(-2, -1), keepdims=True)
    np.testing.assert_allclose((ours - lo) / (hi - lo) * 2 - 1, theirs, rtol=0, atol=5e-6)
    # the comparison can fail: a different kernel is far off
    other = average_neighbours(data.reshape(R * C, 60, 60), cols=C, kernel="box" if mine[0] != "box" else "circular",
                               size=size).reshape(R, C, 60, 60).astype(np.float64)
    lo, hi = other.min(axis=(-2, -1), keepdims=True), other.max(axis=(-2, -1), keepdims=True)
    if not (nav == "small" and size == 5 and mine[0] in ("box", "circular")):  # same weights on a 3x3 map
        assert np.abs((other - lo) / (hi - lo) * 2 - 1 - theirs).max() > 1e-3
