"""``ebsdxc bench --pipeline``: a real run on a synthetic scan it writes, with the bounds
measured in the same process (CPU here; the device tool runs it on a GPU)."""

from __future__ import annotations

import h5py
import numpy as np

from ebsdxc import cli
from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
from ebsdxc.engines.base import EngineConfig
from ebsdxc.run.bench_pipeline import measure, write_scan


def test_synthetic_scan_is_what_it_says(tmp_path):
    path = write_scan(tmp_path / "s.h5", 40, (32, 48), distinct=4, chunk=16)
    with h5py.File(path, "r") as f:
        p = f["patterns"]
        assert p.shape == (40, 32, 48) and p.dtype == np.uint16 and p.chunks == (16, 32, 48)
        a = p[...]
    np.testing.assert_array_equal(a[0], a[4])  # distinct patterns, repeated
    assert not np.array_equal(a[0], a[1]) and a.min() >= 5000 and a.max() <= 55000


def test_measure_gives_every_figure_and_the_share_of_the_bound(tmp_path):
    cfg = ProcessConfig(roi=RoiConfig(layout="grid", grid=(3, 3), size=24),
                        correlation=EngineConfig(subpixel="quadratic"))
    r = measure(cfg, RunConfig(device="cpu", batch=16), patterns=48, shape=(64, 64), workdir=str(tmp_path),
                repeats=2)
    f = r["figures"]
    for k in ("end to end, streaming", "end to end, after the first batch", "end to end, wall with set-up",
              "read bound", "engine bound"):
        assert f[k]["min"] > 0 and f[k]["min"] <= f[k]["median"] <= f[k]["max"]
    assert f["host-to-device bound"] is None  # no GPU
    assert "read to the device by reader processes" not in f  # nor reader processes
    # the run can't beat its own engine on the same machine by much, nor the wall its streaming
    smallest = min(f["read bound"]["median"], f["engine bound"]["median"])
    assert r["smallest_bound"] == smallest and 0 < r["share_of_bound"] < 2
    assert f["end to end, wall with set-up"]["median"] <= f["end to end, streaming"]["median"] * 1.05
    assert r["profile_bound"] in ("read", "transfer", "preprocess", "correlate", "peaks", "write")
    assert r["engine"] == "fft"  # what "auto" ran on the CPU
    # the bounds were taken at the batch the run used, read from its results file's attributes
    from ebsdxc.io.results import read_attrs
    from ebsdxc.run.bench_pipeline import _run_batch

    out = tmp_path / "bench-pipeline-result.h5"
    assert int(read_attrs(out)["batch_sizes"][0]) == 16 and _run_batch(out, 999) == 16
    assert r["batch"] == 16


def test_cli_prints_the_table(tmp_path, capsys):
    recipe = tmp_path / "small.toml"
    recipe.write_text('[roi]\nlayout = "grid"\ngrid = [3, 3]\nsize = 24\n[correlation]\nsubpixel = "quadratic"\n')
    assert cli.main(["bench", "--pipeline", str(recipe), "--device", "cpu", "--patterns", "24", "--pattern-size", "64",
                     "--repeats", "1", "--batch", "8", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| read bound |" in out and "| engine bound |" in out and "of the smallest bound" in out
    assert out.splitlines()[0].endswith("; engine fft")


def test_table_gives_the_share_of_the_host_to_device_bound():
    # issue 18's measure for the realistic sizes: end to end against whole-pattern copies
    from ebsdxc.run.bench_pipeline import format_table

    def fig(v):
        return {"median": v, "min": v, "max": v}
    result = {"device": "cuda:0 (GPU)", "patterns": 100, "shape": [512, 512], "chunk": 64, "batch": 32, "repeats": 3,
              "engine": "fused", "smallest_bound": 50.0, "share_of_bound": 0.9, "profile_bound": "read",
              "figures": {"end to end, streaming": fig(45.0), "read bound": fig(50.0),
                          "host-to-device bound": fig(100.0), "engine bound": fig(60.0)}}
    assert format_table(result).splitlines()[-1] == "end to end = 45% of the host-to-device bound of whole patterns"
    result["figures"]["host-to-device bound"] = None  # on the CPU: no such line
    assert "host-to-device bound of whole" not in format_table(result)


def test_patterns_made_on_the_fly_repeat_and_read_like_a_file():
    from ebsdxc.run.bench_pipeline import SyntheticScan

    src = SyntheticScan(3000, (32, 48), distinct=4)
    assert src.n_patterns == 3000 and (src.grid.rows, src.grid.cols) == (3, 1000)
    a = src.read(2, 10)
    np.testing.assert_array_equal(a[0], a[4])
    assert a.dtype == np.uint16 and not np.array_equal(a[0], a[1])
    assert SyntheticScan(7, (8, 8)).grid.cols == 7  # not a multiple of the columns: one row


def test_memory_over_time_samples_the_whole_run(tmp_path):
    from ebsdxc.run.bench_pipeline import format_memory, memory_over_time

    cfg = ProcessConfig(roi=RoiConfig(layout="grid", grid=(2, 2), size=16),
                        correlation=EngineConfig(subpixel="quadratic"))
    r = memory_over_time(cfg, RunConfig(device="cpu", batch=32), patterns=400, shape=(48, 48),
                         workdir=str(tmp_path), interval=0.02)
    s = r["samples"]
    assert len(s) >= 3 and s[0]["done"] == 0 and s[-1]["done"] == 400
    assert all(x["rss"] > 0 and x["device"] is None for x in s)
    assert [x["t"] for x in s] == sorted(x["t"] for x in s)
    text = format_memory(r)
    assert "points done" in text and "host RSS:" in text
    assert not (tmp_path / "bench-memory-result.h5").exists()  # the results file is not left behind
