"""Reading throughput: patterns from HDF5 (page cache) into pinned host buffers.

Two files of the same simulated patterns (Poisson noise on a smooth pattern, so gzip
compresses them as much as it does real ones): uncompressed contiguous, and gzip-chunked
(16 patterns per chunk, deflate level 4, optionally with the shuffle filter). Both are read
once to put them in the page cache, then read whole, in the runner's batch size, into
pinned buffers (``cupyx.empty_pinned`` when CuPy sees a GPU, else ordinary memory) by

- ``ebsdxc``: :class:`ebsdxc.io.hdf5.HDF5Source.read_into`, which reads through
  :mod:`ebsdxc.io.direct` (positioned reads; chunks inflated on all cores);
- ``h5py``: the same source with ``EBSDXC_DIRECT_READ=0``, i.e. ``Dataset.read_direct``,
  what a reader built on h5py alone does (the competitor).

Throughput is bytes of (decompressed) patterns per second. The gzip file is written with
chunks compressed on all cores and stored with ``write_direct_chunk`` (h5py would compress
on one core).

Usage::

    python benchmarks/read_throughput.py [--dir DIR] [--patterns 20000] [--size 256] [--batch 1024]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np

from ebsdxc.io import direct, open_scan


def _patterns(n_unique, size, seed=0):
    """``n_unique`` noisy patterns of a smooth band-like image, uint16 around 1000 counts."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size] / size
    base = 1000 * (1.2 + 0.3 * np.cos(40 * (x + 0.3 * y)) + 0.2 * np.cos(31 * (y - 0.5 * x))
                   - 0.4 * ((x - 0.5) ** 2 + (y - 0.4) ** 2))
    return rng.poisson(base, (n_unique, size, size)).astype(np.uint16)


def _write(path, kind, n, size, chunk=16, level=4, shuffle=False):
    unique = _patterns(64, size)
    with h5py.File(path, "w") as f:
        if kind == "plain":
            ds = f.create_dataset("patterns", (n, size, size), np.uint16)
            for a in range(0, n, 1024):
                b = min(a + 1024, n)
                ds[a:b] = unique[np.arange(a, b) % 64]
            return
        ds = f.create_dataset("patterns", (n, size, size), np.uint16, chunks=(chunk, size, size),
                              compression="gzip", compression_opts=level, shuffle=shuffle)

        def pack(a):
            block = np.zeros((chunk, size, size), np.uint16)
            m = min(chunk, n - a)
            block[:m] = unique[np.arange(a, a + m) % 64]
            raw = block.tobytes()
            if shuffle:
                raw = np.frombuffer(raw, np.uint8).reshape(-1, 2).T.tobytes()
            return a, zlib.compress(raw, level)

        with ThreadPoolExecutor(direct.threads()) as pool:
            for a, blob in pool.map(pack, range(0, n, chunk)):
                ds.id.write_direct_chunk((a, 0, 0), blob)


def _warm(path):
    with open(path, "rb") as fh:
        while fh.read(64 << 20):
            pass


def _buffer(shape, dtype):
    try:
        import cupy
        import cupyx

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return cupyx.empty_pinned(shape, dtype=dtype), "pinned"
    except Exception:  # no CuPy or no GPU: pageable memory is what the CPU path uses too
        pass
    return np.empty(shape, dtype=dtype), "pageable"


def _time_read(path, batch, use_direct, repeats):
    os.environ["EBSDXC_DIRECT_READ"] = "1" if use_direct else "0"
    try:
        with open_scan(path) as src:
            n = src.n_patterns
            buf, kind = _buffer((batch, *src.pattern_shape), src.dtype)
            best = np.inf
            for _ in range(repeats):
                t0 = time.perf_counter()
                for a in range(0, n, batch):
                    b = min(a + batch, n)
                    src.read_into(a, b, buf[: b - a])
                best = min(best, time.perf_counter() - t0)
            check = src.read(n - 1, n)[0]
            nbytes = n * src.nbytes_per_pattern
    finally:
        os.environ.pop("EBSDXC_DIRECT_READ", None)
    return nbytes / best / 1e9, best, kind, check


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "ebsdxc-read-bench"))
    ap.add_argument("--patterns", type=int, default=20000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", default="", help="comma list of EBSDXC_READ_THREADS for the gzip file, "
                                                  "e.g. 1,4,16 (default: all cores only)")
    args = ap.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    files = {"uncompressed, contiguous": ("plain", {}),
             "gzip 4, 16 patterns/chunk": ("gzip", {}),
             "gzip 4 + shuffle, 16 patterns/chunk": ("gzip", {"shuffle": True})}
    print(f"# read throughput: {args.patterns} patterns of {args.size}x{args.size} uint16, batch {args.batch}")
    print(f"host: {platform.node()}, {os.cpu_count()} cores, read threads {direct.threads()}, "
          f"python {sys.version.split()[0]}, h5py {h5py.__version__}, HDF5 {h5py.version.hdf5_version}")
    rows = []
    for i, (label, (kind, opts)) in enumerate(files.items()):
        path = os.path.join(args.dir, f"patterns-{i}.h5")
        if not os.path.exists(path):
            t0 = time.perf_counter()
            _write(path, kind, args.patterns, args.size, **opts)
            print(f"wrote {path} ({os.path.getsize(path) / 1e9:.2f} GB) in {time.perf_counter() - t0:.1f} s")
        _warm(path)
        size_gb = os.path.getsize(path) / 1e9
        ours = _time_read(path, args.batch, True, args.repeats)
        theirs = _time_read(path, args.batch, False, max(1, args.repeats - 2))
        if not np.array_equal(ours[3], theirs[3]):
            raise SystemExit(f"{path}: ebsdxc and h5py read different patterns")
        rows.append((label, size_gb, ours, theirs))
        if kind == "gzip" and args.threads:
            for t in (int(v) for v in args.threads.split(",")):
                os.environ["EBSDXC_READ_THREADS"] = str(t)
                direct._pool = None  # a pool of the new size
                r = _time_read(path, args.batch, True, args.repeats)
                rows.append((f"{label}, {t} threads", size_gb, r, None))
            os.environ.pop("EBSDXC_READ_THREADS")
            direct._pool = None
    print()
    print("| file | on disk (GB) | buffers | ebsdxc (GB/s) | h5py read_direct (GB/s) | ratio |")
    print("|---|---|---|---|---|---|")
    for label, size_gb, ours, theirs in rows:
        other = f"{theirs[0]:.2f}" if theirs else "-"
        ratio = f"{ours[0] / theirs[0]:.1f}x" if theirs else "-"
        print(f"| {label} | {size_gb:.2f} | {ours[2]} | {ours[0]:.2f} | {other} | {ratio} |")


if __name__ == "__main__":
    main()
