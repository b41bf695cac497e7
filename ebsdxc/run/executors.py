"""Executors: what runs a run's tasks (inline, a thread pool; Dask lives in :mod:`ebsdxc.cluster`).

The run hands an executor its :class:`~ebsdxc.run.tasks.Job` and tasks and receives
results through ``emit``, always in the calling thread, in order (the run passes them on to
its one writer thread, :mod:`ebsdxc.run.write_behind`); it never asks which executor it has.
An executor says how it wants the work cut (``rows_per_task``: ``None`` for one task streaming
the whole scan).
"""

from __future__ import annotations

import queue
import threading
from abc import ABC, abstractmethod

from .planning import ROWS_PER_TASK_PATTERNS
from .tasks import TaskContexts, run_task

__all__ = ["Executor", "InlineExecutor", "ThreadExecutor", "default_rows_per_task"]


def default_rows_per_task(cols: int) -> int:
    """Scan rows of about ``ROWS_PER_TASK_PATTERNS`` patterns."""
    return max(1, ROWS_PER_TASK_PATTERNS // max(1, cols))


class Executor(ABC):
    """Runs tasks of a job and hands their results to the caller's thread."""

    #: Scan rows per task it wants, or ``None``: one task for the whole scan.
    rows_per_task: int | None = None

    def plan_rows(self, cols: int) -> int | None:
        """Rows per task for a scan of ``cols`` points per row."""
        return self.rows_per_task

    @abstractmethod
    def run_tasks(self, job, tasks, emit) -> None:
        """Run every task; call ``emit(start, displacement, peak_height, status)`` in this
        thread for each batch of results as it arrives. A task that fails stops the run:
        the results emitted so far stand (``--resume`` continues)."""

    def describe(self, record) -> None:  # noqa: B027 (optional: most executors record nothing)
        """Record where the run went, as ``record(name, value)`` attributes of the results
        (e.g. a cluster's scheduler address); nothing for a local run."""

    def batch_sizes(self, job) -> tuple:
        """Batch sizes the tasks of ``job`` used here, in order (the planned one, then each halving
        after running out of memory); ``()`` where they are not known (Dask: the workers log them)."""
        return ()

    def readings(self, job) -> tuple:
        """How the tasks of ``job`` read their patterns here (``"reader processes (P x T)"``,
        ``"this process"``), in the order first seen; ``()`` where not known (Dask workers)."""
        return ()

    def close(self) -> None:  # noqa: B027 (optional: an executor may keep nothing)
        """Release what the executor keeps (pipelines, workers)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _InProcess(Executor):
    """An executor whose tasks run in this process, sharing its task contexts (what they
    recorded is known here)."""

    def __init__(self):
        self._contexts = TaskContexts()

    def batch_sizes(self, job) -> tuple:
        return self._contexts.batch_sizes(job)

    def readings(self, job) -> tuple:
        return self._contexts.readings(job)

    def close(self) -> None:
        self._contexts.close()


class InlineExecutor(_InProcess):
    """Tasks one after another in the calling thread (one GPU or the CPU's thread pool)."""

    def run_tasks(self, job, tasks, emit) -> None:
        for task in tasks:
            run_task(job, task, emit, contexts=self._contexts)


class ThreadExecutor(_InProcess):
    """Tasks on ``threads`` threads of this process, each with its own pipeline.

    For several tasks in flight in one process: e.g. one thread per task overlapping one
    task's reading with another's compute. Results reach ``emit`` in the calling thread.
    """

    def __init__(self, threads: int = 2, *, rows_per_task: int | None = None):
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        super().__init__()
        self.threads = int(threads)
        self.rows_per_task = rows_per_task

    def plan_rows(self, cols: int) -> int | None:
        return self.rows_per_task or default_rows_per_task(cols)

    def run_tasks(self, job, tasks, emit) -> None:
        todo = queue.Queue()
        for t in tasks:
            todo.put(t)
        results = queue.Queue()
        halt = threading.Event()

        def work():
            try:
                while not halt.is_set():
                    try:
                        task = todo.get_nowait()
                    except queue.Empty:
                        return
                    run_task(job, task, lambda *r: results.put(("result", r)), contexts=self._contexts)
            except BaseException as e:  # handed to the calling thread, which raises it
                results.put(("error", e))
            finally:
                results.put(("exit", None))

        workers = [threading.Thread(target=work, name=f"ebsdxc-task-{i}", daemon=True)
                   for i in range(min(self.threads, max(1, len(tasks))))]
        for w in workers:
            w.start()
        running = len(workers)
        try:
            while running:
                kind, value = results.get()
                if kind == "result":
                    emit(*value)
                elif kind == "error":
                    raise value
                else:
                    running -= 1
        finally:
            halt.set()
            for w in workers:
                w.join()
