"""The runner's streaming rate on one scan, for comparing code versions and settings in one call.

    python benchmarks/stream_rate.py DIR RECIPE SIDE N

``DIR`` is the source tree to import ``ebsdxc`` from (``.``, or an unpacked older revision:
``git archive REV ebsdxc kernels | tar -x -C DIR``). The scan (``N`` uint16 patterns of SIDE x SIDE,
as ``ebsdxc bench --pipeline`` writes it) is ``/tmp/cmpSIDE-N.h5``, written once; one warm-up
run, then three, and the median of their streaming rates (patterns/s from the first batch to the
last, as ``bench --pipeline`` reports it). Environment settings (``EBSDXC_READER_PROCESSES``) apply.
"""

from __future__ import annotations

import os
import statistics
import sys


def scan_and_reference(side, n):
    """(scan path, reference TIFF path, RunConfig) of the ``n``-pattern scan of ``side`` px."""
    import tifffile

    from ebsdxc.config import RunConfig
    from ebsdxc.io import open_scan
    from ebsdxc.run.bench_pipeline import write_scan

    path = f"/tmp/cmp{side}-{n}.h5"
    if not os.path.exists(path):
        write_scan(path, n, (side, side))
    ref = f"/tmp/cmpref{side}.tif"
    with open_scan(path) as src:
        tifffile.imwrite(ref, src.read(0, 1)[0])
    return path, ref, RunConfig(device="cuda", batch=512 if side <= 512 else 128)


def streaming_rates(path, ref, cfg, run, repeats=3):
    """Streaming patterns/s of ``repeats`` runs after a warm-up run (kernels, plans, readers)."""
    from ebsdxc.progress import RecordingProgress
    from ebsdxc.run import process

    process(path, ref=ref, output="/tmp/cmpout.h5", config=cfg, run=run, overwrite=True)
    rates = []
    for _ in range(repeats):
        prog = RecordingProgress()
        process(path, ref=ref, output="/tmp/cmpout.h5", config=cfg, run=run, overwrite=True, progress=prog)
        rates.append(prog.count / prog.elapsed)
    return rates


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    vdir, recipe, side, n = argv[0], argv[1], int(argv[2]), int(argv[3])
    sys.path.insert(0, os.path.abspath(vdir))
    import ebsdxc
    from ebsdxc.config import load_config

    if not ebsdxc.__file__.startswith(os.path.abspath(vdir)):
        raise SystemExit(f"ebsdxc came from {ebsdxc.__file__}, not {vdir}")
    cfg = load_config(recipe)[0]
    path, ref, run = scan_and_reference(side, n)
    rates = streaming_rates(path, ref, cfg, run)
    tag = os.path.basename(os.path.abspath(vdir))
    print(f"{tag:12s} {os.path.basename(recipe):34s} {side} n={n}: median {statistics.median(rates):9,.0f} "
          f"patterns/s  ({', '.join(f'{r:,.0f}' for r in rates)})", flush=True)


if __name__ == "__main__":
    main()
