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
    for k in ("end to end, streaming", "end to end, wall with set-up", "read bound", "engine bound"):
        assert f[k]["min"] > 0 and f[k]["min"] <= f[k]["median"] <= f[k]["max"]
    assert f["host-to-device bound"] is None  # no GPU
    # the run can't beat its own engine on the same machine by much, nor the wall its streaming
    smallest = min(f["read bound"]["median"], f["engine bound"]["median"])
    assert r["smallest_bound"] == smallest and 0 < r["share_of_bound"] < 2
    assert f["end to end, wall with set-up"]["median"] <= f["end to end, streaming"]["median"] * 1.05
    assert r["profile_bound"] in ("read", "transfer", "preprocess", "correlate", "peaks", "write")


def test_cli_prints_the_table(tmp_path, capsys):
    recipe = tmp_path / "small.toml"
    recipe.write_text('[roi]\nlayout = "grid"\ngrid = [3, 3]\nsize = 24\n[correlation]\nsubpixel = "quadratic"\n')
    assert cli.main(["bench", "--pipeline", str(recipe), "--device", "cpu", "--patterns", "24", "--pattern-size", "64",
                     "--repeats", "1", "--batch", "8", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| read bound |" in out and "| engine bound |" in out and "of the smallest bound" in out
