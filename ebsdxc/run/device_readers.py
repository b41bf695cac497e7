"""Reader processes that read a scan's pattern bytes and copy them to the GPU themselves.

Reading threads of the run's own process share its interpreter lock with the thread that
launches every batch and writes its results: a reader back from a read waits for that lock,
and with a busy Python thread beside them 16 threads filled pinned batches of 512x512
patterns at 6.8-7.1k patterns/s instead of 60k (``benchmarks/staged_copy.py --load``,
NVIDIA H100 host, 2026-11-27). Here the reads happen in other processes, each with a CUDA
context of its own: a process reads its pieces of a batch (:meth:`PatternSource.byte_pieces`)
into small pinned slots of its own and copies each slot into the batch's device buffer, which
this process shares with it through a CUDA IPC handle. This process only says which batch goes
where and waits for a process's one reply per batch. Small slots stay in the processor's cache
on the way to the copy engine, where a whole pinned batch makes a trip through memory more.

Each process holds a CUDA context (about 0.6 GB of device memory on an H100) and takes a second
or two to start, so the runner uses them only for large scans on a GPU with memory to spare
(:func:`reader_processes`, ``EBSDXC_READER_PROCESSES``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import sys
import threading
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection

import numpy as np

from ..errors import InputError
from ..io.direct import byte_groups

__all__ = ["DeviceReaders", "DeviceRing", "reader_processes", "shared", "discard", "close_shared", "DeviceBuffer",
           "PIECE_BYTES"]

PIECE_BYTES = 4 << 20  # a slot: 4 MB pieces x 2 slots x 16 readers ran fastest (staged_copy.py --ipc)
_SLOTS = 2
_DEFAULT = (4, 4)  # processes x threads
# A scan smaller than this is read by the runner's threads: the processes' start would cost more.
MIN_SCAN_BYTES = 4 << 30
_CONTEXT_BYTES = 1 << 30  # device memory counted per reader process (its CUDA context, measured ~0.6 GB)


def reader_processes(scan_bytes: int, free_device_bytes: int) -> tuple[int, int] | None:
    """(processes, threads each) for a scan of ``scan_bytes`` with ``free_device_bytes`` free, or
    None: read in this process.

    ``EBSDXC_READER_PROCESSES``: ``0`` never, ``P`` or ``PxT`` always (P processes of T
    threads); unset: the default on Linux for scans of at least 4 GB when the device has room
    for the contexts and 8 GB more.
    """
    env = os.environ.get("EBSDXC_READER_PROCESSES", "").strip().lower()
    if env:
        try:
            p, _, t = env.partition("x")
            spec = (int(p), int(t or 1))
        except ValueError:
            raise InputError(f"EBSDXC_READER_PROCESSES must be P or PxT (processes x threads), got {env!r}") from None
        return spec if spec[0] > 0 and spec[1] > 0 else None
    p, t = _DEFAULT
    if not sys.platform.startswith("linux"):  # CUDA IPC and descriptor passing as used here: Linux
        return None
    if scan_bytes < MIN_SCAN_BYTES or free_device_bytes < p * _CONTEXT_BYTES + (8 << 30):
        return None
    return p, t


class DeviceBuffer:
    """A device allocation of its own (not the memory pool's): an IPC handle names exactly it."""

    def __init__(self, nbytes: int):
        import cupy as cp

        self.nbytes = int(nbytes)
        self.ptr = cp.cuda.runtime.malloc(max(1, self.nbytes))
        mem = cp.cuda.UnownedMemory(self.ptr, max(1, self.nbytes), self)
        self.array = cp.ndarray((self.nbytes,), cp.uint8, cp.cuda.MemoryPointer(mem, 0))

    def view(self, dtype, shape):
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return self.array[:n].view(dtype).reshape(shape)

    def free(self):
        if self.ptr:
            import cupy as cp

            cp.cuda.runtime.free(self.ptr)
            self.ptr = 0


class DeviceReaders:
    """``processes`` reader processes of ``threads`` threads each (:func:`shared` keeps one set
    for the whole Python process: they take seconds to start).

    :meth:`attach` gives them the device buffers batches go to; :meth:`submit` hands out the
    pieces of one batch; :meth:`wait` returns when they are all on the device (raising the
    readers' error, naming the file, when a read failed). Jobs are waited for in the order
    they were submitted.
    """

    def __init__(self, *, processes: int, threads: int, piece_bytes: int = PIECE_BYTES):
        import cupy as cp

        self.spec = (int(processes), int(threads))
        self.device = cp.cuda.Device().id
        self.piece_bytes = int(piece_bytes)
        self.threads = int(threads)
        self._conns, self._procs = [], []
        self._outstanding = []
        self._attached = None
        self._paths = {}
        #: Held by the one stream that uses the readers (their jobs are answered in order).
        self.lock = threading.Lock()
        # A fresh interpreter running this module, not multiprocessing's spawn: that would run
        # the caller's main script again in every reader, and a script without a main guard
        # would start its whole run there. The package is found where this process found it.
        env = dict(os.environ)
        home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join([home] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        try:
            for _ in range(processes):
                mine, theirs = socket.socketpair()
                p = subprocess.Popen([sys.executable, "-m", "ebsdxc.run.device_readers", str(theirs.fileno()),
                                      str(self.device), str(self.threads), str(self.piece_bytes)],
                                     pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
                theirs.close()
                self._conns.append(Connection(mine.detach()))
                self._procs.append(p)
        except BaseException:
            self.close()
            raise
        self._ready = False

    def wait_ready(self) -> None:
        """Return once every process has its CUDA context (they start in the background, while
        the run sets itself up); raise when one could not start."""
        if not self._ready:
            for c in self._conns:
                self._reply(c, "ready")
            self._ready = True

    @property
    def processes(self) -> int:
        return len(self._procs)

    def _reply(self, conn, want, job=None):
        path = self._paths.get(job)
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            raise InputError("cannot read the patterns: a reader process ended unexpectedly", path) from None
        if msg[0] == "error":
            raise InputError(msg[2], path)
        if msg[0] != want or (job is not None and msg[1] != job):
            raise RuntimeError(f"reader process: {msg!r} where {want} {job} was due")
        return msg

    def attach(self, buffers) -> None:
        """Open :class:`DeviceBuffer` s ``buffers`` in every reader (by CUDA IPC handles)."""
        import cupy as cp

        self.wait_ready()
        key = tuple(b.ptr for b in buffers)
        if self._attached == key:
            return
        handles = [cp.cuda.runtime.ipcGetMemHandle(b.ptr) for b in buffers]
        for c in self._conns:
            c.send(("open", handles))
        for c in self._conns:
            self._reply(c, "opened")
        self._attached = key

    def detach(self) -> None:
        """Close the buffers' handles in every reader (before the buffers are freed)."""
        if self._attached is None:
            return
        for c in self._conns:
            c.send(("open", []))
        for c in self._conns:
            self._reply(c, "opened")
        self._attached = None

    def submit(self, job, buffer: int, path, pieces: np.ndarray) -> None:
        """Read ``pieces`` (rows [offset in the buffer, file offset or -1, bytes]) of file
        ``path`` into buffer number ``buffer`` (of those attached): contiguous groups of about
        equal bytes, one per process."""
        path = os.fspath(path)
        self._paths[job] = path
        st = os.stat(path)
        ident = (st.st_dev, st.st_ino)  # a file replaced under the same name is opened again
        pieces = np.asarray(pieces, np.int64).reshape(-1, 3)
        groups = byte_groups(pieces[:, 2], len(self._conns))  # every process gets a message
        self._outstanding.append(job)  # answered by those still running, or the wait fails
        for c, g in zip(self._conns, groups):
            try:
                c.send(("read", job, int(buffer), (path, ident), pieces[g].tolist()))
            except OSError:  # the process has ended (its end of the socket is closed)
                raise InputError("cannot read the patterns: a reader process ended unexpectedly", path) from None

    def wait(self, job) -> None:
        """Return once every piece of ``job`` (the oldest job not waited for) is on the device."""
        if not self._outstanding or self._outstanding[0] != job:
            raise ValueError(f"job {job!r} is not the oldest outstanding one ({self._outstanding[:1]})")
        self._outstanding.pop(0)
        failure = None
        for c in self._conns:  # every process's reply, so that the next wait reads the next job's
            try:
                self._reply(c, "done", job)
            except InputError as e:
                failure = failure or e
        self._paths.pop(job, None)
        if failure is not None:
            raise failure

    def drain(self) -> None:
        """Wait for every outstanding job, ignoring their errors (before their buffers go)."""
        while self._outstanding:
            with contextlib.suppress(InputError):
                self.wait(self._outstanding[0])

    def alive(self) -> bool:
        return bool(self._procs) and all(p.poll() is None for p in self._procs)

    def close(self) -> None:
        for c in self._conns:
            with contextlib.suppress(OSError, ValueError):
                c.send(("stop",))
        for p in self._procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        for c in self._conns:
            c.close()
        self._conns, self._procs, self._outstanding, self._attached = [], [], [], None


class DeviceRing:
    """Batches ``chunks`` ((start, stop, ...) pattern ranges of ``source``) read by ``readers``
    into three device buffers in turn, batch k into buffer k % 3, two batches in flight: the
    way a run streams them (:mod:`ebsdxc.run.streaming`) and ``bench --pipeline`` measures them.

    Entering makes and attaches the buffers; :meth:`start` submits batches 0 and 1 (apart, so
    that a benchmark times the reads alone); :meth:`ready` (k) waits for batch
    k and returns its buffer; :meth:`done` (k) says batch k's buffer is no longer read, so batch
    k + 3 may go there (``done(-1)`` after batch 0 arrives submits batch 2). Leaving waits for
    every outstanding read and the device, closes the buffers in the readers and frees them; a
    reader that died takes its handles with it, so the set is closed and replaced on next use.
    The caller holds ``readers.lock``.
    """

    SLOTS = 3

    def __init__(self, readers: DeviceReaders, source, chunks, batch: int):
        self.readers, self.source, self.chunks = readers, source, list(chunks)
        self.nbytes = int(batch) * source.nbytes_per_pattern
        self.buffers: list[DeviceBuffer] = []

    def __enter__(self):
        try:
            for _ in range(self.SLOTS):
                self.buffers.append(DeviceBuffer(self.nbytes))
            self.readers.attach(self.buffers)
        except BaseException:
            self._release()
            raise
        return self

    def start(self) -> None:
        for k in range(min(self.SLOTS - 1, len(self.chunks))):
            self._submit(k)

    def _submit(self, k):
        start, stop = self.chunks[k][:2]
        self.readers.submit(k, k % self.SLOTS, self.source.path,
                            self.source.byte_pieces(start, stop, self.readers.piece_bytes))

    def ready(self, k) -> DeviceBuffer:
        """Batch k's buffer once every piece of it is there (InputError naming the file if a
        read failed)."""
        self.readers.wait(k)
        return self.buffers[k % self.SLOTS]

    def done(self, k) -> None:
        if 0 <= k + self.SLOTS < len(self.chunks):
            self._submit(k + self.SLOTS)

    def _release(self):
        import cupy as cp

        try:
            self.readers.drain()  # no reader still writes into a buffer about to go
            if self.buffers:
                cp.cuda.Device().synchronize()  # nor a kernel still reads one
                self.readers.detach()  # nor has it open (freeing it first is undefined in CUDA)
        except (InputError, OSError):  # a reader died (its handles went with it): the set is replaced
            self.readers.close()
        for b in self.buffers:
            b.free()
        self.buffers = []

    def __exit__(self, *exc):
        self._release()
        return False


def _pread_all(fd, view, offset):
    while len(view):
        got = os.preadv(fd, [view], offset)
        if got <= 0:
            raise EOFError("is truncated: the file ends before its pattern data do")
        view, offset = view[got:], offset + got


def shared(processes: int, threads: int) -> DeviceReaders:
    """This process's reader processes of that shape on the current device, started on first
    use and kept (their start costs seconds: a CUDA context each)."""
    import cupy as cp

    key = (cp.cuda.Device().id, int(processes), int(threads))
    readers = _shared.get(key)
    if readers is not None and not readers.alive() and readers.lock.acquire(blocking=False):
        readers.lock.release()  # dead and nobody streams with it: start a new set
        readers.close()
        readers = None
    if readers is None:
        readers = _shared[key] = DeviceReaders(processes=processes, threads=threads)
    return readers


def discard(readers: DeviceReaders) -> None:
    """Stop ``readers`` and forget them (a set that failed to start)."""
    for key, r in list(_shared.items()):
        if r is readers:
            del _shared[key]
    readers.close()


def close_shared() -> None:
    """Stop the reader processes of :func:`shared` (their device memory is given back)."""
    while _shared:
        _shared.popitem()[1].close()


_shared = {}  # (device, processes, threads) -> DeviceReaders
atexit.register(close_shared)


def _serve(device, conn, threads, piece_bytes):  # pragma: no cover - runs in a reader process
    """A reader process: its own CUDA context, pinned slots and a stream per thread."""
    try:
        import cupy as cp
        import cupyx

        cp.cuda.Device(device).use()
        files = {}  # (path, (device, inode)) -> descriptor, opened on first use
        ring = cupyx.empty_pinned((threads * _SLOTS * piece_bytes,), np.uint8)
        mv = memoryview(ring)
        streams = [cp.cuda.Stream(non_blocking=True) for _ in range(threads)]
        # blocking events: a thread waiting for its slot's copy sleeps instead of spinning on a core
        events = [[cp.cuda.Event(block=True, disable_timing=True) for _ in range(_SLOTS)] for _ in range(threads)]
        used = [[False] * _SLOTS for _ in range(threads)]
        pool = ThreadPoolExecutor(threads) if threads > 1 else None
        bases = []
        conn.send(("ready", os.getpid()))
    except BaseException as e:  # noqa: BLE001 - the parent raises it
        # A parent that let go already (its end closed) fails this reply too: nobody to tell.
        with contextlib.suppress(OSError):
            conn.send(("error", None, f"cannot start a reader process ({type(e).__name__}: {e})"))
        conn.close()
        return

    def work(t, base, fd, pieces):
        cp.cuda.Device(device).use()
        stream, j = streams[t], 0
        try:
            for dst, off, n in pieces:
                if off < 0:
                    cp.cuda.runtime.memsetAsync(base + dst, 0, n, stream.ptr)
                    continue
                s = j % _SLOTS
                j += 1
                if used[t][s]:
                    events[t][s].synchronize()  # the slot's last copy is done
                b = (t * _SLOTS + s) * piece_bytes
                _pread_all(fd, mv[b:b + n], off)
                cp.cuda.runtime.memcpyAsync(base + dst, ring.ctypes.data + b, n, 1, stream.ptr)
                events[t][s].record(stream)
                used[t][s] = True
        finally:
            stream.synchronize()  # failed or not, nothing of this job is in flight after it

    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if msg[0] == "stop":
            break
        try:
            if msg[0] == "open":
                for b in bases:
                    cp.cuda.runtime.ipcCloseMemHandle(b)
                bases = [cp.cuda.runtime.ipcOpenMemHandle(h) for h in msg[1]]
                conn.send(("opened",))
                continue
            _, job, buffer, key, pieces = msg
            base = bases[buffer]
            if key not in files:
                files[key] = os.open(key[0], os.O_RDONLY)
                if os.fstat(files[key]).st_ino != key[1][1]:
                    raise OSError(f"{key[0]} changed while it was being read")
            fd = files[key]
            if pool is None or len(pieces) < 2:
                work(0, base, fd, pieces)
            else:
                # every thread finished (its copies done) before any reply, failed or not: the
                # parent may free the buffer once it has one
                tasks = [pool.submit(work, t, base, fd, pieces[t::threads]) for t in range(threads)]
                futures.wait(tasks)
                for task in tasks:
                    task.result()
            conn.send(("done", job))
        except BaseException as e:  # noqa: BLE001 - the parent raises it, naming the file
            why = str(e) if isinstance(e, EOFError) else f"cannot read the patterns ({type(e).__name__}: {e})"
            try:
                conn.send(("error", msg[1] if len(msg) > 1 else None, why))
            except OSError:  # the parent has let go of this reader (its reply failed too): nobody to tell
                break
    for b in bases:
        with contextlib.suppress(Exception):  # the process ends anyway
            cp.cuda.runtime.ipcCloseMemHandle(b)
    for fd in files.values():
        os.close(fd)
    conn.close()  # the parent's next read or send fails at once (a loop in a thread, in tests)


if __name__ == "__main__":  # pragma: no cover - a reader process, started by DeviceReaders
    _serve(int(sys.argv[2]), Connection(int(sys.argv[1])), int(sys.argv[3]), int(sys.argv[4]))
