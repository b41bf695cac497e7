"""The issue's headline cases, every candidate timed in one run (CSV + a summary).

- n-to-mn: 86 reference ROIs of 96x96 against 50 patterns (4300 correlations), full mode,
  maps and peaks;
- one-to-many: one 64x64 matrix against 4000;
- a saturated n-to-m case (32 x 32 matrices of 128x128) for the FP32 FMA rate.

Usage: python benchmarks/paper_cases.py --out cases.csv [--only n_to_mn]
"""

from __future__ import annotations

import argparse

from ebsdxc import bench
from ebsdxc.engines.dispatch import Case, gpu_model

CASES = {
    "n_to_mn": Case("n_to_mn", 86, 50, 96, 96),
    "n_to_mn_peaks": Case("n_to_mn", 86, 50, 96, 96, peaks=True),
    "one_to_many": Case("one_to_many", 1, 4000, 64, 64),
    "saturated": Case("n_to_m", 32, 32, 128, 128),
    "window16_peaks": Case("n_to_mn", 86, 400, 96, 96, "window", 16, peaks=True),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*", choices=sorted(CASES))
    a = ap.parse_args()
    print(gpu_model())
    results = []
    for name in a.only or CASES:
        ms = bench.measure_case(CASES[name], skip=False)
        results += ms
        done = sorted((m for m in ms if m.ms is not None), key=lambda m: m.ms)
        print(f"\n{name}: {CASES[name]}")
        for m in done[:12]:
            print(f"  {m.choice.label:45s} {m.ms:10.4f} ms  {m.tflops:7.2f} TFLOP/s")
        for m in ms:
            if m.ms is None:
                print(f"  {m.choice.label:45s} {m.note}")
    bench.write_csv(results, a.out)


if __name__ == "__main__":
    main()
