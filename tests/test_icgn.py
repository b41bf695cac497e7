"""IC-GN core (ebsdxc.icgn): exact warps of analytic images, partial overlaps, failures, the
starting-warp fit, and the fused CUDA kernel against the float64 NumPy oracle."""

from __future__ import annotations

import numpy as np
import pytest
from exact_warps import texture

from ebsdxc import icgn

H_, W_ = 96, 112
ORIGIN = np.array([(W_ - 1) / 2, (H_ - 1) / 2])
S = 48.0


def _field(seed=0):
    return texture(seed, n=14, spread=0.22)


def _pair(p_true, shape_function="homography", seed=0):
    """Reference f on the pixel grid and the image g with g(W(x)) = f(x), both sampled exactly."""
    f = _field(seed)
    yy, xx = np.mgrid[0:H_, 0:W_].astype(float)
    Ht = icgn.parameters_to_warp(np.asarray(p_true, float), shape_function)
    uv = np.stack([(xx - ORIGIN[0]) / S, (yy - ORIGIN[1]) / S], -1).reshape(-1, 2)
    src = icgn.warp_points(np.linalg.inv(Ht), uv) * S + ORIGIN
    return f(xx, yy), f(src[:, 0], src[:, 1]).reshape(H_, W_), Ht


def _disc(radius=36):
    yy, xx = np.mgrid[0:H_, 0:W_]
    r = (xx - ORIGIN[0]) ** 2 + (yy - ORIGIN[1]) ** 2 < radius**2
    return np.stack([xx[r], yy[r]], -1)


def _corner_error(H, Ht, tpl):
    c = tpl.corners[0]
    return np.abs(icgn.warp_points(H, c) - icgn.warp_points(Ht, c)).max() * S


@pytest.mark.parametrize("shape_function, p", [
    ("homography", [0.01, -0.02, 0.03, 0.015, -0.01, -0.02, 0.01, -0.015]),
    ("affine", [0.02, 0.01, -0.04, -0.015, 0.01, 0.05]),
])
def test_recovers_known_warp(shape_function, p):
    ref, img, Ht = _pair(p, shape_function)
    tpl = icgn.make_templates(ref[None], pixels=_disc(), origin=ORIGIN, scale=S, shape_function=shape_function)
    res = icgn.register(tpl, icgn.spline_coefficients(img[None]), template_index=[0], initial=np.eye(3)[None],
                        tolerance=1e-6)
    assert res.status[0] == icgn.ICGN_CONVERGED
    assert 2 <= res.iterations[0] <= 10
    assert res.zncc[0] > 0.99999
    assert _corner_error(res.warp[0], Ht, tpl) < 2e-4  # px, over the whole template


def test_identical_images_give_the_identity_at_once():
    ref, _, _ = _pair(np.zeros(8))
    tpl = icgn.make_templates(ref[None], pixels=_disc(), origin=ORIGIN, scale=S)
    res = icgn.register(tpl, icgn.spline_coefficients(ref[None]), template_index=[0], initial=np.eye(3)[None])
    assert res.status[0] == icgn.ICGN_CONVERGED and res.iterations[0] == 1
    np.testing.assert_allclose(res.warp[0], np.eye(3), atol=1e-7)
    assert res.zncc[0] == pytest.approx(1.0, abs=1e-6)


def test_batch_of_problems_with_shared_image_and_templates():
    """Several templates (subsets of one image, as DIC uses them) against one deformed image."""
    p = [0.01, 0.0, 0.05, 0.0, -0.01, -0.03]
    ref, img, Ht = _pair(p, "affine", seed=3)
    yy, xx = np.mgrid[0:21, 0:21]
    pix = []
    origins = []
    for cx, cy in ((35, 30), (70, 40), (50, 65)):
        pix.append(np.stack([xx.ravel() + cx - 10, yy.ravel() + cy - 10], -1))
        origins.append((cx, cy))
    tpl = icgn.make_templates(ref[None], pixels=np.stack(pix), image_index=[0, 0, 0], origin=np.array(origins, float),
                              scale=10.0, shape_function="affine")
    # the subset warp about its own centre: W_subset = T(-o) W T(o) in normalised units
    starts = np.repeat(np.eye(3)[None], 3, 0)
    res = icgn.register(tpl, icgn.spline_coefficients(img[None]), template_index=[0, 1, 2], image_index=[0, 0, 0],
                        initial=starts, tolerance=1e-6)
    assert (res.status == icgn.ICGN_CONVERGED).all()
    for t, (cx, cy) in enumerate(origins):
        centre_true = icgn.warp_points(Ht, (np.array([[cx, cy]]) - ORIGIN) / S)[0] * S + ORIGIN
        centre = icgn.warp_points(res.warp[t], np.zeros((1, 2)))[0] * 10.0 + (cx, cy)
        assert np.abs(centre - centre_true).max() < 1e-3


def test_part_of_the_template_off_the_image_is_left_out_exactly():
    p = [0.0, 0.0, 0.45, 0.0, 0.0, 0.3, 0.0, 0.0]  # 21.6 px right, 14.4 px down: the disc leaves the image
    ref, img, Ht = _pair(p)
    tpl = icgn.make_templates(ref[None], pixels=_disc(38), origin=ORIGIN, scale=S)
    res = icgn.register(tpl, icgn.spline_coefficients(img[None]), template_index=[0],
                        initial=icgn.translation_warp(np.array([[0.43, 0.29]])), tolerance=1e-6)
    assert res.status[0] == icgn.ICGN_CONVERGED
    assert 0.02 < res.outside[0] < 0.2
    assert res.zncc[0] > 0.9999
    # over the part that stays inside (pixels near the image edge interpolate with mirrored
    # boundaries, which costs a few thousandths of a pixel)
    inner = np.array([[-0.4, -0.4], [0.0, 0.0], [0.2, -0.3], [-0.3, 0.2]])
    err = np.abs(icgn.warp_points(res.warp[0], inner) - icgn.warp_points(Ht, inner)).max() * S
    assert err < 0.005
    strict = icgn.register(tpl, icgn.spline_coefficients(img[None]), template_index=[0],
                           initial=icgn.translation_warp(np.array([[0.43, 0.29]])), max_outside=0.01)
    assert strict.status[0] == icgn.ICGN_LEFT_IMAGE
    assert np.isnan(strict.warp[0]).all()


def test_failures_are_reported_not_hidden():
    ref, img, _ = _pair([0.01, 0, 0, 0, 0, 0, 0, 0])
    tpl = icgn.make_templates(ref[None], pixels=_disc(), origin=ORIGIN, scale=S)
    coef = icgn.spline_coefficients(np.stack([img, np.full_like(img, 3.0), img]))
    start = np.repeat(np.eye(3)[None], 3, 0)
    start[2] = np.nan
    res = icgn.register(tpl, coef, template_index=[0, 0, 0], initial=start, max_iterations=2, tolerance=1e-12)
    assert res.status.tolist() == [icgn.ICGN_MAX_ITERATIONS, icgn.ICGN_FAILED, icgn.ICGN_NO_START]
    assert np.isfinite(res.warp[0]).all()  # not converged: the last warp, flagged
    assert np.isnan(res.warp[1:]).all()


def test_fit_warp_recovers_a_homography_and_drops_outliers():
    rng = np.random.default_rng(1)
    uv = rng.uniform(-0.8, 0.8, size=(25, 2))
    Ht = icgn.parameters_to_warp(np.array([0.01, -0.02, 0.03, 0.015, -0.01, -0.02, 0.02, -0.01]))
    moved = icgn.warp_points(Ht, uv)[None].repeat(3, 0)
    moved[1, 4] += 0.2  # one bad match
    valid = np.ones((3, 25), bool)
    valid[2, 3:] = False  # three matches: too few for a homography
    H, used = icgn.fit_warp(uv, moved, valid, floor=1e-3)
    np.testing.assert_allclose(H[0], Ht, atol=1e-10)
    np.testing.assert_allclose(H[1], Ht, atol=1e-10)
    assert not used[1, 4] and used[1].sum() == 24
    assert np.isnan(H[2]).all() and not used[2].any()


def test_bad_arguments_name_the_parameter():
    ref, _, _ = _pair(np.zeros(8))
    with pytest.raises(ValueError, match="shape_function"):
        icgn.make_templates(ref[None], pixels=_disc(), origin=ORIGIN, scale=S, shape_function="cubic")
    with pytest.raises(ValueError, match="pixels must lie inside"):
        icgn.make_templates(ref[None], pixels=np.array([[W_, 0]]), origin=ORIGIN, scale=S)
    with pytest.raises(ValueError, match="no contrast"):
        icgn.make_templates(np.ones((1, H_, W_)), pixels=_disc(), origin=ORIGIN, scale=S)
    tpl = icgn.make_templates(ref[None], pixels=_disc(), origin=ORIGIN, scale=S)
    with pytest.raises(ValueError, match="max_iterations"):
        icgn.register(tpl, icgn.spline_coefficients(ref[None]), template_index=[0], initial=np.eye(3)[None],
                      max_iterations=0)


@pytest.mark.gpu
def test_gpu_kernel_matches_the_float64_oracle():
    cp = pytest.importorskip("cupy")
    from ebsdxc.icgn import _sums_gpu, _sums_host

    rng = np.random.default_rng(5)
    refs = np.stack([_pair(np.zeros(8), seed=s)[0] for s in (0, 1)])
    imgs = np.stack([_pair(rng.normal(scale=0.01, size=8), seed=s % 2)[1] for s in range(6)])
    for shape_function in ("homography", "affine", "quadratic"):
        n = icgn.SHAPE_FUNCTIONS[shape_function]
        tpl_h = icgn.make_templates(refs, pixels=_disc(40), origin=ORIGIN, scale=S, shape_function=shape_function)
        tpl_d = icgn.make_templates(cp.asarray(refs), pixels=cp.asarray(_disc(40)), origin=ORIGIN, scale=S,
                                    shape_function=shape_function)
        for name in ("u", "v", "f", "fu", "fv", "w"):
            np.testing.assert_allclose(getattr(tpl_d, name).get(), getattr(tpl_h, name), rtol=1e-5, atol=1e-5)
        p = rng.normal(scale=0.02, size=(6, n))
        p[:, [2, 5]] = rng.normal(scale=0.3, size=(6, 2))  # translations of ~15 px: some pixels leave the image
        H = icgn.parameters_to_warp(p, shape_function)
        tidx = np.array([0, 1, 0, 1, 0, 1])
        coef = icgn.spline_coefficients(imgs)
        want = _sums_host(coef, tpl_h, tidx, np.arange(6), H)
        got = _sums_gpu(cp.asarray(coef), _on_device(tpl_h, cp), cp.asarray(tidx), cp.arange(6),
                        cp.asarray(H)).get()
        scale = np.abs(want).max(axis=0) + 1e-12
        assert (np.abs(got - want) / scale).max() < 1e-9
        assert want[:, -1].max() > 0  # some problems reach off the image: that count is compared too
        res_h = icgn.register(tpl_h, coef, template_index=tidx, initial=np.repeat(np.eye(3)[None], 6, 0))
        res_d = icgn.register(tpl_d, cp.asarray(coef), template_index=cp.asarray(tidx),
                              initial=cp.asarray(np.repeat(np.eye(3)[None], 6, 0)))
        assert (res_d.status.get() == res_h.status).all()
        np.testing.assert_allclose(res_d.warp.get(), res_h.warp, atol=1e-6)


def _on_device(tpl, cp):
    import dataclasses

    host = {f.name: getattr(tpl, f.name) for f in dataclasses.fields(tpl)}
    return dataclasses.replace(tpl, **{k: cp.asarray(v) for k, v in host.items() if isinstance(v, np.ndarray)})
