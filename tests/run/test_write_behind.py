"""Results written by a thread of their own (:mod:`ebsdxc.run.write_behind`): in order, all of
them, also after a failure, while the run goes on with the next batch."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
from ebsdxc.errors import InputError
from ebsdxc.io import ArraySource
from ebsdxc.io.results import read_results
from ebsdxc.progress import Progress
from ebsdxc.run import process
from ebsdxc.run.executors import Executor
from ebsdxc.run.tasks import TaskContexts, run_task
from ebsdxc.run.write_behind import WriteBehind


def test_batches_are_written_in_order_and_copied():
    got = []
    a = np.arange(4)
    with WriteBehind(lambda start, arr, extra: got.append((start, arr, extra))) as w:
        for k in range(50):
            a[:] = k
            w.put(k, a, {"x": a})  # the caller reuses its array at once
    assert [g[0] for g in got] == list(range(50))
    assert all((g[1] == g[0]).all() and (g[2]["x"] == g[0]).all() for g in got)


def test_put_returns_while_the_writer_is_still_writing():
    release, started, got = threading.Event(), threading.Event(), []

    def slow(k):
        started.set()
        assert release.wait(30)
        got.append(k)

    with WriteBehind(slow, depth=2) as w:
        w.put(0)
        assert started.wait(30)
        w.put(1)  # a synchronous write would still be inside slow(0) here, forever
        assert got == []
        release.set()
    assert got == [0, 1]


def test_a_failed_write_stops_the_next_put_and_close():
    written = []

    def write(k):
        if k == 1:
            raise InputError("cannot write the results (no space)", "r.h5")
        written.append(k)

    w = WriteBehind(write, depth=1)
    w.put(0)
    w.put(1)
    with pytest.raises(InputError, match="no space"):
        for k in range(2, 1000):  # raises once the writer has failed; never hangs on a full queue
            w.put(k)
    with pytest.raises(InputError, match="no space"):
        w.close()
    assert written == [0]


def test_the_run_failing_keeps_what_it_handed_over():
    release, got = threading.Event(), []

    def write(k):
        assert release.wait(30)
        got.append(k)

    with pytest.raises(RuntimeError, match="device fault"), WriteBehind(write, depth=3) as w:
        for k in range(3):
            w.put(k)
        release.set()
        raise RuntimeError("device fault")
    assert got == [0, 1, 2]


def test_depth_is_checked():
    with pytest.raises(ValueError, match="depth"):
        WriteBehind(print, depth=0)


# ------------------------------------------------------------------------- in a real run

CFG = ProcessConfig(roi=RoiConfig(grid=(3, 3), size=16))
ROWS, COLS = 8, 10


def _patterns():
    rng = np.random.default_rng(3)
    y, x = np.mgrid[0:48, 0:48]
    base = 500 + 200 * np.sin(x / 3.0) * np.cos(y / 4.0) + rng.uniform(0, 100, (48, 48))
    return (base + rng.normal(0, 5, (ROWS, COLS, 48, 48))).astype(np.float32)


class _Counting(Executor):
    """Inline tasks; sets ``second`` once the run's thread has handed over its second batch."""

    def __init__(self):
        self.contexts, self.emitted, self.second = TaskContexts(), 0, threading.Event()

    def run_tasks(self, job, tasks, emit):
        def emitted(*batch):
            emit(*batch)
            self.emitted += 1
            if self.emitted == 2:
                self.second.set()

        for task in tasks:
            run_task(job, task, emitted, contexts=self.contexts)

    def close(self):
        self.contexts.close()


class _WaitsForTheSecondBatch(Progress):
    """The first batch's write does not end before the run has computed the second batch."""

    def __init__(self, executor):
        self.executor, self.overlapped, self.calls = executor, None, 0

    def update(self, n):
        self.calls += 1
        if self.calls == 1:
            self.overlapped = self.executor.second.wait(60)


def test_a_run_computes_the_next_batch_while_the_last_is_written(tmp_path):
    pats = _patterns()
    ex = _Counting()
    prog = _WaitsForTheSecondBatch(ex)
    out = process(ArraySource(pats, path="scan.h5"), ref_index=0, output=str(tmp_path / "a.h5"), config=CFG,
                  run=RunConfig(device="cpu", batch=20), executor=ex, progress=prog)
    assert prog.overlapped is True and ex.emitted == ROWS * COLS // 20
    one = process(ArraySource(pats, path="scan.h5"), ref_index=0, output=str(tmp_path / "b.h5"), config=CFG,
                  run=RunConfig(device="cpu", batch=ROWS * COLS))
    a, b = read_results(out), read_results(one)
    assert a["attrs"]["complete"] and a["done"].all()
    for k in ("displacement", "peak_height", "status"):
        assert a[k].tobytes() == b[k].tobytes(), k
