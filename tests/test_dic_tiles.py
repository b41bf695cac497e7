"""Tiled DIC (``dic.tile``): frames larger than a tile matched window by window, read lazily,
against whole-image matching and the exact field; and the readers' windows."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import tifffile
from exact_warps import affine_pair
from PIL import Image

from ebsdxc import cli, dic, dic_tiles
from ebsdxc import io as scan_io
from ebsdxc import status as st
from ebsdxc.errors import InputError
from ebsdxc.io.tiff_stack import TiffStackSource

CFG = dic.DicConfig(enabled=True, subset=31, step=10)
G = np.array([[4e-3, 1e-3], [-2e-3, 3e-3]])
T = (37.3, -21.6)


def _reader(image):
    return lambda rows, cols: image[rows[0]:rows[1], cols[0]:cols[1]]


@pytest.fixture(scope="module")
def pair():
    return affine_pair(G, T, (400, 520), seed=3)


def test_tiles_agree_with_whole_images_and_the_truth(pair):
    ref, img = pair
    pts, inside = dic.subset_grid(ref.shape, subset=31, step=10)
    whole = dic.match_subsets(ref, img, pts, config=CFG, valid=inside.reshape(-1))
    tiled = dic_tiles.match_tiled(_reader(ref), _reader(img), ref.shape, pts, config=CFG, valid=inside.reshape(-1),
                                  tile=160, margin=48)
    assert len(dic_tiles.tile_windows(pts, subset=31, step=10, tile=160, margin=48, shift=T, shape=ref.shape)) == 12
    np.testing.assert_array_equal(tiled.status, whole.status)
    ok = tiled.status == st.OK
    assert ok.sum() > 0.8 * ok.size
    # the starts differ (seeds per tile): the same optimum to the IC-GN tolerance
    assert np.abs(tiled.displacement[ok] - whole.displacement[ok]).max() < 2e-3
    truth = np.asarray(T) + pts.reshape(-1, 2) @ G.T
    assert np.abs(tiled.displacement[ok] - truth[ok]).max() < 0.01


def test_a_subset_leaving_its_window_is_not_called_off_the_image():
    # 3% stretch about the corner: up to 15 px of non-rigid motion, no margin for it
    ref, img = affine_pair(np.diag([0.03, 0.03]), (0.0, 0.0), (400, 500), seed=3)
    pts, inside = dic.subset_grid(ref.shape, subset=31, step=10)
    whole = dic.match_subsets(ref, img, pts, config=CFG, valid=inside.reshape(-1))
    tight = dic_tiles.match_tiled(_reader(ref), _reader(img), ref.shape, pts, config=CFG,
                                  valid=inside.reshape(-1), tile=200, margin=0)
    lost = (whole.status == st.OK) & (tight.status != st.OK)
    assert lost.sum() > 10  # subsets that moved out of their tile's window...
    assert (tight.status[lost] == st.REFINE_FAILED).all()  # ...are not measured, not "outside"
    ok = tight.status == st.OK
    truth = pts.reshape(-1, 2) * 0.03
    assert np.abs(tight.displacement[ok] - truth[ok]).max() < 0.01
    roomy = dic_tiles.match_tiled(_reader(ref), _reader(img), ref.shape, pts, config=CFG,
                                  valid=inside.reshape(-1), tile=200, margin=40)
    np.testing.assert_array_equal(roomy.status, whole.status)


def test_binned_image_read_in_blocks_equals_binning_the_whole():
    a = np.random.default_rng(0).normal(size=(203, 317))
    k = 4
    want = a[:200, :316].reshape(50, 4, 79, 4).mean(axis=(1, 3))
    np.testing.assert_allclose(dic_tiles.binned_image(_reader(a), a.shape, k, block=24), want, rtol=1e-12)


# ----------------------------------------------------------------------------- readers' windows

FRAMES = (np.random.default_rng(5).integers(0, 60000, size=(3, 90, 130))).astype(np.uint16)


def _write(kind, d):
    if kind == "tiff_tiled":
        tifffile.imwrite(d / "f.tif", FRAMES, tile=(32, 48), compression="zlib", photometric="minisblack")
        return d / "f.tif"
    if kind == "tiff_strips_predictor":
        tifffile.imwrite(d / "f.tif", FRAMES, rowsperstrip=7, compression="zlib", predictor=True,
                         photometric="minisblack")
        return d / "f.tif"
    if kind == "tiff_raw_big_endian":
        tifffile.imwrite(d / "f.tif", FRAMES, byteorder=">", photometric="minisblack")
        return d / "f.tif"
    if kind == "stack_tiff":
        for i, f in enumerate(FRAMES):
            tifffile.imwrite(d / f"f{i}.tif", f, tile=(16, 16), compression="zlib")
        return d
    if kind == "stack_png":
        for i, f in enumerate(FRAMES):
            Image.fromarray(f).save(d / f"f{i}.png")
        return d
    if kind in ("hdf5_3d", "hdf5_4d"):
        with h5py.File(d / "f.h5", "w") as h:
            data = FRAMES if kind == "hdf5_3d" else FRAMES.reshape(1, 3, 90, 130)
            h.create_dataset("frames", data=data, chunks=(1,) * (data.ndim - 2) + (32, 32), compression="gzip")
        return d / "f.h5"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["tiff_tiled", "tiff_strips_predictor", "tiff_raw_big_endian", "stack_tiff",
                                  "stack_png", "hdf5_3d", "hdf5_4d"])
def test_every_frame_reader_reads_windows(tmp_path, kind):
    src = scan_io.open_scan(str(_write(kind, tmp_path)))
    assert src.n_patterns == 3 and src.pattern_shape == (90, 130)
    rng = np.random.default_rng(1)
    for _ in range(12):
        i = int(rng.integers(0, 3))
        r0 = int(rng.integers(0, 89))
        r1 = int(rng.integers(r0 + 1, 91))
        c0 = int(rng.integers(0, 129))
        c1 = int(rng.integers(c0 + 1, 131))
        w = src.read_window(i, (r0, r1), (c0, c1))
        assert w.dtype == np.uint16 and w.dtype.isnative
        np.testing.assert_array_equal(w, FRAMES[i, r0:r1, c0:c1])
    with pytest.raises(ValueError, match="outside"):
        src.read_window(0, (0, 91), (0, 10))
    src.close()


def test_multipage_tiff_reader(tmp_path):
    tifffile.imwrite(tmp_path / "f.tif", FRAMES, photometric="minisblack")
    src = scan_io.open_scan(str(tmp_path / "f.tif"))
    assert src.format == "tiff_stack" and src.grid.n_points == 3
    np.testing.assert_array_equal(src.read(0, 3), FRAMES)
    with tifffile.TiffWriter(tmp_path / "odd.tif") as w:
        w.write(FRAMES[0])
        w.write(FRAMES[1, :80])
    with pytest.raises(InputError, match="page 1 is 130x80 px uint16 but page 0 is 130x90"):
        scan_io.open_scan(str(tmp_path / "odd.tif"))
    tifffile.imwrite(tmp_path / "rgb.tif", np.zeros((3, 20, 20, 3), np.uint8), photometric="rgb")
    with pytest.raises(InputError, match="colour"):
        scan_io.open_scan(str(tmp_path / "rgb.tif"))


# ----------------------------------------------------------------------------- the run


def _to16(a):
    return np.clip((a + 12) / 24 * 60000 + 2000, 0, 65535).astype(np.uint16)


@pytest.fixture(scope="module")
def series(tmp_path_factory, pair):
    d = tmp_path_factory.mktemp("tiled")
    ref, img = pair
    img2 = affine_pair(2 * G, (2 * T[0], 2 * T[1]), ref.shape, seed=3)[1]
    tifffile.imwrite(d / "ref.tif", _to16(ref))
    tifffile.imwrite(d / "frames.tif", np.stack([_to16(img), _to16(img2)]), tile=(64, 64), compression="zlib",
                     photometric="minisblack")
    return d


def _run(d, name, *extra):
    out = d / name
    assert cli.main(["process", str(d / "frames.tif"), "--ref", str(d / "ref.tif"), "--mode", "dic", "--subset", "31",
                     "--step", "10", "-o", str(out), "-q", *extra]) == 0
    with h5py.File(out, "r") as f:
        return {k: f["ebsdxc/dic"][k][()] for k in ("points", "displacement", "status", "strain")}


def test_tiled_run_reads_windows_only_and_agrees_with_whole_frames(series, monkeypatch):
    whole = _run(series, "whole.h5", "--tile", "0")

    def no_whole_frames(self, start, stop, out):
        raise AssertionError("a whole frame was read")

    monkeypatch.setattr(TiffStackSource, "read_records", no_whole_frames)
    tiled = _run(series, "tiled.h5", "--tile", "256", "--tile-margin", "64")
    np.testing.assert_array_equal(tiled["status"], whole["status"])
    ok = tiled["status"] == st.OK
    assert ok.sum() > 0.7 * ok.size
    assert np.abs(tiled["displacement"][ok] - whole["displacement"][ok]).max() < 2e-3
    for f, scale in enumerate((1, 2)):
        truth = scale * (np.asarray(T) + tiled["points"] @ G.T)
        err = tiled["displacement"][f][ok[f]] - truth[ok[f]]  # 16-bit frames: quantisation noise
        assert np.sqrt((err ** 2).mean()) < 0.005 and np.abs(err).max() < 0.03


def test_tiles_refuse_whole_image_preprocessing(series, capsys):
    rc = cli.main(["process", str(series / "frames.tif"), "--ref", str(series / "ref.tif"), "--mode", "dic",
                   "--tile", "256", "--dynamic-background", "20", "-o", str(series / "pp.h5"), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and "window by window" in err[0]
    assert not (series / "pp.h5").exists()


@pytest.mark.gpu
def test_tiles_on_the_gpu_match_the_cpu(pair):
    cp = pytest.importorskip("cupy")
    ref, img = pair
    pts, inside = dic.subset_grid(ref.shape, subset=31, step=10)
    kw = dict(config=CFG, valid=inside.reshape(-1), tile=160, margin=48)
    cpu = dic_tiles.match_tiled(_reader(ref), _reader(img), ref.shape, pts, **kw)
    gpu = dic_tiles.match_tiled(_reader(ref), _reader(img), ref.shape, pts,
                                prepare=lambda a: cp.asarray(a, dtype=cp.float32), **kw)
    np.testing.assert_array_equal(gpu.status, cpu.status)
    ok = cpu.status == st.OK
    assert ok.sum() > 0.8 * ok.size
    np.testing.assert_allclose(gpu.displacement[ok], cpu.displacement[ok], atol=2e-4)


def test_tiled_run_interrupted_then_resumed_equals_the_whole_run(series, tmp_path):
    """Frames read window by window keep resume exact: a run stopped after its first frame is
    incomplete, claims only that frame, and ``resume`` gives the uninterrupted results."""
    from ebsdxc.config import ProcessConfig, RunConfig
    from ebsdxc.io.results import read_results
    from ebsdxc.progress import Progress
    from ebsdxc.run import process

    class StopAfterFirst(Progress):
        def update(self, n):
            raise KeyboardInterrupt

    cfg = ProcessConfig(dic=dic.DicConfig(enabled=True, subset=31, step=10, tile=256, tile_margin=64))
    run = RunConfig(device="cpu", batch=1)
    scan, ref = str(series / "frames.tif"), str(series / "ref.tif")
    whole = process(scan, ref=ref, output=str(tmp_path / "whole.h5"), config=cfg, run=run)
    part = str(tmp_path / "part.h5")
    with pytest.raises(KeyboardInterrupt):
        process(scan, ref=ref, output=part, config=cfg, run=run, progress=StopAfterFirst())
    r = read_results(part)
    assert not r["attrs"]["complete"] and r["done"].sum() == 1
    with h5py.File(part, "r") as f:
        assert not f["ebsdxc/dic"].attrs.get("strain_complete", False)
    process(scan, ref=ref, output=part, config=cfg, run=run, resume=True)
    a, b = read_results(whole), read_results(part)
    assert b["attrs"]["complete"]
    for k in ("displacement", "peak_height", "status", "done"):
        np.testing.assert_array_equal(a[k], b[k])
    with h5py.File(whole, "r") as fa, h5py.File(part, "r") as fb:
        assert fb["ebsdxc/dic"].attrs["strain_complete"]
        np.testing.assert_array_equal(fa["ebsdxc/dic/strain"][()], fb["ebsdxc/dic/strain"][()])
