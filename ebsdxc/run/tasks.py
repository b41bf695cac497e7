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
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..backend import is_out_of_memory, select_backend
from ..errors import InputError
from ..references import ReferenceSet
from ..rois import RoiLayout
from .dic import DicPipeline
from .pipeline import Pipeline
from .planning import auto_batch, plan_chunks
from .streaming import stream_chunks

__all__ = ["Job", "TaskContexts", "run_task", "halved_batch", "WORKER_CONTEXTS"]


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
    simulated: object = None  # SimulatedReferences: each point's reference simulated (--ref simulated)
    local: dict | None = field(default=None, compare=False, repr=False)

    @functools.cached_property
    def key(self) -> str:
        """Identity of what the job computes (not how or where); hashed once per job object."""
        parts = (self.scan, self.dataset, self.format, self.grid, self.config, self.layout.centres.tobytes(),
                 self.layout.size, _digest(self.references.patterns), _digest(self.references.index),
                 _digest(self.static_background), self.device,
                 None if self.simulated is None else self.simulated.digest())
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
        self._batches: dict = {}
        self._readings: dict = {}

    def _note(self, notes: dict, job: Job, value) -> None:
        with self._lock:
            seen = notes.setdefault(job.key, [])
            if value not in seen:
                seen.append(value)

    def _noted(self, notes: dict, job: Job) -> tuple:
        with self._lock:
            return tuple(notes.get(job.key, ()))

    def record_batch(self, job: Job, batch: int) -> None:
        """Note that a task of ``job`` streams batches of ``batch`` patterns."""
        self._note(self._batches, job, int(batch))

    def record_reading(self, job: Job, how: str) -> None:
        """Note how a task of ``job`` read its patterns (``stream_chunks``' ``on_read``)."""
        self._note(self._readings, job, how)

    def readings(self, job: Job) -> tuple[str, ...]:
        """How the tasks of ``job`` run here read their patterns, in the order first seen."""
        return self._noted(self._readings, job)

    def batch_sizes(self, job: Job) -> tuple[int, ...]:
        """The batch sizes the tasks of ``job`` run here used, in the order first used: the
        planned size, then each size it was halved to after running out of memory."""
        return self._noted(self._batches, job)

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
        kind = DicPipeline if getattr(getattr(job.config, "dic", None), "enabled", False) else Pipeline
        pipeline = kind(backend, job.config, job.layout, job.references,
                        static_background=job.static_background, batch=job.batch, simulated=job.simulated)
        if kind is DicPipeline:
            pipeline.frames = source  # incremental DIC reads the frame before a batch's first
    return {"source": source, "pipeline": pipeline, "buffers": None, "owned": True, "owns_source": owns}


#: The contexts of a worker process (Dask): kept across the tasks the process runs.
WORKER_CONTEXTS = TaskContexts()


def halved_batch(batch: int, smallest: int = 1) -> int | None:
    """The batch to retry with after ``batch`` ran out of memory: half of it, not below
    ``smallest``; ``None`` when ``batch`` is ``smallest`` already."""
    if batch <= smallest:
        return None
    return max(int(smallest), int(batch) // 2)


def run_task(job: Job, task, emit, *, contexts: TaskContexts = WORKER_CONTEXTS) -> None:
    """Correlate the points of ``task`` not done yet; ``emit(start, displacement, peak_height,
    status[, extra])`` receives each batch's host arrays, in order (``extra``: the per-point
    arrays of whole-pattern refinement, when the run refines).

    A batch that runs out of memory (device or host) is redone from its first point with
    half the batch size, down to one pattern (one scan row with neighbour averaging), with
    one warning; the pipeline keeps the smaller size for later tasks. Every point's result
    is the same whatever the batch size, so the results do not change.
    """
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
        contexts.record_batch(job, entry["batch"])
        cols = task.cols
        halo = pipeline.preprocessor.halo_rows
        base = task.row0 * cols
        done = task.done.reshape(-1).copy()  # what is emitted is done: a retry plans the rest

        def emitted(start, disp, height, status, *extra):
            emit(start, disp, height, status, *extra)
            done[start - base:start - base + len(disp)] = True

        while True:
            batch = entry["batch"]
            chunks = plan_chunks(done, batch, offset=base, cols=cols, halo=halo, rows=source.grid.rows)
            try:
                with pipeline.backend.use():
                    entry["buffers"] = stream_chunks(pipeline, source, chunks, emit=emitted,
                                                     references=job.references, buffers=entry["buffers"],
                                                     on_read=lambda how: contexts.record_reading(job, how))
                return
            except Exception as e:
                if not is_out_of_memory(e):
                    raise
                where = "GPU" if pipeline.backend.is_gpu else "host"
                reason = " ".join(str(e).split()) or type(e).__name__
                smaller = halved_batch(batch, cols if halo else 1)
                if smaller is None:
                    raise InputError(f"out of {where} memory with batches of {batch} pattern(s) ({reason}); "
                                     f"free {where} memory or use fewer or smaller ROIs; the points done are "
                                     "kept: resume=True continues", job.scan) from None
            # Here, out of the handler: the failed batch's arrays, held by the traceback, are gone.
            pipeline.release_memory()
            entry["batch"] = smaller
            contexts.record_batch(job, smaller)
            warnings.warn(f"out of {where} memory with batches of {batch} patterns ({reason}); continuing "
                          f"with batches of {smaller} (the results do not depend on the batch size)",
                          UserWarning, stacklevel=2)
    finally:
        contexts.checkin(job, entry)
