"""ROI-only transfers (issue 18 item 1): the crop of what travels to the device, against the
tiles cut from whole patterns (CPU), and the copy engine's crop against NumPy's (GPU)."""

import os

import numpy as np
import pytest

from ebsdxc.backend import select_backend
from ebsdxc.config import EngineConfig, PreprocessConfig, ProcessConfig, RoiConfig
from ebsdxc.rois import RoiLayout, extract_tiles, grid_layout, ring_layout
from ebsdxc.run.transfer import copy_efficiency, plan_transfer


def _random_layout(rng, shape, n, size):
    H, W = shape
    w, h = size
    x0 = rng.integers(0, W - w + 1, n)
    y0 = rng.integers(0, H - h + 1, n)
    return RoiLayout(np.column_stack([x0 + (w - 1) / 2, y0 + (h - 1) / 2]), (w, h))


def test_full_grids_travel_whole():
    # the shipped layouts cover the pattern: nothing to save
    assert plan_transfer(grid_layout((256, 256), grid=(9, 10), size=96, drop_corners=True), (256, 256)) is None
    assert plan_transfer(grid_layout((512, 512), grid=(5, 5), size=128, margin=4), (512, 512)) is None


def test_a_margin_sends_the_bounding_box():
    lay = grid_layout((512, 512), grid=(3, 3), size=128, margin=100)  # overlapping ROIs
    p = plan_transfer(lay, (512, 512))
    assert p is not None and len(p.boxes) == 1
    assert p.shape == (312, 312) and tuple(p.boxes[0]) == (100, 100, 312, 312)
    np.testing.assert_array_equal(p.layout.origins, lay.origins - 100)


def test_a_ring_sends_each_roi():
    lay = ring_layout((512, 512), n=8, size=128)
    p = plan_transfer(lay, (512, 512))
    assert len(p.boxes) == 9 and p.shape == (9 * 128, 128)
    assert p.pixels == 9 * 128 * 128 < 0.75 * 512 * 512
    np.testing.assert_array_equal(p.layout.origins[:, 1], np.arange(9) * 128)
    assert not p.layout.origins[:, 0].any()


def test_narrow_rois_are_not_sent_one_by_one():
    # 9 ROIs of 32x32 = 9,216 px in rows of 64 bytes, or a 152x152 box = 23,104 px in rows of 304
    lay = ring_layout((512, 512), n=8, size=32, radius=60)
    wide = plan_transfer(lay, (512, 512), itemsize=8)
    narrow = plan_transfer(lay, (512, 512), itemsize=2)
    assert len(wide.boxes) == 9 and len(narrow.boxes) == 1
    assert narrow.pixels == 152 * 152


def test_copy_efficiency_grows_with_the_row():
    e = [copy_efficiency(b) for b in (32, 64, 100, 128, 256, 512, 4096)]
    assert e == sorted(e) and e[0] == e[1] > 0 and e[-1] == e[-2] == 1.0


def test_nothing_smaller_is_no_plan():
    lay = ring_layout((160, 160), n=4, size=64, radius=40)
    assert plan_transfer(lay, (160, 160)) is None
    assert plan_transfer(lay, (160, 160), max_fraction=1.0) is not None


@pytest.mark.parametrize("seed", range(6))
def test_tiles_cut_from_the_crop_are_the_tiles_of_the_pattern(seed):
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(100, 300)), int(rng.integers(100, 300)))
    size = (int(rng.integers(4, 80)), int(rng.integers(4, 80)))
    lay = _random_layout(rng, shape, int(rng.integers(1, 12)), size)  # overlapping ROIs too
    p = plan_transfer(lay, shape, itemsize=8, max_fraction=np.inf)
    patterns = rng.integers(0, 65535, (3, *shape), dtype=np.uint16)
    crop = p.crop(patterns)
    assert crop.shape == (3, *p.shape)
    np.testing.assert_array_equal(extract_tiles(crop, p.layout, np), extract_tiles(patterns, lay, np))


def test_outside_roi_is_refused():
    lay = RoiLayout([[150.5, 20.5]], (32, 32))
    with pytest.raises(Exception, match="outside"):
        plan_transfer(lay, (100, 160))


def _ring_config(**preprocess):
    return ProcessConfig(roi=RoiConfig(layout="ring", n=2, size=64, radius=48, include_centre=False),
                         preprocess=PreprocessConfig(**preprocess),
                         correlation=EngineConfig(mode="window", max_shift=8, subpixel="quadratic"))


def test_pipeline_results_from_the_crop_are_those_of_whole_patterns(sample_dir):
    from ebsdxc.io import open_scan
    from ebsdxc.rois import layout_for
    from ebsdxc.run import Pipeline

    config = _ring_config()
    source = open_scan(os.path.join(sample_dir, "scan.h5"))
    patterns = source.read(0, 20)
    lay = layout_for(config.roi, source.pattern_shape)
    pipe = Pipeline(select_backend("cpu"), config, lay, patterns[0])
    assert pipe.rois_only
    assert pipe.transfer_plan(source.pattern_shape, 2) is None  # nothing travels on the CPU
    whole = pipe.match(patterns)
    assert np.isfinite(whole.displacement).all()
    for itemsize, boxes in ((2, 1), (8, 2)):  # the bounding box, the ROIs one by one
        plan = plan_transfer(lay, source.pattern_shape, itemsize=itemsize)
        assert len(plan.boxes) == boxes
        part = pipe.match(plan.crop(patterns), transferred=plan)
        for f in ("displacement", "peak_height", "status"):
            np.testing.assert_array_equal(getattr(part, f), getattr(whole, f))
    pipe.close()


def test_a_pipeline_that_needs_whole_patterns_refuses_a_crop(sample_dir):
    from ebsdxc.io import open_scan
    from ebsdxc.rois import layout_for
    from ebsdxc.run import Pipeline

    config = _ring_config(dynamic_background_sigma=8.0)
    source = open_scan(os.path.join(sample_dir, "scan.h5"))
    patterns = source.read(0, 4)
    lay = layout_for(config.roi, source.pattern_shape)
    pipe = Pipeline(select_backend("cpu"), config, lay, patterns[0])
    assert not pipe.rois_only
    plan = plan_transfer(lay, source.pattern_shape)
    with pytest.raises(ValueError, match="whole patterns"):
        pipe.match(plan.crop(patterns), transferred=plan)
    pipe.close()


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32])
@pytest.mark.parametrize("kind", ["box", "stack"])
@pytest.mark.parametrize("batch", [1, 7])
def test_gpu_copy_is_the_crop(dtype, kind, batch):
    import cupy as cp
    import cupyx

    shape = (300, 220)
    if kind == "box":
        lay = grid_layout(shape, grid=(3, 3), size=80, margin=40)  # overlapping: one box
    else:
        lay = ring_layout(shape, n=5, size=64, radius=70)
    plan = plan_transfer(lay, shape, itemsize=4)
    assert (len(plan.boxes) == 1) == (kind == "box")
    rng = np.random.default_rng(1)
    host = cupyx.empty_pinned((batch, *shape), dtype=dtype)
    host[...] = rng.integers(0, 250, host.shape).astype(dtype)
    dev = cp.full((batch, *plan.shape), 7, dtype=dtype)
    cp.cuda.Device().synchronize()  # the fill ran on the null stream, which the copy's does not wait for
    stream = cp.cuda.Stream(non_blocking=True)
    plan.copy(host, dev, stream)
    stream.synchronize()
    # every pixel of either frame is some ROI's (or the box's): none of the 7s is left
    np.testing.assert_array_equal(dev.get(), plan.crop(np.asarray(host)))
    with pytest.raises(ValueError, match="device must be"):
        plan.copy(host, dev[:, :-1], stream)


@pytest.mark.gpu
def test_gpu_pipeline_on_the_crop_equals_whole_patterns(sample_dir):
    import cupy as cp

    from ebsdxc.io import open_scan
    from ebsdxc.rois import layout_for
    from ebsdxc.run import Pipeline

    config = _ring_config()
    source = open_scan(os.path.join(sample_dir, "scan.h5"))
    patterns = source.read(0, 30)
    lay = layout_for(config.roi, source.pattern_shape)
    backend = select_backend("cuda")
    with backend.use():
        pipe = Pipeline(backend, config, lay, patterns[0], batch=30)
        assert pipe.transfer_plan(source.pattern_shape, 2) is not None
        whole = pipe.match(cp.asarray(patterns))
        for itemsize in (2, 8):  # the bounding box, the ROIs one by one
            plan = plan_transfer(lay, source.pattern_shape, itemsize=itemsize)
            part = pipe.match(cp.asarray(plan.crop(patterns)), transferred=plan)
            for f in ("displacement", "peak_height", "status"):
                np.testing.assert_array_equal(cp.asnumpy(getattr(part, f)), cp.asnumpy(getattr(whole, f)))
        pipe.close()


@pytest.mark.gpu
def test_gpu_run_with_rois_only_equals_the_cpu(tmp_path, sample_dir):
    from ebsdxc.config import RunConfig
    from ebsdxc.io.results import read_results
    from ebsdxc.run import process

    config = _ring_config()
    out = {}
    for dev in ("cpu", "cuda"):
        out[dev] = read_results(process(os.path.join(sample_dir, "scan.h5"), ref=os.path.join(sample_dir, "ref.tif"),
                                        output=str(tmp_path / f"{dev}.h5"), config=config,
                                        run=RunConfig(device=dev, batch=16)))
    np.testing.assert_array_equal(out["cuda"]["status"], out["cpu"]["status"])
    np.testing.assert_allclose(out["cuda"]["displacement"], out["cpu"]["displacement"], atol=2e-3)
