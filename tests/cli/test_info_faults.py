"""``ebsdxc info``, ``--resume`` and ``--overwrite`` on damaged and stale results files: one line each."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
from clitools import assert_one_error, run_cli

SMALL = ["--roi-grid", "2x2", "--roi-size", "16", "--device", "cpu", "-q"]


@pytest.fixture
def scan(tmp_path):
    rng = np.random.default_rng(2)
    y, x = np.mgrid[0:40, 0:40]
    base = 500 + 200 * np.sin(x / 3.0) * np.cos(y / 4.0)
    path = tmp_path / "scan.h5"
    with h5py.File(path, "w") as f:
        f["patterns"] = (base + rng.normal(0, 5, (5, 6, 40, 40))).astype(np.float32)
    return path


def test_damaged_results_file_one_line_for_info_resume_and_overwrite(tmp_path, scan):
    out = tmp_path / "r.h5"
    res = run_cli("process", scan, "--ref-index", "0", "-o", out, *SMALL)
    assert res.returncode == 0, res.stderr
    with open(out, "r+b") as fh:
        fh.truncate(os.path.getsize(out) // 3)
    assert_one_error(run_cli("info", out), out, "HDF5 cannot open")
    assert_one_error(run_cli("process", scan, "--ref-index", "0", "-o", out, "--resume", *SMALL), out,
                     "cannot be resumed")
    res = run_cli("process", scan, "--ref-index", "0", "-o", out, "--overwrite", *SMALL)
    assert res.returncode == 0, res.stderr
    res = run_cli("info", out)
    assert res.returncode == 0 and "complete: True" in res.stdout


def test_roi_of_one_pixel_is_a_clear_error(tmp_path, scan):
    out = tmp_path / "r.h5"
    res = run_cli("process", scan, "--ref-index", "0", "-o", out, "--roi-size", "1", "--device", "cpu")
    assert_one_error(res, "--roi-size", ">= 4")
    assert not out.exists()


def test_info_says_what_is_stale(tmp_path, scan):
    from ebsdxc.io.results import StrainWriter

    out = tmp_path / "r.h5"
    assert run_cli("process", scan, "--ref-index", "0", "-o", out, *SMALL).returncode == 0
    with StrainWriter(out, parameters={}, n_roi=4, fit_codes={}) as w:
        w.finish()
    with h5py.File(out, "r+") as f:  # as a resume that changed the displacement leaves it
        f["ebsdxc/done"][2] = False
        f["ebsdxc"].attrs["complete"] = False
    res = run_cli("process", scan, "--ref-index", "0", "-o", out, "--resume", *SMALL)
    assert res.returncode == 0, res.stderr
    assert "strain results are stale" in res.stdout
    info = run_cli("info", out)
    assert info.returncode == 0 and "stale: [\"strain\"]" in info.stdout, info.stdout
