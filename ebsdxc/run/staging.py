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
after which it may be overwritten. It reads sources that say where their patterns lie as raw
bytes (:meth:`~ebsdxc.io.source.PatternSource.raw_ranges`: uncompressed HDF5), with one
positioned read per piece and no other Python work per pattern: the threads share one
interpreter lock, and a piece read through the general reader path (a few NumPy calls per
read) ran at a quarter of the rate.
"""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass

import numpy as np

from .. import timing
from ..errors import InputError

__all__ = ["DEVICE_BATCHES", "PART_BYTES", "PIECE_BYTES", "SLOTS", "StagedReader", "StagedBatch", "part_bytes",
           "piece_bytes", "read_failure", "ring_shape"]

#: Bytes per piece (``EBSDXC_STAGE_BYTES`` overrides). Each piece costs a read, a copy and a wait
#: on the shared interpreter lock: 512x512 scans went to the device at 65-68k patterns/s in 8 MB
#: pieces, 49-59k in 4 MB ones, and 0.5-2 MB pieces ran at half that or less (H100 host).
PIECE_BYTES = 8 << 20
#: Pinned slots per thread: one being read while the other's copy runs. A third slot made the
#: ring larger than helps (4 MB x 3 ran 15% slower than x 2 with 16 threads).
SLOTS = 2


#: Device batches a staged run uses in turn. With two, the pieces of batch k + 2 could not be
#: copied until batch k was computed, so the ring sat full while the device computed and the
#: readers waited (a run at a third of the reading rate); with three they flow as they are read.
DEVICE_BATCHES = 3

# Threads waiting for a slot's copy sleep instead of spinning: a spinning wait holds a core,
# and with a thread per core the thread that launches the batches' kernels had none left.
_BLOCKING = True


def piece_bytes(batch_bytes: int) -> int:
    """Bytes per piece: :data:`PIECE_BYTES` (or ``EBSDXC_STAGE_BYTES``), at most a batch."""
    env = os.environ.get("EBSDXC_STAGE_BYTES", "").strip()
    want = max(1, int(env)) if env.isdigit() else PIECE_BYTES
    return max(1, min(int(batch_bytes), want))


#: Bytes per part when one thread reads a batch in parts, each part read by the source's own
#: parallel reader and copied as soon as it is read.
PART_BYTES = 64 << 20


def part_bytes(batch_bytes: int, pattern_bytes: int) -> int:
    """Bytes per part: whole patterns, about :data:`PART_BYTES` (``EBSDXC_STAGE_BYTES``), at most a batch."""
    env = os.environ.get("EBSDXC_STAGE_BYTES", "").strip()
    want = max(1, int(env)) if env.isdigit() else PART_BYTES
    k = max(1, min(int(batch_bytes), want) // int(pattern_bytes))
    return k * int(pattern_bytes)


def ring_shape(threads: int, piece: int) -> tuple[int, int]:
    """Shape of the pinned ring (uint8): ``threads`` x :data:`SLOTS` slots of ``piece`` bytes."""
    return (int(threads) * SLOTS, int(piece))


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
        self._h2d = cp.cuda.runtime.memcpyHostToDevice
        self.stream = cp.cuda.Stream(non_blocking=True)
        self._slots = [None] * nslots

    def after(self, event):
        if event is not None:
            self.stream.wait_event(event)  # on the device: the batch's memory is free then

    def reuse(self, s):
        if self._slots[s] is not None:
            self._slots[s].synchronize()  # the slot's last copy has left it

    def copy(self, host, target, offset, s):
        # Not timed as a stage of its own: CUDA events around every piece slowed the copies 2.5x
        # in a profiled run; the pieces' copies overlap their reads and count as 'read'.
        cp = self._cp
        cp.cuda.runtime.memcpyAsync(target.data.ptr + offset, host.ctypes.data, host.nbytes, self._h2d,
                                    self.stream.ptr)
        if self._slots[s] is None:
            self._slots[s] = cp.cuda.Event(block=_BLOCKING, disable_timing=True)
        self._slots[s].record(self.stream)

    def mark(self):
        return self.stream.record()


class _HostCopier:
    """The same bookkeeping with NumPy targets: copies done at once (the CPU tests' device)."""

    def after(self, event):
        pass

    def reuse(self, s):
        pass

    def copy(self, host, target, offset, s):
        target.reshape(-1).view(np.uint8)[offset:offset + host.nbytes] = host

    def mark(self):
        return None


@dataclass
class _Task:
    start: int
    pieces: list  # (offset in the batch, file offset or -1, bytes)
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
        owner, copier, slots = self.owner, self.copier, self.slots
        while True:
            task = self.tasks.get()
            if task is None:
                return
            if owner.failed.is_set():
                task.countdown.report(error=_Skipped())
                continue
            try:
                if task.pieces:
                    copier.after(task.after)
                    read = task.pieces[0][3]
                    for o, src, n, _ in task.pieces:
                        s = self._next
                        self._next = (s + 1) % len(slots)
                        copier.reuse(s)
                        slot = slots[s][:n]
                        try:
                            with timing.stage("read"):
                                read(src, n, slot)
                        except (OSError, ValueError) as e:  # damaged or truncated, read back mid-run
                            pb = owner.pattern_bytes
                            raise read_failure(e, task.start + o // pb, task.start + (o + n - 1) // pb + 1,
                                               owner.source.path) from e
                        copier.copy(slot, task.target, o, s)
                task.countdown.report(event=copier.mark() if task.pieces else None)
            except BaseException as e:  # handed to the consumer, in batch order
                owner.failed.set()
                task.countdown.report(error=e)


class StagedReader(threading.Thread):
    """Reads ``chunks`` [(start, stop), ...] of ``source`` into the device batches ``targets``
    (two or more C-contiguous arrays of (batch, H, W) in the source's dtype, CuPy or, for
    tests, NumPy) through ``ring`` (pinned uint8 of :func:`ring_shape`: one thread per
    :data:`SLOTS` slots, pieces as long as a slot). ``source`` must give
    :meth:`~ebsdxc.io.source.PatternSource.raw_ranges` for every chunk.

    :attr:`ready` yields a :class:`StagedBatch` per chunk, in order, then ``None``; a read that
    fails yields its exception instead (after the batches before it) and ends the stream.
    The consumer hands each device batch back with :meth:`release` and the event after which
    the batch may be overwritten; copies into it wait for that event on the device.
    """

    def __init__(self, source, chunks, targets, ring, *, after=None, raw=True):
        super().__init__(daemon=True, name="ebsdxc-stager")
        self.source = source
        self.raw = raw
        self.pattern_bytes = source.nbytes_per_pattern
        self._frame = (targets[0].dtype, tuple(targets[0].shape[1:]))
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
            n = len(self.workers)
            for start, stop in self.chunks:
                slot, after = self.free.get()
                if self._halt.is_set() or self.failed.is_set():
                    return
                pieces = self._pieces(start, stop)
                countdown = _Countdown(n, self._batch_done(start, stop, slot))
                target = self.targets[slot]
                for i, w in enumerate(self.workers):
                    w.tasks.put(_Task(start, pieces[i::n], target, after, countdown))
            end = _Countdown(n, self._batch_done(None, None, None))
            for w in self.workers:  # after every batch: each worker takes its tasks in order
                w.tasks.put(_Task(0, [], None, None, end))
        except BaseException as e:  # handed to the consuming thread, which raises it
            self.failed.set()
            self.ready.put(e)

    def _pieces(self, start, stop):
        """(offset in the batch, what to read, bytes, how) of every piece of patterns ``start:stop``."""
        if self.raw:
            ranges = self.source.raw_ranges(start, stop)
            if ranges is None:
                raise RuntimeError(f"{self.source.path}: patterns {start} to {stop - 1} are not stored raw")
            r = ranges.split(self.piece)
            return list(zip(r.dst.tolist(), r.src.tolist(), r.size.tolist(), [r.reader.read_range] * r.size.size))
        pb = self.pattern_bytes
        k = max(1, self.piece // pb)
        return [((a - start) * pb, a, (min(a + k, stop) - a) * pb, self._read_patterns) for a in range(start, stop, k)]

    def _read_patterns(self, first, nbytes, slot):
        dtype, shape = self._frame
        n = nbytes // self.pattern_bytes
        self.source.read_into(first, first + n, slot[:nbytes].view(dtype).reshape(n, *shape))

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
