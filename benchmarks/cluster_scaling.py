"""Scaling over GPUs with Dask: the paper's layout on 1 and 2 (or more) GPU workers.

The same scan (simulated 256x256 uint16 patterns, uncompressed HDF5, page cache warm) is
processed with ``pipelines/paper-86roi-96.toml`` (86 ROIs of 96x96, full mode, dft subpixel)
as a user runs it: ``ebsdxc.run.process(..., executor=DaskExecutor(client, ...))`` against a local Dask cluster
with one worker per GPU (dask-cuda's LocalCUDACluster when installed, else a SpecCluster
pinning one GPU per worker), the client writing the results file. For comparison, the
single-process run without Dask on one GPU. Each configuration runs twice; the second run is
timed (workers have compiled kernels and FFT plans by then). Results must be identical to the
single-process run's.

Usage::

    python benchmarks/cluster_scaling.py [--patterns 40000] [--gpus 1,2] [--rows-per-task N]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import make_scan, write_tiff  # noqa: E402

from ebsdxc.cluster import DaskExecutor, connect  # noqa: E402
from ebsdxc.config import ClusterConfig, RunConfig, load_config  # noqa: E402
from ebsdxc.io.results import read_results  # noqa: E402
from ebsdxc.run import process  # noqa: E402


def warm(path):
    """Read the scan once so the timed run reads it from the page cache (the machine's cache
    must hold it: a scan larger than the cache measures the disk instead)."""
    with open(path, "rb") as fh:
        while fh.read(64 << 20):
            pass


def timed(fn, scan):
    fn()
    warm(scan)
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patterns", type=int, default=40000)
    ap.add_argument("--cols", type=int, default=200)
    ap.add_argument("--gpus", default="1,2")
    ap.add_argument("--rows-per-task", type=int, default=None,
                    help="scan rows per task (default: ebsdxc's, about 2048 patterns)")
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "ebsdxc-scaling"))
    args = ap.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    scan = os.path.join(args.dir, "scan.h5")
    ref = os.path.join(args.dir, "ref.tif")
    make_scan(scan, args.patterns, (256, 256))
    if not os.path.exists(ref):
        import h5py

        with h5py.File(scan, "r") as f:
            write_tiff(ref, f["patterns"][0])
    rows = args.patterns // args.cols
    from ebsdxc.run.planning import ROWS_PER_TASK_PATTERNS

    per_task = args.rows_per_task or max(1, ROWS_PER_TASK_PATTERNS // args.cols)
    cfg = load_config("paper-86roi-96")[0]
    run = RunConfig(device="cuda")
    grid = f"{rows}x{args.cols}"
    import cupy

    print(f"# Dask scaling: {args.patterns} patterns 256x256 ({grid}), paper-86roi-96, "
          f"{per_task} rows ({per_task * args.cols} patterns) per task")
    gpus = [cupy.cuda.runtime.getDeviceProperties(i)["name"].decode()
            for i in range(cupy.cuda.runtime.getDeviceCount())]
    print(f"host {platform.node()}, {os.cpu_count()} cores, GPUs: {gpus}")
    try:
        import dask_cuda

        print(f"dask-cuda {dask_cuda.__version__}")
    except ImportError:
        print("dask-cuda not installed: SpecCluster with CUDA_VISIBLE_DEVICES per worker")

    base_out = os.path.join(args.dir, "single.h5")
    t_single, _ = timed(lambda: process(scan, ref=ref, config=cfg, run=run, output=base_out, overwrite=True,
                                        grid_shape=grid), scan)
    base = read_results(base_out)
    rows_out = [("single process, no Dask, 1 GPU", t_single, True)]
    for n in (int(v) for v in args.gpus.split(",")):
        ccfg = ClusterConfig(address="local", workers=n, rows_per_task=args.rows_per_task)
        client, cluster = connect(ccfg)
        try:
            client.wait_for_workers(n, timeout=120)
            out = os.path.join(args.dir, f"dask{n}.h5")
            t, _ = timed(functools.partial(process, scan, ref=ref, config=cfg, run=run, output=out, overwrite=True,
                                           grid_shape=grid, executor=DaskExecutor(client, ccfg)), scan)
        finally:
            client.close()
            cluster.close()
        got = read_results(out)
        same = (np.array_equal(got["displacement"], base["displacement"], equal_nan=True)
                and np.array_equal(got["status"], base["status"]))
        rows_out.append((f"Dask, {n} GPU worker{'s' if n > 1 else ''}", t, same))
    one = next((t for label, t, _ in rows_out if label.startswith("Dask, 1 ")), None)
    print()
    print("| configuration | wall time (s) | patterns/s | vs Dask 1 GPU | vs single process "
          "| identical to single process |")
    print("|---|---|---|---|---|---|")
    for label, t, same in rows_out:
        ratio = f"{one / t:.2f}x" if one else "-"
        print(f"| {label} | {t:.2f} | {args.patterns / t:,.0f} | {ratio} | {t_single / t:.2f}x | "
              f"{'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
