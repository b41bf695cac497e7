"""The strain pass under real write faults (issue 20): a full disk (a real tmpfs) and a file size
limit (RLIMIT_FSIZE, as a quota) hit ``ebsdxc strain`` and the strain pass of ``ebsdxc process``.

Before: HDF5 failing half-way through adding the strain datasets left the results file
unreadable (the displacement lost with it), or segfaulted at exit with tracebacks. Now the room
is claimed before HDF5 grows the file: one line, the file as it was, and the strain redone
once there is room.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess

import h5py
import numpy as np
import pytest
from clitools import _exe, assert_one_error, run_cli
from run.test_faults import fill, small_disk

ROI = ("--roi-grid", "3x3", "--roi-size", "40", "--device", "cpu", "-q")
STRAIN = ("strain", "fit_status", "fit_residual", "rotation")


def _group(path):
    with h5py.File(path, "r") as f:
        g = f["ebsdxc"]
        data = {k: g[k][...] for k in ("displacement", "status", "done", *STRAIN) if k in g}
        data.update({k: g[k][...] for k in ("nye_tensor", "gnd_density") if k in g})
        return data, dict(g.attrs)


@pytest.fixture(scope="module")
def results(tmp_path_factory, sample_dir):
    """(displacement-only results file, the same after an undisturbed strain pass)."""
    d = tmp_path_factory.mktemp("strain_truth")
    plain, full = d / "plain.h5", d / "full.h5"
    r = run_cli("process", f"{sample_dir}/scan.h5", "--ref", f"{sample_dir}/ref.tif", "-o", plain, *ROI)
    assert r.returncode == 0, r.stderr
    shutil.copy(plain, full)
    r = run_cli("strain", full, "--material", "Ni", "-q")
    assert r.returncode == 0, r.stderr
    return plain, full


def _same(got, want, names):
    for k in names:
        assert got[k].tobytes() == want[k].tobytes(), k


def _limited(limit, *args):
    """The console script under a file size limit (writes past it fail with EFBIG)."""
    def limit_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    return subprocess.run([_exe(), *map(str, args)], capture_output=True, text=True, timeout=120,
                          preexec_fn=limit_size)


def test_strain_on_a_full_disk_is_one_line_then_redone(results):
    plain, full = results
    want, _ = _group(full)
    with small_disk("1m") as d:
        out = os.path.join(d, "r.h5")
        shutil.copy(plain, out)
        user = fill(d, 20_000)  # the strain needs about 0.1 MB
        with open(user, "rb") as fh:
            before = fh.read()
        r = run_cli("strain", out, "--material", "Ni", "-q")
        assert_one_error(r, out, "space")
        got, attrs = _group(out)  # still openable, the displacement as it was
        _same(got, _group(plain)[0], ("displacement", "status", "done"))
        assert not attrs.get("strain_complete", False) and "strain" not in got
        with open(user, "rb") as fh:
            assert fh.read() == before
        assert sorted(os.listdir(d)) == ["r.h5", "user_file.bin"]
        os.remove(user)  # space is back
        r = run_cli("strain", out, "--material", "Ni", "-q")
        assert r.returncode == 0, r.stderr
        got, attrs = _group(out)
        assert attrs["strain_complete"]
        _same(got, want, (*STRAIN, "displacement"))


@pytest.mark.parametrize("stage", ["strain", "gnd"])
def test_strain_past_a_file_size_limit_leaves_the_file_whole(tmp_path, results, stage):
    plain, full = results
    want, _ = _group(full)
    out = tmp_path / "r.h5"
    shutil.copy(plain, out)
    # strain: the limit bites adding the strain datasets; gnd: after them, adding the GND ones
    limit = os.path.getsize(plain) + 20_000 if stage == "strain" else os.path.getsize(full) - 1_000
    r = _limited(limit, "strain", out, "--material", "Ni", "-q")
    line = assert_one_error(r, out, "file size limit reached")
    assert "Traceback" not in r.stderr
    got, attrs = _group(out)
    _same(got, _group(plain)[0], ("displacement", "status", "done"))
    assert os.path.getsize(out) <= limit
    if stage == "strain":
        assert not attrs.get("strain_complete", False) and "strain" not in got
        redo = ()
    else:
        assert attrs["strain_complete"] and not attrs["gnd_complete"]
        _same(got, want, STRAIN)
        assert "--overwrite" in line
        redo = ("--overwrite",)
    r = run_cli("strain", out, "--material", "Ni", "-q", *redo)
    assert r.returncode == 0, r.stderr
    got, attrs = _group(out)
    assert attrs["strain_complete"] and attrs.get("gnd_complete", False) == bool(_group(full)[1].get("gnd_complete"))
    _same(got, want, [k for k in want if k in STRAIN or k in ("nye_tensor", "gnd_density")])
    if stage == "strain":  # the claimed room HDF5 did not use is given back (--overwrite leaves HDF5 holes)
        assert os.path.getsize(out) == os.path.getsize(full)


def test_incomplete_strain_is_redone_without_overwrite(tmp_path, results):
    # A strain pass that stopped half-way (strain_complete false) claims nothing: redone freely.
    plain, full = results
    out = tmp_path / "r.h5"
    shutil.copy(full, out)
    with h5py.File(out, "r+") as f:
        f["ebsdxc"].attrs["strain_complete"] = False
        f["ebsdxc/strain"][0] = np.nan
    r = run_cli("strain", out, "--material", "Ni", "-q")
    assert r.returncode == 0, r.stderr
    _same(_group(out)[0], _group(full)[0], STRAIN)
    r = run_cli("strain", out, "--material", "Ni", "-q")  # complete now: kept unless --overwrite
    assert_one_error(r, out, "already holds strain results", "--overwrite")


def test_strain_pass_of_process_past_a_file_size_limit(tmp_path, results, sample_dir):
    plain, full = results
    out = tmp_path / "r.h5"
    # Room for the correlation (process claims about 0.08 MB up front), not for the strain after it.
    r = _limited(os.path.getsize(plain) + 60_000, "process", f"{sample_dir}/scan.h5", "--ref",
                 f"{sample_dir}/ref.tif", "-o", out, "--material", "Ni", *ROI)
    assert_one_error(r, out, "file size limit reached", "space for the strain results")
    got, attrs = _group(out)
    assert attrs["complete"] and not attrs.get("strain_complete", False)
    _same(got, _group(plain)[0], ("displacement", "status", "done"))
    r = run_cli("process", f"{sample_dir}/scan.h5", "--ref", f"{sample_dir}/ref.tif", "-o", out, "--material", "Ni",
                "--resume", *ROI)  # once there is room
    assert r.returncode == 0, r.stderr
    got, attrs = _group(out)
    assert attrs["strain_complete"]
    _same(got, _group(full)[0], STRAIN)
