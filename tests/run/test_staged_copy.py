"""benchmarks/staged_copy.py (issue 18's staging experiment): its pieces cover the scan once and
respect batch boundaries, and its dry run (host memory for the device) puts the right bytes in
place for every mode (CPU)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

# Imported by its name from the benchmarks folder, so that the reader processes it starts
# (spawned: they import the module of their function again) find it too.
sys.path.append(str(Path(__file__).resolve().parents[2] / "benchmarks"))
staged = importlib.import_module("staged_copy")


@pytest.mark.parametrize("size,wrap", [(7, 20), (64, 48), (1000, 96), (5, 5)])
def test_pieces_cover_every_byte_once_within_batches(size, wrap):
    runs = [(1000, 0, 50), (3000, 50, 50), (2000, 100, 37)]  # file order is not scan order
    pieces = staged.cut(runs, size, wrap)
    covered = np.zeros(137, int)
    for off, dst, n in pieces:
        assert 0 < n <= size and dst // wrap == (dst + n - 1) // wrap
        run = next(r for r in runs if r[1] <= dst < r[1] + r[2])
        assert off - run[0] == dst - run[1] and dst + n <= run[1] + run[2]  # inside its own run
        covered[dst:dst + n] += 1
    assert (covered == 1).all()


def test_dry_run_puts_the_scan_in_place(tmp_path, capsys):
    staged.main(["64", "300", "--batch", "40", "--threads", "2,3", "--pieces", "0.01,0.05", "--slots", "2",
                 "--repeats", "1", "--dir", str(tmp_path), "--dry-run"])
    out = capsys.readouterr().out
    assert out.count("patterns/s") == 3 + 2 * 2 and "WRONG DATA" not in out


def test_dry_run_of_reader_processes_and_a_busy_thread_puts_the_scan_in_place(tmp_path, capsys):
    staged.main(["64", "300", "--batch", "40", "--threads", "2", "--pieces", "0.01,0.05", "--slots", "2",
                 "--procs", "2,3", "--load", "--repeats", "1", "--dir", str(tmp_path), "--dry-run"])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("rep ")]
    assert len(lines) == 2 * (3 + 2 + 2 * 2) and "WRONG DATA" not in out
    assert sum("processes" in line for line in lines) == 2 * 2 * 2
    assert sum("busy thread kept" in line for line in lines) == len(lines) // 2


def test_the_device_check_sees_wrong_data(tmp_path):
    # the check the benchmark prints must fail when the last batch is not on the device
    path = staged.write_scan(str(tmp_path / "s.h5"), 100, (16, 16))
    runs, n, per = staged.stored_runs(path)
    dev = staged.Device(2 * 40 * per, dry=True)
    fd = staged.os.open(path, staged.os.O_RDONLY)
    try:
        staged.run_batches(fd, runs, 40 * per, n * per, dev, 2, True)
        first, half = staged.last_batch(n, 40)
        with staged.h5py.File(path) as f:
            want = int(f["patterns"][first:first + 40].astype(np.uint64).sum())
        assert dev.batch_sum(half * 40 * per, 40 * per) == want
        dev.buf[half * 40 * per + 10] ^= 0xFF
        assert dev.batch_sum(half * 40 * per, 40 * per) != want
    finally:
        staged.os.close(fd)
