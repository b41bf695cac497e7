"""Running the pipeline on a Dask cluster: many GPUs, many nodes, one results file per scan.

The scan is split into tasks of whole scan rows. Every worker opens the scan itself (readers
reopen files by path after pickling), builds its :class:`~ebsdxc.runner.Pipeline` once per
scan and reference and correlates its rows with the same streaming loop as a single-machine
run, so the results are the same. Only the client writes the results file, task by task as
results arrive: a crash loses at most the tasks in flight, and ``--resume`` submits only
rows not yet done.

Fault tolerance is Dask's: a task that raises is retried up to ``retries`` times; the tasks
of a worker that dies are rescheduled on the others (``distributed.scheduler.allowed-failures``
bounds how often a task may take a worker down). Each task's result reaches the client once,
so every point is written exactly once.

Clusters (:func:`connect`):

``local``
    One worker per GPU (dask-cuda's ``LocalCUDACluster``) when there are GPUs, else a
    ``LocalCluster`` of CPU worker processes.
``tcp://host:port``
    An existing scheduler (e.g. started by ``pipelines/slurm-ebsdxc.sh``).
``slurm``, ``pbs``
    dask-jobqueue's ``SLURMCluster`` / ``PBSCluster`` with the job settings of a recipe's
    ``[cluster]`` table.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import os
import pickle
import sys
import threading
import uuid

import numpy as np

from .errors import InputError

__all__ = ["ClusterConfig", "connect", "run_on_cluster", "correlate_rows", "CLUSTER_KINDS"]

CLUSTER_KINDS = ("local", "slurm", "pbs")  # or an address tcp://host:port
ROWS_PER_TASK_PATTERNS = 2048  # a task holds about this many patterns: seconds of GPU work


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """How to reach or start a cluster (a recipe's ``[cluster]`` table and ``--cluster``).

    Attributes
    ----------
    address : str
        ``local``, ``slurm``, ``pbs`` or a scheduler address ``tcp://host:port``.
    workers : int or None
        Local: worker processes (default: one per GPU, else one per two cores).
        Job queues: number of jobs to start.
    retries : int
        How often a failing task is tried again before the run stops.
    rows_per_task : int or None
        Scan rows per task (default: about 2048 patterns).
    job : dict
        dask-jobqueue settings for ``slurm``/``pbs`` (``queue``, ``account``, ``walltime``,
        ``cores``, ``memory``, ``processes``, ``job_extra_directives``, ...).
    """

    address: str = "local"
    workers: int | None = None
    retries: int = 2
    rows_per_task: int | None = None
    job: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        a = str(self.address)
        if a not in CLUSTER_KINDS and "://" not in a:
            raise ValueError(f"--cluster must be local, slurm, pbs or a scheduler address such as "
                             f"tcp://host:8786, got {a!r}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"cluster workers must be >= 1, got {self.workers}")
        if self.retries < 0:
            raise ValueError(f"task retries must be >= 0, got {self.retries}")
        if self.rows_per_task is not None and self.rows_per_task < 1:
            raise ValueError(f"rows per task must be >= 1, got {self.rows_per_task}")


def _require_distributed():
    try:
        import distributed
    except ImportError:
        raise InputError("--cluster needs Dask: pip install 'dask[distributed]' "
                         "(and dask-cuda for GPUs, dask-jobqueue for slurm/pbs)") from None
    return distributed


def _gpu_count() -> int:
    try:
        from .backend import gpu_available

        if not gpu_available():
            return 0
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no CuPy or no driver: a CPU cluster
        return 0


def connect(cfg: ClusterConfig):
    """A ``distributed.Client`` for ``cfg`` and the cluster object it started (or ``None``).

    Close both when done (``client.close(); cluster.close()``).
    """
    distributed = _require_distributed()
    a = cfg.address
    if "://" in a:
        try:
            return distributed.Client(a, timeout="30s"), None
        except OSError as e:
            raise InputError(f"cannot reach the Dask scheduler at {a} ({e})") from None
    if a == "local":
        n_gpu = _gpu_count()
        if n_gpu:
            try:
                from dask_cuda import LocalCUDACluster
            except ImportError:
                LocalCUDACluster = None
            if LocalCUDACluster is not None:
                cluster = LocalCUDACluster(n_workers=min(cfg.workers or n_gpu, n_gpu), threads_per_worker=1)
            else:
                cluster = _one_worker_per_gpu(distributed, min(cfg.workers or n_gpu, n_gpu))
        else:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
            n = cfg.workers or max(1, cores // 2)
            cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=max(1, cores // n),
                                               processes=True, dashboard_address=None)
        return distributed.Client(cluster), cluster
    try:
        import dask_jobqueue
    except ImportError:
        raise InputError(f"--cluster {a} needs dask-jobqueue: pip install dask-jobqueue") from None
    kind = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster}[a]
    try:
        cluster = kind(**cfg.job)
    except (TypeError, ValueError) as e:
        raise InputError(f"[cluster] job settings for {a} are not accepted by dask-jobqueue ({e})") from None
    cluster.scale(jobs=cfg.workers or 1)
    return distributed.Client(cluster), cluster


def _one_worker_per_gpu(distributed, n):
    """Without dask-cuda: a SpecCluster whose nannies pin one GPU each (CUDA_VISIBLE_DEVICES)."""
    from distributed import Nanny, Scheduler, SpecCluster

    workers = {f"gpu-{i}": {"cls": Nanny, "options": {"nthreads": 1, "env": {"CUDA_VISIBLE_DEVICES": str(i)}}}
               for i in range(n)}
    return SpecCluster(scheduler={"cls": Scheduler, "options": {"dashboard_address": None}}, workers=workers)


# --------------------------------------------------------------------------- the task


class _Worker:
    """What a worker keeps between tasks: an open source and a pipeline per scan and
    reference, and the pinned host buffers of its last batch size. Building a pipeline (FFT
    plans, kernels, reference tiles) and pinning host memory take far longer than a task's
    reading, so they are built once; entries are checked out by one task at a time, so a
    worker with several threads builds one per concurrently running task."""

    lock = threading.Lock()
    idle: dict = {}

    @classmethod
    def checkout(cls, job):
        with cls.lock:
            stack = cls.idle.setdefault(job["key"], [])
            entry = stack.pop() if stack else None
            if entry is None:
                for key in [k for k, v in cls.idle.items() if k != job["key"]]:
                    for old in cls.idle.pop(key):  # another scan's: release its memory
                        old["source"].close()
                        old["pipeline"].close()
        return entry or _build(job)

    @classmethod
    def checkin(cls, job, entry):
        with cls.lock:
            cls.idle.setdefault(job["key"], []).append(entry)


_malloc_tuned = False


def tune_malloc() -> bool:
    """Give glibc's allocator back the thresholds it settles at in an ordinary process.

    Dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``. Setting any malloc
    threshold switches off glibc's sliding mmap threshold, so every array over 128 KiB is a
    fresh ``mmap``, page-faulted and zeroed again on every batch: a CPU worker ran the
    fast-cpu recipe 1.6x slower than one process. Called once per worker process, whoever
    started it (local cluster, ``dask worker`` in a batch job). Returns whether it applied.
    """
    global _malloc_tuned
    if _malloc_tuned or not sys.platform.startswith("linux"):
        return False
    _malloc_tuned = True
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # musl or another libc: their own rules
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    # 32 MiB is the largest mmap threshold glibc accepts on 64-bit (and where it slides to).
    return bool(libc.mallopt(m_mmap_threshold, 32 << 20)) and bool(libc.mallopt(m_trim_threshold, 256 << 20))


def _build(job):
    tune_malloc()
    from . import io as scan_io
    from .backend import select_backend
    from .runner import Pipeline, build_layout, processed_shape

    source = scan_io.open_scan(job["scan"], dataset=job["dataset"], format=job["format"],
                               grid_shape=job["grid"])
    config = job["config"]
    backend = select_backend(config.device)
    if not backend.is_gpu:
        try:
            from distributed import get_worker

            backend = dataclasses.replace(backend, workers=max(1, get_worker().state.nthreads))
        except (ImportError, ValueError, AttributeError):
            pass
    backend.use().__enter__()  # the worker's device for good (one GPU per worker)
    layout = build_layout(config.roi, processed_shape(config, source.pattern_shape, source.path),
                          path=source.path)
    pipeline = Pipeline(backend, config, layout, job["reference"], static_background=job["static_bg"])
    return {"source": source, "pipeline": pipeline, "buffers": None}


def correlate_rows(job, row0: int, row1: int):
    """Correlate scan rows ``row0:row1`` on this worker -> (start, displacement, peak_height, status).

    Points without a pattern come back flagged as in a single-machine run.
    """

    failing = os.environ.get("EBSDXC_TEST_FAIL_ONCE")  # tests: a transient error, once per marker file
    if failing and os.path.exists(failing):
        os.remove(failing)
        raise OSError("injected transient failure (EBSDXC_TEST_FAIL_ONCE)")
    entry = _Worker.checkout(job)
    try:
        return _correlate(job, entry, row0, row1)
    finally:
        _Worker.checkin(job, entry)


def _correlate(job, entry, row0, row1):
    from . import status as st
    from .progress import NullProgress
    from .runner import _todo_chunks, auto_batch, run_stream

    source, pipeline = entry["source"], entry["pipeline"]
    cols = source.grid.cols
    start, stop = row0 * cols, row1 * cols
    n = pipeline.layout.n
    disp = np.full((stop - start, n, 2), np.nan, np.float32)
    height = np.full((stop - start, n), np.nan, np.float32)
    status = np.full((stop - start, n), st.NOT_PROCESSED, np.uint8)
    todo = np.ones(source.grid.size, bool)
    todo[start:stop] = False
    if source.present is not None:  # never read: flagged as the single-machine run flags them
        absent = ~source.present.reshape(-1)[start:stop]
        status[absent] = st.MISSING_PATTERN
        todo[start:stop] |= ~source.present.reshape(-1)[start:stop]
    if "batch" not in entry:
        # Once per pipeline: free device memory changes as the pool caches blocks, and a
        # batch that changed from task to task would change the FFT plans too.
        entry["batch"] = job["config"].batch or auto_batch(pipeline, 1 << 30)
    batch = min(entry["batch"], stop - start)
    chunks = _todo_chunks(todo, batch, cols=cols, halo=pipeline.preprocessor.halo_rows)

    def write(a, d, h, s):
        k = slice(a - start, a - start + len(d))
        disp[k], height[k], status[k] = d, h, s

    entry["buffers"] = run_stream(pipeline, source, chunks, write=write, progress=NullProgress(),
                                  buffers=entry["buffers"])
    return start, disp, height, status


# --------------------------------------------------------------------------- the client


def _job_key(parts) -> str:
    return hashlib.sha1(pickle.dumps(parts)).hexdigest()[:16]


def row_tasks(done: np.ndarray, rows_per_task: int) -> list[tuple[int, int]]:
    """(row0, row1) tasks covering every scan row with a point not yet done."""
    todo = np.flatnonzero(~done.all(axis=1))
    out = []
    if todo.size:
        breaks = np.flatnonzero(np.diff(todo) != 1) + 1
        for run in np.split(todo, breaks):
            for r0 in range(int(run[0]), int(run[-1]) + 1, rows_per_task):
                out.append((r0, min(r0 + rows_per_task, int(run[-1]) + 1)))
    return out


def run_on_cluster(client, cluster_cfg: ClusterConfig, source, writer, config, reference, static_bg,
                   *, progress, dataset=None, format=None):  # noqa: A002
    """Submit the rows ``writer`` has not done and write each task's results as it finishes."""
    from distributed import as_completed

    rows, cols = source.grid.rows, source.grid.cols
    per = cluster_cfg.rows_per_task or max(1, ROWS_PER_TASK_PATTERNS // cols)
    done = writer.done
    if source.present is not None:
        # Rows whose only undone points hold no pattern are done already (flagged).
        done = done | ~source.present
    tasks = row_tasks(done, per)
    job = {"scan": source.path, "dataset": dataset, "format": format or source.format,
           "grid": (rows, cols), "config": config, "reference": np.asarray(reference),
           "static_bg": static_bg}
    if job["format"] not in _scan_formats():
        raise InputError("a scan held in memory cannot be sent to a cluster: give its file", source.path)
    job["key"] = _job_key((job["scan"], job["dataset"], job["format"], job["grid"], config,
                           hashlib.sha1(job["reference"].tobytes()).hexdigest(),
                           None if static_bg is None else hashlib.sha1(np.asarray(static_bg).tobytes()).hexdigest()))
    [job_future] = client.scatter([job], broadcast=True, hash=False)
    tag = uuid.uuid4().hex[:8]
    futures = [client.submit(correlate_rows, job_future, r0, r1, key=f"ebsdxc-rows-{tag}-{r0}-{r1}",
                             retries=cluster_cfg.retries, pure=False)
               for r0, r1 in tasks]
    rows_of = {f.key: t for f, t in zip(futures, tasks)}
    try:
        for fut in as_completed(futures):
            try:
                start, disp, height, status = fut.result()
            except InputError:
                raise
            except Exception as e:  # retries used up (or a worker died too often): say which rows
                r0, r1 = rows_of[fut.key]
                raise InputError(f"scan rows {r0} to {r1 - 1} failed on the cluster after "
                                 f"{cluster_cfg.retries} retries ({type(e).__name__}: {e}); the rows "
                                 "done are kept: --resume continues", source.path) from e
            writer.write(start, disp, height, status)
            progress.update(len(disp))
            fut.release()
    except BaseException:
        client.cancel(futures)
        raise


def _scan_formats():
    from .io import SCAN_FORMATS

    return SCAN_FORMATS
