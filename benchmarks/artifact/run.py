#!/usr/bin/env python3
"""Build and time the paper's own CUDA kernels (asmelko/jpdc23-artifact) on this GPU.

    python3 benchmarks/artifact/run.py --src .artifact/cross-corr --out artifact.csv [--quick]
                                       [--cases PATTERNS] [--budget-s 100]

Builds the driver with build.sh (incremental: instant when build.sh already ran with the same
build folder), then runs every selected case in one driver process and writes one CSV:

    form,left_count,right_count,rows,cols,algorithm,params,time_ms

plus comment lines starting with '#' (device, skipped configurations, errors). Times are kernel
times in ms (CUDA events, median after a warm-up); see README.md. Only the standard library is
used. If the driver dies (a CUDA error that leaves the context unusable, a crash), the run goes
on from the next algorithm in a fresh process.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import os
import subprocess
import sys
import threading
import time
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = "form,left_count,right_count,rows,cols,algorithm,params,time_ms"

# Table 1 forms: "left-right" counts -> the artifact's form names.
TABLE1_FORMS = [
    ("1-1", "one_to_one", 1, 1),
    ("1-2", "one_to_many", 1, 2),
    ("1-8", "one_to_many", 1, 8),
    ("1-32", "one_to_many", 1, 32),
    ("2-2", "n_to_m", 2, 2),
    ("8-8", "n_to_m", 8, 8),
    ("32-32", "n_to_m", 32, 32),
]
TABLE1_SIZES = [16, 32, 64, 128, 256, 384]


def all_cases():
    """(name, groups, form, rows, cols, left, right) in run order: the two headline cases, then
    Table 1 by increasing size, so a run cut short by its time budget loses the largest cells."""
    cases = [
        # n-to-mn: 86 left matrices, 50 right matrices per left (the artifact counts 86*50 = 4300).
        ("n_to_mn-96x96-86x4300", ("headline",), "n_to_mn", 96, 96, 86, 4300),
        ("one_to_many-64x64-1x4000", ("headline",), "one_to_many", 64, 64, 1, 4000),
    ]
    for n in TABLE1_SIZES:
        for tag, form, left, right in TABLE1_FORMS:
            cases.append((f"t1-{tag}-{n}", ("table1",), form, n, n, left, right))
    return cases


def select(cases, patterns):
    if not patterns:
        return cases
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    out = []
    for c in cases:
        name, groups = c[0], c[1]
        for p in pats:
            if p in groups or p == c[2]:
                out.append(c)
                break
            q = p if any(ch in p for ch in "*?[") else f"*{p}*"
            if fnmatch.fnmatchcase(name, q):
                out.append(c)
                break
    return out


def build(src, build_dir):
    t = time.time()
    r = subprocess.run(["bash", os.path.join(HERE, "build.sh"), src, build_dir])
    if r.returncode != 0:
        sys.exit(f"run.py: build.sh failed (exit {r.returncode})")
    print(f"run.py: build step {time.time() - t:.1f} s", file=sys.stderr, flush=True)


def run_driver(exe, cases, args, deadline, out):
    """Runs the driver over `cases`, restarting after the last begun algorithm if it dies.
    Writes result and comment lines to `out` as they come. Returns the list of result rows."""
    base = [exe]
    for c in cases:
        base += ["--case", f"{c[2]},{c[3]},{c[4]},{c[5]},{c[6]}"]
    base += ["--deadline", f"{deadline:.3f}", "--max-run-ms", str(args.max_run_ms),
             "--alg-budget-s", str(args.alg_budget_s)]
    if args.quick:
        base.append("--quick")
    if args.dry_run:
        base.append("--dry-run")
    if args.algos:
        base += ["--algos", args.algos]

    rows = []
    resume = None
    restarts = 0
    while True:
        cmd = base + (["--resume-after", resume] if resume else [])
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1)
        # Watchdog: a hung kernel must not hold the run past its budget.
        watchdog = threading.Timer(max(1.0, deadline + args.grace_s - time.time()), proc.kill)
        watchdog.daemon = True
        watchdog.start()
        last_begin = None
        try:
            for line in proc.stdout:
                line = line.rstrip("\n")
                if not line:
                    continue
                if line.startswith("# begin,"):
                    # "# begin,form,left,right,rows,cols,alg" -> "form,left,right,rows,cols|alg"
                    parts = line[len("# begin,"):].split(",")
                    last_begin = ",".join(parts[:5]) + "|" + parts[5]
                    continue
                out.write(line + "\n")
                out.flush()
                if line.startswith("#"):
                    if not line.startswith("# plan"):
                        print(line, file=sys.stderr, flush=True)
                    continue
                rows.append(line)
                print(line, flush=True)
        finally:
            rc = proc.wait()
            killed = watchdog.finished.is_set() and rc < 0
            watchdog.cancel()
        if rc == 0 and not killed:
            return rows
        why = "killed after the time budget" if killed else f"exited with status {rc}"
        msg = f"# error,driver {why}; last algorithm begun: {last_begin or '-'}"
        out.write(msg + "\n")
        out.flush()
        print(msg, file=sys.stderr, flush=True)
        restarts += 1
        if killed or time.time() > deadline or restarts > 30 or last_begin is None:
            return rows
        resume = last_begin


def summary(rows):
    best = OrderedDict()
    for r in csv.reader(rows):
        if len(r) != 8:
            continue
        key = tuple(r[:5])
        try:
            t = float(r[7])
        except ValueError:
            continue
        d = best.setdefault(key, OrderedDict())
        if r[5] not in d or t < d[r[5]][0]:
            d[r[5]] = (t, r[6])
    lines = []
    for key, d in best.items():
        form, left, right, nr, nc = key
        lines.append(f"{form} {left}x{right} {nr}x{nc}: " + ", ".join(f"{a} {t:.4g}" for a, (t, _) in d.items()))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", required=True, help="the artifact's repo/cross-corr folder (or its src/)")
    ap.add_argument("--out", required=True, help="CSV file to write")
    ap.add_argument("--quick", action="store_true", help="only the best-known configuration of each algorithm")
    ap.add_argument("--cases", default="", help="comma-separated: group (headline, table1), form, or name pattern "
                    "(substring or glob, e.g. 't1-*-384', 't1-32-32'); see --list")
    ap.add_argument("--list", action="store_true", help="list the case names and exit")
    ap.add_argument("--build-dir", default=os.environ.get("ARTIFACT_BUILD_DIR", "/tmp/artbuild"))
    ap.add_argument("--no-build", action="store_true", help="use the driver already in --build-dir")
    ap.add_argument("--budget-s", type=float, default=100.0,
                    help="wall-clock budget for running the cases (build excluded); later cases are skipped "
                    "with a comment line once it is used up")
    ap.add_argument("--grace-s", type=float, default=45.0, help="kill the driver this long after the budget")
    ap.add_argument("--max-run-ms", type=float, default=2000.0,
                    help="skip configurations predicted or measured to take longer than this per run")
    ap.add_argument("--alg-budget-s", type=float, default=2.0, help="time one algorithm's sweep may use per case")
    ap.add_argument("--algos", default="", help="comma-separated algorithm names to run (default all)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan with predicted times; no GPU needed")
    args = ap.parse_args()

    cases = select(all_cases(), args.cases)
    if args.list:
        for c in all_cases():
            print(f"{c[0]:28s} {','.join(c[1]):9s} {c[2]} rows={c[3]} cols={c[4]} left={c[5]} right={c[6]}")
        return
    if not cases:
        sys.exit(f"run.py: no case matches {args.cases!r} (see --list)")

    t0 = time.time()
    if not args.no_build:
        build(args.src, args.build_dir)
    exe = os.path.join(args.build_dir, "artifact_driver")
    if not os.path.exists(exe):
        sys.exit(f"run.py: {exe} missing (run build.sh first or drop --no-build)")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    deadline = time.time() + args.budget_s
    with open(args.out, "w") as out:
        out.write(HEADER + "\n")
        out.write(f"# artifact asmelko/jpdc23-artifact from {os.path.abspath(args.src)}; cases: "
                  f"{' '.join(c[0] for c in cases)}; quick={int(args.quick)}\n")
        out.flush()
        rows = run_driver(exe, cases, args, deadline, out)
        out.write(f"# total wall time {time.time() - t0:.1f} s (build included)\n")
    print(f"run.py: {len(rows)} result rows in {args.out}; {time.time() - t0:.1f} s in all", file=sys.stderr)
    if rows:
        print("best time (ms) per algorithm:\n" + summary(rows), file=sys.stderr)
    elif not args.dry_run:
        sys.exit(1)


if __name__ == "__main__":
    main()
