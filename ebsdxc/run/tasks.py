"""What one task of a run is, and how any executor runs it.

A :class:`Job` describes the run in a form that can travel to another process (scan path,
settings, reference set, static background). :func:`run_task` correlates the points of one
:class:`~ebsdxc.run.planning.Task` and hands each batch's results to ``emit``; the same
function runs inline, in threads and on Dask workers. What a process keeps between tasks
(an open source, a pipeline with its reference tiles on the device, pinned buffers) lives in
:class:`TaskContexts`, built once per job and checked out by one task at a time.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import pickle
import threading
from dataclasses import dataclass, field

import numpy as np

from ..backend import select_backend
from ..references import ReferenceSet
from ..rois import RoiLayout
from .pipeline import Pipeline
from .planning import auto_batch, plan_chunks
from .streaming import stream_chunks

__all__ = ["Job", "TaskContexts", "run_task", "WORKER_CONTEXTS"]


@dataclass(frozen=True)
class Job:
    """Everything a task needs, picklable.

    ``local`` holds objects of the process that planned the run (its open source and
    pipeline), used by executors in that same process instead of building them again;
    it never travels.
    """

    scan: str
    dataset: object
    format: str
    grid: tuple[int, int]
    config: object
    layout: RoiLayout
    references: ReferenceSet
    static_background: np.ndarray | None
    device: str = "auto"
    threads: int | None = None
    batch: int | None = None
    local: dict | None = field(default=None, compare=False, repr=False)

    @functools.cached_property
    def key(self) -> str:
        """Identity of what the job computes (not how or where); hashed once per job object."""
        parts = (self.scan, self.dataset, self.format, self.grid, self.config, self.layout.centres.tobytes(),
                 self.layout.size, _digest(self.references.patterns), _digest(self.references.index),
                 _digest(self.static_background), self.device)
        return hashlib.sha1(pickle.dumps(parts)).hexdigest()[:16]

    def __getstate__(self):
        state = dict(self.__dict__)
        state["local"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)

    def with_threads(self, threads: int | None) -> Job:
        job = dataclasses.replace(self, threads=threads)
        if "key" in self.__dict__:  # threads are not part of the key: keep the hash
            job.__dict__["key"] = self.key
        return job


def _digest(a) -> str | None:
    return None if a is None else hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest()


class TaskContexts:
    """Open sources and pipelines kept between tasks, one per concurrently running task.

    Building a pipeline (FFT plans, kernels, reference tiles) and pinning host memory take
    far longer than a task's reading, so they are built once per job. Entries are checked
    out by one task at a time; checking out another job's entry releases the old job's.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._idle: dict = {}
        self._local_used: set = set()

    def checkout(self, job: Job) -> dict:
        key = job.key
        with self._lock:
            stack = self._idle.setdefault(key, [])
            entry = stack.pop() if stack else None
            if entry is None:
                for other in [k for k in self._idle if k != key]:
                    for old in self._idle.pop(other):  # another job's: release its memory
                        _close(old)
                if job.local is not None and key not in self._local_used:
                    self._local_used.add(key)
                    entry = {"source": job.local["source"], "pipeline": job.local["pipeline"], "buffers": None,
                             "owned": False, "owns_source": False}
        return entry or _build(job)

    def checkin(self, job: Job, entry: dict) -> None:
        with self._lock:
            self._idle.setdefault(job.key, []).append(entry)

    def close(self) -> None:
        with self._lock:
            for stack in self._idle.values():
                for entry in stack:
                    _close(entry)
            self._idle.clear()
            self._local_used.clear()


def _close(entry):
    if entry.get("owns_source", True):
        entry["source"].close()
    if entry.get("owned", True):
        entry["pipeline"].close()


def _build(job: Job) -> dict:
    from .. import io as scan_io

    if job.local is not None:  # this process planned the run: its source serves every thread
        source, owns = job.local["source"], False
    else:
        source, owns = scan_io.open_scan(job.scan, dataset=job.dataset, format=job.format, grid_shape=job.grid), True
    backend = select_backend(job.device, threads=job.threads)
    with backend.use():
        pipeline = Pipeline(backend, job.config, job.layout, job.references,
                            static_background=job.static_background, batch=job.batch)
    return {"source": source, "pipeline": pipeline, "buffers": None, "owned": True, "owns_source": owns}


#: The contexts of a worker process (Dask): kept across the tasks the process runs.
WORKER_CONTEXTS = TaskContexts()


def run_task(job: Job, task, emit, *, contexts: TaskContexts = WORKER_CONTEXTS) -> None:
    """Correlate the points of ``task`` not done yet; ``emit(start, displacement, peak_height,
    status)`` receives each batch's host arrays, in order."""
    entry = contexts.checkout(job)
    try:
        source, pipeline = entry["source"], entry["pipeline"]
        if "batch" not in entry:
            # Once per pipeline: free device memory changes as the pool caches blocks, and a
            # batch that changed from task to task would change the FFT plans too.
            free = None
            if pipeline.backend.is_gpu:
                with pipeline.backend.use():
                    free = pipeline.backend.xp.cuda.runtime.memGetInfo()[0]
            entry["batch"] = job.batch or auto_batch(pipeline.bytes_per_pattern(), source.n_patterns,
                                                     gpu_free_bytes=free)
        cols = task.cols
        chunks = plan_chunks(task.done.reshape(-1), entry["batch"], offset=task.row0 * cols, cols=cols,
                             halo=pipeline.preprocessor.halo_rows, rows=source.grid.rows)
        with pipeline.backend.use():
            entry["buffers"] = stream_chunks(pipeline, source, chunks, emit=emit, references=job.references,
                                             buffers=entry["buffers"])
    finally:
        contexts.checkin(job, entry)
