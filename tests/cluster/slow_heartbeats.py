"""A Dask scheduler preload (``distributed.scheduler.preload``) that answers every worker
heartbeat 1.5 s late, so that a heartbeat is nearly always on its way when a run's workers
close: the race of dask/distributed#7192, made to happen on every run."""

import asyncio


def dask_setup(scheduler):
    reply = scheduler.handlers["heartbeat_worker"]

    async def late(*args, **kwargs):
        await asyncio.sleep(1.5)
        return reply(*args, **kwargs)

    scheduler.handlers["heartbeat_worker"] = late
