"""Streaming batches through a pipeline: the reader thread, pinned host buffers, CUDA streams.

(On a GPU, large unfiltered HDF5 scans are read instead by reader processes that copy each
batch to the device themselves: :mod:`ebsdxc.run.device_readers`, :func:`_stream_device_read`.)

A reader thread fills the next batch of patterns (into pinned host buffers on the GPU)
while the device correlates the current one on its own CUDA stream. The next batch travels
to the device on a transfer stream meanwhile, into one of two device buffers used in turn
(whole patterns, or only their ROIs: :mod:`ebsdxc.run.transfer`), and results of a batch
are copied back and handed on while the next batch computes. Host memory is bounded by
``N_BUFFERS`` batches of raw patterns, device memory by two, whatever the scan size.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import warnings
from dataclasses import dataclass

import numpy as np

from .. import timing
from ..backend import is_out_of_memory, pinned_empty
from ..engines import PeakResult
from ..errors import InputError
from .transfer import copy_to_device

__all__ = ["N_BUFFERS", "Reader", "host_buffers", "read_failure", "start_device_readers", "stream_chunks"]

N_BUFFERS = 3  # raw-pattern batches in host memory at once: one being read, one queued, one in transfer
# The interpreter's switch interval while batches stream on a GPU. A reader thread back from a
# read waits for the interpreter lock until the thread holding it lets go, by default after
# 5 ms; the run's main thread holds it most of the time (launching batches, writing results),
# so reads stalled. With a busy Python thread beside them, 16 reader threads filled whole
# batches at 6.8-7.1k patterns/s of 512x512 with 5 ms and 25-32k with 0.5 ms (60k alone;
# NVIDIA H100 host, benchmarks/staged_copy.py --load, 2026-11-27).
SWITCH_INTERVAL_S = 0.0005
_switching = {"users": 0, "saved": None}
_switching_lock = threading.Lock()


@dataclass
class _Batch:
    start: int
    stop: int
    buffer: np.ndarray
    view: np.ndarray
    offset: int = 0  # where the chunk starts in `view` (halo rows before it)


class Reader(threading.Thread):
    """Reads chunks ahead into a small ring of (pinned) host buffers."""

    def __init__(self, source, chunks, buffers):
        super().__init__(daemon=True, name="ebsdxc-reader")
        self.source = source
        self.chunks = chunks
        self.free = queue.Queue()
        for b in buffers:
            self.free.put((b, None))
        self.ready = queue.Queue()
        self._halt = threading.Event()

    def run(self):
        try:
            for chunk in self.chunks:
                start, stop = chunk[:2]
                a, b = chunk[2:] if len(chunk) == 4 else chunk
                buf, event = self.free.get()
                if self._halt.is_set():
                    break
                if event is not None:
                    event.synchronize()  # the previous transfer out of this buffer has finished
                view = buf[: b - a]
                try:
                    with timing.stage("read"):
                        self.source.read_into(a, b, view)
                except (OSError, ValueError) as e:  # a damaged or truncated file, read back mid-run
                    raise read_failure(e, a, b, self.source.path) from e
                self.ready.put(_Batch(start, stop, buf, view, start - a))
            self.ready.put(None)
        except BaseException as e:  # handed to the consuming thread, which raises it
            self.ready.put(e)

    def release(self, buf, event=None):
        self.free.put((buf, event))

    def stop(self):
        self._halt.set()
        self.free.put((None, None))


def read_failure(error, start: int, stop: int, path) -> InputError:
    """The one-line :class:`InputError` for a read of patterns ``start:stop`` that raised ``error``
    mid-run (the file damaged, truncated or changed since it was opened), naming the file once."""
    if isinstance(error, InputError):  # names the file and the problem already
        return InputError(f"cannot read patterns {start} to {stop - 1}: {error.problem}", error.path or path)
    return InputError(f"cannot read patterns {start} to {stop - 1} ({error})", path)


def host_buffers(backend, n, shape, dtype):
    """``n`` host buffers of ``shape``: pinned on the GPU where the system gives pinned memory
    (fast, asynchronous copies; :func:`~ebsdxc.backend.pinned_empty`)."""
    # Native byte order: the reader converts big-endian files while reading, and CuPy
    # takes native arrays only.
    dtype = np.dtype(dtype).newbyteorder("=")
    if backend.is_gpu:
        return [pinned_empty(shape, dtype) for _ in range(n)]
    return [np.empty(shape, dtype=dtype) for _ in range(n)]


def _to_host(backend, res: PeakResult, stream=None):
    extra = res.extra
    if backend.is_gpu:
        if extra is not None:
            extra = {k: v.get(stream=stream) for k, v in extra.items()}
        return tuple(a.get(stream=stream) for a in (res.displacement, res.peak_height, res.status)) + (extra,)
    return res.displacement, res.peak_height, res.status, extra


def stream_chunks(pipeline, source, chunks, *, emit, references=None, buffers=None, on_read=None):
    """Correlate ``chunks`` [(start, stop[, read_start, read_stop]), ...] of ``source``.

    ``emit(start, displacement, peak_height, status)`` receives host arrays, in order, and a
    fifth argument, the per-point arrays of :attr:`PeakResult.extra`, when the pipeline adds
    them (whole-pattern refinement). A batch that runs out of memory raises (CuPy's
    ``OutOfMemoryError``, a ``MemoryError``) after the batches before it were emitted;
    :func:`~ebsdxc.run.tasks.run_task` retries from there with smaller batches.
    ``references`` is the :class:`~ebsdxc.references.ReferenceSet` whose ``index`` says
    which reference each point uses (``None``: the pipeline's, all points reference 0).
    ``buffers`` are host buffers from an earlier call to use again when they fit (pinning
    host memory is slow); the ones used are returned. ``on_read(how)``, when given, is told
    how the patterns are read: ``"reader processes (P x T)"`` (they copy to the device
    themselves) or ``"this process"``.
    """
    with _quick_switching() if pipeline.backend.is_gpu else contextlib.nullcontext():
        return _stream_chunks(pipeline, source, chunks, emit, references, buffers, on_read or (lambda how: None))


def _stream_chunks(pipeline, source, chunks, emit, references, buffers, on_read):
    be = pipeline.backend
    if not chunks:
        return buffers
    if getattr(pipeline, "reads_frames", False):
        # frames larger than memory (tiled DIC): the pipeline reads its own windows
        on_read("this process")
        for chunk in chunks:
            start, stop = chunk[:2]
            _flush(be, (start, pipeline.match(None, index=np.arange(start, stop)), None), emit, None)
        return buffers
    refs = pipeline.reference_set if references is None else references
    batch = max(c[-1] - c[-2] for c in chunks)  # the read range: halo rows included
    halo = len(chunks[0]) == 4
    cols = source.grid.cols
    present = None if source.present is None else source.present.reshape(-1)

    def match(item, patterns):
        # simulated references: the pipeline simulates each point's own, by its flat index
        flat = pipeline.simulated is not None or getattr(pipeline, "flat_index", False)
        index = np.arange(item.start, item.stop) if flat else refs.of(item.start, item.stop)
        if plan is not None:
            return pipeline.match(patterns, index=index, transferred=plan)
        if not halo:
            return pipeline.match(patterns, index=index)
        a = item.start - item.offset
        return pipeline.match(patterns, index=index, crop=(item.offset, item.stop - item.start), cols=cols,
                              present=None if present is None else present[a:a + len(item.view)])

    want = np.dtype(source.dtype).newbyteorder("=")
    plan = None
    if be.is_gpu and not halo:
        plan = pipeline.transfer_plan(source.pattern_shape, want.itemsize)
    frame = tuple(source.pattern_shape) if plan is None else plan.shape
    if _may_read_to_device(pipeline, halo, plan):
        readers = _device_readers(pipeline, source)
        # one stream at a time: another task's thread (ThreadExecutor) reads for itself meanwhile
        if readers is not None and readers.lock.acquire(blocking=False):
            try:
                on_read(f"reader processes ({readers.processes} x {readers.threads})")
                _stream_device_read(pipeline, source, chunks, emit, match, readers, batch)
            finally:
                readers.lock.release()
            return buffers  # reader processes need no pinned batches here
    if (buffers is None or buffers[0].shape[0] < batch or buffers[0].shape[1:] != tuple(source.pattern_shape)
            or buffers[0].dtype != want):
        buffers = host_buffers(be, N_BUFFERS, (batch, *source.pattern_shape), source.dtype)
    on_read("this process")
    reader = Reader(source, chunks, buffers)
    reader.start()
    pending = None
    copy_back = None
    # Two device buffers of raw patterns, used in turn: batch k's copy (transfer stream) waits
    # only for batch k - 2's computation to be done with the same buffer, so it overlaps batch
    # k - 1's. (With the copy on the compute stream, copying and computing 512x512 patterns add up.)
    slots, slot_free, k = [None, None], [None, None], 0
    try:
        if be.is_gpu:
            cp = be.xp
            compute, copy_back, transfer = pipeline.streams()
        while True:
            item = reader.ready.get()
            if item is None:
                break
            if isinstance(item, BaseException):
                if pending is not None:  # keep what was computed before the failed read
                    _flush(be, pending, emit, copy_back)
                    pending = None
                raise item
            try:
                if be.is_gpu:
                    slot, k = k % 2, k + 1
                    if slots[slot] is None:
                        with compute:  # a block of the compute stream's pool, used in its order
                            slots[slot] = cp.empty((batch, *frame), dtype=item.view.dtype)
                            slot_free[slot] = compute.record()
                    dev = slots[slot][:len(item.view)]
                    with transfer:
                        transfer.wait_event(slot_free[slot])
                        with timing.stage("transfer", xp=cp):
                            copy_to_device(item.view, dev, transfer, plan)
                        copied = transfer.record()
                    reader.release(item.buffer, copied)
                    with compute:
                        compute.wait_event(copied)
                        res = match(item, dev)
                        done_event = compute.record()
                    slot_free[slot] = done_event
                else:
                    res = match(item, item.view)
                    reader.release(item.buffer)
                    done_event = None
            except Exception as e:
                _keep_before_failure(e, be, pending, emit, copy_back)
                pending = None
                raise
            if pending is not None:
                _flush(be, pending, emit, copy_back)
            pending = (item.start, res, done_event)
        if pending is not None:
            _flush(be, pending, emit, copy_back)
            pending = None
    finally:
        reader.stop()
        reader.join(timeout=10)
    return buffers


def _device_readers(pipeline, source, wait=True):
    """This process's :class:`~ebsdxc.run.device_readers.DeviceReaders` (started on first use
    and kept for later runs) when ``source`` is worth reading with them, or None: this process
    reads."""
    from . import device_readers as dr

    cp = pipeline.backend.xp
    spec = dr.reader_processes(source.n_patterns * source.nbytes_per_pattern, cp.cuda.Device().mem_info[0])
    if spec is None or _refused.get(spec) or source.byte_pieces(0, 1, dr.PIECE_BYTES) is None:
        return None
    readers = None
    try:
        readers = dr.shared(*spec)
        if wait:
            readers.wait_ready()
    except (OSError, RuntimeError, ValueError, InputError) as e:  # ValueError: no descriptor passing here
        if readers is not None:
            dr.discard(readers)
        _refused[spec] = True
        warnings.warn(f"reading in this process: reader processes did not start ({e})", stacklevel=3)
        return None
    return readers


_refused = {}  # (processes, threads) that failed to start in this process: not tried again


def start_device_readers(pipeline, source, *, wait=False):
    """Start the reader processes of :func:`stream_chunks` for ``source`` now, when it will use
    them, so that their start (a CUDA context each) overlaps the run's set-up; ``wait``: return
    once they are ready. Returns them (a :class:`~ebsdxc.run.device_readers.DeviceReaders`), or
    None where the run reads in this process."""
    if getattr(pipeline, "reads_frames", False) or not pipeline.backend.is_gpu:
        return None
    halo = pipeline.preprocessor.halo_rows
    plan = pipeline.transfer_plan(source.pattern_shape, np.dtype(source.dtype).itemsize)
    return _device_readers(pipeline, source, wait=wait) if _may_read_to_device(pipeline, halo, plan) else None


def _may_read_to_device(pipeline, halo, plan) -> bool:
    """Whether a stream may have reader processes copy whole batches to the device: not where
    it reads neighbours' rows too (``halo``) or sends only the ROIs (``plan``), which this
    process arranges from its own pinned batches."""
    return pipeline.backend.is_gpu and not halo and plan is None


def _stream_device_read(pipeline, source, chunks, emit, match, readers, batch):
    """:func:`stream_chunks` with reader processes copying each batch to one of three device
    buffers (:class:`~ebsdxc.run.device_readers.DeviceRing`): batch k + 2 is read while batch k
    computes, into batch k - 1's buffer once its results are back."""
    from .device_readers import DeviceRing

    be = pipeline.backend
    compute, copy_back, _ = pipeline.streams()
    shape, dtype = tuple(source.pattern_shape), np.dtype(source.dtype).newbyteorder("=")
    pending = None

    def read_failed(error, first, last):
        # keep what was computed before the batch that could not be read, then name that batch
        if pending is not None:
            _flush(be, pending, emit, copy_back)
        return read_failure(error, first, last, source.path)

    with DeviceRing(readers, source, chunks, batch) as ring:
        ring.start()
        for k, chunk in enumerate(chunks):
            start, stop = chunk[:2]
            item = _Batch(start, stop, None, None)
            try:
                with timing.stage("read"):  # the wait for the reader processes
                    buf = ring.ready(k)
            except InputError as e:
                raise read_failed(e, start, stop) from e
            patterns = buf.view(dtype, (stop - start, *shape))
            try:
                with compute:
                    res = match(item, patterns)
                    done_event = compute.record()
            except Exception as e:
                _keep_before_failure(e, be, pending, emit, copy_back)
                raise
            if pending is not None:
                _flush(be, pending, emit, copy_back)  # batch k - 1 computed: its buffer is free
            pending = (start, res, done_event)
            try:
                ring.done(k - 1)  # batch k + 2 into that buffer
            except InputError as e:  # a reader ended: keep batch k, name the batch not sent
                raise read_failed(e, *chunks[k + 2][:2]) from e
        if pending is not None:
            _flush(be, pending, emit, copy_back)


@contextlib.contextmanager
def _quick_switching():
    """:data:`SWITCH_INTERVAL_S` (or less) while any stream runs; the caller's value after."""
    with _switching_lock:
        if _switching["users"] == 0:
            _switching["saved"] = sys.getswitchinterval()
            sys.setswitchinterval(min(_switching["saved"], SWITCH_INTERVAL_S))
        _switching["users"] += 1
    try:
        yield
    finally:
        with _switching_lock:
            _switching["users"] -= 1
            if _switching["users"] == 0:
                sys.setswitchinterval(_switching["saved"])


def _keep_before_failure(error, be, pending, emit, stream):
    """A batch ran out of memory: the batch before it is computed, keep it (the caller retries
    from the failed batch's first point with smaller batches). Any other error: nothing kept."""
    if pending is not None and is_out_of_memory(error):
        _flush(be, pending, emit, stream)


def _flush(be, pending, emit, stream):
    start, res, event = pending
    if event is not None:
        stream.wait_event(event)
    with timing.stage("results"):  # copied back: on a GPU, also the wait for the batch to finish
        disp, height, status, extra = _to_host(be, res, stream)
    if extra is None:
        emit(start, disp, height, status)
    else:
        emit(start, disp, height, status, extra)
