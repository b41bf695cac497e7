"""The GPU path of the run (streaming, resume, memory pool) against the CPU (run with
``pytest -m gpu``). The engines' and kernels' GPU tests are in tests/engines/test_gpu_engines.py
and tests/engines/test_gpu_ops.py."""

import os

import numpy as np
import pytest

from ebsdxc.backend import select_backend

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


def test_process_gpu_equals_cpu(tmp_path, sample_dir):
    from ebsdxc.config import RunConfig
    from ebsdxc.io.results import read_results
    from ebsdxc.run import process

    out = {}
    for dev in ("cpu", "cuda"):
        out[dev] = process(os.path.join(sample_dir, "scan.h5"), ref=os.path.join(sample_dir, "ref.tif"),
                           output=str(tmp_path / f"{dev}.h5"),
                           run=RunConfig(device=dev, batch=7))
    a, b = read_results(out["cpu"]), read_results(out["cuda"])
    assert a["done"].all() and b["done"].all() and b["attrs"]["complete"]
    np.testing.assert_array_equal(a["status"], b["status"])
    # the default (dft) runs in the fused engine on the GPU: refined from its float32 map
    # (H100: 3.7e-4 px RMS, 2.1e-3 max from the CPU's float64; the fft engine 8e-6 RMS)
    d = b["displacement"] - a["displacement"]
    ok = np.isfinite(d)
    np.testing.assert_array_equal(ok, np.isfinite(a["displacement"]))
    assert np.sqrt((d[ok] ** 2).mean()) < 1e-3 and np.abs(d[ok]).max() < 4e-3
    assert "cuda" in b["attrs"]["device"]


def test_process_gpu_uint_and_float_inputs_agree(tmp_path, sample_dir):
    """The GPU tile kernel converts raw dtypes itself: every dtype gives the same shifts."""
    import h5py

    from ebsdxc.config import RunConfig
    from ebsdxc.io.results import read_results
    from ebsdxc.run import process

    with h5py.File(os.path.join(sample_dir, "scan.h5"), "r") as f:
        pats = f["patterns"][...]
    res = []
    for dt in (np.uint16, np.float32, np.float64):
        p = tmp_path / f"{np.dtype(dt).name}.h5"
        with h5py.File(p, "w") as f:
            f["patterns"] = pats.astype(dt)
        o = process(str(p), ref=os.path.join(sample_dir, "ref.tif"), output=str(tmp_path / f"r{p.name}"),
                    run=RunConfig(device="cuda"))
        res.append(read_results(o)["displacement"])
    for r in res[1:]:
        np.testing.assert_allclose(r, res[0], atol=1e-4, equal_nan=True)


def test_gpu_stream_interrupted_and_resumed_equals_uninterrupted(tmp_path, sample_dir):
    """The GPU streaming path (pinned buffers, events, two streams) keeps resume exact."""
    from ebsdxc.config import RunConfig
    from ebsdxc.io.results import read_results
    from ebsdxc.progress import Progress
    from ebsdxc.run import process

    class StopAfterFirst(Progress):
        def update(self, n):
            raise KeyboardInterrupt

    scan, ref = os.path.join(sample_dir, "scan.h5"), os.path.join(sample_dir, "ref.tif")
    cfg = RunConfig(device="cuda", batch=9)
    whole = process(scan, ref=ref, output=str(tmp_path / "whole.h5"), run=cfg)
    part = str(tmp_path / "part.h5")
    with pytest.raises(KeyboardInterrupt):
        process(scan, ref=ref, output=part, run=cfg, progress=StopAfterFirst())
    r = read_results(part)
    assert not r["attrs"]["complete"] and 0 < r["done"].sum() < r["done"].size
    process(scan, ref=ref, output=part, run=cfg, resume=True)
    a, b = read_results(whole), read_results(part)
    assert b["attrs"]["complete"]
    for k in ("displacement", "peak_height", "status", "done"):
        np.testing.assert_array_equal(a[k], b[k])


def test_process_with_definition_and_tensor_engines(tmp_path, sample_dir):
    from ebsdxc.cli import main
    from ebsdxc.io.results import read_results

    out = {}
    for engine in ("direct", "tensor", "fft"):  # the tensor engine reads the ROIs from the patterns
        o = tmp_path / f"{engine}.h5"
        assert main(["process", os.path.join(sample_dir, "scan.h5"), "--ref", os.path.join(sample_dir, "ref.tif"),
                     "-o", str(o), "-q", "--device", "cuda", "--engine", engine, "--max-shift", "6",
                     "--subpixel", "quadratic"]) == 0
        out[engine] = read_results(o)
    for engine in ("direct", "tensor"):
        assert out[engine]["attrs"]["engine"] == engine
        np.testing.assert_array_equal(out[engine]["status"], out["fft"]["status"])
        np.testing.assert_allclose(out[engine]["displacement"], out["fft"]["displacement"], atol=1e-3)


def test_repeated_streams_reuse_the_memory_pool(cp, sample_dir):
    """A Dask worker streams once per task on one pipeline: the device memory the
    pool holds must not grow with the number of calls (blocks are cached per CUDA stream)."""
    import tifffile

    from ebsdxc.config import ProcessConfig
    from ebsdxc.io import open_scan
    from ebsdxc.rois import layout_for
    from ebsdxc.run import Pipeline
    from ebsdxc.run.planning import plan_chunks
    from ebsdxc.run.streaming import stream_chunks

    config = ProcessConfig()
    source = open_scan(os.path.join(sample_dir, "scan.h5"))
    ref = tifffile.imread(os.path.join(sample_dir, "ref.tif"))
    backend = select_backend("cuda")
    with backend.use():
        pipeline = Pipeline(backend, config, layout_for(config.roi, source.pattern_shape), ref, batch=16)
        pool = cp.get_default_memory_pool()
        chunks = plan_chunks(np.zeros(source.grid.size, bool), 16)
        got, held, buffers = [], [], None
        for _ in range(6):
            out = {}

            def keep(a, d, h, s, out=out):
                out[a] = d

            buffers = stream_chunks(pipeline, source, chunks, emit=keep, buffers=buffers)
            cp.cuda.Device().synchronize()
            got.append(np.concatenate([out[k] for k in sorted(out)]))
            held.append(pool.total_bytes())
        pipeline.close()
    for g in got[1:]:
        np.testing.assert_array_equal(g, got[0])
    assert held[-1] == held[1], f"pool grew from {held[1]} to {held[-1]} bytes over repeated calls"


def test_references_prepared_on_the_gpu_as_on_the_cpu(cp):
    """The reference ROIs the tile kernel prepares (the run's references and each pattern's own
    in match_pairs) flag what the CPU's array code flags, and give the CPU's shifts: a constant
    ROI and a NaN ROI are refused, the others find the known shift."""
    from scipy.ndimage import gaussian_filter

    from ebsdxc.config import load_config
    from ebsdxc.references import ReferenceSet
    from ebsdxc.rois import layout_for
    from ebsdxc.run.pipeline import Pipeline
    from ebsdxc.status import CONSTANT_TILE, NOT_FINITE, OK

    config, _ = load_config(None, {"roi": {"layout": "grid", "grid": [3, 3], "size": 32},
                                   "correlation": {"engine": "fft"}})
    base = gaussian_filter(np.random.default_rng(2).random((128, 128)), 2.0).astype(np.float32)
    layout = layout_for(config.roi, (128, 128))
    ref = base.copy()
    (ox, oy), (w, h) = layout.origins[0], layout.size
    ref[oy:oy + h, ox:ox + w] = 1.5  # ROI 0 constant
    (ox, oy) = layout.origins[4]
    ref[oy + 3, ox + 5] = np.nan  # ROI 4 not finite
    refs = ReferenceSet(ref[None], None, ())
    shifted = np.stack([np.roll(base, (1, 2), axis=(0, 1)), np.roll(base, (-2, 1), axis=(0, 1))])
    got = {}
    for dev in ("cpu", "cuda"):
        p = Pipeline(select_backend(dev), config, layout, refs)
        xp = p.backend.xp
        res = p.match_pairs(xp.asarray(np.stack([ref, ref])), shifted)
        got[dev] = (np.asarray(p.reference_status), *(p.backend.asnumpy(a) for a in
                                                      (res.displacement, res.status)))
    (st_c, d_c, s_c), (st_g, d_g, s_g) = got["cpu"], got["cuda"]
    np.testing.assert_array_equal(st_g, st_c)
    assert st_c[0, 0] == CONSTANT_TILE and st_c[0, 4] == NOT_FINITE and (np.delete(st_c[0], [0, 4]) == OK).all()
    np.testing.assert_array_equal(s_g, s_c)
    assert (s_c[:, [0, 4]] != OK).all() and (np.delete(s_c, [0, 4], axis=1) == OK).all()
    ok = s_c == OK
    np.testing.assert_allclose(d_g[ok], d_c[ok], atol=2e-3)
    # the rolled patterns moved by (dx, dy) = (2, 1) and (1, -2)
    assert np.abs(d_c[0][ok[0]] - [2, 1]).max() < 0.05 and np.abs(d_c[1][ok[1]] - [1, -2]).max() < 0.05
