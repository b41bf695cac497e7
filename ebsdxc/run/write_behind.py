"""Results written by a thread of their own, in order, while the run computes the next batch.

A run's results file is written batch by batch (:class:`~ebsdxc.io.results.ResultsWriter`,
a flush per batch). Written in the thread that also launches the next batch, that time is time
the device may wait: with whole-pattern IC-GN, whose iterations end every batch on the host,
about 2 ms of each 30 ms batch of 512x512 patterns on an H200. :class:`WriteBehind` hands each
batch to one writer thread instead; only that thread writes while the run streams.

Nothing is lost or reordered: batches are written in the order they were handed over, and
leaving the block waits for every batch handed over, also when the run failed (what was
computed before a failure is kept, so ``--resume`` continues after it). A write that fails
stops the run at its next hand-over, or on leaving the block, with the writer's error.
"""

from __future__ import annotations

import queue
import threading

import numpy as np

__all__ = ["WriteBehind"]

_STOP = object()


class WriteBehind:
    """Calls ``write(*batch)`` in a thread of its own for each batch given to :meth:`put`.

    Parameters
    ----------
    write : callable
        Writes one batch; called with :meth:`put`'s arguments, in order, in one thread.
    depth : int, optional
        Batches that may wait for the writer; :meth:`put` blocks beyond that (a slow disk then
        slows the run instead of filling the memory).
    """

    def __init__(self, write, *, depth: int = 2):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._write = write
        self._queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="ebsdxc-writer", daemon=True)
        self._thread.start()

    def _loop(self):
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if self._error is not None:
                continue  # drained unwritten, so that put() never waits on a writer that stopped
            try:
                self._write(*item)
            except BaseException as e:  # noqa: BLE001 (raised in the run's thread)
                self._error = e

    def put(self, *batch) -> None:
        """Hand over one batch (host arrays, or dicts of them). They are copied: the caller may
        reuse its arrays for the next batch. Raises the writer's error if a write failed."""
        self._raise_error()
        self._queue.put(tuple(_copied(a) for a in batch))

    def close(self) -> None:
        """Wait for every batch handed over; raise the writer's error if a write failed."""
        self._drain()
        self._raise_error()

    def _drain(self):
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    def _raise_error(self):
        if self._error is not None:
            raise self._error

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            self.close()
            return
        # The run failed: what it handed over is still written; its own error is the one raised.
        self._drain()


def _copied(a):
    if isinstance(a, np.ndarray):
        return a.copy()
    if isinstance(a, dict):
        return {k: _copied(v) for k, v in a.items()}
    return a
