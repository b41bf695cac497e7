"""Reading straight to the device through a small ring of pinned slots.

The plain reader (:class:`~ebsdxc.run.streaming.Reader`) fills a whole pinned batch, then the
copy engine reads that batch back. At 512x512 a batch is 256 MB, far more than the processor's
last-level cache, so every byte crosses host memory three times (read from the page cache,
written to the batch, read by the copy engine), and reading slows down while copies run.

Here a few threads each read pieces of a batch (whole patterns, a few MB) into pinned slots of
their own and queue each slot's copy to the piece's place in the device batch at once, on a
CUDA stream of their own; a slot is refilled once its copy is done. The slots together fit in
the cache, and the copy engine reads them from there. On an H100 host this moved 512x512
patterns to the device at 88k patterns/s, against 63k for whole batches (BENCHMARKS.md,
"Reading straight to the device").

:class:`StagedReader` hands the consumer batches already on the device, in order, each with the
events its computation must wait for; the consumer gives a device batch back with the event
after which it may be overwritten. Sources whose reads may run in parallel say so
(:attr:`~ebsdxc.io.source.PatternSource.concurrent_reads`).
"""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass

import numpy as np

from .. import timing
from ..errors import InputError

__all__ = ["PIECE_BYTES", "SLOTS", "StagedReader", "StagedBatch", "piece_patterns", "read_failure", "ring_shape"]

#: Bytes per piece (rounded up to whole patterns; ``EBSDXC_STAGE_BYTES`` overrides). Pieces of
#: 0.5-2 MB ran at a half or less of 4 MB ones: each copy and each wait has a fixed cost.
PIECE_BYTES = 4 << 20
#: Pinned slots per thread: one being read while the other's copy runs. A third slot made the
#: ring larger than helps (4 MB x 3 ran 15% slower than x 2 with 16 threads).
SLOTS = 2


def piece_patterns(pattern_bytes: int, batch: int) -> int:
    """Patterns per piece: the fewest whose bytes reach :data:`PIECE_BYTES`, at most ``batch``."""
    env = os.environ.get("EBSDXC_STAGE_BYTES", "").strip()
    want = max(1, int(env)) if env.isdigit() else PIECE_BYTES
    return max(1, min(int(batch), -(-want // max(1, int(pattern_bytes)))))


def ring_shape(threads: int, piece: int, pattern_shape) -> tuple[int, ...]:
    """Shape of the pinned ring: ``threads`` x :data:`SLOTS` slots of ``piece`` patterns."""
    return (int(threads) * SLOTS, int(piece), *(int(n) for n in pattern_shape))


def read_failure(error, start: int, stop: int, path) -> InputError:
    """The one-line :class:`InputError` for a read of patterns ``start:stop`` that raised ``error``
    mid-run (the file damaged, truncated or changed since it was opened)."""
    if isinstance(error, InputError):  # names the file and the problem already
        return InputError(f"cannot read patterns {start} to {stop - 1}: {error.problem}", error.path or path)
    return InputError(f"cannot read patterns {start} to {stop - 1} ({error})", path)


@dataclass
class StagedBatch:
    """Patterns ``start:stop``, copied into device batch ``slot`` once all ``events`` are done."""

    start: int
    stop: int
    slot: int
    events: list


class _Skipped(Exception):
    """A worker's share of a batch left undone after another share failed."""


class _Countdown:
    """Collects every worker's report on one batch; the last report calls ``done``."""

    def __init__(self, n, done):
        self._lock = threading.Lock()
        self._left = n
        self._events = []
        self._errors = []
        self._done = done

    def report(self, event=None, error=None):
        with self._lock:
            if event is not None:
                self._events.append(event)
            if error is not None:
                self._errors.append(error)
            self._left -= 1
            last = self._left == 0
        if last:
            self._done(self._events, self._errors)


class _DeviceCopier:
    """A worker's CUDA stream and the events of its slots' last copies."""

    def __init__(self, nslots):
        import cupy as cp

        self._cp = cp
        self.stream = cp.cuda.Stream(non_blocking=True)
        self._slots = [None] * nslots

    def after(self, event):
        if event is not None:
            self.stream.wait_event(event)  # on the device: the batch's memory is free then

    def reuse(self, s):
        if self._slots[s] is not None:
            self._slots[s].synchronize()  # the slot's last copy has left it

    def copy(self, host, device, s):
        cp = self._cp
        if timing.active() is None:
            cp.cuda.runtime.memcpyAsync(device.data.ptr, host.ctypes.data, host.nbytes,
                                        cp.cuda.runtime.memcpyHostToDevice, self.stream.ptr)
        else:
            with self.stream, timing.stage("transfer", xp=cp):  # timed on this worker's stream
                cp.cuda.runtime.memcpyAsync(device.data.ptr, host.ctypes.data, host.nbytes,
                                            cp.cuda.runtime.memcpyHostToDevice, self.stream.ptr)
        if self._slots[s] is None:
            self._slots[s] = cp.cuda.Event(block=False, disable_timing=True)
        self._slots[s].record(self.stream)

    def mark(self):
        return self.stream.record()


class _HostCopier:
    """The same bookkeeping with NumPy targets: copies done at once (the CPU tests' device)."""

    def after(self, event):
        pass

    def reuse(self, s):
        pass

    def copy(self, host, device, s):
        device[...] = host

    def mark(self):
        return None


@dataclass
class _Task:
    start: int
    pieces: list
    target: object
    after: object
    countdown: _Countdown


class _Worker(threading.Thread):
    def __init__(self, owner, i, slots, copier):
        super().__init__(daemon=True, name=f"ebsdxc-stage-{i}")
        self.owner = owner
        self.slots = slots
        self.copier = copier
        self.tasks = queue.Queue()
        self._next = 0

    def run(self):
        owner = self.owner
        while True:
            task = self.tasks.get()
            if task is None:
                return
            if owner.failed.is_set():
                task.countdown.report(error=_Skipped())
                continue
            try:
                if task.pieces:
                    self.copier.after(task.after)
                    for a, b in task.pieces:
                        s, self._next = self._next, (self._next + 1) % len(self.slots)
                        self.copier.reuse(s)
                        view = self.slots[s][:b - a]
                        try:
                            with timing.stage("read"):
                                owner.source.read_into(a, b, view)
                        except (OSError, ValueError) as e:  # damaged or truncated, read back mid-run
                            raise read_failure(e, a, b, owner.source.path) from e
                        self.copier.copy(view, task.target[a - task.start:b - task.start], s)
                task.countdown.report(event=self.copier.mark() if task.pieces else None)
            except BaseException as e:  # handed to the consumer, in batch order
                owner.failed.set()
                task.countdown.report(error=e)


class StagedReader(threading.Thread):
    """Reads ``chunks`` [(start, stop), ...] of ``source`` into the device batches ``targets``
    (two or more arrays of (batch, H, W), CuPy or, for tests, NumPy) through ``ring`` (pinned
    (threads * SLOTS, piece, H, W), one thread per :data:`SLOTS` slots).

    :attr:`ready` yields a :class:`StagedBatch` per chunk, in order, then ``None``; a read that
    fails yields its exception instead (after the batches before it) and ends the stream.
    The consumer hands each device batch back with :meth:`release` and the event after which
    the batch may be overwritten; copies into it wait for that event on the device.
    """

    def __init__(self, source, chunks, targets, ring, *, after=None):
        super().__init__(daemon=True, name="ebsdxc-stager")
        self.source = source
        self.chunks = [tuple(c[:2]) for c in chunks]
        self.targets = targets
        self.piece = ring.shape[1]
        self.failed = threading.Event()
        self.ready = queue.Queue()
        self.free = queue.Queue()
        for slot in range(len(targets)):
            self.free.put((slot, after))
        self._halt = threading.Event()
        on_device = not isinstance(targets[0], np.ndarray)
        n = ring.shape[0] // SLOTS
        self.workers = [_Worker(self, i, ring[i * SLOTS:(i + 1) * SLOTS],
                                _DeviceCopier(SLOTS) if on_device else _HostCopier()) for i in range(n)]

    def run(self):
        for w in self.workers:
            w.start()
        try:
            for start, stop in self.chunks:
                slot, after = self.free.get()
                if self._halt.is_set() or self.failed.is_set():
                    return
                pieces = [(a, min(a + self.piece, stop)) for a in range(start, stop, self.piece)]
                countdown = _Countdown(len(self.workers), self._batch_done(start, stop, slot))
                target = self.targets[slot]
                for i, w in enumerate(self.workers):
                    w.tasks.put(_Task(start, pieces[i::len(self.workers)], target, after, countdown))
            end = _Countdown(len(self.workers), self._batch_done(None, None, None))
            for w in self.workers:  # after every batch: each worker takes its tasks in order
                w.tasks.put(_Task(0, [], None, None, end))
        except BaseException as e:  # handed to the consuming thread, which raises it
            self.failed.set()
            self.ready.put(e)

    def _batch_done(self, start, stop, slot):
        def done(events, errors):
            real = [e for e in errors if not isinstance(e, _Skipped)]
            if real:
                self.ready.put(real[0])
            elif errors:
                pass  # a later batch of a failed run: its failure went out first
            elif start is None:
                self.ready.put(None)
            else:
                self.ready.put(StagedBatch(start, stop, slot, events))
        return done

    def release(self, slot, event=None):
        """Device batch ``slot`` may be overwritten once ``event`` is done."""
        self.free.put((slot, event))

    def stop(self):
        self._halt.set()
        self.free.put((None, None))
        for w in self.workers:
            w.tasks.put(None)

    def join(self, timeout=None):
        super().join(timeout)
        for w in self.workers:
            if w.is_alive():
                w.join(timeout)
