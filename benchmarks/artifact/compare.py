"""Our kernels against the paper's, algorithm by algorithm, from two CSVs of the same GPU.

    python benchmarks/artifact/compare.py ARTIFACT.csv OURS.csv [OURS2.csv ...]

ARTIFACT.csv comes from ``benchmarks/artifact/run.py``; OURS from ``ebsdxc bench`` or
``benchmarks/paper_cases.py``. For every case both measured (full mode, maps), prints the best
time of each algorithm family on each side and the ratio (artifact / ours: > 1 means ours is
faster). cuFFT is set against our fastest FFT engine.
"""

from __future__ import annotations

import csv
import math
import sys

# artifact algorithm label -> our family
FAMILY = {"overlap-wise": "overlap_wise", "warp-shuffle-base": "warp_shuffle", "split-row": "split_row",
          "multi-matrix-right-split-row": "split_row", "multi-matrix-both-split-row": "split_row",
          "grouped-overlap": "grouped_overlap", "multi-matrix-right": "multi_matrix_right",
          "multi-matrix-both": "multi_matrix_both", "warp-per-overlap": "warp_per_overlap",
          "warp-per-overlap-shared-mem": "warp_per_overlap", "cufft": "fft"}
FORMS = {"one_to_one": "one_to_one", "one_to_many": "one_to_many", "n_to_mn": "n_to_mn", "n_to_m": "n_to_m"}


def _key(form, nl, nr, h, w):
    return (form, int(nl), int(nr), int(h), int(w))


def artifact(path):
    best = {}
    with open(path) as f:
        for r in csv.DictReader(line for line in f if not line.startswith("#")):
            fam = FAMILY.get(r["algorithm"])
            if fam is None or not r["time_ms"]:
                continue
            nr = int(r["right_count"])
            if r["form"] == "n_to_mn":  # the artifact counts all right matrices; we count per left
                nr //= int(r["left_count"])
            k = (_key(r["form"], r["left_count"], nr, r["rows"], r["cols"]), fam)
            best[k] = min(best.get(k, math.inf), float(r["time_ms"]))
    return best


def ours(paths):
    best = {}
    for path in paths:
        with open(path) as f:
            for r in csv.DictReader(f):
                if r["mode"] != "full" or r["peaks"] == "1" or not r["ms"]:
                    continue
                fam = r["algorithm"] if r["engine"] == "direct" else "fft"
                k = (_key(r["form"], r["n_left"], r["n_right"], r["h"], r["w"]), fam)
                best[k] = min(best.get(k, math.inf), float(r["ms"]))
    return best


def main(argv):
    a, o = artifact(argv[0]), ours(argv[1:])
    print("| case | algorithm | artifact (ms) | ebsdxc (ms) | artifact / ebsdxc |")
    print("|---|---|---|---|---|")
    for k in sorted(set(a) & set(o), key=lambda k: (k[0][0], k[0][3], k[0][1], k[0][2], k[1])):
        (form, nl, nr, h, w), fam = k
        print(f"| {form} {nl}-{nr} {h}x{w} | {fam} | {a[k]:.4g} | {o[k]:.4g} | {a[k] / o[k]:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
