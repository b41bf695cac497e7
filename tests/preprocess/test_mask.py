"""Detector mask: circular_mask, rois_inside_mask and the fill of the off-screen pixels."""

from __future__ import annotations

import numpy as np
import pytest
from preprocess_oracles import bin_oracle, fill_oracle, host, mask_oracle, seeded

from ebsdxc.preprocess import PatternPreprocessor, PreprocessConfig, circular_mask, rois_inside_mask

# ================================================================ circular_mask

@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (7, 5), (10, 13), (33, 32), (2, 9)])
@pytest.mark.parametrize("geom", [(None, None), ((1.0, 2.0), None), (None, 2.5), ((3.5, 0.0), 4.0),
                                  ((-3.0, 20.0), 6.2), ((0.0, 0.0), 0.5)])
def test_circular_mask_matches_loops(xp, shape, geom):
    centre, radius = geom
    m = circular_mask(shape, centre=centre, radius=radius, xp=xp)
    assert type(m) is xp.ndarray and m.dtype == bool and m.shape == shape
    np.testing.assert_array_equal(host(m), mask_oracle(shape, centre, radius))


def test_circular_mask_convention():
    m = circular_mask((5, 7))  # centre (3, 2), radius 2.5
    assert m[2, 3] and m[0, 3] and m[2, 1] and m[2, 5] and not m[2, 0] and not m[0, 0]
    # x is the column: a centre at x = 0 (left edge) keeps the left column, not the top row
    m = circular_mask((9, 9), centre=(0.0, 4.0), radius=1.0)
    assert m[4, 0] and m[4, 1] and m[3, 0] and not m[0, 4] and m.sum() == 4


@pytest.mark.parametrize("bad", [dict(radius=0), dict(radius=-1.0), dict(radius=float("nan")),
                                 dict(centre=(1.0,)), dict(centre=(1.0, float("inf"))), dict(centre="middle")])
def test_circular_mask_bad_options(bad):
    with pytest.raises(ValueError):
        circular_mask((10, 10), **bad)


# ================================================================ rois_inside_mask

def inside_oracle(mask, origins, size):
    H, W = mask.shape
    w, h = size
    out = []
    for x0, y0 in origins:
        ok = True
        for y in range(y0, y0 + h):
            for x in range(x0, x0 + w):
                ok &= 0 <= y < H and 0 <= x < W and bool(mask[y, x])
        out.append(ok)
    return np.array(out, bool)


@pytest.mark.parametrize("shape,size", [((40, 40), (8, 8)), ((31, 45), (5, 9)), ((12, 7), (1, 1)),
                                        ((60, 50), (20, 13))])
def test_rois_inside_mask_matches_loops(xp, shape, size):
    rng = seeded("inside", shape, size)
    mask = circular_mask(shape, radius=min(shape) / 2 - 1, xp=xp)
    H, W = shape
    w, h = size
    origins = np.stack([rng.integers(-w, W + 1, 60), rng.integers(-h, H + 1, 60)], axis=1)
    got = rois_inside_mask(mask, origins, size)
    want = inside_oracle(host(mask), origins, size)
    assert got.dtype == bool and got.shape == (60,)
    np.testing.assert_array_equal(got, want)
    assert want.any() and not want.all()  # the sample tests both answers


def test_rois_inside_mask_with_a_layout():
    from ebsdxc.rois import grid_layout

    shape = (160, 160)
    lay = grid_layout(shape, grid=(5, 5), size=32)
    mask = circular_mask(shape)
    got = rois_inside_mask(mask, lay.origins, lay.size)
    np.testing.assert_array_equal(got, inside_oracle(mask, lay.origins, lay.size))
    corners = [0, 4, 20, 24]
    assert not got[corners].any() and got[12]
    assert rois_inside_mask(np.ones(shape, bool), lay.origins, lay.size).all()


def test_rois_inside_mask_bad_input():
    with pytest.raises(ValueError):
        rois_inside_mask(np.ones((4, 4, 2), bool), [[0, 0]], (2, 2))
    with pytest.raises(ValueError):
        rois_inside_mask(np.ones((4, 4), bool), [[0, 0]], (0, 2))
    with pytest.raises(ValueError):
        rois_inside_mask(np.ones((4, 4), bool), [[0.5, 0]], (2, 2))


# ================================================================ mask fill

@pytest.mark.parametrize("shape", [(21, 21), (30, 47), (1, 6), (9, 4)])
def test_mask_fill_without_filters(be, shape):
    xp = be.xp
    rng = seeded("fill", shape)
    pats = rng.uniform(0, 1000, (3,) + shape)
    pats[1, shape[0] // 2, shape[1] // 2] = np.nan  # on screen: stays NaN, not in the mean
    pats[2, 0, 0] = np.inf  # off screen (a corner): filled
    pp = PatternPreprocessor(PreprocessConfig(mask="circle"), be)
    assert not pp.is_identity
    out = host(pp(xp.asarray(pats)))
    mask = mask_oracle(shape)
    want = fill_oracle(pats, mask)
    np.testing.assert_allclose(out, want, rtol=1e-6, equal_nan=True)
    assert np.isnan(out[1, shape[0] // 2, shape[1] // 2]) and np.isfinite(out[2]).all()
    np.testing.assert_array_equal(out[:, mask][np.isfinite(out[:, mask])],
                                  pats.astype(np.float32)[:, mask][np.isfinite(out[:, mask])])
    np.testing.assert_array_equal(pp.screen_mask(shape), mask)


def test_mask_with_static_divide_leaves_no_nan_off_screen(be):
    xp = be.xp
    shape = (40, 40)
    mask = mask_oracle(shape)
    bg = np.where(mask, 50.0, 0.0)  # a static background that is 0 off the screen
    pats = seeded("div").uniform(100, 200, (2,) + shape)
    cfg = PreprocessConfig(mask="circle", static_operation="divide", dynamic_background_sigma=4.0)
    out = host(PatternPreprocessor(cfg, be, static_background=bg)(xp.asarray(pats)))
    assert np.isfinite(out).all()
    without = host(PatternPreprocessor(PreprocessConfig(static_operation="divide", dynamic_background_sigma=4.0), be,
                                       static_background=bg)(xp.asarray(pats)))
    assert np.isnan(without[:, ~mask]).all()  # the NaNs the mask fill prevents


def disk_pattern(shape, radius, seed, *, rim=5.0):
    H, W = shape
    y, x = np.mgrid[0:H, 0:W].astype(float)
    rng = np.random.default_rng(seed)
    tex = 100 * np.ones(shape)
    for _ in range(10):
        th, off = rng.uniform(0, np.pi), rng.uniform(-40, 40)
        d = (x - W / 2) * np.cos(th) + (y - H / 2) * np.sin(th) - off
        tex += rng.uniform(5, 15) * np.exp(-d ** 2 / (2 * rng.uniform(2, 4) ** 2))
    r = np.hypot(x - (W - 1) / 2, y - (H - 1) / 2)
    return np.where(r <= radius, tex, rim), tex, r


@pytest.mark.parametrize("opts", [dict(bandpass=(1.0, 10.0)), dict(dynamic_background_sigma=6.0),
                                  dict(bandpass_kind="erf", bandpass_cutoffs=(0.02, 0.3), bandpass_width=0.02),
                                  dict(dynamic_background_sigma=6.0, bandpass=(0.0, 12.0))],
                         ids=["gaussian-bp", "dynamic", "erf-bp", "dynamic+bp"])
def test_dark_rim_leaves_no_edge_inside_the_screen(be, opts):
    """A dark rim outside the screen must not put an edge into the filtered screen."""
    xp = be.xp
    shape, R = (96, 110), 44.0
    pat, tex, r = disk_pattern(shape, R, 3)
    masked = PatternPreprocessor(PreprocessConfig(mask="circle", mask_radius=R, **opts), be)
    plain = PatternPreprocessor(PreprocessConfig(**opts), be)
    out_m = host(masked(xp.asarray(pat[None])))[0]
    out_p = host(plain(xp.asarray(pat[None])))[0]
    # 1. Whatever lies off the screen has no influence at all: the same output for the
    #    pattern with its dark rim and for the texture running on over the whole detector.
    out_t = host(masked(xp.asarray(tex[None])))[0]
    np.testing.assert_array_equal(out_m, out_t)
    # 2. Quantified edge: RMS contrast (about the median of the middle of the screen) in the
    #    5 px just inside the screen edge, against that in the middle of the screen.
    rim = (r > R - 5) & (r <= R)
    mid = r < R - 15

    def rms(o, sel):
        return np.sqrt(np.mean((o[sel] - np.median(o[mid])) ** 2))

    ratio_m, ratio_p = rms(out_m, rim) / rms(out_m, mid), rms(out_p, rim) / rms(out_p, mid)
    assert ratio_p > 4, ratio_p  # without the mask the filters draw the screen edge (5 to 20)
    assert ratio_m < 1.25, ratio_m  # with it, the edge zone looks like the rest of the screen (about 1)
    # 3. Off the screen: one value per pattern, the mean of the on-screen pixels.
    off = ~mask_oracle(shape, radius=R)
    assert np.ptp(out_m[off]) == 0
    assert out_m[off][0] == pytest.approx(out_m[~off].astype(np.float64).mean(), rel=1e-5, abs=1e-6)


def test_constant_screen_stays_constant_with_mask(be):
    xp = be.xp
    R = 30.0
    r = np.hypot(*np.mgrid[0:64, 0:64] - 31.5)
    pat = np.where(r <= R, 200.0, 3.0)
    opts = dict(bandpass=(0.0, 6.0))
    out_m = host(PatternPreprocessor(PreprocessConfig(mask="circle", mask_radius=R, **opts), be)(
        xp.asarray(pat[None])))[0]
    out_p = host(PatternPreprocessor(PreprocessConfig(**opts), be)(xp.asarray(pat[None])))[0]
    inside = r <= R
    assert np.abs(out_m[inside]).max() < 1e-3  # high-passed constant: 0 (of a 197 step)
    assert np.abs(out_p[inside]).max() > 20


@pytest.mark.parametrize("f", [1, 2, 4])
def test_screen_mask_in_stored_pixels(be, f):
    raw = (96, 128)
    cfg = PreprocessConfig(binning=f, mask="circle", mask_centre=(70.5, 40.5), mask_radius=36.0)
    pp = PatternPreprocessor(cfg, be)
    m = pp.screen_mask(raw)
    assert m.shape == (raw[0] // f, raw[1] // f) and m.dtype == bool
    # a binned pixel's centre is at stored x = f * j + (f - 1) / 2
    np.testing.assert_array_equal(m, mask_oracle(m.shape, ((70.5 + 0.5) / f - 0.5, (40.5 + 0.5) / f - 0.5),
                                                 36.0 / f))
    # the default screen is the same circle whatever the binning
    d = PatternPreprocessor(PreprocessConfig(binning=f, mask="circle"), be).screen_mask(raw)
    np.testing.assert_array_equal(d, mask_oracle(d.shape))
    assert PatternPreprocessor(PreprocessConfig(binning=f), be).screen_mask(raw) is None
    # the preprocessor fills with that same mask
    pats = seeded("sm", f).uniform(0, 10, (2,) + raw)
    out = host(pp(be.xp.asarray(pats)))
    np.testing.assert_allclose(out, fill_oracle(bin_oracle(pats, f), m), rtol=2e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.float32])
@pytest.mark.parametrize("shape", [(96, 110), (1, 6), (33, 20)])
def test_gpu_fill_of_the_screen_mask_against_the_oracle(dtype, shape):
    """The GPU's fill for the screen mask (one float64 reduction, one pass that converts as it
    fills; both index widths): on-screen pixels converted bit for bit, off-screen ones the mean
    of the pattern's on-screen pixels."""
    cp = pytest.importorskip("cupy")
    from ebsdxc.preprocess import _fill_gpu, _fill_kernel

    rng = seeded("gpu-fill", shape, np.dtype(dtype).name)
    lo, hi = (-300, 300) if dtype == np.int16 else (0, 250)
    x = rng.uniform(lo, hi, (4,) + shape)
    x = x.astype(dtype) if dtype == np.float32 else np.rint(x).astype(dtype)
    mask = mask_oracle(shape)
    want = fill_oracle(x, mask)
    got = _fill_gpu(cp.asarray(x), cp.asarray(mask), int(mask.sum())).get()
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got[:, mask], x.astype(np.float32)[:, mask])
    np.testing.assert_allclose(got, want, rtol=1e-6 if mask.any() else 0)
    fill = cp.asarray(want[:, ~mask][:, :1].astype(np.float32).ravel() if (~mask).any() else np.zeros(4, np.float32))
    wide = _fill_kernel(True, False)(cp.asarray(x), cp.asarray(mask), fill, mask.size, size=x.size).get()
    np.testing.assert_array_equal(wide.reshape(x.shape)[:, mask], x.astype(np.float32)[:, mask])
    # usable pixels per pattern (the screen less NaN found in float patterns), counted on the device
    ok = np.broadcast_to(mask, x.shape).copy()
    ok[1, :, : shape[1] // 2] = False
    ok[2] = False
    got = _fill_gpu(cp.asarray(x), cp.asarray(ok)).get()
    want = np.stack([np.where(o, p, p[o].astype(np.float64).mean() if o.any() else 0.0) for p, o in zip(x, ok)])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(got[ok], x.astype(np.float32)[ok])
    wide = _fill_kernel(True, True)(cp.asarray(x), cp.asarray(ok), cp.asarray(got[:, 0, 0]), mask.size,
                                    size=x.size).get()
    np.testing.assert_array_equal(wide.reshape(x.shape)[ok], x.astype(np.float32)[ok])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16])
@pytest.mark.parametrize("opts", [{}, dict(dynamic_background_sigma=6.0), dict(bandpass=(1.0, 10.0))],
                         ids=["mask", "dynamic", "gaussian-bp"])
def test_gpu_integer_patterns_with_a_screen_mask_match_the_cpu(dtype, opts):
    """Integer patterns meet the screen mask unconverted on the GPU (its fill converts them):
    the whole preprocessing gives the CPU's result, and one off-screen value per pattern."""
    cp = pytest.importorskip("cupy")
    from ebsdxc.backend import select_backend

    shape, R = (96, 110), 44.0
    scale = 200 if dtype == np.uint8 else 3000
    pats = np.stack([disk_pattern(shape, R, s)[0] for s in range(3)])
    pats = np.rint(pats / pats.max() * scale).astype(dtype)
    cfg = PreprocessConfig(mask="circle", mask_radius=R, **opts)
    cpu = np.asarray(PatternPreprocessor(cfg, select_backend("cpu"))(pats))
    gpu = PatternPreprocessor(cfg, select_backend("cuda"))(cp.asarray(pats)).get()
    np.testing.assert_allclose(gpu, cpu, rtol=0, atol=2e-6 * np.abs(cpu).max())
    off = ~mask_oracle(shape, radius=R)
    assert all(np.ptp(g[off]) == 0 for g in gpu)
