"""Time the correlation engines on the local GPU: the paper's Table 1, and calibration.

Every candidate of a case (each registered engine with each of its variants, e.g. the
definition-based kernels with their blocking factors: :func:`candidates`) runs on the
same random float32 inputs already on the GPU; times are medians of device time (the calls replayed from a
CUDA graph between CUDA events, so Python's launch overhead is not counted) after a
warm-up run (which also compiles), excluding FFT plans and reference spectra (made once
per reference in real use). Candidates that cannot beat the best time so far even at
the FP32 FMA peak are skipped and recorded as such.

Used by ``ebsdxc bench`` (:mod:`ebsdxc.cli`).
"""

from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass

import numpy as np

from .engines.definition import overlap_fmas
from .engines.dispatch import CalibrationTable, Case, Choice, gpu_model
from .engines.registry import ENGINES

__all__ = ["TABLE1_FORMS", "TABLE1_SIZES", "RUN_BATCH", "candidates", "measure_case", "table1_cases",
           "calibration_cases", "missing_cases", "extended_table", "run_cases", "write_csv", "read_csv", "winners",
           "plot_table1", "Measurement"]

# (label, form, lefts, rights) of the paper's Table 1.
TABLE1_FORMS = (("1-1", "one_to_one", 1, 1), ("1-2", "one_to_many", 1, 2), ("1-8", "one_to_many", 1, 8),
                ("1-32", "one_to_many", 1, 32), ("2-2", "n_to_m", 2, 2), ("8-8", "n_to_m", 8, 8),
                ("32-32", "n_to_m", 32, 32))
TABLE1_SIZES = (16, 32, 64, 128, 256, 384)
_ASSUMED_PEAK_FMA = 33e12  # FP32 FMA/s of an H200 (65 TFLOP/s): no kernel can beat this
_MIN_RUN_S = 0.05


@dataclass
class Measurement:
    case: Case
    choice: Choice
    ms: float | None  # None: skipped or failed
    note: str = ""

    @property
    def tflops(self):
        if self.ms is None:
            return None
        c = self.case
        return 2 * overlap_fmas((c.h, c.w), c.max_lag, c.pairing.n_pairs) / (self.ms * 1e-3) / 1e12


def _engines():
    """The registered engine classes in timing order: FFT-based first, whose times bound the
    definition-based candidates (skipped when even at the peak FMA rate they cannot come near)."""
    return sorted(ENGINES.values(), key=lambda cls: cls.info.method == "definition")


def _info(engine):
    cls = ENGINES.get(engine)
    return None if cls is None else cls.info


def _family(choice):
    cls = ENGINES.get(choice.engine)
    return choice.engine if cls is None else cls.family(choice.kernel)


def candidates(case):
    """The engines and variants worth timing for ``case`` (each engine's ``candidates``)."""
    return [Choice(cls.info.name, v) for cls in _engines() for v in cls.candidates(case)]


def table1_cases(sizes=TABLE1_SIZES):
    return [Case(form, nl, nr, s, s) for s in sizes for _, form, nl, nr in TABLE1_FORMS]


#: Patterns per reference subregion of the window-mode peak cases measured as runs batch them
#: (``--batch auto`` gives 1024 or more to a long scan): at 50, fixed costs per call decide, and
#: the tensor engine, 1.3x the fused engine at 512 on the paper layout at +-16, lost to it.
RUN_BATCH = 512


def calibration_cases(quick=False):
    """Table 1 (full-mode maps) plus window-mode maps and the EBSD n-to-mn peak cases (window
    mode also at :data:`RUN_BATCH` patterns)."""
    sizes = (16, 32, 64, 128) if quick else TABLE1_SIZES
    cases = table1_cases(sizes)
    for s in ((32, 64, 128) if quick else (32, 64, 96, 128, 256)):
        for r in (4, 16):
            for _, form, nl, nr in TABLE1_FORMS[::3]:  # 1-1, 1-32, 32-32
                cases.append(Case(form, nl, nr, s, s, "window", r))
    for s in ((64, 96) if quick else (48, 64, 96, 128)):
        for n in (25, 86):
            cases.append(Case("n_to_mn", n, 50, s, s, "full", peaks=True))
            for r in (8, 16):
                cases.append(Case("n_to_mn", n, 50, s, s, "window", r, peaks=True))
    if not quick:
        # Down to small ROIs: the nearest cell of 16x16 ROIs would otherwise be 48x48, where the
        # tensor engine wins, though at 16x16 it took 1.5x the fused engine's time (H200). And
        # +-24, issue 17's realistic window, for ROIs of 64 and more, whose nearest cells were at
        # +-16 before.
        for s in (16, 32, 48, 64, 96, 128):
            for n in (25, 86):
                for r in (8, 16, 24) if s >= 64 else (8, 16):
                    cases.append(Case("n_to_mn", n, RUN_BATCH, s, s, "window", r, peaks=True))
    return cases


def missing_cases(cases, table):
    """The ``cases`` that ``table`` (a :class:`~ebsdxc.engines.dispatch.CalibrationTable`, or
    None) has no measured cell for: what ``ebsdxc bench --calibrate --missing`` measures."""
    have = set() if table is None else set(table.cells())
    return [c for c in cases if c not in have]


def extended_table(table, measurements, meta):
    """``table`` with the rows of ``measurements`` added (cells it lacked), its ``meta``
    keeping the original command and listing the additions (``meta``, with the date)."""
    added = to_table(measurements, table.gpu, meta)
    doc = dict(table.meta)
    doc["added"] = [*doc.get("added", []), dict(added.meta, cases=len({m.case for m in measurements}))]
    return CalibrationTable(table.gpu, [*table.rows, *added.rows], doc)


class _Inputs:
    """Random inputs of one case on the GPU, and the callables that run each candidate."""

    def __init__(self, case, seed=0):
        import cupy as cp

        self.case = case
        rng = cp.random.default_rng(seed)
        p = case.pairing
        self.lefts = rng.standard_normal((p.na, case.h, case.w), dtype=cp.float32)
        self.rights = rng.standard_normal((p.n_rights, case.h, case.w), dtype=cp.float32)

    def runner(self, choice):
        """A callable that runs ``choice`` once on these inputs (the engine's ``benchmark``)."""
        return ENGINES[choice.engine].benchmark(self.case, self.lefts, self.rights, choice.kernel)


def _time(fn, max_reps=20, budget_s=0.3):
    """Median GPU milliseconds of one ``fn()``.

    Calls are captured into a CUDA graph (several per graph when they are short) and the graph
    is replayed between events, so the figure is device time, as a C++ caller would see it,
    not Python's launch overhead; where capture fails, each call is timed directly.
    """
    import cupy as cp

    fn()  # warm-up: compilation, plans, memory pool
    cp.cuda.Device().synchronize()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    first = cp.cuda.get_elapsed_time(start, stop)
    try:
        return _time_graph(fn, first, max_reps, budget_s)
    except Exception:  # noqa: BLE001 - any capture failure: time the calls directly
        cp.cuda.Device().synchronize()
    reps = int(min(max_reps, max(1, budget_s * 1e3 / max(first, 1e-3))))
    times = [first]
    for _ in range(reps - 1):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def _time_graph(fn, first_ms, max_reps, budget_s):
    import cupy as cp

    per_graph = int(min(50, max(1, 2.0 / max(first_ms, 1e-3))))  # >= ~2 ms of work per replay
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        try:
            for _ in range(per_graph):
                fn()
        finally:
            graph = stream.end_capture()
        graph.launch(stream)  # warm replay
        stream.synchronize()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        reps = int(min(max_reps, max(3, budget_s * 1e3 / max(first_ms * per_graph, 1e-3))))
        times = []
        for _ in range(reps):
            start.record(stream)
            graph.launch(stream)
            stop.record(stream)
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop) / per_graph)
    return float(np.median(times))


def measure_case(case, *, choices=None, progress=None, skip=True):
    """Time every candidate of ``case``: a list of :class:`Measurement`."""
    import cupy as cp

    inputs = _Inputs(case)
    choices = candidates(case) if choices is None else choices
    for cls in _engines():
        cls.precompile([c.kernel for c in choices if c.engine == cls.info.name])
    fmas = overlap_fmas((case.h, case.w), case.max_lag, case.pairing.n_pairs)
    out, best = [], math.inf
    for choice in choices:
        definition = _info(choice.engine).method == "definition"
        if skip and definition and fmas / _ASSUMED_PEAK_FMA * 1e3 > 5 * best:
            out.append(Measurement(case, choice, None, "skipped: slower than the best even at peak FMA rate"))
            continue
        try:
            ms = _time(inputs.runner(choice))
        except (ValueError, cp.cuda.memory.OutOfMemoryError) as e:
            out.append(Measurement(case, choice, None, f"failed: {e}"))
            continue
        best = min(best, ms)
        out.append(Measurement(case, choice, ms))
        if progress:
            progress(out[-1])
    inputs = None
    cp.get_default_memory_pool().free_all_blocks()
    return out


def run_cases(cases, *, progress=None):
    results = []
    for case in cases:
        results += measure_case(case, progress=progress)
    return results


_FIELDS = ("form", "n_left", "n_right", "h", "w", "mode", "max_shift", "peaks", "engine", "kernel",
           "algorithm", "ms", "tflops", "note")


def write_csv(measurements, path):
    with open(path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(_FIELDS)
        for m in measurements:
            c, k = m.case, m.choice.kernel
            wr.writerow([c.form, c.n_left, c.n_right, c.h, c.w, c.mode, c.max_shift or "", int(c.peaks),
                         m.choice.engine, k.label if k is not None else "", _family(m.choice),
                         "" if m.ms is None else f"{m.ms:.6g}",
                         "" if m.tflops is None else f"{m.tflops:.4g}", m.note])


def read_csv(path):
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            case = Case(r["form"], int(r["n_left"]), int(r["n_right"]), int(r["h"]), int(r["w"]), r["mode"],
                        int(r["max_shift"]) if r["max_shift"] else None, bool(int(r["peaks"])))
            choice = Choice.parse(r["engine"], r["kernel"])
            out.append(Measurement(case, choice, float(r["ms"]) if r["ms"] else None, r["note"]))
    return out


def to_table(measurements, gpu=None, meta=None):
    rows = [CalibrationTable.row(m.case, m.choice, m.ms) for m in measurements if m.ms is not None]
    return CalibrationTable(gpu or gpu_model(), rows, dict(meta or {}, created=time.strftime("%Y-%m-%d")))


def _is(engine, what):
    info = _info(engine)
    return info is not None and (info.baseline if what == "baseline" else info.method == what)


def winners(measurements):
    """{case: (fastest Measurement, fastest definition-based Measurement or None, time of the
    baseline engine (``fft``) or None)}."""
    by = {}
    for m in measurements:
        if m.ms is not None:
            by.setdefault(m.case, []).append(m)
    out = {}
    for case, ms in by.items():
        best = min(ms, key=lambda m: m.ms)
        direct = [m for m in ms if _is(m.choice.engine, "definition")]
        fft = [m.ms for m in ms if _is(m.choice.engine, "baseline")]
        out[case] = (best, min(direct, key=lambda m: m.ms) if direct else None, fft[0] if fft else None)
    return out


def table1_markdown(measurements):
    """Winner per cell (rows: forms, columns: sizes), the paper's Table 1 layout."""
    win = winners(measurements)
    base = next((name for name, cls in ENGINES.items() if cls.info.baseline), "baseline")
    sizes = sorted({c.h for c in win if not c.peaks and c.mode == "full"})
    lines = ["| form | " + " | ".join(str(s) for s in sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
    for label, form, nl, nr in TABLE1_FORMS:
        cells = []
        for s in sizes:
            w = win.get(Case(form, nl, nr, s, s))
            if w is None:
                cells.append("-")
                continue
            best, _, fft = w
            name = best.choice.kernel.label if best.choice.kernel is not None else best.choice.engine
            cells.append(f"{name} {best.ms:.3g} ms" + (f" ({base} {fft:.3g})"
                                                       if not _is(best.choice.engine, "baseline") and fft else ""))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_table1(measurements, path):
    """PNG: time against matrix size per Table-1 form, best of each algorithm family."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = [f for cls in _engines() for f in cls.families()]
    fig, axes = plt.subplots(2, 4, figsize=(16, 7.5), sharex=True)
    for ax, (label, form, nl, nr) in zip(axes.flat, TABLE1_FORMS):
        fam = {}
        for m in measurements:
            c = m.case
            if m.ms is None or c.peaks or c.mode != "full" or (c.form, c.n_left, c.n_right) != (form, nl, nr):
                continue
            key = _family(m.choice)
            if key not in order:  # an engine this installation lacks: plotted last
                order.append(key)
            fam.setdefault(key, {})
            fam[key][c.h] = min(m.ms, fam[key].get(c.h, math.inf))
        for key in sorted(fam, key=order.index):
            xs = sorted(fam[key])
            # whole engines as lines with markers, variants (kernels) as thin dotted lines
            ax.loglog(xs, [fam[key][x] for x in xs], "o-" if key in ENGINES else ".-", label=key, ms=4,
                      color=plt.get_cmap("tab10")(order.index(key) % 10))
        sizes = sorted({x for f in fam.values() for x in f})
        ax.set_xticks(sizes, [str(x) for x in sizes])
        ax.minorticks_off()
        ax.set_title(f"{label} ({form.replace('_', '-')})")
        ax.set_xlabel("matrix size (px)")
        ax.set_ylabel("time (ms)")
        ax.grid(True, which="both", alpha=0.3)
    axes.flat[-1].axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for ax in axes.flat[1:-1]:
        for h_, l_ in zip(*ax.get_legend_handles_labels()):
            if l_ not in labels:
                handles.append(h_)
                labels.append(l_)
    axes.flat[-1].legend(handles, labels, loc="center")
    fig.suptitle("ebsdxc bench: full-mode cross-correlation, best blocking per algorithm")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
