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
- ``source``: as ``batch``, but each batch read by the runner's own reader (``read_into`` of
  the scan as :func:`ebsdxc.io.open_scan` opens it);
- ``staged C x K``: thread i reads pieces i, i + R, ... of C bytes into its own K pinned slots
  in turn and queues each slot's copy to its place in a device buffer of two batches, on a stream
  of its own; a slot is refilled once its last copy is done.
- ``ipc C x K``: R reader processes, each with a CUDA context of its own, copy their pieces
  themselves from their own pinned slots into this process's device buffer (opened through a
  CUDA IPC handle): nothing of this process takes part per piece.
- ``procs C x K``: the same pieces read by R processes (no shared interpreter lock) into their
  slots of one shared-memory ring that this process pinned (``cudaHostRegister``); one thread of
  this process queues each slot's copy when its reader reports it full, another hands a slot back
  to its reader once its copy is done.

``--load``: a thread of this process runs pure Python all along, as the runner's main thread does
(launching batches, writing results); each line then also gives how much of its idle rate that
thread kept, which is what the readers cost the run's main thread.

Each mode then checks that the device holds the scan's last whole batch (a sum against the file's).
Prints patterns/s and GB/s of each, the last-level cache size, the pinned copy bound.

    python benchmarks/staged_copy.py [SIDE] [PATTERNS] [--threads 8,16] [--pieces 0.5,1,2,4,8]
        [--slots 2,3] [--procs 8,16] [--ipc 8,16] [--load] [--gpu-load] [--dry-run]

``--gpu-load``: this process keeps the GPU computing (matrix products on a stream of its own) all
along, to see whether the copies of other processes' CUDA contexts overlap it.

``--dry-run`` runs the same bookkeeping with host memory for the device (no CUDA), to check the
script on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import mmap
import multiprocessing as mp
import os
import queue
import struct
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import wait as wait_connections

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
            # its own allocation (not the memory pool's), so that an IPC handle names it exactly
            self.ptr = cp.cuda.runtime.malloc(nbytes)
            mem = cp.cuda.UnownedMemory(self.ptr, nbytes, self)
            self.buf = cp.ndarray((nbytes,), cp.uint8, cp.cuda.MemoryPointer(mem, 0))

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

    def register(self, array):
        """Pin ``array``'s host memory (memory this process did not allocate pinned)."""
        if not self.dry:
            self.cp.cuda.runtime.hostRegister(array.ctypes.data, array.nbytes, 0)

    def unregister(self, array):
        if not self.dry:
            self.cp.cuda.runtime.hostUnregister(array.ctypes.data)

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


def run_source(path, batch, per, n, dev):
    """``source``: ``batch`` but read by the runner's own reader (the scan's ``read_into``)."""
    from ebsdxc.io import open_scan

    src = open_scan(path)
    batch_bytes = batch * per
    bufs = [dev.pinned(batch_bytes) for _ in range(2)]
    events = [dev.event() for _ in range(2)]
    stream = dev.stream()
    t = time.perf_counter()
    for b, start in enumerate(range(0, n, batch)):
        k = b % 2
        dev.wait(events[k])
        stop = min(start + batch, n)
        view = bufs[k][:(stop - start) * per].view(src.dtype).reshape(stop - start, *src.pattern_shape)
        src.read_into(start, stop, view)
        dev.copy(bufs[k][:(stop - start) * per], k * batch_bytes, stream, events[k])
    dev.finish()
    return time.perf_counter() - t


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


def _proc_reader(path, ring_path, ring_bytes, pieces, base, slots, piece_bytes, conn):
    """A reader process: pieces into its slots of the shared ring, one message per full slot,
    a slot refilled once this process is told its copy is done (in order: one copy stream)."""
    fd = os.open(path, os.O_RDONLY)
    rfd = os.open(ring_path, os.O_RDWR)
    ring = memoryview(mmap.mmap(rfd, ring_bytes))
    conn.send_bytes(b"ready")
    conn.recv_bytes()
    try:
        for j, (off, _, nbytes) in enumerate(pieces):
            s = j % slots
            if j >= slots:
                conn.recv_bytes()
            b = base + s * piece_bytes
            _pread(fd, ring[b:b + nbytes], off)
            conn.send_bytes(struct.pack("<q", j))
        while conn.recv_bytes() != b"end":  # the hand-backs of the last slots
            pass
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        conn.send_bytes(b"error: " + repr(e).encode())  # never 8 bytes long: a piece number is


def _ipc_reader(path, handle, pieces, slots, piece_bytes, two_batches, conn):
    """A reader process with its own CUDA context: pieces into its own pinned slots, each copied
    at once into the parent's device buffer (``handle``); a slot refilled once its copy is done."""
    try:
        import cupy as cp
        import cupyx

        base = cp.cuda.runtime.ipcOpenMemHandle(handle)
        ring = cupyx.empty_pinned((slots * piece_bytes,), np.uint8)
        stream = cp.cuda.Stream(non_blocking=True)
        events = [cp.cuda.Event(block=True, disable_timing=True) for _ in range(slots)]  # block: no spinning
        fd = os.open(path, os.O_RDONLY)
        conn.send_bytes(b"ready")
        conn.recv_bytes()
        for j, (off, dst, nbytes) in enumerate(pieces):
            s = j % slots
            if j >= slots:
                events[s].synchronize()
            slot = ring[s * piece_bytes:s * piece_bytes + nbytes]
            _pread(fd, memoryview(slot), off)
            cp.cuda.runtime.memcpyAsync(base + dst % two_batches, slot.ctypes.data, nbytes, 1, stream.ptr)
            events[s].record(stream)
        stream.synchronize()
        conn.send_bytes(b"done")
        conn.recv_bytes()
        cp.cuda.runtime.ipcCloseMemHandle(base)
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        conn.send_bytes(b"error: " + repr(e).encode())


def run_ipc(path, pieces, batch_bytes, dev, readers, slots, piece_bytes):
    """``ipc``: the clock runs from the readers' start signal (their CUDA contexts made) to the
    last reader's copies done."""
    handle = dev.cp.cuda.runtime.ipcGetMemHandle(dev.ptr)
    ctx = mp.get_context("spawn")
    conns, procs = [], []
    for i in range(readers):
        mine, theirs = ctx.Pipe()
        p = ctx.Process(target=_ipc_reader, args=(path, handle, pieces[i::readers], slots, piece_bytes,
                                                  2 * batch_bytes, theirs), daemon=True)
        p.start()
        conns.append(mine)
        procs.append(p)
    msgs = [c.recv_bytes() for c in conns]
    bad = [m for m in msgs if m != b"ready"]
    if bad:
        raise RuntimeError(bad[0].decode())
    free, total = dev.cp.cuda.runtime.memGetInfo()
    run_ipc.used = total - free  # device memory in use with every reader's context made
    t = time.perf_counter()
    for c in conns:
        c.send_bytes(b"go")
    msgs = [c.recv_bytes() for c in conns]
    dt = time.perf_counter() - t
    for c in conns:
        c.send_bytes(b"end")
    for p in procs:
        p.join(timeout=30)
    bad = [m for m in msgs if m != b"done"]
    if bad:
        raise RuntimeError(bad[0].decode())
    return dt


class Load:
    """A thread running pure Python in slices of about 1 ms, counting them."""

    def __init__(self):
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _slice():
        x = 0
        for i in range(20000):
            x += i
        return x

    def _run(self):
        while not self._stop.is_set():
            self._slice()
            self.count += 1

    def __enter__(self):
        self.count = 0
        self._t = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.rate = self.count / (time.perf_counter() - self._t)


class GpuLoad(Load):
    """A thread of this process keeping the GPU busy with float32 matrix products."""

    def __init__(self, dev):
        super().__init__()
        self.dev = dev

    def _run(self):
        cp = self.dev.cp
        with cp.cuda.Stream(non_blocking=True) as s:
            a = cp.ones((4096, 4096), cp.float32)
            while not self._stop.is_set():
                a @ a
                s.synchronize()
                self.count += 1


class Procs:
    """R reader processes over one pinned shared-memory ring, started before the clock."""

    def __init__(self, path, dev, readers, slots, piece_bytes):
        self.dev, self.readers, self.slots, self.piece_bytes = dev, readers, slots, piece_bytes
        self.ring_bytes = readers * slots * piece_bytes
        fd, self.ring_path = tempfile.mkstemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        os.ftruncate(fd, self.ring_bytes)
        self._mm = mmap.mmap(fd, self.ring_bytes)
        os.close(fd)
        self.ring = np.frombuffer(self._mm, np.uint8)
        self.ring[:] = 0  # fault every page in before pinning
        dev.register(self.ring)
        self.path = path

    def run(self, pieces, batch_bytes):
        ctx = mp.get_context("spawn")
        conns, procs = [], []
        for i in range(self.readers):
            mine, theirs = ctx.Pipe()
            mine_pieces = pieces[i::self.readers]
            p = ctx.Process(target=_proc_reader, args=(self.path, self.ring_path, self.ring_bytes, mine_pieces,
                                                       i * self.slots * self.piece_bytes, self.slots,
                                                       self.piece_bytes, theirs), daemon=True)
            p.start()
            conns.append(mine)
            procs.append(p)
        for c in conns:
            c.recv_bytes()
        dev, stream = self.dev, self.dev.stream()
        events = [[dev.event() for _ in range(self.slots)] for _ in range(self.readers)]
        handback = queue.Queue()
        errors = []

        def release():
            while True:
                item = handback.get()
                if item is None:
                    return
                ev, c = item
                dev.wait(ev)
                c.send_bytes(b"f")

        releaser = threading.Thread(target=release, daemon=True)
        releaser.start()
        who = {id(c): i for i, c in enumerate(conns)}
        t = time.perf_counter()
        for c in conns:
            c.send_bytes(b"go")
        left = len(pieces)
        live = list(conns)
        while left and not errors:
            for c in wait_connections(live):
                msg = c.recv_bytes()
                if len(msg) != 8:
                    errors.append(msg.decode())
                    break
                i = who[id(c)]
                j = struct.unpack("<q", msg)[0]
                off, dst, nbytes = pieces[i + j * self.readers]
                s = j % self.slots
                b = (i * self.slots + s) * self.piece_bytes
                dev.copy(self.ring[b:b + nbytes], dst % (2 * batch_bytes), stream, events[i][s])
                handback.put((events[i][s], c))
                left -= 1
        dev.finish()
        dt = time.perf_counter() - t
        handback.put(None)
        releaser.join()
        for c in conns:
            c.send_bytes(b"end")
        for p in procs:
            p.join(timeout=10)
        if errors:
            raise RuntimeError(errors[0])
        return dt

    def close(self):
        self.dev.unregister(self.ring)
        del self.ring
        self._mm.close()
        os.unlink(self.ring_path)


def idle_load_rate(seconds=1.0):
    with Load() as load:
        time.sleep(seconds)
    return load.rate


def _text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


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
    ap.add_argument("--procs", default="", help="reader process counts (procs cases), e.g. 8,16")
    ap.add_argument("--ipc", default="", help="reader process counts with CUDA contexts (ipc cases), e.g. 8,16")
    ap.add_argument("--gpu-load", action="store_true", help="also run ipc cases beside GPU computation")
    ap.add_argument("--load", action="store_true", help="also run every case beside a busy Python thread")
    ap.add_argument("--switch", type=float, default=None, help="the interpreter's switch interval, ms")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    batch = a.batch or (512 if a.side <= 512 else 128)
    if a.switch is not None:
        import sys

        sys.setswitchinterval(a.switch / 1000)
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
        cases = [("read", 16, None, None), ("batch", 16, None, None), ("source", 16, None, None)]
        cases += [("staged", int(t), float(c), int(k)) for t in a.threads.split(",") for c in a.pieces.split(",")
                  for k in a.slots.split(",")]
        cases += [("procs", int(t), float(c), int(k)) for t in a.procs.split(",") if t for c in a.pieces.split(",")
                  for k in a.slots.split(",")]
        cases += [("ipc", int(t), float(c), int(k)) for t in a.ipc.split(",") if t and not a.dry_run
                  for c in a.pieces.split(",") for k in a.slots.split(",")]
        idle = idle_load_rate() if a.load else None
        if idle:
            print(f"busy Python thread alone: {idle:,.0f} slices/s")
        if a.gpu_load and not a.dry_run:
            free, whole = dev.cp.cuda.runtime.memGetInfo()
            with GpuLoad(dev) as g:
                time.sleep(1.0)
            print(f"matrix products alone: {g.rate:,.0f}/s; device memory in use {(whole - free) >> 20} MB")
        rings = {}
        for rep in range(a.repeats):
            for kind, threads, piece_mb, slots in cases:
                loads = (False, True) if a.load else (False,)
                if kind == "ipc" and a.gpu_load:
                    loads = (False, "gpu")
                for loaded in loads:
                    dev.buf[:] = 0
                    dev.finish()
                    load_cm = GpuLoad(dev) if loaded == "gpu" else Load() if loaded else _Nothing()
                    with load_cm as load:
                        if kind == "ipc":
                            size = int(piece_mb * MB)
                            dt = run_ipc(path, cut(runs, size, batch_bytes), batch_bytes, dev, threads, slots, size)
                            name = (f"ipc {piece_mb:g} MB x {slots} slots x {threads} CUDA processes "
                                    f"({run_ipc.used >> 20} MB used)")
                        elif kind in ("staged", "procs"):
                            size = int(piece_mb * MB)
                            pieces = cut(runs, size, batch_bytes)
                            if kind == "staged":
                                dt = run_staged(fd, pieces, batch_bytes, dev, threads, slots, size)
                            else:
                                key = (threads, slots, size)
                                if key not in rings:
                                    rings[key] = Procs(path, dev, threads, slots, size)
                                dt = rings[key].run(pieces, batch_bytes)
                            ring = threads * slots * size >> 20
                            what = "threads" if kind == "staged" else "processes"
                            name = f"{kind} {piece_mb:g} MB x {slots} slots x {threads} {what} ({ring} MB)"
                        elif kind == "source":
                            dt = run_source(path, batch, per, n, dev)
                            name = "source (the runner's reader, batches as in batch)"
                        else:
                            dt = run_batches(fd, runs, batch_bytes, total, dev, threads, kind == "batch")
                            name = f"{kind} ({threads} threads)"
                    ok = kind == "read" or dev.batch_sum(half * batch_bytes, batch_bytes) == want
                    if loaded == "gpu":
                        kept = f"  beside {load.rate:,.0f} matrix products/s"
                    else:
                        kept = f"  busy thread kept {load.rate / idle:4.0%}" if loaded else ""
                    print(f"rep {rep} {name:56s} {n / dt:9,.0f} patterns/s {total / dt / 1e9:6.1f} GB/s{kept}"
                          f"{'' if ok else '  WRONG DATA ON THE DEVICE'}", flush=True)
        for r in rings.values():
            r.close()
    finally:
        os.close(fd)


if __name__ == "__main__":
    main()
