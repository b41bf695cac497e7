"""The results file under real faults: a full disk (tmpfs, else a file size limit), a second
writer with HDF5 file locking off, a stale lock of a dead run, a file replaced mid-run."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import h5py
import numpy as np
import pytest
from clitools import assert_one_error, run_cli

from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
from ebsdxc.errors import InputError
from ebsdxc.io import ArraySource
from ebsdxc.io.results import SIGNATURE, read_summary
from ebsdxc.progress import Progress
from ebsdxc.run import process

CFG = ProcessConfig(roi=RoiConfig(grid=(3, 3), size=16))
RUN = RunConfig(device="cpu", batch=50)
ROWS, COLS = 30, 30


def patterns(rows=ROWS, cols=COLS):
    """A textured pattern plus noise at every point: every match is ok, near zero shift."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:48, 0:48]
    base = 500 + 200 * np.sin(x / 3.0) * np.cos(y / 4.0) + rng.uniform(0, 100, (48, 48))
    return (base + rng.normal(0, 5, (rows, cols, 48, 48))).astype(np.float32)


def datasets(path):
    with h5py.File(path, "r") as f:
        g = f["ebsdxc"]
        return {k: g[k][...] for k in ("displacement", "peak_height", "status", "done")}, dict(g.attrs)


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    """The uninterrupted run on a normal disk: what every faulted run must end up holding."""
    out = tmp_path_factory.mktemp("truth") / "truth.h5"
    process(ArraySource(patterns(), path="scan.h5"), ref_index=0, output=str(out), config=CFG, run=RUN)
    return datasets(out)[0]


@contextlib.contextmanager
def small_disk(size="1m"):
    """A real tmpfs of ``size``; skips (with the reason) where mounting is not allowed."""
    d = tempfile.mkdtemp(prefix="ebsdxc-tmpfs-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", d], capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(d)
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}): the file size limit "
                    "tests cover a full disk")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", d], check=False)
        os.rmdir(d)


def fill(directory, leave: int) -> str:
    """Fill a file system up to ``leave`` bytes free with a file of the user's; return its path."""
    path = os.path.join(directory, "user_file.bin")
    free = shutil.disk_usage(directory).free
    with open(path, "wb") as fh:
        fh.write(os.urandom(max(0, free - leave)))
    return path


def digest(path):
    with open(path, "rb") as fh:
        return fh.read()


# ----------------------------------------------------------------------------- full disk


def test_full_disk_refused_at_once_then_resumes_once_space_is_back(tmp_path, truth):
    np.save(tmp_path / "p.npy", patterns())
    with small_disk("1m") as d:
        user = fill(d, 100_000)  # the results need about 0.2 MB
        before = digest(user)
        out = os.path.join(d, "r.h5")
        with pytest.raises(InputError) as e:
            process(ArraySource(np.load(tmp_path / "p.npy"), path="scan.h5"), ref_index=0, output=out,
                    config=CFG, run=RUN)
        msg = str(e.value)
        assert "\n" not in msg and out in msg and "space" in msg, msg
        assert not os.path.exists(out) and not os.path.exists(out + ".lock")
        assert sorted(os.listdir(d)) == ["user_file.bin"]  # no reservation or half file left
        assert digest(user) == before
        os.remove(user)  # space is back
        process(ArraySource(np.load(tmp_path / "p.npy"), path="scan.h5"), ref_index=0, output=out,
                config=CFG, run=RUN)
        got, attrs = datasets(out)
        assert bool(attrs["complete"])
        for k in got:
            assert got[k].tobytes() == truth[k].tobytes(), k
        with open(out, "rb") as fh:
            assert fh.read(len(SIGNATURE)) == SIGNATURE


class FillDiskAfterFirstBatch(Progress):
    """Another program fills the disk to the last byte once the first batch is written."""

    def __init__(self, directory):
        self.directory = directory
        self.updates = 0
        self.filled = None

    def update(self, n):
        self.updates += 1
        if self.updates == 1:
            self.filled = fill(self.directory, 0)
            with pytest.raises(OSError), open(os.path.join(self.directory, "more.bin"), "wb") as fh:  # full
                fh.write(b"x" * 65536)
                fh.flush()
                os.fsync(fh.fileno())


def test_disk_filling_up_mid_run_leaves_the_run_whole(truth):
    """The results' space is taken when the file is made: a disk that fills up during the run
    (another program) costs the run nothing."""
    with small_disk("1m") as d:
        out = os.path.join(d, "r.h5")
        prog = FillDiskAfterFirstBatch(d)
        process(ArraySource(patterns(), path="scan.h5"), ref_index=0, output=out, config=CFG, run=RUN,
                progress=prog)
        assert prog.filled and shutil.disk_usage(d).free < 65536
        got, attrs = datasets(out)
        assert bool(attrs["complete"])
        for k in got:
            assert got[k].tobytes() == truth[k].tobytes(), k


LIMITED = textwrap.dedent("""
    import os, resource, signal, sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from run.test_faults import CFG, RUN, patterns
    from ebsdxc.errors import InputError
    from ebsdxc.io import ArraySource
    from ebsdxc.run import process
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY))
    try:
        process(ArraySource(patterns(), path="scan.h5"), ref_index=0, output=sys.argv[1], config=CFG, run=RUN)
    except InputError as e:
        print(e, file=sys.stderr)
        sys.exit(2)
""")


def test_file_size_limit_is_one_line_no_crash_nothing_left(tmp_path, truth):
    """A limit the free-space check cannot see (RLIMIT_FSIZE, like a quota): one line, exit 2,
    no crash at exit (HDF5 used to segfault), nothing half-made left; then the run works."""
    out = tmp_path / "r.h5"
    code = LIMITED.format(tests=os.path.dirname(os.path.dirname(__file__)), limit=50_000)
    r = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1 and str(out) in r.stderr and "file size limit" in r.stderr, r.stderr
    assert os.listdir(tmp_path) == []
    process(ArraySource(patterns(), path="scan.h5"), ref_index=0, output=str(out), config=CFG, run=RUN)
    got, _ = datasets(out)
    assert got["displacement"].tobytes() == truth["displacement"].tobytes()


# ----------------------------------------------------------------------------- one writer


SLOW = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from run.test_faults import CFG, patterns
    from ebsdxc.config import RunConfig
    from ebsdxc.io import ArraySource
    from ebsdxc.progress import Progress
    from ebsdxc.run import process

    class Slow(Progress):
        def update(self, n):
            time.sleep(0.3)

    process(ArraySource(patterns(), path="scan.h5"), ref_index=0, output=sys.argv[1], config=CFG,
            run=RunConfig(device="cpu", batch=30), progress=Slow(), command_line="first run")
    print("first done")
""")


def test_second_writer_refused_naming_the_first_with_hdf5_locking_off(tmp_path, truth):
    out = tmp_path / "r.h5"
    np.save(tmp_path / "scan.npy", patterns())
    env = {**os.environ, "HDF5_USE_FILE_LOCKING": "FALSE"}
    first = subprocess.Popen([sys.executable, "-c", SLOW.format(tests=os.path.dirname(os.path.dirname(__file__))),
                              str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):
            if os.path.exists(str(out) + ".lock") and os.path.exists(out):
                break
            time.sleep(0.05)
        with open(str(out) + ".lock") as fh:
            holder = json.load(fh)
        assert holder["pid"] == first.pid
        for extra in (["--overwrite"], ["--resume"]):
            scan = tmp_path / "scan.h5"
            if not scan.exists():
                with h5py.File(scan, "w") as f:
                    f["patterns"] = np.load(tmp_path / "scan.npy")
            res = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ebsdxc"), "process", str(scan),
                                  "--ref-index", "0", "--roi-grid", "3x3", "--roi-size", "16", "--device", "cpu",
                                  "-o", str(out), "-q", *extra], env=env, capture_output=True, text=True,
                                 timeout=120)
            assert_one_error(res, out, f"pid {first.pid}", "another ebsdxc run")
        stdout, stderr = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, stderr
    got, attrs = datasets(out)
    assert bool(attrs["complete"]) and got["done"].all()
    assert got["displacement"].tobytes() == truth["displacement"].tobytes()
    assert not os.path.exists(str(out) + ".lock")


def dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_lock_of_a_dead_run_is_taken_over(tmp_path, truth):
    import socket

    out = tmp_path / "r.h5"
    # a run killed with SIGKILL leaves its lock behind
    with open(str(out) + ".lock", "w") as fh:
        json.dump({"file": str(out), "pid": dead_pid(), "host": socket.gethostname(), "started": "earlier"}, fh)
    process(ArraySource(patterns(), path="scan.h5"), ref_index=0, output=str(out), config=CFG, run=RUN)
    assert datasets(out)[0]["displacement"].tobytes() == truth["displacement"].tobytes()
    assert not os.path.exists(str(out) + ".lock")


def test_lock_of_a_live_run_on_another_host_is_respected(tmp_path):
    out = tmp_path / "r.h5"
    with open(str(out) + ".lock", "w") as fh:
        json.dump({"file": str(out), "pid": 1, "host": "elsewhere.example", "started": "2026-01-01T00:00:00"}, fh)
    with pytest.raises(InputError) as e:
        process(ArraySource(patterns(4, 4), path="scan.h5"), ref_index=0, output=str(out), config=CFG, run=RUN)
    assert "pid 1 on elsewhere.example" in str(e.value) and not out.exists()


def test_sigkill_leaves_a_stale_lock_that_resume_takes_over(tmp_path, truth):
    out = tmp_path / "r.h5"
    first = subprocess.Popen([sys.executable, "-c", SLOW.format(tests=os.path.dirname(os.path.dirname(__file__))),
                              str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for _ in range(400):
            if out.exists():
                with contextlib.suppress(OSError, KeyError), h5py.File(out, "r", locking=False) as f:
                    if f["ebsdxc/done"][...].sum() >= 60:
                        break
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    assert os.path.exists(str(out) + ".lock")  # the dead run's
    process(ArraySource(patterns(), path="scan.h5"), ref_index=0, output=str(out), config=CFG, run=RUN,
            resume=True)
    got, attrs = datasets(out)
    assert bool(attrs["complete"])
    for k in got:
        assert got[k].tobytes() == truth[k].tobytes(), k


class ReplaceAfterFirstBatch(Progress):
    def __init__(self, out):
        self.out = out
        self.updates = 0

    def update(self, n):
        self.updates += 1
        if self.updates == 1:  # another program (without our lock) puts its own file there
            tmp = self.out + ".other"
            with h5py.File(tmp, "w") as f:
                f["data"] = np.arange(3)
            os.replace(tmp, self.out)


def test_file_replaced_mid_run_is_noticed(tmp_path):
    out = str(tmp_path / "r.h5")
    with pytest.raises(InputError) as e:
        process(ArraySource(patterns(), path="scan.h5"), ref_index=0, output=out, config=CFG, run=RUN,
                progress=ReplaceAfterFirstBatch(out))
    assert out in str(e.value) and "replaced" in str(e.value)
    with h5py.File(out, "r") as f:  # the other program's file, untouched
        assert list(f) == ["data"]


# ----------------------------------------------------------------------------- summaries


def test_summary_of_an_all_missing_scan_claims_no_matches(tmp_path):
    from ebsdxc.io.results import ResultsWriter
    from ebsdxc.io.source import ScanGrid

    out = tmp_path / "r.h5"
    with ResultsWriter.create(out, grid=ScanGrid(3, 4), centres=np.zeros((2, 2)) + 10, roi_size=(16, 16),
                              parameters={}, inputs=[]) as w:
        w.mark_missing(np.ones((3, 4), bool))
        w.finish()
    s = read_summary(out)
    assert (s["points"], s["points_done"], s["points_missing"], s["points_measured"]) == (12, 12, 12, 0)
    assert s["ok_fraction"] is None


def test_summary_counts_scan_points_not_hexagonal_padding(tmp_path):
    from ebsdxc.io.source import ScanGrid

    grid = ScanGrid(4, 5, kind="hexagonal")
    src = ArraySource(patterns(4, 5), path="scan.h5", grid=grid)
    present = np.isfinite(grid.positions()).all(axis=-1)  # the padding slots hold no pattern
    n_points = int(present.sum())
    assert n_points == 4 * 5 - 2
    present[2, 2] = False  # and one point the scan lost
    src.set_present(present)
    out = tmp_path / "r.h5"
    process(src, ref_index=0, output=str(out), config=CFG, run=RUN)
    s = read_summary(out)
    assert s["points"] == n_points and s["points_done"] == n_points
    assert s["points_missing"] == 1 and s["points_measured"] == n_points - 1
    assert s["ok_fraction"] == 1.0
    res = run_cli("info", out)
    assert res.returncode == 0 and f"points: {n_points}" in res.stdout
