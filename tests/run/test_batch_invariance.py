"""Results do not depend on how the run is cut: the batch size (1, 7, 64 patterns), the executor
(inline, a thread pool, tasks run and their batches emitted in a shuffled order), with one or
several references and with neighbour averaging (batches of whole scan rows with halo rows).

Every case is compared with the inline run bit for bit, and that run is checked against the
sample scan's known shifts, so that identical-but-wrong results (all NaN, say) cannot pass.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from ebsdxc import status as st
from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
from ebsdxc.io.results import read_results
from ebsdxc.preprocess import PreprocessConfig
from ebsdxc.run import process
from ebsdxc.run.executors import Executor, ThreadExecutor
from ebsdxc.run.tasks import TaskContexts, halved_batch, run_task

FIELDS = ("displacement", "peak_height", "status", "done")
CFG = ProcessConfig(roi=RoiConfig(grid=(3, 3), size=40))
CASES = {
    "one reference": (CFG, {"ref_index": 0}),
    "three references": (CFG, {"ref_index": [0, (4, 7), 93]}),
    "neighbour averaging": (ProcessConfig(roi=RoiConfig(grid=(3, 3), size=40),
                                          preprocess=PreprocessConfig(average_neighbours=3)), {"ref_index": 0}),
}


class ShuffledExecutor(Executor):
    """Runs its tasks in a shuffled order and emits their batches shuffled again, as results
    of a cluster arrive: the writer must place every batch by its start alone."""

    rows_per_task = 2

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.contexts = TaskContexts()
        self.order = []

    def run_tasks(self, job, tasks, emit) -> None:
        pieces = []
        for i in self.rng.permutation(len(tasks)):
            run_task(job, tasks[i], lambda *r: pieces.append(r), contexts=self.contexts)
        for i in self.rng.permutation(len(pieces)):
            self.order.append(int(pieces[i][0]))
            emit(*pieces[i])

    def close(self) -> None:
        self.contexts.close()


def _reference_index(kwargs):
    if not isinstance(kwargs["ref_index"], list):
        return kwargs
    r, c = np.mgrid[:10, :10]
    return {**kwargs, "reference_index": ((r + 2 * c) % 3).astype(np.int32)}


def _run(tmp_path, sample_dir, name, cfg, kwargs, *, batch, executor=None):
    return read_results(process(os.path.join(sample_dir, "scan.h5"), config=cfg, output=tmp_path / f"{name}.h5",
                                run=RunConfig(device="cpu", batch=batch), executor=executor,
                                **_reference_index(kwargs)))


def _same(a, b, what):
    for k in FIELDS:
        np.testing.assert_array_equal(a[k], b[k], err_msg=f"{what}: {k}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_results_identical_whatever_the_batch_and_executor(tmp_path, sample_dir, case):
    cfg, kwargs = CASES[case]
    base = _run(tmp_path, sample_dir, "b64", cfg, kwargs, batch=64)
    # ground truth first: the reference run measures the sample's shifts
    assert base["done"].all() and base["attrs"]["complete"]
    ok = base["status"] == st.OK
    assert ok.mean() > 0.9, ok.mean()
    assert np.isfinite(base["displacement"][ok]).all()
    if case == "one reference":
        # the sample's patterns move by up to a few pixels: the map is not all zeros
        assert np.nanmax(np.abs(base["displacement"])) > 0.5
        assert np.abs(base["displacement"][0, 0]).max() < 1e-3  # the reference point against itself
    for batch in (1, 7):
        _same(_run(tmp_path, sample_dir, f"b{batch}", cfg, kwargs, batch=batch), base, f"batch {batch}")
    with ThreadExecutor(3, rows_per_task=1) as ex:
        _same(_run(tmp_path, sample_dir, "threads", cfg, kwargs, batch=7, executor=ex), base, "threads")
    ex = ShuffledExecutor(seed=7)
    with ex:
        _same(_run(tmp_path, sample_dir, "shuffled", cfg, kwargs, batch=3, executor=ex), base, "shuffled")
    assert ex.order != sorted(ex.order)  # the batches really arrived out of order


@pytest.mark.parametrize(("batch", "smallest", "expect"),
                         [(64, 1, 32), (7, 1, 3), (2, 1, 1), (1, 1, None), (30, 10, 15), (15, 10, 10), (10, 10, None)])
def test_halved_batch(batch, smallest, expect):
    assert halved_batch(batch, smallest) == expect
