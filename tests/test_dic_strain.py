"""Strain from DIC displacement fields (ebsdxc.dic_strain): a local plane fit, against fields
whose gradient is known exactly."""

from __future__ import annotations

import numpy as np
import pytest

from ebsdxc import dic_strain as ds

STEP = 8.0


def _grid(ny=20, nx=24):
    y, x = np.mgrid[0:ny, 0:nx] * STEP
    return x.astype(float), y.astype(float)


def test_uniform_gradient_is_exact_with_holes_and_edges():
    x, y = _grid()
    G = np.array([[1e-3, -2e-3], [5e-4, 3e-3]])
    d = np.stack([0.3 + G[0, 0] * x + G[0, 1] * y, -1.2 + G[1, 0] * x + G[1, 1] * y], -1)
    d[5, 5] = np.nan
    d[10:13, 3:6] = np.nan
    grad = ds.fit_gradients(d[None], step=STEP, window=5)[0]
    ok = np.isfinite(grad).all(axis=(-2, -1))
    assert ok.mean() > 0.95  # edges fit what they have; only points with too few neighbours drop out
    np.testing.assert_allclose(grad[ok], np.broadcast_to(G, grad[ok].shape), atol=1e-12)


def test_too_few_points_or_a_line_is_nan():
    x, y = _grid(5, 5)
    d = np.stack([1e-3 * x, 0 * y], -1)
    d[:, 1:] = np.nan  # one column left: every window's points lie on a line
    grad = ds.fit_gradients(d, step=STEP, window=3)
    assert np.isnan(grad).all()


def test_transfer_function_of_a_sinusoid():
    x, y = _grid(4, 200)
    P = 160.0
    d = np.stack([np.sin(2 * np.pi * x / P), np.zeros_like(x)], -1)
    grad = ds.fit_gradients(d, step=STEP, window=7)
    # at the zero crossings the true slope is 2 pi / P; the fit gives transfer(P) of it
    j = np.argmin(np.abs(x[0] - 2 * P))
    want = 2 * np.pi / P * ds.transfer(P, step=STEP, window=7)
    assert grad[1, j, 0, 0] == pytest.approx(want, rel=1e-9)
    assert 0.85 < ds.transfer(P, step=STEP, window=7) < 0.95  # a 48 px window on a 160 px period
    periods = STEP * np.array([40.0, 20.0, 10.0, 7.0])
    t = [ds.transfer(p, step=STEP, window=7) for p in periods]
    assert np.all(np.diff(t) < 0) and t[-1] < 0.5  # shorter periods than the window are filtered out


def test_green_lagrange_and_small_strain():
    a = np.deg2rad(5)
    R = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    grad = R - np.eye(2)
    np.testing.assert_allclose(ds.green_lagrange(grad), 0, atol=1e-15)  # a rigid rotation: no strain
    assert abs(ds.small_strain(grad)[0, 0]) == pytest.approx(1 - np.cos(a))  # small strain: not zero
    assert ds.gauge_length(8, 5, 31) == 63.0


def test_bad_arguments():
    d = np.zeros((5, 5, 2))
    with pytest.raises(ValueError, match="window"):
        ds.fit_gradients(d, step=8, window=4)
    with pytest.raises(ValueError, match="step"):
        ds.fit_gradients(d, step=0, window=5)
    with pytest.raises(ValueError, match="shape"):
        ds.fit_gradients(np.zeros((5, 5)), step=8)


@pytest.mark.gpu
def test_gpu_matches_cpu():
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(0)
    d = rng.normal(size=(3, 20, 24, 2))
    d[0, 4, 4] = np.nan
    np.testing.assert_allclose(ds.fit_gradients(cp.asarray(d), step=STEP).get(), ds.fit_gradients(d, step=STEP),
                               atol=1e-12, equal_nan=True)
