"""Results-file flags stay true: strain and GND fitted on a displacement that later changes are
marked stale; a results file HDF5 can no longer open is recognised by its signature."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
from ebsdxc.errors import InputError
from ebsdxc.io import ArraySource
from ebsdxc.io.results import SIGNATURE, StrainWriter, is_damaged_results, read_summary, require_results, write_gnd
from ebsdxc.progress import Progress
from ebsdxc.run import process

CFG = ProcessConfig(roi=RoiConfig(grid=(2, 2), size=16))
RUN = RunConfig(device="cpu", batch=10)


def source():
    rng = np.random.default_rng(1)
    y, x = np.mgrid[0:40, 0:40]
    base = 500 + 200 * np.sin(x / 3.0) * np.cos(y / 4.0)
    return ArraySource((base + rng.normal(0, 5, (6, 8, 40, 40))).astype(np.float32), path="scan.h5")


class StopAfter(Progress):
    def __init__(self, n):
        self.n, self.updates = n, 0

    def update(self, k):
        self.updates += 1
        if self.updates >= self.n:
            raise KeyboardInterrupt


def fake_strain(path):
    """A strain pass over what the file holds now (values as the fit would write them)."""
    with h5py.File(path, "r") as f:
        done = f["ebsdxc/done"][...]
        rows, cols, n = f["ebsdxc/status"].shape
    with StrainWriter(path, parameters={"material": "Ni"}, n_roi=n, fit_codes={0: "ok"},
                      overwrite=True) as w:
        w.write(slice(0, rows), cols, fit_status=np.where(done, 0, 2).astype(np.uint8).ravel(),
                strain=np.where(done[..., None, None], 1e-3, np.full((3, 3), np.nan)).reshape(-1, 3, 3))
        w.finish()
    write_gnd(path, np.zeros((rows, cols, 3, 3)), np.where(done, 1e12, np.nan), attrs={})


def test_strain_on_a_partial_file_is_stale_after_resume(tmp_path):
    out = tmp_path / "r.h5"
    with pytest.raises(KeyboardInterrupt):
        process(source(), ref_index=0, output=str(out), config=CFG, run=RUN, progress=StopAfter(2))
    fake_strain(out)
    s = read_summary(out)
    assert s["strain"]["complete"] and s["gnd_complete"] and s["stale"] == []
    assert s["strain"]["points_fitted"] == 20

    process(source(), ref_index=0, output=str(out), config=CFG, run=RUN, resume=True)
    s = read_summary(out)
    assert s["complete"]
    # the file no longer claims a strain (or GND) it does not hold for most points
    assert s["strain"]["complete"] is False and s["gnd_complete"] is False
    assert s["stale"] == ["strain", "gnd"]
    with h5py.File(out, "r") as f:
        a = f["ebsdxc"].attrs
        assert bool(a["strain_stale"]) and bool(a["gnd_stale"])

    fake_strain(out)  # the strain pass again: true again
    s = read_summary(out)
    assert s["strain"]["complete"] and s["gnd_complete"] and s["stale"] == []
    assert s["strain"]["points_fitted"] == 48


def test_resume_of_a_complete_file_keeps_its_strain(tmp_path):
    out = tmp_path / "r.h5"
    process(source(), ref_index=0, output=str(out), config=CFG, run=RUN)
    fake_strain(out)
    process(source(), ref_index=0, output=str(out), config=CFG, run=RUN, resume=True)
    s = read_summary(out)
    assert s["strain"]["complete"] and s["stale"] == []  # nothing changed: nothing stale


def test_new_strain_without_gnd_marks_old_gnd_stale(tmp_path):
    out = tmp_path / "r.h5"
    process(source(), ref_index=0, output=str(out), config=CFG, run=RUN)
    fake_strain(out)
    with StrainWriter(out, parameters={}, n_roi=4, fit_codes={}, overwrite=True) as w:
        w.finish()
    s = read_summary(out)
    assert s["strain"]["complete"] and s["gnd_complete"] is False and s["stale"] == ["gnd"]


def test_truncated_results_file_is_recognised_and_refused_in_one_line(tmp_path):
    out = tmp_path / "r.h5"
    process(source(), ref_index=0, output=str(out), config=CFG, run=RUN)
    with open(out, "rb") as fh:
        assert fh.read(len(SIGNATURE)) == SIGNATURE
    size = os.path.getsize(out)
    with open(out, "r+b") as fh:
        fh.truncate(size // 3)
    with pytest.raises(OSError):
        h5py.File(out, "r")
    assert is_damaged_results(out)
    with pytest.raises(InputError) as e:
        require_results(out)
    assert str(out) in str(e.value) and "cannot open" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(InputError) as e:
        process(source(), ref_index=0, output=str(out), config=CFG, run=RUN, resume=True)
    assert "cannot be resumed" in str(e.value)
    process(source(), ref_index=0, output=str(out), config=CFG, run=RUN, overwrite=True)
    assert read_summary(out)["complete"]


def test_a_damaged_file_of_someone_else_is_never_replaced(tmp_path):
    other = tmp_path / "theirs.h5"
    with h5py.File(other, "w") as f:
        f["data"] = np.arange(1000)
    with open(other, "r+b") as fh:
        fh.truncate(os.path.getsize(other) // 2)
    before = other.read_bytes()
    assert not is_damaged_results(other)
    with pytest.raises(InputError) as e:
        process(source(), ref_index=0, output=str(other), config=CFG, run=RUN, overwrite=True)
    assert "not an ebsdxc results file" in str(e.value)
    assert other.read_bytes() == before and not os.path.exists(str(other) + ".lock")


# ----------------------------------------------------------------------------- write order


def test_points_are_marked_done_only_after_their_data_was_flushed(tmp_path):
    """One flush per batch: a batch's points are marked done with the next batch's flush, so
    at every flush the points marked done are points whose data an earlier flush wrote."""
    from ebsdxc.io.results import ResultsWriter
    from ebsdxc.io.source import ScanGrid

    rows, cols, n_roi = 5, 7, 3
    rng = np.random.default_rng(2)
    disp = rng.normal(size=(rows * cols, n_roi, 2)).astype(np.float32)
    height = rng.uniform(size=(rows * cols, n_roi)).astype(np.float32)
    status = rng.integers(0, 3, (rows * cols, n_roi)).astype(np.uint8)
    out = tmp_path / "r.h5"
    w = ResultsWriter.create(out, grid=ScanGrid(rows, cols), centres=np.zeros((n_roi, 2)) + 10, roi_size=(16, 16),
                             parameters={}, inputs=[])
    g = w._g
    flushes = []  # (points marked done, points holding data) at each flush
    real_flush = w._f.flush

    def flush():
        flushes.append((g["done"][...].ravel().copy(), ~np.isnan(g["displacement"][..., 0, 0]).ravel()))
        real_flush()

    w._f.flush = flush
    # part of a row, then part of a row and two whole rows at once, then one whole row
    for a, b in ((0, 9), (9, 28), (28, 35)):
        w.write(a, disp[a:b], height[a:b], status[a:b])
    w.finish()
    w.close()
    assert len(flushes) >= 3
    for (done, _), (_, had_data) in zip(flushes[1:], flushes[:-1]):
        assert not (done & ~had_data).any(), "a point was marked done before its data were flushed"
    assert not flushes[0][0].any()
    with h5py.File(out, "r") as f:
        e = f["ebsdxc"]
        np.testing.assert_array_equal(e["displacement"][...].reshape(-1, n_roi, 2), disp)
        np.testing.assert_array_equal(e["peak_height"][...].reshape(-1, n_roi), height)
        np.testing.assert_array_equal(e["status"][...].reshape(-1, n_roi), status)
        assert e["done"][...].all() and bool(e.attrs["complete"])


def test_the_last_batch_is_marked_done_when_the_writer_closes(tmp_path):
    from ebsdxc.io.results import ResultsWriter
    from ebsdxc.io.source import ScanGrid

    out = tmp_path / "r.h5"
    w = ResultsWriter.create(out, grid=ScanGrid(2, 4), centres=np.zeros((1, 2)) + 10, roi_size=(16, 16),
                             parameters={}, inputs=[])
    w.write(0, np.zeros((3, 1, 2), np.float32), np.ones((3, 1), np.float32), np.zeros((3, 1), np.uint8))
    assert not w._g["done"][...].any()  # written and flushed, marked with the next operation
    assert w.done.sum() == 3  # reading `done` is such an operation
    w.write(3, np.zeros((2, 1, 2), np.float32), np.ones((2, 1), np.float32), np.zeros((2, 1), np.uint8))
    w.close()
    with h5py.File(out, "r") as f:
        assert f["ebsdxc/done"][...].ravel().tolist() == [True] * 5 + [False] * 3
        assert not bool(f["ebsdxc"].attrs["complete"])
