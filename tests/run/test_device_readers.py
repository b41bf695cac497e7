"""Reader processes that copy patterns to the GPU themselves (:mod:`ebsdxc.run.device_readers`):
the results of reading in the run's own process, bit for bit; points with no stored pattern; a
file cut short mid-run named in one line with the points before it kept; a batch out of device
memory retried smaller (run with ``pytest -m gpu``)."""

from __future__ import annotations

import warnings

import h5py
import numpy as np
import pytest
import tifffile

from ebsdxc import status as st
from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
from ebsdxc.errors import InputError
from ebsdxc.io.results import read_results
from ebsdxc.run import process, streaming
from ebsdxc.run.bench_pipeline import write_scan
from ebsdxc.run.pipeline import Pipeline

pytestmark = pytest.mark.gpu

CFG = ProcessConfig(roi=RoiConfig(grid=(3, 3), size=32))
KEYS = ("displacement", "peak_height", "status", "done")


@pytest.fixture
def used(monkeypatch):
    """The batches' count of each call streamed through reader processes."""
    calls = []
    real = streaming._stream_device_read

    def spy(pipeline, source, chunks, *a, **k):
        calls.append(len(chunks))
        return real(pipeline, source, chunks, *a, **k)

    monkeypatch.setattr(streaming, "_stream_device_read", spy)
    return calls


def _scan(tmp_path, n=700, *, stored=None, contiguous=False):
    """A 96x96 uint16 scan (chunks of 9 patterns, or contiguous); ``stored``: only the first
    patterns written (the rest never: read as zeros, no measurement)."""
    made = write_scan(tmp_path / "made.h5", n, (96, 96), chunk=9)
    with h5py.File(made, "r") as f:
        data = f["patterns"][...]
    path = tmp_path / "scan.h5"
    with h5py.File(path, "w") as f:
        if contiguous:
            f.create_dataset("patterns", data=data)
        else:
            ds = f.create_dataset("patterns", shape=data.shape, dtype=data.dtype, chunks=(9, 96, 96))
            ds[:stored] = data[:stored]
    ref = tmp_path / "ref.tif"
    tifffile.imwrite(ref, data[0])
    return path, ref


def _run(scan, ref, out, batch=64, **kw):
    scan = scan if hasattr(scan, "read_into") else str(scan)
    return read_results(process(scan, ref=str(ref), output=str(out), config=CFG,
                                run=RunConfig(device="cuda", batch=batch), **kw))


@pytest.mark.parametrize("spec", ["2x2", "3x1"])
def test_reader_processes_give_the_results_of_reading_here(tmp_path, monkeypatch, used, spec):
    scan, ref = _scan(tmp_path)
    monkeypatch.setenv("EBSDXC_READER_PROCESSES", "0")
    here = _run(scan, ref, tmp_path / "here.h5")
    assert not used
    monkeypatch.setenv("EBSDXC_READER_PROCESSES", spec)
    there = _run(scan, ref, tmp_path / "there.h5")
    assert sum(used) == 11  # 700 patterns in batches of 64
    for k in KEYS:
        np.testing.assert_array_equal(there[k], here[k], err_msg=k)
    assert there["attrs"]["complete"] and (there["status"] == st.OK).mean() > 0.3  # measured, not all flagged
    p, t = spec.split("x")
    assert (here["attrs"]["pattern_reading"], there["attrs"]["pattern_reading"]) == (
        "this process", f"reader processes ({p} x {t})")


def test_patterns_never_stored_arrive_as_zeros(tmp_path, monkeypatch, used):
    scan, ref = _scan(tmp_path, stored=400)
    monkeypatch.setenv("EBSDXC_READER_PROCESSES", "0")
    here = _run(scan, ref, tmp_path / "here.h5")
    monkeypatch.setenv("EBSDXC_READER_PROCESSES", "2x2")
    there = _run(scan, ref, tmp_path / "there.h5")
    assert used
    for k in KEYS:
        np.testing.assert_array_equal(there[k], here[k], err_msg=k)
    flat = there["status"].reshape(-1, 9)
    assert (flat[405:] == st.MISSING_PATTERN).all() and (flat[:396] != st.MISSING_PATTERN).all()


def test_a_file_cut_short_mid_run_is_one_line_naming_it(tmp_path, monkeypatch, used):
    from ebsdxc.io import open_scan

    scan, ref = _scan(tmp_path, contiguous=True)
    whole = _run(scan, ref, tmp_path / "whole.h5")
    monkeypatch.setenv("EBSDXC_READER_PROCESSES", "2x1")
    src = open_scan(scan)  # opened (and checked) whole
    size = scan.stat().st_size
    with open(scan, "r+b") as fh:  # then the file loses its last third: mid-run for the readers
        fh.truncate(size - size // 3)
    with pytest.raises(InputError) as e:
        _run(src, ref, tmp_path / "cut.h5")
    assert used
    msg = str(e.value)
    assert "cannot read patterns" in msg and "truncated" in msg, msg
    assert msg.count(str(scan)) == 1 and "\n" not in msg
    r = read_results(tmp_path / "cut.h5")
    done = r["done"]
    assert not r["attrs"]["complete"] and 0 < done.sum() < done.size
    for k in ("displacement", "peak_height", "status"):  # every point marked done holds its result
        np.testing.assert_array_equal(r[k][done], whole[k][done], err_msg=k)
    src.close()


def test_a_batch_out_of_device_memory_is_retried_smaller(tmp_path, monkeypatch, used):
    import cupy as cp

    scan, ref = _scan(tmp_path)
    monkeypatch.setenv("EBSDXC_READER_PROCESSES", "2x2")
    whole = _run(scan, ref, tmp_path / "whole.h5")
    real = Pipeline.match
    calls = []

    def third_fails(self, patterns, **kw):
        calls.append(len(patterns))
        if len(calls) == 3:
            raise cp.cuda.memory.OutOfMemoryError(1 << 30, 0)
        return real(self, patterns, **kw)

    monkeypatch.setattr(Pipeline, "match", third_fails)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _run(scan, ref, tmp_path / "tight.h5")
    assert [str(w.message).count("out of GPU memory") for w in caught].count(1) == 1
    assert calls[:4] == [64, 64, 64, 32], calls
    assert got["attrs"]["complete"]
    for k in KEYS:
        np.testing.assert_array_equal(got[k], whole[k], err_msg=k)


def test_a_scan_replaced_under_its_name_is_read_anew(tmp_path, monkeypatch, used):
    """The reader processes outlive a run (they take seconds to start) and keep their files
    open: a file written again under the same name between two runs must not be read from the
    old one."""
    scan, ref = _scan(tmp_path)
    monkeypatch.setenv("EBSDXC_READER_PROCESSES", "2x2")
    first = _run(scan, ref, tmp_path / "first.h5")
    with h5py.File(scan, "r") as f:
        data = f["patterns"][...]
    scan.unlink()
    with h5py.File(scan, "w") as f:  # a new file: the patterns in reverse order
        f.create_dataset("patterns", data=data[::-1], chunks=(9, 96, 96))
    second = _run(scan, ref, tmp_path / "second.h5")
    monkeypatch.setenv("EBSDXC_READER_PROCESSES", "0")
    here = _run(scan, ref, tmp_path / "here.h5")
    assert len(used) == 2
    for k in KEYS:
        np.testing.assert_array_equal(second[k], here[k], err_msg=k)
    assert not np.array_equal(second["displacement"], first["displacement"], equal_nan=True)


def test_bench_takes_the_run_to_the_bound_of_its_own_readers(tmp_path, monkeypatch):
    """``bench --pipeline`` on a scan the readers read: their rate to the device is measured
    (two batches in flight, as the run) and is the read bound the share is taken of; the readers
    still serve a run afterwards (the measurement detached its buffers and gave the lock back)."""
    from ebsdxc.run.bench_pipeline import format_table, measure

    monkeypatch.setenv("EBSDXC_READER_PROCESSES", "2x2")
    r = measure(CFG, RunConfig(device="cuda", batch=64), patterns=400, shape=(96, 96), workdir=str(tmp_path),
                repeats=2)
    f = r["figures"]
    dev = f["read to the device by reader processes"]
    assert dev is not None and 0 < dev["min"] <= dev["median"] <= dev["max"]
    assert "host-to-device bound, ROIs only" not in f  # whole patterns: what the readers copy
    sent = f["host-to-device bound"]
    assert r["smallest_bound"] == min(dev["median"], sent["median"], f["engine bound"]["median"])
    assert "| read to the device by reader processes |" in format_table(r)
    path, ref = _scan(tmp_path, 120)
    out = tmp_path / "after.h5"
    process(path, ref=ref, output=out, config=CFG, run=RunConfig(device="cuda", batch=32))
    assert read_results(out)["done"].all()


def test_a_run_with_reader_processes_pins_no_batches_here(tmp_path, monkeypatch, used):
    """The reader processes copy from their own pinned slots: the run allocates none of the
    pinned batches (three of them: 768 MB at 1024x1024 in batches of 128) it reads into itself."""
    scan, ref = _scan(tmp_path, 200)
    pinned = []
    real = streaming.host_buffers
    monkeypatch.setattr(streaming, "host_buffers", lambda *a, **k: pinned.append(a[2]) or real(*a, **k))
    monkeypatch.setenv("EBSDXC_READER_PROCESSES", "2x2")
    _run(scan, ref, tmp_path / "there.h5")
    assert used and not pinned
    monkeypatch.setenv("EBSDXC_READER_PROCESSES", "0")
    _run(scan, ref, tmp_path / "here.h5")
    assert pinned  # the control: reading here pins them
