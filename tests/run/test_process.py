"""The streaming runner and the results file it writes (schema v1), on the CPU."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tracemalloc

import h5py
import numpy as np
import pytest
import tifffile

import ebsdxc
from ebsdxc import status as st
from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
from ebsdxc.io import ArraySource
from ebsdxc.progress import Progress
from ebsdxc.rois import layout_for
from ebsdxc.run import default_output, process
from ebsdxc.run.planning import MAX_BATCH, MIN_SCAN_BATCH, SCAN_BATCHES, auto_batch, plan_chunks
from ebsdxc.run.streaming import N_BUFFERS

DATASETS = ("displacement", "peak_height", "status", "done", "roi/centers", "roi/size")


CPU = RunConfig(device="cpu")


def small_config(**kw):
    return ProcessConfig(roi=RoiConfig(layout="grid", grid=(3, 3), size=32), **kw)


@pytest.fixture(scope="module")
def sample_patterns(request):
    sample_dir = request.getfixturevalue("sample_dir")
    with h5py.File(os.path.join(sample_dir, "scan.h5"), "r") as f:
        return f["patterns"][...]  # (10, 10, 160, 160) uint16


@pytest.fixture(scope="module")
def sample_ref(request):
    return tifffile.imread(os.path.join(request.getfixturevalue("sample_dir"), "ref.tif"))


def read_all(path):
    with h5py.File(path, "r") as f:
        g = f["ebsdxc"]
        return {k: g[k][...] for k in DATASETS}, dict(g.attrs)


# ----------------------------------------------------------------------------- schema v1


def test_results_file_schema_v1(tmp_path, sample_dir):
    scan = os.path.join(sample_dir, "scan.h5")
    ref = os.path.join(sample_dir, "ref.tif")
    out = tmp_path / "res.h5"
    t0 = datetime.datetime.now(datetime.timezone.utc)
    got = process(scan, ref=ref, output=str(out), config=small_config(), run=CPU, command_line="ebsdxc process X")
    assert os.path.abspath(got) == str(out)
    rows, cols, n = 10, 10, 9
    with h5py.File(out, "r") as f:
        assert "ebsdxc" in f
        g = f["ebsdxc"]
        expect = {
            "displacement": ((rows, cols, n, 2), np.float32),
            "peak_height": ((rows, cols, n), np.float32),
            "status": ((rows, cols, n), np.uint8),
            "done": ((rows, cols), np.bool_),
        }
        for name, (shape, dtype) in expect.items():
            ds = g[name]
            assert ds.shape == shape, name
            assert ds.dtype == dtype, name
            # chunked along scan rows: a chunk holds one row of this small scan
            assert ds.chunks is not None, name
            assert ds.chunks == (1, *shape[1:]), (name, ds.chunks)
        c = g["roi/centers"]
        assert c.shape == (n, 2) and c.dtype == np.float64
        s = g["roi/size"]
        assert s.shape == (2,) and s.dtype.kind in "iu"
        assert s[...].tolist() == [32, 32]
        layout = layout_for(small_config().roi, (160, 160))
        np.testing.assert_array_equal(c[...], layout.centres)

        a = g.attrs
        assert int(a["schema"]) == 1
        assert a["version"] == ebsdxc.__version__
        assert a["command_line"] == "ebsdxc process X"
        params = json.loads(a["parameters"])
        assert params["roi"]["grid"] == [3, 3] and params["roi"]["size"] == 32
        assert params["correlation"]["subpixel"] == "dft"
        assert params["reference"] == "ref.tif" and params["scan"] == "scan.h5"
        inputs = json.loads(a["inputs"])
        by_name = {i["name"]: i for i in inputs}
        assert set(by_name) == {"scan.h5", "ref.tif"}
        for p in (scan, ref):
            rec = by_name[os.path.basename(p)]
            st_ = os.stat(p)
            assert rec["size"] == st_.st_size
            mt = datetime.datetime.fromisoformat(rec["mtime"])
            assert abs(mt.timestamp() - st_.st_mtime) < 1e-3
        created = datetime.datetime.fromisoformat(a["created"])
        assert created.tzinfo is not None
        assert abs((created - t0).total_seconds()) < 120
        assert bool(a["complete"]) is True
        codes = json.loads(g["status"].attrs["codes"])
        assert {int(k) for k in codes} >= {st.OK, st.PEAK_ON_BORDER, st.CONSTANT_TILE, st.NOT_FINITE,
                                           st.NOT_PROCESSED}
        assert codes[str(st.OK)] == "ok"
        assert g["done"][...].all()
        assert (g["status"][...] == st.OK).all()


def test_results_file_readable_with_plain_h5py(tmp_path, sample_dir):
    out = tmp_path / "res.h5"
    process(os.path.join(sample_dir, "scan.h5"), ref=os.path.join(sample_dir, "ref.tif"),
            output=str(out), config=small_config(), run=CPU)
    code = (
        "import sys, json, h5py\n"
        f"f = h5py.File({str(out)!r}, 'r')\n"
        "g = f['ebsdxc']\n"
        "d = g['displacement'][...]; s = g['status'][...]; h = g['peak_height'][...]\n"
        "assert d.shape == (10, 10, 9, 2) and g['done'][...].all()\n"
        "assert json.loads(g.attrs['parameters'])['roi']['size'] == 32\n"
        "assert g['roi/centers'].shape == (9, 2)\n"
        "assert not any(m.startswith('ebsdxc') for m in sys.modules), 'ebsdxc was imported'\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=str(tmp_path), timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


# ----------------------------------------------------------------------------- invalid tiles


def test_nan_block_constant_pattern_and_peak_heights(tmp_path, sample_patterns, sample_ref):
    pats = sample_patterns[:2, :3].astype(np.float32).copy()  # (2, 3, 160, 160)
    cfg = small_config()
    layout = layout_for(cfg.roi, (160, 160))
    w, h = layout.size
    x0, y0 = layout.origins[4]  # the centre ROI
    pats[0, 1, y0 + 5:y0 + 15, x0 + 5:x0 + 15] = np.nan  # inside ROI 4 only
    x1, y1 = layout.origins[0]
    pats[1, 0, y1 + 3, x1 + 7] = np.inf  # one Inf pixel in ROI 0
    pats[1, 2] = 1234.0  # a constant pattern
    ref = tmp_path / "ref.tif"
    tifffile.imwrite(ref, sample_ref)
    out = tmp_path / "res.h5"
    process(ArraySource(pats, path=str(tmp_path / "arr")), ref=str(ref), output=str(out), config=cfg, run=CPU)
    d, a = read_all(out)
    status, disp, height = d["status"], d["displacement"], d["peak_height"]
    assert bool(a["complete"])

    assert status[0, 1, 4] == st.NOT_FINITE
    assert np.isnan(disp[0, 1, 4]).all() and np.isnan(height[0, 1, 4])
    others = [k for k in range(layout.n) if k != 4]
    assert (status[0, 1, others] == st.OK).all()
    assert np.isfinite(disp[0, 1, others]).all()

    assert status[1, 0, 0] == st.NOT_FINITE
    assert np.isnan(disp[1, 0, 0]).all()
    assert (status[1, 0, 1:] == st.OK).all()

    assert (status[1, 2] == st.CONSTANT_TILE).all()
    assert np.isnan(disp[1, 2]).all()
    assert np.isnan(height[1, 2]).all()

    # every point untouched by the damage matches fine
    for (r, c) in [(0, 0), (0, 2), (1, 1)]:
        assert (status[r, c] == st.OK).all()
    # invalid never 0; OK always finite
    bad = status != st.OK
    assert np.isnan(disp[bad]).all()
    assert np.isfinite(disp[~bad]).all()
    fin = np.isfinite(height)
    assert fin[~bad].all()
    assert (height[fin] >= -1).all() and (height[fin] <= 1).all()


@pytest.mark.parametrize("pre", [{"dynamic_background_sigma": 12.0}, {"bandpass": (1.0, 20.0)}],
                         ids=["dynamic_background", "bandpass"])
def test_nan_block_stays_in_its_roi_with_fourier_filters(tmp_path, sample_patterns, sample_ref, pre):
    """Background division and band-pass run through FFTs; a NaN block (dead pixels) in one
    ROI must not turn every other ROI of the pattern into NOT_FINITE ("NaN or Inf in the
    subregion" is false for them)."""
    from ebsdxc.preprocess import PreprocessConfig

    cfg = small_config().replace(preprocess=PreprocessConfig(**pre))
    layout = layout_for(cfg.roi, (160, 160))
    x0, y0 = layout.origins[4]
    clean = sample_patterns[0, :3].astype(np.float32)
    pats = clean.copy()
    pats[1, y0 + 5:y0 + 15, x0 + 5:x0 + 15] = np.nan
    tifffile.imwrite(tmp_path / "ref.tif", sample_ref)
    out, ref_out = tmp_path / "res.h5", tmp_path / "clean.h5"
    process(ArraySource(pats), ref=str(tmp_path / "ref.tif"), output=str(out), config=cfg, run=CPU)
    process(ArraySource(clean), ref=str(tmp_path / "ref.tif"), output=str(ref_out), config=cfg, run=CPU)
    d, _ = read_all(out)
    want, _ = read_all(ref_out)
    assert d["status"][0, 1, 4] == st.NOT_FINITE
    assert np.isnan(d["displacement"][0, 1, 4]).all()
    # every other ROI is as it is without the dead pixels (the same fits, the same flags: with the
    # band-pass one barely concave peak is SUBPIXEL_FAILED either way)
    others = np.ones(d["status"].shape, bool)
    others[0, 1, 4] = False
    np.testing.assert_array_equal(d["status"][others], want["status"][others])
    assert (d["status"][others] != st.NOT_FINITE).all()
    assert (want["status"][0] == st.OK).mean() > 0.9


def test_reference_with_nan_block_invalidates_that_roi_everywhere(tmp_path, sample_patterns, sample_ref):
    cfg = small_config()
    layout = layout_for(cfg.roi, (160, 160))
    x0, y0 = layout.origins[2]
    ref = sample_ref.astype(np.float32)
    ref[y0:y0 + 4, x0:x0 + 4] = np.nan
    tifffile.imwrite(tmp_path / "ref.tif", ref)
    out = tmp_path / "res.h5"
    process(ArraySource(sample_patterns[:1, :4]), ref=str(tmp_path / "ref.tif"), output=str(out),
            config=cfg, run=CPU)
    d, _ = read_all(out)
    assert (d["status"][..., 2] == st.NOT_FINITE).all()
    assert np.isnan(d["displacement"][..., 2, :]).all()
    assert (np.delete(d["status"], 2, axis=-1) == st.OK).all()


# ----------------------------------------------------------------------------- dtypes and layouts


def _as(arr, dtype):
    return arr.astype(dtype)


@pytest.mark.parametrize("layout4d", [False, True], ids=["n_H_W", "rows_cols_H_W"])
def test_dtypes_give_same_shifts(tmp_path, sample_patterns, sample_ref, layout4d):
    # values already in 0..255, so every dtype holds them exactly
    src = sample_patterns[:2, :3].astype(np.float64)
    scale = 255.0 / max(src.max(), sample_ref.max())
    pats8 = np.rint(src * scale).astype(np.uint8)  # (2, 3, H, W)
    ref8 = np.rint(sample_ref * scale).astype(np.uint8)
    cfg = small_config()
    results = {}
    for dtype in (np.uint8, np.uint16, np.float32, np.float64):
        name = np.dtype(dtype).name
        scan = tmp_path / f"scan_{name}.h5"
        with h5py.File(scan, "w") as f:
            if layout4d:
                f["patterns"] = _as(pats8, dtype)
            else:
                ds = f.create_dataset("patterns", data=_as(pats8.reshape(6, 160, 160), dtype))
                ds.attrs["nrows"] = 2
                ds.attrs["ncols"] = 3
        ref = tmp_path / f"ref_{name}.tif"
        tifffile.imwrite(ref, _as(ref8, dtype))
        out = tmp_path / f"res_{name}.h5"
        process(str(scan), ref=str(ref), output=str(out), config=cfg, run=CPU)
        d, a = read_all(out)
        assert d["done"].shape == (2, 3)
        assert (d["status"] == st.OK).all(), name
        results[name] = d
    base = results["uint8"]
    for name, d in results.items():
        np.testing.assert_allclose(d["displacement"], base["displacement"], atol=1e-3, rtol=0,
                                   err_msg=name)
        np.testing.assert_allclose(d["peak_height"], base["peak_height"], atol=1e-5, rtol=0,
                                   err_msg=name)
    # and the shifts are real ones (not all ~0)
    assert np.abs(base["displacement"]).max() > 0.3


def test_one_dimensional_scan_is_one_row(tmp_path, sample_patterns, sample_ref):
    scan = tmp_path / "line.h5"
    with h5py.File(scan, "w") as f:
        f["patterns"] = sample_patterns[0, :5]  # (5, H, W), no grid attributes
    tifffile.imwrite(tmp_path / "ref.tif", sample_ref)
    out = tmp_path / "res.h5"
    process(str(scan), ref=str(tmp_path / "ref.tif"), output=str(out), config=small_config(), run=CPU)
    d, _ = read_all(out)
    assert d["displacement"].shape == (1, 5, 9, 2)
    assert d["done"].shape == (1, 5) and d["done"].all()


# ----------------------------------------------------------------------------- interrupt / resume


class InterruptAfter(Progress):
    """Raises KeyboardInterrupt in the ``after``-th update (after that batch was written)."""

    def __init__(self, after=1):
        self.after = after
        self.updates = 0

    def update(self, n):
        self.updates += 1
        if self.updates >= self.after:
            raise KeyboardInterrupt


def test_interrupted_run_resumed_equals_uninterrupted(tmp_path, sample_dir):
    scan = os.path.join(sample_dir, "scan.h5")
    ref = os.path.join(sample_dir, "ref.tif")
    cfg, run = small_config(), RunConfig(device="cpu", batch=7)

    full = tmp_path / "full.h5"
    process(scan, ref=ref, output=str(full), config=cfg, run=run)

    part = tmp_path / "part.h5"
    with pytest.raises(KeyboardInterrupt):
        process(scan, ref=ref, output=str(part), config=cfg, run=run, progress=InterruptAfter(1))
    d, a = read_all(part)
    assert bool(a["complete"]) is False
    done = d["done"]
    assert 0 < done.sum() < done.size
    assert done.sum() == 7  # the first batch, and only it
    assert done.reshape(-1)[:7].all()
    todo = ~done
    assert (d["status"][todo] == st.NOT_PROCESSED).all()
    assert np.isnan(d["displacement"][todo]).all()
    assert np.isnan(d["peak_height"][todo]).all()
    assert (d["status"][done] == st.OK).all()

    # a second interruption, later on, then the rest
    with pytest.raises(KeyboardInterrupt):
        process(scan, ref=ref, output=str(part), config=cfg, run=run, resume=True, progress=InterruptAfter(3))
    d, a = read_all(part)
    assert bool(a["complete"]) is False
    assert 7 < d["done"].sum() < 100

    process(scan, ref=ref, output=str(part), config=cfg, run=run, resume=True)
    d_full, a_full = read_all(full)
    d_part, a_part = read_all(part)
    assert bool(a_part["complete"]) is True
    for k in DATASETS:
        assert d_part[k].dtype == d_full[k].dtype, k
        assert d_part[k].shape == d_full[k].shape, k
        assert d_part[k].tobytes() == d_full[k].tobytes(), f"{k} differs after resume"
    assert a_part["parameters"] == a_full["parameters"]


def test_resume_refuses_other_parameters(tmp_path, sample_dir):
    scan = os.path.join(sample_dir, "scan.h5")
    ref = os.path.join(sample_dir, "ref.tif")
    out = tmp_path / "part.h5"
    with pytest.raises(KeyboardInterrupt):
        process(scan, ref=ref, output=str(out), config=small_config(), run=RunConfig(device="cpu", batch=7),
                progress=InterruptAfter(1))
    other = ProcessConfig(roi=RoiConfig(layout="grid", grid=(2, 2), size=32))
    with pytest.raises(ebsdxc.InputError) as e:
        process(scan, ref=ref, output=str(out), config=other, run=RunConfig(device="cpu", batch=7), resume=True)
    assert str(out) in str(e.value)
    d, a = read_all(out)
    assert d["done"].sum() == 7 and not bool(a["complete"])


# ----------------------------------------------------------------------------- memory bound


class CountingSource(ArraySource):
    """Records every read: its range and the buffer it fills."""

    def __init__(self, patterns, **kw):
        super().__init__(patterns, **kw)
        self.reads = []

    def read_into(self, start, stop, out):
        self.reads.append((start, stop, out.__array_interface__["data"][0], out.nbytes))
        super().read_into(start, stop, out)


def test_reads_bounded_by_n_buffers_batches(tmp_path, sample_patterns, sample_ref):
    batch = 4
    tifffile.imwrite(tmp_path / "ref.tif", sample_ref)
    flat = sample_patterns.reshape(-1, 160, 160).astype(np.float64)  # 100 patterns, 20 MB
    per_batch = batch * 160 * 160 * flat.dtype.itemsize
    extra = {}
    for copies in (1, 3):
        pats = np.concatenate([flat] * copies)
        n = len(pats)
        src = CountingSource(pats, path=str(tmp_path / "arr"))
        out = tmp_path / f"res{copies}.h5"
        tracemalloc.start()
        try:
            base, _ = tracemalloc.get_traced_memory()
            process(src, ref=str(tmp_path / "ref.tif"), output=str(out), config=small_config(),
                    run=RunConfig(device="cpu", batch=batch))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        extra[copies] = peak - base
        reads = src.reads
        # every pattern read exactly once, in order, never more than a batch at a time
        assert [r[:2] for r in reads] == [(a, min(a + batch, n)) for a in range(0, n, batch)]
        # into at most N_BUFFERS distinct buffers of one batch each
        assert len({r[2] for r in reads}) <= N_BUFFERS
        assert all(r[3] <= per_batch for r in reads)
        d, a = read_all(out)
        assert bool(a["complete"]) and (d["status"] == st.OK).all()
        if copies == 3:
            # the allocations while processing stay far below the scan's size ...
            assert extra[3] < pats.nbytes / 8, (extra, pats.nbytes)
    # ... and do not grow with it
    assert extra[3] < extra[1] + per_batch, (extra, per_batch)


# ----------------------------------------------------------------------------- helpers


def test_plan_chunks():
    assert plan_chunks(np.ones(10, bool), 3) == []
    assert plan_chunks(np.zeros(7, bool), 3) == [(0, 3), (3, 6), (6, 7)]
    assert plan_chunks(np.zeros(6, bool), 3) == [(0, 3), (3, 6)]
    assert plan_chunks(np.zeros(5, bool), 100) == [(0, 5)]
    done = np.array([1, 0, 0, 1, 0, 0, 0, 0, 1, 0], bool)
    assert plan_chunks(done, 2) == [(1, 3), (4, 6), (6, 8), (9, 10)]
    assert plan_chunks(done, 1) == [(1, 2), (2, 3), (4, 5), (5, 6), (6, 7), (7, 8), (9, 10)]
    rng = np.random.default_rng(0)
    for _ in range(50):
        done = rng.random(int(rng.integers(1, 60))) < 0.4
        b = int(rng.integers(1, 9))
        ch = plan_chunks(done, b)
        covered = np.concatenate([np.arange(a, z) for a, z in ch]) if ch else np.array([], int)
        np.testing.assert_array_equal(covered, np.flatnonzero(~done))
        assert all(0 < z - a <= b for a, z in ch)
        assert all(isinstance(a, int) and isinstance(z, int) for a, z in ch)


def test_auto_batch():
    gib = 1 << 30
    # memory first: a fifth of the free device memory (at most 16 GiB), 1 GiB on the CPU
    assert auto_batch(10 << 20, 10**6, gpu_free_bytes=50 * gib) == 1024
    assert auto_batch(1 << 20, 10**6) == 1024
    assert auto_batch(1 << 20, 10**6, gpu_free_bytes=400 * gib) == MAX_BATCH  # 16 GiB, then the cap
    # an engine that takes little: a SCAN_BATCHES-th of the scan in whole 64s, not below MIN_SCAN_BATCH
    assert auto_batch(30_000, 50_000, gpu_free_bytes=70 * gib) == 2112
    assert 50_000 / 2112 <= SCAN_BATCHES
    assert auto_batch(30_000, 10**6, gpu_free_bytes=70 * gib) == MAX_BATCH
    assert auto_batch(30_000, 5_000, gpu_free_bytes=70 * gib) == MIN_SCAN_BATCH
    assert auto_batch(30_000, 300, gpu_free_bytes=70 * gib) == 300  # never more than the scan
    assert auto_batch(10 * gib, 300, gpu_free_bytes=gib) == 1


def test_default_output(tmp_path, monkeypatch):
    assert default_output("/data/x/scan.h5") == "/data/x/scan.ebsdxc.h5"
    assert default_output("/data/x/scan.hdf5") == "/data/x/scan.ebsdxc.h5"
    monkeypatch.chdir(tmp_path)
    assert default_output("rel.h5") == str(tmp_path / "rel.ebsdxc.h5")
    assert os.path.isabs(default_output("rel.h5"))


def test_default_output_distinct_for_distinct_scans():
    """Two scans in one folder must not share a default results file (the second run would
    refuse, or with --overwrite destroy the first one's results)."""
    a = default_output("/data/grain.1.h5")
    b = default_output("/data/grain.2.h5")
    assert a != b, (a, b)
    assert default_output("/data/scan.h5") != "/data/scan.h5"


def test_read_error_mid_run_is_one_clear_error_and_resumable(tmp_path):
    """A source that fails while streaming: an InputError naming the file, points before it kept."""
    import h5py

    from ebsdxc.errors import InputError
    from ebsdxc.io.source import ArraySource

    rng = np.random.default_rng(0)
    pats = rng.uniform(0, 1000, (20, 48, 48)).astype(np.float32)

    class Failing(ArraySource):
        def read_into(self, start, stop, out):
            if start >= 10:
                raise OSError("Can't read data (inflate() failed)")
            super().read_into(start, stop, out)

    src = Failing(pats, path=str(tmp_path / "broken.h5"))
    out = tmp_path / "r.h5"
    cfg, run = ProcessConfig(roi=RoiConfig(grid=(2, 2), size=16)), RunConfig(device="cpu", batch=5)
    with pytest.raises(InputError) as e:
        process(src, ref_index=0, output=str(out), config=cfg, run=run)
    assert "broken.h5" in str(e.value) and "patterns 10 to 14" in str(e.value)
    with h5py.File(out, "r") as f:
        assert not f["ebsdxc"].attrs["complete"]
        done = f["ebsdxc/done"][...].ravel()
    assert done[:10].all() and not done[10:].any()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_big_endian_scan_and_reference_give_the_same_shifts(tmp_path, sample_dir, device):
    """Big-endian files (some acquisition software writes them) are read into native buffers
    (CuPy takes native byte order only)."""
    import tifffile

    from ebsdxc.io.results import read_results

    with h5py.File(os.path.join(sample_dir, "scan.h5"), "r") as f:
        pats = f["patterns"][:3]
    ref = tifffile.imread(os.path.join(sample_dir, "ref.tif"))
    cfg = ProcessConfig(roi=RoiConfig(grid=(3, 3), size=32))
    out = {}
    for order in ("<", ">"):
        scan = tmp_path / f"scan{order == '>'}.h5"
        with h5py.File(scan, "w") as f:
            f["patterns"] = pats.astype(pats.dtype.newbyteorder(order))
        r = tmp_path / f"ref{order == '>'}.tif"
        tifffile.imwrite(r, ref.astype(ref.dtype.newbyteorder(order)), byteorder=order)
        out[order] = read_results(process(str(scan), ref=str(r), output=str(tmp_path / f"o{order == '>'}.h5"),
                                          config=cfg, run=RunConfig(device=device)))
    np.testing.assert_array_equal(out["<"]["displacement"], out[">"]["displacement"])
    assert (out[">"]["status"] == 0).all()


def test_top_level_entry_points_are_lazy_and_work(tmp_path, sample_dir):
    code = ("import sys, ebsdxc; assert 'ebsdxc.run' not in sys.modules and 'h5py' not in sys.modules; "
            "assert ebsdxc.process.__module__ == 'ebsdxc.run.process'; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "ok", r.stderr
    import ebsdxc

    cfg, run = ebsdxc.ProcessConfig(), ebsdxc.RunConfig(device="cpu")
    out = ebsdxc.process(os.path.join(sample_dir, "scan.h5"), ref=os.path.join(sample_dir, "ref.tif"),
                         output=str(tmp_path / "r.h5"), config=cfg, run=run)
    assert ebsdxc.read_results(out)["done"].all()
    with pytest.raises(AttributeError):
        ebsdxc.no_such_thing  # noqa: B018 (the lookup is what raises)


def test_a_file_with_parameters_of_the_earlier_layout_resumes(tmp_path, sample_dir):
    """Files written before ``static_background`` moved into ``preprocess`` and ``dynamic_sigma``
    was renamed record the same settings in the old layout: they resume, and only they."""
    import shutil

    from ebsdxc.errors import InputError
    from ebsdxc.io.results import read_results
    from ebsdxc.preprocess import PreprocessConfig

    scan = os.path.join(sample_dir, "scan.h5")
    ref = os.path.join(sample_dir, "ref.tif")
    cfg = small_config(preprocess=PreprocessConfig(static_background="mean", dynamic_background_sigma=8.0))
    whole = tmp_path / "whole.h5"
    process(scan, ref=ref, output=str(whole), config=cfg, run=CPU)
    part = tmp_path / "part.h5"
    shutil.copy(whole, part)
    with h5py.File(part, "r+") as f:
        g = f["ebsdxc"]
        params = json.loads(g.attrs["parameters"])
        pre = params["preprocess"]
        params["static_background"] = pre.pop("static_background")
        pre["dynamic_sigma"] = pre.pop("dynamic_background_sigma")
        g.attrs["parameters"] = json.dumps(params, sort_keys=True)
        done = g["done"][...]
        done[4:] = False
        g["done"][...] = done
        g["displacement"][4:] = np.nan
        g.attrs["complete"] = False
    other = small_config(preprocess=PreprocessConfig(static_background="mean", dynamic_background_sigma=9.0))
    with pytest.raises(InputError, match="other parameters"):
        process(scan, ref=ref, output=str(part), config=other, run=CPU, resume=True)
    process(scan, ref=ref, output=str(part), config=cfg, run=CPU, resume=True)
    a, b = read_results(whole), read_results(part)
    assert b["attrs"]["complete"]
    np.testing.assert_array_equal(a["displacement"], b["displacement"])


def test_a_wide_scan_is_chunked_within_a_row(tmp_path):
    """Every batch rewrites the result chunks it touches: a row of 3,000 points x 64 ROIs is cut
    into chunks of at most CHUNK_BYTES, and the run writes every point of it."""
    import h5py

    from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
    from ebsdxc.io import ArraySource
    from ebsdxc.io.results import CHUNK_BYTES, read_results
    from ebsdxc.run import process

    rng = np.random.default_rng(3)
    y, x = np.mgrid[0:24, 0:24]
    base = 500 + 200 * np.sin(x / 2.0) * np.cos(y / 3.0)
    src = ArraySource((base + rng.normal(0, 5, (1, 3000, 24, 24))).astype(np.float32), path="wide.h5")
    out = process(src, ref_index=0, output=str(tmp_path / "wide.h5"),
                  config=ProcessConfig(roi=RoiConfig(grid=(8, 8), size=4)), run=RunConfig(device="cpu", batch=700))
    with h5py.File(out, "r") as f:
        d = f["ebsdxc/displacement"]
        assert d.shape == (1, 3000, 64, 2)
        assert d.chunks == (1, CHUNK_BYTES // (64 * 2 * 4), 64, 2) and d.chunks[1] < 3000
        assert f["ebsdxc/status"].chunks == (1, 3000, 64)  # one byte a ROI: the row fits
    r = read_results(out)
    assert r["done"].all() and r["attrs"]["complete"] and (r["status"] != st.NOT_PROCESSED).all()
    # batches of 700 straddle the chunks of 2,048 points: the same file as one batch writes
    one = read_results(process(src, ref_index=0, output=str(tmp_path / "one.h5"),
                               config=ProcessConfig(roi=RoiConfig(grid=(8, 8), size=4)),
                               run=RunConfig(device="cpu", batch=3000)))
    for k in ("displacement", "peak_height", "status"):
        np.testing.assert_array_equal(r[k], one[k])


def test_quick_switching_is_the_callers_again_after_overlapping_streams():
    """Streams on a GPU lower the interpreter's switch interval while any of them runs (reader
    threads then get the lock back sooner); the caller's value returns after the last, and a
    caller's lower value is kept."""
    import sys
    import threading

    from ebsdxc.run import streaming

    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.004)
        first, second = streaming._quick_switching(), streaming._quick_switching()
        first.__enter__()
        assert sys.getswitchinterval() == pytest.approx(streaming.SWITCH_INTERVAL_S, rel=0.05)
        seen = []
        t = threading.Thread(target=lambda: (second.__enter__(), seen.append(sys.getswitchinterval())))
        t.start()
        t.join()
        first.__exit__(None, None, None)  # the other stream still runs
        assert seen == [pytest.approx(streaming.SWITCH_INTERVAL_S, rel=0.05)]
        assert sys.getswitchinterval() == pytest.approx(streaming.SWITCH_INTERVAL_S, rel=0.05)
        second.__exit__(None, None, None)
        assert sys.getswitchinterval() == pytest.approx(0.004, rel=0.05)
        sys.setswitchinterval(0.0001)
        with streaming._quick_switching():
            assert sys.getswitchinterval() == pytest.approx(0.0001, rel=0.05)
        assert sys.getswitchinterval() == pytest.approx(0.0001, rel=0.05)
    finally:
        sys.setswitchinterval(before)
