"""Does the page size of the host batch change reading it from the page cache and copying it?

Reads an HDF5 scan (written here once) batch by batch into four kinds of host buffer -- CuPy's
pinned memory (4 KB pages), anonymous memory with MADV_HUGEPAGE registered with
cudaHostRegister, 4 KB pages registered, plain NumPy memory -- alone, and while another thread
copies a second buffer of the same kind to the device without pause; prints patterns/s of each.

    python benchmarks/pinned_pages.py [SIDE] [PATTERNS]    (512 10000; 1024 2500)
"""

import mmap
import os
import sys
import threading
import time

import cupy as cp
import cupyx
import numpy as np

from ebsdxc import io as scan_io
from ebsdxc.run.bench_pipeline import write_scan

KINDS = ("cupy pinned", "THP madvised + registered", "4K pages + registered", "numpy empty (unpinned)")


def _text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        return str(e)


def _huge_kb():
    return sum(int(line.split()[1]) for line in _text("/proc/self/smaps").splitlines()
               if line.startswith("AnonHugePages"))


def _anonymous(shape, advice, keep):
    m = mmap.mmap(-1, int(np.prod(shape)) * 2, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(advice)
    keep.append(m)
    a = np.frombuffer(m, dtype=np.uint16).reshape(shape)
    a[...] = 1  # fault the pages in (huge ones where the advice holds)
    cp.cuda.runtime.hostRegister(a.ctypes.data, a.nbytes, 0)
    return a


def make(kind, shape, keep):
    if kind == "THP madvised + registered":
        return _anonymous(shape, mmap.MADV_HUGEPAGE, keep)
    if kind == "4K pages + registered":
        return _anonymous(shape, mmap.MADV_NOHUGEPAGE, keep)
    a = cupyx.empty_pinned(shape, dtype=np.uint16) if kind == "cupy pinned" else np.empty(shape, np.uint16)
    a[...] = 1
    return a


def read_all(src, buf, n, batch):
    t = time.perf_counter()
    for i in range(0, n, batch):
        k = min(batch, n - i)
        src.read_into(i, i + k, buf[:k])
    return n / (time.perf_counter() - t)


def copies(dev, buf, halt, count):
    s = cp.cuda.Stream(non_blocking=True)
    while not halt.is_set():
        cp.cuda.runtime.memcpyAsync(dev.data.ptr, buf.ctypes.data, buf.nbytes, 1, s.ptr)
        s.synchronize()
        count[0] += 1


def main():
    for f in ("enabled", "defrag"):
        print("THP", f, _text(f"/sys/kernel/mm/transparent_hugepage/{f}").strip())
    side = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    batch = 512 if side <= 512 else 128
    path = f"/tmp/thp-{side}-{n}.h5"
    if not os.path.exists(path):
        write_scan(path, n, (side, side))
    src = scan_io.open_scan(path)
    shape = (batch, side, side)
    dev = cp.empty(shape, np.uint16)
    keep = []
    read_all(src, make("numpy empty (unpinned)", shape, keep), n, batch)  # into the page cache
    bufs = {}
    for k in KINDS:
        h0 = _huge_kb()
        bufs[k] = (make(k, shape, keep), make(k, shape, keep))
        print(f"{k}: AnonHugePages +{(_huge_kb() - h0) // 1024} MB of {2 * bufs[k][0].nbytes >> 20} MB")
    for rep in range(3):
        for k in KINDS:
            a, b = bufs[k]
            alone = read_all(src, a, n, batch)
            s = cp.cuda.Stream(non_blocking=True)
            t = time.perf_counter()
            for _ in range(10):
                cp.cuda.runtime.memcpyAsync(dev.data.ptr, b.ctypes.data, b.nbytes, 1, s.ptr)
            s.synchronize()
            h2d = 10 * batch / (time.perf_counter() - t)
            halt, count = threading.Event(), [0]
            th = threading.Thread(target=copies, args=(dev, b, halt, count))
            th.start()
            time.sleep(0.2)
            t, c0 = time.perf_counter(), count[0]
            both = read_all(src, a, n, batch)
            dt, c1 = time.perf_counter() - t, count[0]
            halt.set()
            th.join()
            print(f"rep {rep} {k:28s} read {alone:9,.0f}  h2d {h2d:9,.0f}  read while copying {both:9,.0f}  "
                  f"(copies meanwhile {(c1 - c0) * batch / dt:9,.0f}) patterns/s", flush=True)


if __name__ == "__main__":
    main()
