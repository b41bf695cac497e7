"""The quadratic (12-parameter) subset shape function of the IC-GN core: Gao et al.'s 6x6 warp
matrix, and subsets of frames deformed by exactly known quadratic and sinusoidal fields."""

from __future__ import annotations

import numpy as np
import pytest
from exact_warps import texture

from ebsdxc import dic, icgn
from ebsdxc import status as st


def _quadratic_map(p, u, v):
    """u', v' of the quadratic shape function (the module's parameter order)."""
    up = (1 + p[0]) * u + p[1] * v + p[2] + 0.5 * p[6] * u * u + p[7] * u * v + 0.5 * p[8] * v * v
    vp = p[3] * u + (1 + p[4]) * v + p[5] + 0.5 * p[9] * u * u + p[10] * u * v + 0.5 * p[11] * v * v
    return up, vp


def test_matrix_applies_and_round_trips_the_parameters():
    rng = np.random.default_rng(0)
    p = rng.normal(scale=0.05, size=(5, 12))
    M = icgn.parameters_to_warp(p, "quadratic")
    assert M.shape == (5, 6, 6)
    np.testing.assert_allclose(icgn.warp_parameters(M), p, atol=1e-15)
    uv = rng.uniform(-1, 1, size=(5, 7, 2))
    got = icgn.warp_points(M, uv)
    want = np.stack(_quadratic_map(p.T[:, :, None], uv[..., 0], uv[..., 1]), -1)
    np.testing.assert_allclose(got, want, atol=1e-14)
    # rows 1-3: the products of u' and v' to second order, exactly for affine warps
    xi = np.stack([uv[..., 0] ** 2, uv[..., 0] * uv[..., 1], uv[..., 1] ** 2, uv[..., 0], uv[..., 1],
                   np.ones(uv.shape[:-1])], -1)
    pa = p.copy()
    pa[:, 6:] = 0
    Ma = icgn.parameters_to_warp(pa, "quadratic")
    out = xi @ np.swapaxes(Ma, -1, -2)
    np.testing.assert_allclose(out[..., 0], out[..., 3] ** 2, atol=1e-14)
    np.testing.assert_allclose(out[..., 1], out[..., 3] * out[..., 4], atol=1e-14)
    np.testing.assert_allclose(out[..., 2], out[..., 4] ** 2, atol=1e-14)


def test_products_compose_warps_to_second_order():
    rng = np.random.default_rng(1)
    uv = rng.uniform(-1, 1, size=(50, 2))
    for size in (1e-2, 1e-3):
        p, q = rng.normal(scale=size, size=(2, 12))
        Mp, Mq = icgn.parameters_to_warp(p, "quadratic"), icgn.parameters_to_warp(q, "quadratic")
        direct = icgn.warp_points(Mp, icgn.warp_points(Mq, uv))
        product = icgn.warp_points(Mp @ Mq, uv)
        # the truncation drops third-order terms: products of a quadratic coefficient and a shift
        assert np.abs(product - direct).max() < 20 * size ** 2
    # affine warps compose exactly, and the inverse of the matrix inverts the warp
    p, q = rng.normal(scale=0.05, size=(2, 12))
    p[6:], q[6:] = 0, 0
    Mp, Mq = icgn.parameters_to_warp(p, "quadratic"), icgn.parameters_to_warp(q, "quadratic")
    np.testing.assert_allclose(icgn.warp_points(Mp @ Mq, uv), icgn.warp_points(Mp, icgn.warp_points(Mq, uv)),
                               atol=1e-13)
    np.testing.assert_allclose(icgn.warp_points(np.linalg.inv(Mp), icgn.warp_points(Mp, uv)), uv, atol=1e-13)
    # an affine warp as a quadratic one is the same map
    H = icgn.parameters_to_warp(p[:6], "affine")
    np.testing.assert_allclose(icgn.warp_points(icgn.as_quadratic(H), uv), icgn.warp_points(H, uv), atol=1e-14)


def _frame(field, shape, seed=0):
    """Reference f and frame g with g(X + d(X)) = f(X) for the displacement field ``d``
    ((N, 2) px -> (N, 2) px), the pre-image of every frame pixel found by Newton's method."""
    f = texture(seed)
    yy, xx = np.mgrid[0:shape[0], 0:shape[1]].astype(float)
    x = np.stack([xx.ravel(), yy.ravel()], -1)
    X = x.copy()
    for _ in range(50):
        d, J = field(X)
        r = X + d - x
        if np.abs(r).max() < 1e-12:
            break
        X = X - np.linalg.solve(np.eye(2) + J, r[..., None])[..., 0]
    assert np.abs(r).max() < 1e-10
    return f(xx, yy), f(X[:, 0], X[:, 1]).reshape(shape)


def _quadratic_field(c0, q):
    """d(X) = q0 + grad (X - c0) + curvature: q = (12,) in px units about c0."""
    def field(X):
        u, v = (X - c0).T
        up, vp = _quadratic_map(q, u, v)
        d = np.stack([up - u, vp - v], -1)
        J = np.empty((len(X), 2, 2))
        J[:, 0, 0] = q[0] + q[6] * u + q[7] * v
        J[:, 0, 1] = q[1] + q[7] * u + q[8] * v
        J[:, 1, 0] = q[3] + q[9] * u + q[10] * v
        J[:, 1, 1] = q[4] + q[10] * u + q[11] * v
        return d, J
    return field


@pytest.mark.parametrize("shape_function", ["affine", "quadratic"])
def test_a_quadratic_field_is_recovered_by_the_quadratic_shape_function(shape_function):
    c0 = np.array([60.0, 55.0])
    q = np.array([4e-3, -2e-3, 0.7, 3e-3, 5e-3, -0.4, 4e-4, -3e-4, 2e-4, -3e-4, 5e-4, 3e-4])  # per px
    field = _quadratic_field(c0, q)
    ref, img = _frame(field, (110, 120))
    pts = np.array([[60.0, 55.0], [45.0, 50.0], [72.0, 64.0]])
    cfg = dic.DicConfig(subset=41, search=4, shape_function=shape_function, tolerance_px=1e-5, max_iterations=60)
    m = dic.match_subsets(ref, img, pts, config=cfg)
    assert (m.status == st.OK).all()
    err = np.abs(m.displacement - field(pts)[0]).max()
    if shape_function == "quadratic":
        assert err < 1e-3, err
    else:
        # the affine subset averages the curvature over the subset: at its centre a bias of
        # about (u_xx + u_yy) * subset^2 / 24 (here ~0.05 px)
        assert err > 0.01, err


def test_quadratic_subsets_follow_a_sinusoid_better():
    """A sinusoid of 0.5 px amplitude and 60 px period, measured on its crests and troughs with
    31 px subsets: the affine shape function flattens it, the quadratic much less."""
    def field(X):
        k = 2 * np.pi / 60.0
        d = np.stack([np.zeros(len(X)), 0.5 * np.cos(k * X[:, 0])], -1)
        J = np.zeros((len(X), 2, 2))
        J[:, 1, 0] = -0.5 * k * np.sin(k * X[:, 0])
        return d, J
    ref, img = _frame(field, (90, 200), seed=2)
    pts = np.stack([np.arange(30.0, 171.0, 30.0), np.full(5, 45.0)], -1)  # cos = +-1 there
    ratio = {}
    for shape_function in ("affine", "quadratic"):
        m = dic.match_subsets(ref, img, pts, config=dic.DicConfig(subset=31, search=4, shape_function=shape_function))
        assert (m.status == st.OK).all()
        ratio[shape_function] = np.mean(np.abs(m.displacement[:, 1])) / 0.5
    assert ratio["affine"] < 0.85 and ratio["quadratic"] > 0.97, ratio


def test_fit_warp_refuses_quadratic():
    with pytest.raises(ValueError, match="quadratic"):
        icgn.fit_warp(np.zeros((4, 2)), np.zeros((1, 4, 2)), np.ones((1, 4), bool), shape_function="quadratic")


@pytest.mark.gpu
def test_quadratic_gpu_matches_cpu():
    cp = pytest.importorskip("cupy")
    c0 = np.array([60.0, 55.0])
    q = np.array([4e-3, -2e-3, 0.7, 3e-3, 5e-3, -0.4, 4e-4, -3e-4, 2e-4, -3e-4, 5e-4, 3e-4])
    ref, img = _frame(_quadratic_field(c0, q), (110, 120))
    pts = np.array([[60.0, 55.0], [45.0, 50.0], [72.0, 64.0], [20.0, 20.0]])
    cfg = dic.DicConfig(subset=41, search=4, shape_function="quadratic", tolerance_px=1e-5, max_iterations=60)
    host = dic.match_subsets(ref, img, pts, config=cfg)
    dev = dic.match_subsets(cp.asarray(ref), cp.asarray(img), pts, config=cfg)
    np.testing.assert_array_equal(dev.status, host.status)
    np.testing.assert_allclose(dev.displacement, host.displacement, atol=2e-4)
