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


def _collinear_case(shape_function):
    """A 5x5 grid of points, moved by a known warp; problem 1 uses only the middle row (all
    on one line: no warp of either shape function is determined by them)."""
    g = np.linspace(-0.7, 0.7, 5)
    uv = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)
    p = np.array([0.01, -0.02, 0.03, 0.015, -0.01, -0.02, 0.02, -0.01])[:icgn.SHAPE_FUNCTIONS[shape_function]]
    Ht = icgn.parameters_to_warp(p, shape_function)
    moved = icgn.warp_points(Ht, uv)[None].repeat(3, 0)
    valid = np.ones((3, 25), bool)
    valid[1] = False
    valid[1, 10:15] = True
    return uv, moved, valid, Ht


@pytest.mark.parametrize("shape_function", ["homography", "affine"])
def test_fit_warp_gives_nan_for_collinear_points(shape_function):
    """Points all on one line leave the warp undetermined: that problem's warp is NaN (IC-GN then
    reports no start), and the others of the batch are fitted, instead of one error for all."""
    uv, moved, valid, Ht = _collinear_case(shape_function)
    H, used = icgn.fit_warp(uv, moved, valid, shape_function=shape_function, floor=1e-3)
    assert np.isnan(H[1]).all() and not used[1].any()
    for k in (0, 2):
        np.testing.assert_allclose(H[k], Ht, atol=1e-10)
        assert used[k].all()


@pytest.mark.gpu
@pytest.mark.parametrize("shape_function", ["homography", "affine"])
def test_gpu_fit_warp_gives_nan_for_collinear_points(shape_function):
    cp = pytest.importorskip("cupy")
    uv, moved, valid, Ht = _collinear_case(shape_function)
    H, used = icgn.fit_warp(cp.asarray(uv), cp.asarray(moved), cp.asarray(valid), shape_function=shape_function,
                            floor=1e-3)
    H = H.get()
    assert np.isnan(H[1]).all()
    np.testing.assert_allclose(H[[0, 2]], np.stack([Ht, Ht]), atol=1e-10)
    assert used.get()[[0, 2]].all() and not used.get()[1].any()


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


def _mixed_problems(shape_function, seed=3):
    """Problems with every outcome: starts at and near the truth (converge), starts that put part
    of the template off the image (constants over the pixels left inside), starts far enough off
    to leave it, an image with no contrast (fails), no start; 2 templates, 7 images."""
    rng = np.random.default_rng(seed)
    n = icgn.SHAPE_FUNCTIONS[shape_function]
    refs = np.stack([_pair(np.zeros(n), shape_function, seed=s)[0] for s in range(2)])
    imgs, truth = [], []
    for k in range(6):
        p = rng.normal(scale=0.01, size=n)
        p[[2, 5]] = rng.normal(scale=0.05, size=2)
        _, img, Ht = _pair(p, shape_function, seed=k % 2)
        imgs.append(img)
        truth.append(Ht)
    imgs.append(np.zeros_like(imgs[0]))
    tidx, midx, H0 = [], [], []
    for k in range(6):
        for off in ((0, 0), (0.01, -0.01), (0.2, 0.1), (-0.25, 0.0), (0.7, 0.0)):
            T = truth[k].copy()
            T[:2, 2] += off
            tidx.append(k % 2)
            midx.append(k)
            H0.append(T)
    tidx += [0, 1]
    midx += [6, 0]
    H0 += [np.eye(3), np.full((3, 3), np.nan)]
    return refs, np.stack(imgs), np.array(tidx), np.array(midx), np.stack(H0)


@pytest.mark.gpu
@pytest.mark.parametrize("shape_function", ["homography", "affine"])
@pytest.mark.parametrize("max_iterations", [50, 2])
def test_gpu_iterations_match_the_host_problem_by_problem(shape_function, max_iterations):
    """The GPU's iterations (sums and update kernels, one wait per iteration; problems partly off
    the image through the host's step) against the NumPy path: every status and iteration count,
    and the warps, ZNCC and fraction outside."""
    cp = pytest.importorskip("cupy")

    refs, imgs, tidx, midx, H0 = _mixed_problems(shape_function)
    coef = icgn.spline_coefficients(imgs)
    tpl_h = icgn.make_templates(refs, pixels=_disc(40), origin=ORIGIN, scale=S, shape_function=shape_function)
    want = icgn.register(tpl_h, coef, template_index=tidx, image_index=midx, initial=H0,
                         max_iterations=max_iterations)
    got = icgn.register(_on_device(tpl_h, cp), cp.asarray(coef), template_index=cp.asarray(tidx),
                        image_index=cp.asarray(midx), initial=cp.asarray(H0), max_iterations=max_iterations)
    got = {k: getattr(got, k).get() for k in ("warp", "iterations", "status", "zncc", "outside")}
    # every outcome is there, and problems reached the path of constants over the pixels inside
    codes = set(want.status.tolist())
    assert {icgn.ICGN_CONVERGED, icgn.ICGN_MAX_ITERATIONS, icgn.ICGN_FAILED, icgn.ICGN_NO_START} <= codes
    assert max_iterations == 2 or icgn.ICGN_LEFT_IMAGE in codes
    assert (want.outside > 0).sum() >= 5
    np.testing.assert_array_equal(got["status"], want.status)
    np.testing.assert_array_equal(got["iterations"], want.iterations)
    np.testing.assert_array_equal(np.isnan(got["warp"]), np.isnan(want.warp))
    np.testing.assert_allclose(got["warp"], want.warp, rtol=0, atol=1e-9)
    np.testing.assert_allclose(got["zncc"], want.zncc, rtol=1e-6, equal_nan=True)
    np.testing.assert_allclose(got["outside"], want.outside, rtol=1e-6, atol=1e-7)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(3, 1, 7), (2, 5, 1), (1, 1, 1), (2, 17, 23), (4, 64, 96), (1, 301, 257),
                                   (2, 3, 40, 29)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint16, np.int16])
def test_gpu_spline_coefficients_match_scipy_in_float64(shape, dtype):
    """kernels/spline_prefilter.cu (a 29-tap cut of the exact prefilter) against scipy's recursive
    filter in float64, mirror boundaries, shorter lines than the taps included."""
    cp = pytest.importorskip("cupy")

    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    x = rng.normal(100, 30, size=shape)
    x = x.astype(dtype) if np.dtype(dtype).kind == "f" else np.rint(x).astype(dtype)
    want = icgn.spline_coefficients(x)
    got = icgn.spline_coefficients(cp.asarray(x))
    assert got.dtype == cp.float32 and got.shape == x.shape
    # float32 rounding of the result; the taps left out are below 1e-8 of the largest value
    np.testing.assert_allclose(got.get(), want, rtol=0, atol=1.5e-7 * np.abs(want).max())


@pytest.mark.gpu
def test_gpu_spline_coefficients_of_real_patterns():
    """kikuchipy's nine real Ni patterns (uint8): the GPU's coefficients are scipy's, in float64."""
    cp = pytest.importorskip("cupy")
    from real_patterns import ni_patterns
    from scipy.ndimage import spline_filter

    p = ni_patterns()
    want = np.stack([spline_filter(q.astype(np.float64), order=3, mode="mirror", output=np.float64) for q in p])
    got = icgn.spline_coefficients(cp.asarray(p)).get()
    np.testing.assert_allclose(got, want, rtol=0, atol=1.5e-7 * np.abs(want).max())


@pytest.mark.gpu
@pytest.mark.parametrize("shape_function", ["homography", "affine"])
@pytest.mark.parametrize("m", [25, 49, 9])
def test_gpu_fit_warp_matches_the_host_fit(shape_function, m):
    """kernels/warp_fit.cu against the NumPy fit: the same points dropped and the same warps, over
    problems with no outlier, one, several, NaN matches, and too few matches to fit."""
    cp = pytest.importorskip("cupy")

    rng = np.random.default_rng(m)
    n = icgn.SHAPE_FUNCTIONS[shape_function]
    side = int(round(np.sqrt(m)))
    g = np.linspace(-0.7, 0.7, side)
    uv = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)
    B = 400
    p = rng.normal(scale=0.01, size=(B, n))
    moved = icgn.warp_points(icgn.parameters_to_warp(p, shape_function), uv)
    moved += rng.normal(scale=2e-4, size=moved.shape)
    bad = rng.random((B, m)) < 0.08  # gross errors, of a few to a hundred noise levels
    moved[bad] += rng.normal(scale=0.01, size=(bad.sum(), 2)) * rng.choice([0.3, 3.0], size=(bad.sum(), 1))
    moved[rng.random((B, m)) < 0.02] = np.nan
    valid = rng.random((B, m)) > 0.05
    valid[:8, 2:] = False  # two points left: too few for any warp
    want_H, want_used = icgn.fit_warp(uv, moved, valid, shape_function=shape_function, floor=1e-3)
    got_H, got_used = icgn.fit_warp(cp.asarray(uv), cp.asarray(moved), cp.asarray(valid),
                                    shape_function=shape_function, floor=1e-3)
    assert (want_used != valid).sum() > B // 4  # the test drops points, NaN ones and outliers
    np.testing.assert_array_equal(got_used.get(), want_used)
    np.testing.assert_array_equal(np.isnan(got_H.get()), np.isnan(want_H))
    assert np.isnan(want_H[:8]).all() and np.isfinite(want_H[8:]).all()
    np.testing.assert_allclose(got_H.get(), want_H, rtol=0, atol=1e-12)


@pytest.mark.gpu
def test_gpu_iterations_on_real_patterns_match_the_host():
    """kikuchipy's nine real Ni patterns, every pair registered (as tests/test_refine.py does on
    the CPU): the GPU's iterations give the NumPy path's statuses, and its warps where both
    converged."""
    cp = pytest.importorskip("cupy")
    from real_patterns import ni_patterns

    from ebsdxc.backend import select_backend
    from ebsdxc.preprocess import PatternPreprocessor, PreprocessConfig

    pre = PatternPreprocessor(PreprocessConfig(dynamic_background_sigma=6.0), select_backend("cpu"))
    p = np.asarray(pre(ni_patterns().astype(np.float32)))
    h, w = p.shape[1:]
    o, s = np.array([(w - 1) / 2, (h - 1) / 2]), max(h, w) / 2
    yy, xx = np.mgrid[5:h - 5, 5:w - 5]
    pix = np.stack([xx.ravel(), yy.ravel()], -1)
    tpl = icgn.make_templates(p, pixels=pix, origin=o, scale=s)
    coef = icgn.spline_coefficients(p)
    j, k = (a.ravel() for a in np.meshgrid(np.arange(9), np.arange(9), indexing="ij"))
    H0 = np.repeat(np.eye(3)[None], 81, 0)
    kw = dict(tolerance=1e-3, max_iterations=200)
    want = icgn.register(tpl, coef, template_index=j, image_index=k, initial=H0, **kw)
    got = icgn.register(_on_device(tpl, cp), cp.asarray(coef), template_index=cp.asarray(j),
                        image_index=cp.asarray(k), initial=cp.asarray(H0), **kw)
    np.testing.assert_array_equal(got.status.get(), want.status)
    both = want.status == icgn.ICGN_CONVERGED
    assert both.sum() > 70
    same = both & (got.iterations.get() == want.iterations)
    assert same.sum() >= both.sum() - 2  # pairs that creep may stop an iteration apart
    c = tpl.corners[0]
    gap = np.abs(icgn.warp_points(got.warp.get(), c) - icgn.warp_points(want.warp, c)).max(axis=(1, 2)) * s
    assert gap[same].max() < 1e-8  # px
    assert gap[both].max() < 2e-3  # px: an iteration apart moves no corner by more than the tolerance


@pytest.mark.gpu
@pytest.mark.parametrize("shape_function", ["homography", "quadratic"])
def test_gpu_register_takes_more_problems_than_a_grid_has_rows(shape_function):
    """The sums kernel's problems are its grid's rows (at most 65,535): 66,000 problems run in
    parts, and every one gives the NumPy result of the same problem."""
    cp = pytest.importorskip("cupy")

    ref, img, _ = _pair([0.004, -0.003, 0.2, 0.002, 0.003, -0.1, 0.0, 0.0])  # affine: both shapes reach it
    tpl = icgn.make_templates(ref[None], pixels=_disc(12), origin=ORIGIN, scale=S, shape_function=shape_function)
    coef = icgn.spline_coefficients(img[None])
    start = icgn.translation_warp(np.array([0.19, -0.09]), shape_function)[None]
    want = icgn.register(tpl, coef, template_index=[0], initial=start)
    P = 66_000
    got = icgn.register(_on_device(tpl, cp), cp.asarray(coef), template_index=cp.zeros(P, dtype=cp.int64),
                        image_index=cp.zeros(P, dtype=cp.int64), initial=cp.asarray(np.repeat(start, P, 0)))
    assert want.status[0] == icgn.ICGN_CONVERGED
    assert (got.status.get() == want.status[0]).all() and (got.iterations.get() == want.iterations[0]).all()
    np.testing.assert_allclose(got.warp.get(), np.repeat(want.warp, P, 0), rtol=0, atol=1e-9)
