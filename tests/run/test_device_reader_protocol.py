"""The reader process's side of :mod:`ebsdxc.run.device_readers` on the CPU: its loop
(``_serve``) run in a thread, with host memory standing in for the device the way
``benchmarks/staged_copy.py --dry-run`` does (copies made at once by ``ctypes.memmove``). The
GPU tests (``tests/run/test_device_readers.py``) run the real processes; these check the
protocol's answers where no GPU is: bytes in place, zeros for unstored patterns, a short file
reported after every thread stopped, a file replaced under its name opened again."""

from __future__ import annotations

import ctypes
import os
import socket
import sys
import threading
from multiprocessing.connection import Connection
from types import SimpleNamespace

import numpy as np
import pytest

from ebsdxc.run import device_readers


class _Stream:
    ptr = 0

    def __init__(self, non_blocking=True):
        pass

    def synchronize(self):
        pass


class _Event:
    def __init__(self, block=True, disable_timing=True):
        pass

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass


_RUNTIME = SimpleNamespace(
    memsetAsync=lambda ptr, value, n, stream: ctypes.memset(ptr, value, n),
    memcpyAsync=lambda dst, src, n, kind, stream: ctypes.memmove(dst, src, n),
    ipcOpenMemHandle=lambda handle: handle,  # the "handle" is the buffer's address here
    ipcCloseMemHandle=lambda ptr: None,
)
_CUPY = SimpleNamespace(cuda=SimpleNamespace(runtime=_RUNTIME, Device=lambda i: SimpleNamespace(use=lambda: None),
                                             Stream=_Stream, Event=_Event))
_CUPYX = SimpleNamespace(empty_pinned=lambda shape, dtype: np.empty(shape, dtype))


@pytest.fixture
def reader(monkeypatch):
    """(connection to a reader loop with 3 threads and 1000-byte slots, its thread)."""
    monkeypatch.setitem(sys.modules, "cupy", _CUPY)
    monkeypatch.setitem(sys.modules, "cupyx", _CUPYX)
    mine, theirs = socket.socketpair()
    t = threading.Thread(target=device_readers._serve, args=(0, Connection(theirs.detach()), 3, 1000), daemon=True)
    t.start()
    conn = Connection(mine.detach())
    assert conn.recv()[0] == "ready"
    yield conn
    conn.send(("stop",))
    t.join(timeout=10)
    assert not t.is_alive()
    conn.close()


def _key(path):
    st = os.stat(path)
    return (str(path), (st.st_dev, st.st_ino))


def test_pieces_land_in_place_with_zeros_for_unstored_ones(tmp_path, reader):
    data = np.random.default_rng(0).integers(0, 256, 20000, dtype=np.uint8)
    path = tmp_path / "raw.bin"
    path.write_bytes(data.tobytes())
    out = np.full(12000, 7, np.uint8)
    reader.send(("open", [out.ctypes.data]))
    assert reader.recv() == ("opened",)
    # 11 pieces of at most a slot, out of order in the file, and 2000 bytes never stored
    pieces = [(o, 19000 - o - 1000 if o < 10000 else -1, 1000) for o in range(0, 12000, 1000)]
    reader.send(("read", 5, 0, _key(path), pieces))
    assert reader.recv() == ("done", 5)
    for o, off, n in pieces:
        want = np.zeros(n, np.uint8) if off < 0 else data[off:off + n]
        np.testing.assert_array_equal(out[o:o + n], want)


def test_a_short_file_is_one_error_reply_for_the_job(tmp_path, reader):
    path = tmp_path / "short.bin"
    path.write_bytes(bytes(range(256)) * 10)  # 2560 bytes
    out = np.zeros(6000, np.uint8)
    reader.send(("open", [out.ctypes.data]))
    reader.recv()
    reader.send(("read", 1, 0, _key(path), [(0, 0, 1000), (1000, 1000, 1000), (2000, 2000, 1000), (3000, 3000, 1000)]))
    kind, job, why = reader.recv()
    assert (kind, job) == ("error", 1) and "truncated" in why, why
    reader.send(("read", 2, 0, _key(path), [(0, 1000, 500)]))  # the next job is answered as its own
    assert reader.recv() == ("done", 2)
    np.testing.assert_array_equal(out[:500], np.frombuffer(path.read_bytes()[1000:1500], np.uint8))


def test_a_file_written_again_under_its_name_is_opened_again(tmp_path, reader):
    path = tmp_path / "scan.bin"
    path.write_bytes(b"\x01" * 3000)
    out = np.zeros(3000, np.uint8)
    reader.send(("open", [out.ctypes.data]))
    reader.recv()
    reader.send(("read", 0, 0, _key(path), [(0, 0, 1000), (1000, 1000, 1000), (2000, 2000, 1000)]))
    assert reader.recv() == ("done", 0) and (out == 1).all()
    path.unlink()
    path.write_bytes(b"\x02" * 3000)  # a new file (a new inode) under the same name
    reader.send(("read", 1, 0, _key(path), [(0, 0, 1000), (1000, 1000, 1000), (2000, 2000, 1000)]))
    assert reader.recv() == ("done", 1) and (out == 2).all()


@pytest.mark.parametrize("gpu,frames,halo,rois_only,starts", [
    (True, False, 0, False, True), (True, False, 2, False, False), (True, False, 0, True, False),
    (False, False, 0, False, False), (True, True, 0, False, False)])
def test_reader_processes_start_only_for_runs_that_use_them(monkeypatch, gpu, frames, halo, rois_only, starts):
    """A run that averages neighbours (halo rows), sends only its ROIs, runs on the CPU or reads
    DIC frames reads in its own process: starting the readers for it would cost seconds and
    device memory for nothing (the stream makes the same choice, ``_may_read_to_device``)."""
    from ebsdxc.run import streaming

    started = []
    monkeypatch.setattr(streaming, "_device_readers", lambda *a, **k: started.append(k) or "the readers")
    pipeline = SimpleNamespace(backend=SimpleNamespace(is_gpu=gpu), reads_frames=frames,
                               preprocessor=SimpleNamespace(halo_rows=halo),
                               transfer_plan=lambda shape, itemsize: "a plan" if rois_only else None)
    source = SimpleNamespace(pattern_shape=(64, 64), dtype=np.dtype(np.uint16))
    got = streaming.start_device_readers(pipeline, source, wait=True)
    assert (got == "the readers") == starts and len(started) == int(starts)
    if starts:
        assert started == [{"wait": True}]


class _HostBuffer:
    """A device buffer's stand-in in host memory (its address is its 'IPC handle' here)."""

    def __init__(self, nbytes):
        self.array = np.zeros(max(1, nbytes), np.uint8)
        self.ptr = self.array.ctypes.data
        self.freed = False

    def view(self, dtype, shape):
        return self.array[:int(np.prod(shape)) * np.dtype(dtype).itemsize].view(dtype).reshape(shape)

    def free(self):
        self.freed = True


def _host_readers(monkeypatch, n=2, threads=2, piece_bytes=4096):
    """A DeviceReaders whose n 'processes' are _serve loops in threads writing host memory."""
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(cuda=SimpleNamespace(
        runtime=SimpleNamespace(ipcGetMemHandle=lambda ptr: ptr, **vars(_RUNTIME)), Device=lambda i=0: SimpleNamespace(
            use=lambda: None, synchronize=lambda: None), Stream=_Stream, Event=_Event)))
    monkeypatch.setitem(sys.modules, "cupyx", _CUPYX)
    monkeypatch.setattr(device_readers, "DeviceBuffer", _HostBuffer)
    r = device_readers.DeviceReaders.__new__(device_readers.DeviceReaders)
    r.spec, r.device, r.piece_bytes, r.threads = (n, threads), 0, piece_bytes, threads
    r._conns, r._procs, r._outstanding, r._attached, r._paths = [], [], [], None, {}
    r.lock, r._ready = threading.Lock(), False
    loops = []
    for _ in range(n):
        mine, theirs = socket.socketpair()
        t = threading.Thread(target=device_readers._serve, args=(0, Connection(theirs.detach()), threads, piece_bytes),
                             daemon=True)
        t.start()
        loops.append(t)
        r._conns.append(Connection(mine.detach()))
    return r, loops


def _stop(readers, loops):
    readers.close()
    for t in loops:
        t.join(timeout=10)
        assert not t.is_alive()


def test_the_device_ring_reads_batch_k_into_buffer_k_mod_3_two_in_flight(tmp_path, monkeypatch):
    """The run's stream and bench --pipeline read through one DeviceRing: batch k lands in
    buffer k % 3, batches k + 1 and k + 2 are submitted only once batch k - 1's buffer is let
    go (never three in flight: the third buffer is the one being computed on), and leaving waits
    for the readers, detaches and frees every buffer."""
    from ebsdxc.io import open_scan
    from ebsdxc.run.bench_pipeline import write_scan

    path = write_scan(tmp_path / "scan.h5", 50, (32, 32), chunk=7)
    source = open_scan(path)
    want = source.read(0, 50)
    readers, loops = _host_readers(monkeypatch)
    submitted = []
    real = readers.submit
    monkeypatch.setattr(readers, "submit", lambda job, buf, *a: submitted.append((job, buf)) or real(job, buf, *a))
    chunks = [(i, min(i + 8, 50)) for i in range(0, 50, 8)]  # 7 batches, the last of 2
    try:
        with device_readers.DeviceRing(readers, source, chunks, 8) as ring:
            buffers = list(ring.buffers)
            assert readers._attached == tuple(b.ptr for b in buffers) and submitted == []
            ring.start()
            assert submitted == [(0, 0), (1, 1)]
            for k, (a, b) in enumerate(chunks):
                got = ring.ready(k)
                assert got is buffers[k % 3]
                np.testing.assert_array_equal(got.view(source.dtype, (b - a, 32, 32)), want[a:b])
                assert len(readers._outstanding) <= 1  # batch k + 1 only, until k - 1 is let go
                ring.done(k - 1)
                assert [j for j, _ in submitted] == list(range(min(k + 3, len(chunks))))
        assert submitted == [(k, k % 3) for k in range(len(chunks))]
        assert readers._attached is None and all(b.freed for b in buffers) and ring.buffers == []
    finally:
        _stop(readers, loops)


def test_a_device_ring_left_mid_scan_waits_for_its_reads_and_frees(tmp_path, monkeypatch):
    """A run that fails mid-scan (an exception inside the ring) leaves no read outstanding into a
    buffer about to be freed, and the readers serve the next ring."""
    from ebsdxc.io import open_scan
    from ebsdxc.run.bench_pipeline import write_scan

    path = write_scan(tmp_path / "scan.h5", 40, (16, 16), chunk=5)
    source = open_scan(path)
    readers, loops = _host_readers(monkeypatch)
    chunks = [(i, i + 5) for i in range(0, 40, 5)]
    try:
        with pytest.raises(RuntimeError, match="the run failed"), \
                device_readers.DeviceRing(readers, source, chunks, 5) as ring:
            ring.start()
            ring.ready(0)
            ring.done(-1)  # batches 1 and 2 in flight
            raise RuntimeError("the run failed")
        assert readers._outstanding == [] and readers._attached is None
        with device_readers.DeviceRing(readers, source, chunks[:2], 5) as ring:
            ring.start()
            np.testing.assert_array_equal(ring.ready(0).view(source.dtype, (5, 16, 16)), source.read(0, 5))
            ring.ready(1)
    finally:
        _stop(readers, loops)


def test_a_reader_whose_parent_let_go_ends_quietly(monkeypatch):
    """A reader whose parent closed its connection (the set closed after another reader died)
    while it replied ends its loop, with no traceback of its own (it printed two, a broken pipe
    while saying so, on the user's terminal)."""
    readers, loops = _host_readers(monkeypatch, n=1)
    raised = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    conn = readers._conns.pop()
    conn.send(("open", []))  # the reply finds the connection closed
    conn.close()
    loops[0].join(timeout=10)
    assert not loops[0].is_alive() and raised == []


def test_a_reader_whose_parent_let_go_before_it_was_ready_ends_quietly(monkeypatch):
    """The same at start-up: a parent that let go before its reader said it was ready (the test
    above, when the reader's thread started late) leaves the reader to end with no traceback.
    Its error reply failed too, and that second broken pipe escaped the reader."""
    _host_readers(monkeypatch, n=0)  # the stand-ins for CuPy
    raised = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    mine, theirs = socket.socketpair()
    Connection(mine.detach()).close()
    loop = threading.Thread(target=device_readers._serve, args=(0, Connection(theirs.detach()), 2, 4096),
                            daemon=True)
    loop.start()
    loop.join(timeout=10)
    assert not loop.is_alive() and raised == []


def test_a_reader_that_dies_mid_scan_is_one_error_naming_the_file_and_the_set_is_closed(tmp_path, monkeypatch):
    """A reader process that ends mid-scan took its handles with it: the ring's wait says so,
    naming the file, and leaving it closes the readers (the next run starts a new set) instead
    of failing again on the dead one."""
    from ebsdxc.errors import InputError
    from ebsdxc.io import open_scan
    from ebsdxc.run.bench_pipeline import write_scan

    path = write_scan(tmp_path / "scan.h5", 40, (16, 16), chunk=5)
    source = open_scan(path)
    readers, loops = _host_readers(monkeypatch)
    chunks = [(i, i + 5) for i in range(0, 40, 5)]
    try:
        with pytest.raises(InputError, match="ended unexpectedly") as err, \
                device_readers.DeviceRing(readers, source, chunks, 5) as ring:
            ring.start()
            readers._conns[1].send(("stop",))  # the second reader ends after batches 0 and 1
            for k in range(len(chunks)):
                ring.ready(k)
                ring.done(k - 1)
        assert str(path) in str(err.value)
        assert readers._conns == [] and readers._attached is None
    finally:
        _stop(readers, loops)
