"""Incremental DIC (``--incremental``): each frame against the one before, the increments
accumulated; a rotation growing to 75 degrees that frame-against-reference cannot follow."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import tifffile
from exact_warps import texture

from ebsdxc import cli
from ebsdxc import status as st
from ebsdxc.run.dic import accumulate_increments

N = 160
DEGREES = (25.0, 50.0, 75.0)
C = np.array([(N - 1) / 2, (N - 1) / 2])


def _rot(deg):
    a = np.radians(deg)
    return np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])


def _frame(deg, f):
    """The texture rotated by ``deg`` about the image centre: g(R (X - c) + c) = f(X)."""
    yy, xx = np.mgrid[0:N, 0:N].astype(float)
    x = np.stack([xx, yy], -1) - C
    X = x @ _rot(deg) + C  # R^T (x - c) + c, row vectors
    return f(X[..., 0], X[..., 1])


def _truth(points, deg):
    return (points - C) @ _rot(deg).T + C - points


def test_accumulation_of_affine_increments_is_exact():
    ys, xs = np.mgrid[0:6, 0:7].astype(float)
    pts = np.stack([xs * 10 + 5, ys * 10 + 5], -1)
    G = [np.array([[0.02, 0.01], [-0.005, 0.03]]), np.array([[-0.01, 0.004], [0.002, 0.015]])]
    t = [np.array([1.3, -0.7]), np.array([-2.1, 0.4])]
    inc = np.stack([t[k] + pts @ G[k].T for k in range(2)])
    # increment k is measured on the fixed grid of frame k - 1's image coordinates
    total, status = accumulate_increments(inc, np.zeros(inc.shape[:3], np.uint8), pts)
    x1 = pts + inc[0]
    x2 = x1 + t[1] + x1 @ G[1].T
    inside = ((x1 >= pts[0, 0]) & (x1 <= pts[-1, -1])).all(axis=-1)
    np.testing.assert_allclose(total[0], inc[0], atol=1e-12)
    np.testing.assert_allclose(total[1][inside], (x2 - pts)[inside], atol=1e-12)
    assert (status[1][inside] == st.OK).all() and (status[1][~inside] == st.OUTSIDE_MASK).all()
    assert np.isnan(total[1][~inside]).all()
    # an invalid increment on the path: NaN with its code, and the point stays lost
    bad = np.zeros(inc.shape[:3], np.uint8)
    bad[0, 2, 3] = st.REFINE_FAILED
    total, status = accumulate_increments(inc, bad, pts)
    assert status[0, 2, 3] == st.REFINE_FAILED and np.isnan(total[0, 2, 3]).all()
    assert status[1, 2, 3] == st.REFINE_FAILED


@pytest.fixture(scope="module")
def rotating(tmp_path_factory):
    d = tmp_path_factory.mktemp("incremental")
    f = texture(3)
    lo, hi = -12.0, 12.0
    to16 = lambda a: np.clip((a - lo) / (hi - lo) * 60000 + 2000, 0, 65535).astype(np.uint16)  # noqa: E731
    tifffile.imwrite(d / "ref.tif", to16(_frame(0.0, f)))
    (d / "frames").mkdir()
    for k, deg in enumerate(DEGREES):
        tifffile.imwrite(d / "frames" / f"frame{k + 1}.tif", to16(_frame(deg, f)))
    return d


def _run(d, name, *extra):
    out = d / name
    assert cli.main(["process", str(d / "frames"), "--ref", str(d / "ref.tif"), "--mode", "dic", "--subset", "21",
                     "--step", "10", "--search", "4", "-o", str(out), "-q", *extra]) == 0
    with h5py.File(out, "r") as f:
        g = f["ebsdxc/dic"]
        return {k: g[k][()] for k in g if k != "strain"} | {"attrs": dict(g.attrs), "strain": g["strain"][()]}


def test_incremental_follows_a_rotation_to_75_degrees(rotating):
    d = rotating
    direct = _run(d, "direct.h5")
    inc = _run(d, "incremental.h5", "--incremental")
    pts = inc["points"]
    truth = np.stack([_truth(pts, deg) for deg in DEGREES])
    # where the rotated subset is still in the frame (and its path stayed on the grid)
    ok = inc["status"] == st.OK
    assert ok[2].sum() > 0.2 * ok[2].size
    err = np.abs(inc["displacement"][ok] - truth[ok]).max()
    assert err < 0.02, err
    # 50 degrees in one step: no seed's search start converges (a false one would need ZNCC 0.9)
    assert (direct["status"][1] == st.OK).sum() < 0.2 * ok[1].sum()
    assert inc["attrs"]["displacement_complete"] and inc["attrs"]["strain_complete"]
    from ebsdxc.io.results import read_summary

    summary = read_summary(d / "incremental.h5")["dic"]
    assert summary["displacement_complete"] and summary["displacement_kind"] == "the increments accumulated"
    assert summary["frames"] == 3 and summary["strain_complete"]
    assert "displacement_complete" not in read_summary(d / "direct.h5")["dic"]  # direct: views of the run
    # the increments are kept: frame t against frame t - 1 on the fixed grid
    incr_ok = inc["increment_status"] == st.OK
    step = (pts - C) @ _rot(25.0).T + C - pts
    assert np.abs(inc["increment"][incr_ok] - np.broadcast_to(step, inc["increment"].shape)[incr_ok]).max() < 0.02
    # strain of a rigid rotation: Green-Lagrange zero
    e = inc["strain"][ok[..., None, None].repeat(2, -1).repeat(2, -2)]
    assert np.nanmax(np.abs(e)) < 2e-3


def test_incremental_does_not_depend_on_the_batch(rotating):
    a = _run(rotating, "b1.h5", "--incremental", "--batch", "1")
    b = _run(rotating, "b3.h5", "--incremental", "--batch", "3")
    for k in ("displacement", "status", "increment"):
        np.testing.assert_array_equal(a[k], b[k])
