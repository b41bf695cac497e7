"""Reading while copying through a small pinned ring instead of whole pinned batches (issue 18).

The runner's reader fills a whole pinned batch (256 MB at 512x512, batch 512) from the page cache,
then the copy engine reads that batch back: every byte crosses host memory three times (the page
cache read, the batch write, the copy engine's read), and reading while copying runs at about 51k
patterns/s of 512x512 against 63k reading alone ("What bounds these sizes: the host",
BENCHMARKS.md). Here the same bytes go through slots small enough to stay in the processor's
last-level cache, each copied to the device as soon as it is full, in the hope that the copy
engine reads them from the cache rather than from memory.

On one scan in the page cache (written here as ``ebsdxc bench --pipeline`` writes it; its chunks
read with ``os.preadv`` at the offsets HDF5 gives, so that only the memory path differs):

- ``read``: threads read each batch into a pinned batch buffer, no copies (the read bound);
- ``batch``: the runner's scheme, two pinned batch buffers: batch k is read while batch k - 1
  copies (each copy waits for its batch; a batch buffer waits for its copy two batches back);
- ``staged C x K``: thread i reads pieces i, i + R, ... of C bytes into its own K pinned slots
  in turn and queues each slot's copy to its place in a device buffer of two batches, on a stream
  of its own; a slot is refilled once its last copy is done.

Each mode then checks that the device holds the scan's last whole batch (a sum against the file's).
Prints patterns/s and GB/s of each, the last-level cache size, the pinned copy bound.

    python benchmarks/staged_copy.py [SIDE] [PATTERNS] [--threads 8,16] [--pieces 0.5,1,2,4,8]
        [--slots 2,3] [--dry-run]

``--dry-run`` runs the same bookkeeping with host memory for the device (no CUDA), to check the
script on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np

from ebsdxc.run.bench_pipeline import write_scan

MB = 1 << 20


def stored_runs(path):
    """(file offset, scan byte offset, bytes) of every stored chunk of ``/patterns``, in scan order."""
    with h5py.File(path, "r") as f:
        ds = f["patterns"]
        n, h, w = ds.shape
        per = h * w * ds.dtype.itemsize
        if ds.chunks is None:
            return [(ds.id.get_offset(), 0, n * per)], n, per
        runs = []
        for c in range(ds.id.get_num_chunks()):
            info = ds.id.get_chunk_info(c)
            if info.filter_mask:
                raise SystemExit(f"{path}: chunks are filtered; this benchmark reads raw chunks only")
            first = info.chunk_offset[0]
            runs.append((info.byte_offset, first * per, min(ds.chunks[0], n - first) * per))
    return sorted(runs, key=lambda r: r[1]), n, per


def cut(runs, size, wrap):
    """The runs cut into pieces of at most ``size`` bytes that never cross a multiple of ``wrap``
    (a batch), as (file offset, scan byte offset, bytes)."""
    out = []
    for off, dst, nbytes in runs:
        a = 0
        while a < nbytes:
            k = min(size, nbytes - a, wrap - (dst + a) % wrap)
            out.append((off + a, dst + a, k))
            a += k
    return out


class Device:
    """The device side: a buffer of two batches, pinned host buffers, streams and events; or, dry,
    host memory and copies made at once."""

    def __init__(self, nbytes, dry):
        self.dry = dry
        if dry:
            self.buf = np.empty(nbytes, np.uint8)
        else:
            import cupy as cp

            self.cp = cp
            self.buf = cp.empty(nbytes, cp.uint8)

    def pinned(self, nbytes):
        if self.dry:
            return np.empty(nbytes, np.uint8)
        import cupyx

        return cupyx.empty_pinned((nbytes,), np.uint8)

    def stream(self):
        return None if self.dry else self.cp.cuda.Stream(non_blocking=True)

    def event(self):
        return None if self.dry else self.cp.cuda.Event(block=False, disable_timing=True)

    def copy(self, host, dst, stream, event):
        """Queue host -> buf[dst:dst + host.size] on ``stream``, then ``event``."""
        if self.dry:
            self.buf[dst:dst + host.size] = host
            return
        self.cp.cuda.runtime.memcpyAsync(self.buf.data.ptr + dst, host.ctypes.data, host.size, 1, stream.ptr)
        event.record(stream)

    def wait(self, event):
        if event is not None:
            event.synchronize()

    def finish(self):
        if not self.dry:
            self.cp.cuda.Device().synchronize()

    def batch_sum(self, start, nbytes):
        b = self.buf[start:start + nbytes].view(np.uint16)
        return int(b.astype(np.uint64).sum()) if self.dry else int(b.astype(self.cp.uint64).sum().get())


def _pread(fd, view, offset):
    while view.nbytes:
        k = os.preadv(fd, [view], offset)
        if k <= 0:
            raise OSError(f"short read at byte {offset}")
        view, offset = view[k:], offset + k


def run_batches(fd, runs, batch_bytes, total, dev, threads, copy):
    """``read`` (copy False) or ``batch``: each batch read by ``threads`` into one of two pinned
    batch buffers, then (copy) queued whole to the device."""
    bufs = [dev.pinned(batch_bytes) for _ in range(2)]
    events = [dev.event() for _ in range(2)]
    stream = dev.stream()
    pool = ThreadPoolExecutor(threads)
    parts = {}  # batch -> its pieces, a thread's share each
    for p in cut(runs, max(batch_bytes // threads, 1 << 16), batch_bytes):
        parts.setdefault(p[1] // batch_bytes, []).append(p)
    t = time.perf_counter()
    for b, start in enumerate(range(0, total, batch_bytes)):
        k = b % 2
        dev.wait(events[k] if copy else None)  # its copy two batches back
        stop = min(start + batch_bytes, total)
        into = memoryview(bufs[k])
        list(pool.map(_pread, [fd] * len(parts[b]), [into[d - start:d - start + m] for _, d, m in parts[b]],
                      [off for off, _, _ in parts[b]]))
        if copy:
            dev.copy(bufs[k][:stop - start], k * batch_bytes, stream, events[k])
    dev.finish()
    dt = time.perf_counter() - t
    pool.shutdown()
    return dt


def run_staged(fd, pieces, batch_bytes, dev, threads, slots, piece_bytes):
    """``staged``: thread i reads pieces i, i + R, ... into its own ``slots`` pinned slots and
    queues each slot's copy to the piece's place in the device's two batches."""
    ring = dev.pinned(threads * slots * piece_bytes)
    errors = []

    def worker(i):
        try:
            stream = dev.stream()
            events = [dev.event() for _ in range(slots)]
            used = [False] * slots
            for j, (off, dst, nbytes) in enumerate(pieces[i::threads]):
                s = j % slots
                if used[s]:
                    dev.wait(events[s])
                base = (i * slots + s) * piece_bytes
                slot = ring[base:base + nbytes]
                _pread(fd, memoryview(slot), off)
                dev.copy(slot, dst % (2 * batch_bytes), stream, events[s])
                used[s] = True
            for s in range(slots):
                if used[s]:
                    dev.wait(events[s])
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)

    t = time.perf_counter()
    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    dev.finish()
    if errors:
        raise errors[0]
    return time.perf_counter() - t


def _text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def last_batch(n, batch):
    """(first pattern, index in the device's two batches) of the last whole batch."""
    b = n // batch - 1
    return b * batch, b % 2


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("side", nargs="?", type=int, default=512)
    ap.add_argument("patterns", nargs="?", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=None, help="patterns per batch (512, or 128 above 512 px)")
    ap.add_argument("--threads", default="8,16")
    ap.add_argument("--pieces", default="0.5,1,2,4,8", help="piece sizes, MB")
    ap.add_argument("--slots", default="2,3")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    batch = a.batch or (512 if a.side <= 512 else 128)
    path = os.path.join(a.dir, f"staged-{a.side}-{a.patterns}.h5")
    if not os.path.exists(path):
        write_scan(path, a.patterns, (a.side, a.side))
    runs, n, per = stored_runs(path)
    total, batch_bytes = n * per, batch * per
    first, half = last_batch(n, batch)
    with h5py.File(path, "r") as f:
        want = int(f["patterns"][first:first + batch].astype(np.uint64).sum())
    llc = "?"
    for idx in range(5):
        cache = f"/sys/devices/system/cpu/cpu0/cache/index{idx}"
        if _text(f"{cache}/level") == "3":
            llc = f"{_text(f'{cache}/size')} (shared by CPUs {_text(f'{cache}/shared_cpu_list')})"
    print(f"{n} patterns of {a.side}x{a.side} uint16 ({total / 1e9:.1f} GB), batches of {batch}; "
          f"last-level cache {llc}; {len(os.sched_getaffinity(0))} CPUs; {'dry run' if a.dry_run else 'GPU'}")
    dev = Device(2 * batch_bytes, a.dry_run)
    fd = os.open(path, os.O_RDONLY)
    try:
        run_batches(fd, runs, batch_bytes, total, dev, 16, False)  # into the page cache
        if not a.dry_run:
            src = dev.pinned(batch_bytes)
            s, e = dev.stream(), dev.event()
            t = time.perf_counter()
            for _ in range(10):
                dev.copy(src, 0, s, e)
            dev.finish()
            rate = 10 * batch_bytes / (time.perf_counter() - t)
            print(f"pinned batch to device alone: {rate / 1e9:.1f} GB/s = {rate / per:,.0f} patterns/s")
        cases = [("read", 16, None, None), ("batch", 16, None, None)]
        cases += [("staged", int(t), float(c), int(k)) for t in a.threads.split(",") for c in a.pieces.split(",")
                  for k in a.slots.split(",")]
        for rep in range(a.repeats):
            for kind, threads, piece_mb, slots in cases:
                dev.buf[:] = 0
                if kind == "staged":
                    size = int(piece_mb * MB)
                    dt = run_staged(fd, cut(runs, size, batch_bytes), batch_bytes, dev, threads, slots, size)
                    ring = threads * slots * size >> 20
                    name = f"staged {piece_mb:g} MB x {slots} slots x {threads} threads ({ring} MB)"
                else:
                    dt = run_batches(fd, runs, batch_bytes, total, dev, threads, kind == "batch")
                    name = f"{kind} ({threads} threads)"
                ok = kind == "read" or dev.batch_sum(half * batch_bytes, batch_bytes) == want
                print(f"rep {rep} {name:52s} {n / dt:9,.0f} patterns/s {total / dt / 1e9:6.1f} GB/s"
                      f"{'' if ok else '  WRONG DATA ON THE DEVICE'}", flush=True)
    finally:
        os.close(fd)


if __name__ == "__main__":
    main()
