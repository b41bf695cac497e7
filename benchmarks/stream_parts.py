"""Which part of the runner's streaming bounds it: stages replaced by no-ops in turn.

    python benchmarks/stream_parts.py RECIPE SIDE N

On the scan ``/tmp/cmpSIDE-N.h5`` (written once, as ``ebsdxc bench --pipeline`` writes it), the
streaming rate (median of 3 after a warm-up) with everything, without correlation
(``Pipeline.match`` returns a ready result), without writing results, without reading (the
pinned batches keep what they hold), and with transfers only. Two rounds.
"""

from __future__ import annotations

import os
import statistics
import sys

MODES = [("everything", 0, 0, 0), ("no correlation", 1, 0, 0), ("no writing", 0, 1, 0), ("no reading", 0, 0, 1),
         ("no correlation, no writing", 1, 1, 0), ("only transfers", 1, 1, 1)]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    import cupy as cp
    from stream_rate import scan_and_reference, streaming_rates  # this folder's: the same scan and runs

    from ebsdxc.config import load_config
    from ebsdxc.engines import PeakResult
    from ebsdxc.io import direct
    from ebsdxc.io.results import ResultsWriter
    from ebsdxc.run.pipeline import Pipeline

    recipe, side, n = argv[0], int(argv[1]), int(argv[2])
    cfg = load_config(recipe)[0]
    path, ref, run = scan_and_reference(side, n)
    real = (Pipeline.match, ResultsWriter.write, direct.DirectReader.read)
    ready = {}

    def no_match(self, patterns, **kw):
        b, m = patterns.shape[0], self.layout.n
        if b not in ready:
            ready[b] = PeakResult(cp.zeros((b, m, 2), cp.float32), cp.ones((b, m), cp.float32),
                                  cp.zeros((b, m), cp.uint8))
        return ready[b]

    for _ in range(2):
        for name, no_corr, no_write, no_read in MODES:
            Pipeline.match = no_match if no_corr else real[0]
            ResultsWriter.write = (lambda self, *a, **k: None) if no_write else real[1]
            direct.DirectReader.read = (lambda self, a, b, out: None) if no_read else real[2]
            rates = streaming_rates(path, ref, cfg, run)
            print(f"{name:28s} {os.path.basename(recipe):34s} {side} n={n}: median {statistics.median(rates):9,.0f} "
                  f"patterns/s  ({', '.join(f'{r:,.0f}' for r in rates)})", flush=True)


if __name__ == "__main__":
    main()
