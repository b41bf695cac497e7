"""Running the pipeline on a Dask cluster: many GPUs, many nodes, one results file per scan.

:class:`DaskExecutor` is the run's executor for Dask: the scan is split into tasks of whole
scan rows, and every worker runs :func:`ebsdxc.run.tasks.run_task`, the function the inline
and thread executors run: it opens the scan itself (readers reopen files by path after
pickling), builds its pipeline once per job and correlates its rows with the same streaming
loop as a single-machine run, so the results are the same. Only the client writes the
results file, task by task as results arrive: a crash loses at most the tasks in flight,
and ``--resume`` submits only points not yet done.

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

Shutdown goes workers first, then the scheduler (:func:`stop_workers`; the clusters
:func:`connect` starts do it in ``close()``): Dask's own order leaves tracebacks in the job
logs of runs that went well, and warnings in those of runs stopped early.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import uuid

from .config import ClusterConfig
from .errors import InputError
from .run.executors import Executor, default_rows_per_task
from .run.tasks import run_task

__all__ = ["DaskExecutor", "connect", "run_on_worker", "stop_workers", "tune_malloc"]

def _require_distributed():
    try:
        import distributed
    except ImportError:
        raise InputError("cluster.address needs Dask: pip install 'dask[distributed]' "
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


def _not_the_sync_cancel_race(record: logging.LogRecord) -> bool:
    """False for one record: distributed's ``sync`` interrupted (Ctrl-C, SIGTERM) before it
    made its future, whose ``cancel`` callback then reads the unassigned name and fails with
    NameError on the client's event loop, which tornado logs with a traceback after the run's
    one line about the interrupt (distributed 2026.8; seen once in CI). Nothing was lost: the
    interrupt itself ends the run."""
    exc = record.exc_info[1] if record.exc_info else None
    if not isinstance(exc, NameError):
        return True
    tb = record.exc_info[2]
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code if tb is not None else None
    return not (code is not None and code.co_name == "cancel"
                and code.co_filename.replace("\\", "/").endswith("distributed/utils.py"))


def quiet_sync_cancel_race() -> None:
    """Keep :func:`_not_the_sync_cancel_race`'s record out of the logs (once per process)."""
    log = logging.getLogger("tornado.application")
    if _not_the_sync_cancel_race not in log.filters:
        log.addFilter(_not_the_sync_cancel_race)


def connect(cfg: ClusterConfig):
    """A ``distributed.Client`` for ``cfg`` and the cluster object it started (or ``None``).

    Close both when done (``client.close(); cluster.close()``).
    """
    distributed = _require_distributed()
    quiet_sync_cancel_race()
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
                cluster = _workers_closed_first(LocalCUDACluster)(n_workers=min(cfg.workers or n_gpu, n_gpu),
                                                                  threads_per_worker=1)
            else:
                cluster = _one_worker_per_gpu(distributed, min(cfg.workers or n_gpu, n_gpu))
        else:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
            n = cfg.workers or max(1, cores // 2)
            cluster = _workers_closed_first(distributed.LocalCluster)(
                n_workers=n, threads_per_worker=max(1, cores // n), processes=True, dashboard_address=None)
        return distributed.Client(cluster), cluster
    try:
        import dask_jobqueue
    except ImportError:
        raise InputError(f"cluster.address {a} needs dask-jobqueue: pip install dask-jobqueue") from None
    kind = _workers_closed_first({"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster}[a])
    try:
        cluster = kind(**cfg.job)
    except (TypeError, ValueError) as e:
        raise InputError(f"[cluster] job settings for {a} are not accepted by dask-jobqueue ({e})") from None
    cluster.scale(jobs=cfg.workers or 1)
    return distributed.Client(cluster), cluster


def _workers_closed_first(cls):
    """``cls``, a Dask cluster class, whose ``close()`` stops the workers before the scheduler.

    dask-jobqueue closes the scheduler and cancels the worker jobs at the same time; a worker
    still running when its scheduler has gone logs a ``CommClosedError`` traceback into its
    job log, after a run that went well. Here the workers are stopped first, one by one
    through their nannies (:func:`_close_workers`; the jobs end with them), then the usual
    close cancels what is left and stops the scheduler.
    """

    class WorkersFirst(cls):
        async def _close(self):
            from distributed.core import Status

            if self.status == Status.running and self.scheduler_comm is not None:
                await _close_workers(self.scheduler_comm)
            await super()._close()

    WorkersFirst.__name__ = WorkersFirst.__qualname__ = cls.__name__
    WorkersFirst.__doc__ = cls.__doc__
    return WorkersFirst


async def _close_workers(scheduler, *, timeout: float = 20.0) -> None:
    """Stop the workers of ``scheduler`` (an rpc to it) one by one through their nannies.

    Dask's own shutdown races in three places, each logging a traceback after a run that
    went well: a scheduler that closes first leaves its workers writing to a closed
    connection; a worker asked to close itself (``retire_workers(close_workers=True)``)
    races with its nanny's stop-queue thread ("Worker process died unexpectedly"); and
    workers closing together make the scheduler tell each one about the others' removal
    while it closes. So: each nanny stops its worker through the worker's stop queue (the
    worker closes its connection cleanly) and answers once the process has ended; the next
    one starts once the scheduler has let the last one go. Workers without a nanny are
    retired. Each worker is first left to finish the tasks its threads run: after a run
    stopped early (Ctrl-C, a cancelled job), tasks the client let go of run to their end,
    and a worker closed under them logs a warning for each. Its heartbeat is stopped too,
    and one on its way let finish (:func:`_until_quiet`). Best effort within ``timeout``
    seconds: what is left is closed the usual way.
    """
    import asyncio

    from distributed.core import rpc

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout

    async def workers():
        return (await asyncio.wait_for(scheduler.identity(), max(0.1, deadline - loop.time())))["workers"]

    async def terminate(nanny):
        try:
            async with rpc(nanny, timeout=max(0.1, deadline - loop.time())) as r:
                await r.terminate(reason="ebsdxc-finished")
        except OSError:  # the nanny closed the connection on its way out: gone
            pass

    async def quiet(address):
        # Tasks the client let go of (a run stopped early) still run to their end in the
        # worker's threads; a worker closed before that logs a warning for each. A heartbeat
        # on its way when the worker closes logs a traceback.
        from distributed.protocol.pickle import dumps

        try:
            async with rpc(address, timeout=max(0.1, deadline - loop.time())) as r:
                await r.run(function=dumps(_until_quiet), kwargs=dumps({"timeout": deadline - loop.time()}))
        except OSError:  # gone already
            pass

    try:
        for address, info in (await workers()).items():
            if loop.time() >= deadline:
                return
            await asyncio.wait_for(quiet(address), deadline - loop.time())
            if info.get("nanny"):
                await asyncio.wait_for(terminate(info["nanny"]), deadline - loop.time())
            else:
                await asyncio.wait_for(scheduler.retire_workers(workers=[address], close_workers=True),
                                       deadline - loop.time())
            while address in await workers() and loop.time() < deadline:
                await asyncio.sleep(0.05)
    except Exception:  # the scheduler is gone, or a worker hangs: the usual close follows
        return


async def _until_quiet(dask_worker, timeout: float) -> None:
    """Return once no thread of ``dask_worker`` runs a task and its heartbeat has stopped, or
    after ``timeout`` seconds.

    The heartbeat is stopped here because a worker's own close only stops its timer: a
    heartbeat already waiting for the scheduler's answer then has its connection closed under
    it, and the worker logs "Failed to communicate with scheduler during heartbeat" with a
    traceback (distributed 2026.8; dask/distributed#7192). So the timer is stopped and a
    heartbeat on its way is let finish before the nanny is asked to end the worker.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    state = getattr(dask_worker, "state", None)  # the worker's state machine (distributed >= 2022.11)
    while state is not None and (state.executing or state.long_running) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    heartbeat = getattr(dask_worker, "periodic_callbacks", {}).get("heartbeat")
    if heartbeat is None:
        return
    heartbeat.stop()
    on_its_way = [t for t in asyncio.all_tasks() if _runs_callback(t, heartbeat)]
    if on_its_way and loop.time() < deadline:
        await asyncio.wait(on_its_way, timeout=deadline - loop.time())


def _runs_callback(task, periodic) -> bool:
    """Whether ``task`` is a run of tornado's ``periodic`` callback (its ``_run`` coroutine)."""
    frame = getattr(task.get_coro(), "cr_frame", None)
    return frame is not None and frame.f_code.co_name == "_run" and frame.f_locals.get("self") is periodic


def stop_workers(client, *, timeout: float = 20.0) -> None:
    """Stop every worker of ``client``'s scheduler, nannies included, before the scheduler stops.

    Shut a cluster down in this order (workers, then scheduler): a worker whose scheduler
    went away first logs a ``CommClosedError`` traceback on its way out. Used by
    ``pipelines/slurm-ebsdxc.sh`` and ``pbs-ebsdxc.sh`` at the end of a job; the clusters
    :func:`connect` starts do it in their ``close()``.

    Parameters
    ----------
    client : distributed.Client
    timeout : float, optional
        Seconds to wait for the workers to end; what is left is left to the caller.
    """
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    client.sync(_close_workers, client.scheduler, timeout=timeout)


def _one_worker_per_gpu(distributed, n):
    """Without dask-cuda: a SpecCluster whose nannies pin one GPU each (CUDA_VISIBLE_DEVICES)."""
    from distributed import Nanny, Scheduler, SpecCluster

    workers = {f"gpu-{i}": {"cls": Nanny, "options": {"nthreads": 1, "env": {"CUDA_VISIBLE_DEVICES": str(i)}}}
               for i in range(n)}
    return _workers_closed_first(SpecCluster)(scheduler={"cls": Scheduler, "options": {"dashboard_address": None}},
                                              workers=workers)


# --------------------------------------------------------------------------- the task


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


def run_on_worker(job, task):
    """Run ``task`` on this worker -> the list of its result batches (start, disp, height, status).

    Only the points the task computed come back, so points done by an earlier run are
    never written again.
    """
    tune_malloc()
    try:
        from distributed import get_worker

        job = job.with_threads(job.threads or max(1, get_worker().state.nthreads))
    except (ImportError, ValueError, AttributeError):
        pass
    pieces = []
    run_task(job, task, lambda *r: pieces.append(r))
    return pieces


# --------------------------------------------------------------------------- the executor


class DaskExecutor(Executor):
    """Tasks of scan rows on a Dask cluster; results written by the client as they arrive.

    Parameters
    ----------
    client : distributed.Client
    config : ClusterConfig
        Retries and rows per task.
    """

    def __init__(self, client, config: ClusterConfig | None = None):
        self.client = client
        self.config = config or ClusterConfig()

    def plan_rows(self, cols: int) -> int:
        return self.config.rows_per_task or default_rows_per_task(cols)

    def describe(self, record) -> None:
        record("cluster", str(self.client.scheduler.address))

    def submit(self, job_future, task, *, key):
        """The future of one task: :func:`run_on_worker` with the configured retries. Override
        to change how tasks are submitted (resources, priorities, a wrapped task function)."""
        return self.client.submit(run_on_worker, job_future, task, key=key, retries=self.config.retries,
                                  pure=False)

    def run_tasks(self, job, tasks, emit) -> None:
        """Submit ``tasks`` and emit each one's results as it finishes."""
        from distributed import as_completed

        from . import io as scan_io

        if job.format not in scan_io.SCAN_FORMATS:
            raise InputError("a scan held in memory cannot be sent to a cluster: give its file", job.scan)
        [job_future] = self.client.scatter([job], broadcast=True, hash=False)
        tag = uuid.uuid4().hex[:8]
        futures = [self.submit(job_future, t, key=f"ebsdxc-rows-{tag}-{t.row0}-{t.row1}") for t in tasks]
        rows_of = {f.key: (t.row0, t.row1) for f, t in zip(futures, tasks)}
        try:
            for fut in as_completed(futures):
                try:
                    pieces = fut.result()
                except InputError:
                    raise
                except Exception as e:  # retries used up (or a worker died too often): say which rows
                    r0, r1 = rows_of[fut.key]
                    raise InputError(f"scan rows {r0} to {r1 - 1} failed on the cluster after "
                                     f"{self.config.retries} retries ({type(e).__name__}: {e}); the rows "
                                     "done are kept: resume=True continues", job.scan) from e
                for piece in pieces:
                    emit(*piece)
                fut.release()
        except BaseException:
            # Released, not cancelled: the scheduler drops the tasks no client wants all the same,
            # where cancel() logs a line per task into the scheduler's log (a job cancelled by
            # SLURM: hundreds of lines about one cancel).
            for fut in futures:
                fut.release()
            raise
