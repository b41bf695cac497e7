"""Executors: inline, threads and a caller's own executor give the same results file; a task
that fails stops the run with the points before it kept; tasks follow the executor's plan."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
from ebsdxc.errors import InputError
from ebsdxc.io.results import read_results
from ebsdxc.io.source import ArraySource
from ebsdxc.run import InlineExecutor, ThreadExecutor, process
from ebsdxc.run.executors import Executor
from ebsdxc.run.planning import plan_tasks

CFG = ProcessConfig(roi=RoiConfig(grid=(3, 3), size=40))
RUN = RunConfig(device="cpu", batch=6)


def _same(a, b):
    for k in ("displacement", "peak_height", "status", "done"):
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


class Recording(Executor):
    """A caller's own executor: runs tasks inline, in reverse order, and records them."""

    def __init__(self, rows):
        self.inner = InlineExecutor()
        self.rows = rows
        self.tasks = []

    def plan_rows(self, cols):
        return self.rows

    def run_tasks(self, job, tasks, emit):
        self.tasks = list(tasks)
        self.inner.run_tasks(job, self.tasks[::-1], emit)

    def close(self):
        self.inner.close()


def test_inline_threads_and_own_executor_agree(tmp_path, sample_dir):
    scan = os.path.join(sample_dir, "scan.h5")
    ref = os.path.join(sample_dir, "ref.tif")
    inline = read_results(process(scan, ref=ref, config=CFG, run=RUN, output=tmp_path / "i.h5"))
    threads = read_results(process(scan, ref=ref, config=CFG, run=RunConfig(device="cpu", batch=6,
                                                                            executor="threads", threads=2),
                                   output=tmp_path / "t.h5"))
    with ThreadExecutor(3, rows_per_task=1) as ex:
        three = read_results(process(scan, ref=ref, config=CFG, run=RUN, executor=ex, output=tmp_path / "3.h5"))
    with Recording(rows=3) as rec:
        own = read_results(process(scan, ref=ref, config=CFG, run=RUN, executor=rec, output=tmp_path / "o.h5"))
    assert [(t.row0, t.row1) for t in rec.tasks] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    for other in (threads, three, own):
        _same(inline, other)
    assert inline["done"].all() and own["attrs"]["complete"]
    # how the patterns were read, where the executor knows (an executor of one's own: not said)
    assert [r["attrs"].get("pattern_reading") for r in (inline, threads, three, own)] == ["this process"] * 3 + [None]


def test_a_failing_task_stops_the_run_and_resume_finishes_it(tmp_path):
    rng = np.random.default_rng(1)
    pats = rng.uniform(0, 1000, (6, 8, 48, 48)).astype(np.float32)

    class Failing(ArraySource):
        fail = True

        def read_into(self, start, stop, out):
            if self.fail and start >= 24:
                raise OSError("Can't read data (inflate() failed)")
            super().read_into(start, stop, out)

    src = Failing(pats, path=str(tmp_path / "broken.h5"))
    cfg = ProcessConfig(roi=RoiConfig(grid=(2, 2), size=16))
    out = tmp_path / "r.h5"
    with ThreadExecutor(1, rows_per_task=1) as ex, pytest.raises(InputError, match="broken.h5"):
        process(src, ref_index=0, config=cfg, run=RunConfig(device="cpu", batch=8), executor=ex, output=out)
    got = read_results(out)
    assert not got["attrs"]["complete"]
    assert got["done"][:3].all() and not got["done"][3:].any()
    src.fail = False
    with ThreadExecutor(2, rows_per_task=2) as ex:
        got = read_results(process(src, ref_index=0, config=cfg, run=RunConfig(device="cpu", batch=8),
                                   executor=ex, output=out, resume=True))
    whole = read_results(process(src, ref_index=0, config=cfg, run=RunConfig(device="cpu"),
                                 output=tmp_path / "whole.h5"))
    _same(got, whole)


def test_plan_tasks():
    done = np.zeros((5, 4), bool)
    done[1] = True
    done[3, :2] = True
    assert [(t.row0, t.row1) for t in plan_tasks(done, None)] == [(0, 5)]
    tasks = plan_tasks(done, 2)
    assert [(t.row0, t.row1) for t in tasks] == [(0, 1), (2, 4), (4, 5)]
    np.testing.assert_array_equal(tasks[1].done, done[2:4])
    assert tasks[1].n_todo == 6
    assert plan_tasks(np.ones((3, 2), bool), 1) == []
