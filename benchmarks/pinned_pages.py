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

for f in ("enabled", "defrag"):
    try:
        print("THP", f, open(f"/sys/kernel/mm/transparent_hugepage/{f}").read().strip())
    except OSError as e:
        print("THP", f, e)
print("hugepages", [l for l in open("/proc/meminfo") if "Huge" in l])
side = int(sys.argv[1]) if len(sys.argv) > 1 else 512
n = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
batch = 512 if side <= 512 else 128
path = f"/tmp/thp-{side}-{n}.h5"
if not os.path.exists(path):
    write_scan(path, n, (side, side))
src = scan_io.open_scan(path)
shape = (batch, side, side)
nbytes = int(np.prod(shape)) * 2

def anon_huge():
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE)
    a = np.frombuffer(m, dtype=np.uint16).reshape(shape)
    a[...] = 1
    return a, m

def anon_small():
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_NOHUGEPAGE)
    a = np.frombuffer(m, dtype=np.uint16).reshape(shape)
    a[...] = 1
    return a, m

def register(a):
    cp.cuda.runtime.hostRegister(a.ctypes.data, a.nbytes, 0)
    return a

def huge_kb():
    return sum(int(l.split()[1]) for l in open("/proc/self/smaps") if l.startswith("AnonHugePages"))

keep = []
def make(kind):
    if kind == "cupy pinned":
        a = cupyx.empty_pinned(shape, dtype=np.uint16); a[...] = 1; return a
    if kind == "THP madvised + registered":
        a, m = anon_huge(); keep.append(m); return register(a)
    if kind == "4K pages + registered":
        a, m = anon_small(); keep.append(m); return register(a)
    if kind == "numpy empty (unpinned)":
        a = np.empty(shape, np.uint16); a[...] = 1; return a

def read_all(buf):
    t = time.perf_counter()
    for i in range(0, n, batch):
        k = min(batch, n - i)
        src.read_into(i, i + k, buf[:k])
    return n / (time.perf_counter() - t)

dev = cp.empty(shape, np.uint16)
def copier(buf, halt, count):
    s = cp.cuda.Stream(non_blocking=True)
    while not halt.is_set():
        cp.cuda.runtime.memcpyAsync(dev.data.ptr, buf.ctypes.data, nbytes, 1, s.ptr)
        s.synchronize(); count[0] += 1

read_all(make("numpy empty (unpinned)"))  # page cache warm
kinds = ["cupy pinned", "THP madvised + registered", "4K pages + registered", "numpy empty (unpinned)"]
bufs = {}
for k in kinds:
    h0 = huge_kb(); bufs[k] = (make(k), make(k)); print(f"{k}: AnonHugePages +{(huge_kb()-h0)//1024} MB of {2*nbytes>>20} MB")
for rep in range(3):
    for k in kinds:
        a, b = bufs[k]
        alone = read_all(a)
        s = cp.cuda.Stream(non_blocking=True)
        t = time.perf_counter()
        for _ in range(10):
            cp.cuda.runtime.memcpyAsync(dev.data.ptr, b.ctypes.data, nbytes, 1, s.ptr)
        s.synchronize()
        h2d = 10 * batch / (time.perf_counter() - t)
        halt = threading.Event(); cnt = [0]
        th = threading.Thread(target=copier, args=(b, halt, cnt)); th.start(); time.sleep(0.2)
        t = time.perf_counter(); c0 = cnt[0]
        both = read_all(a)
        dt = time.perf_counter() - t; c1 = cnt[0]
        halt.set(); th.join()
        print(f"rep {rep} {k:28s} read {alone:9,.0f}  h2d {h2d:9,.0f}  read while copying {both:9,.0f}  (copies meanwhile {(c1-c0)*batch/dt:9,.0f}) patterns/s", flush=True)
