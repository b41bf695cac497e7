"""Time the correlation engines on the local GPU: the paper's Table 1, and calibration.

Every candidate of a case (the ``fft`` and ``fused`` engines and the definition-based
kernels with their blocking factors, :func:`candidates`) runs on the same random float32
inputs already on the GPU; times are medians of device time (the calls replayed from a
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

from .dispatch import CalibrationTable, Case, Choice, applies, gpu_model
from .engines.definition import (
    KernelChoice,
    correlate_maps,
    overlap_fmas,
    precompile,
    segment_width,
)

__all__ = ["TABLE1_FORMS", "TABLE1_SIZES", "candidates", "measure_case", "table1_cases",
           "calibration_cases", "run_cases", "write_csv", "read_csv", "winners", "plot_table1",
           "Measurement"]

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


def candidates(case):
    """The engines and kernels worth timing for ``case``."""
    out = [Choice("fft")]
    if applies(Choice("fused"), case) and case.form != "n_to_m":
        out.append(Choice("fused"))
    W = segment_width(case.max_lag)
    per_left = case.n_right
    ks = [KernelChoice("overlap_wise"), KernelChoice("warp_shuffle", width=W)]
    if case.mode == "window" and W > 8:  # narrower segments waste fewer lanes on short rows
        ks += [KernelChoice("grouped_overlap", width=W // 2, g=4, kr=k) for k in (1, 8) if k <= per_left]
    if case.h * case.w <= 64 * 64:
        ks.append(KernelChoice("warp_per_overlap"))
    krs = [k for k in (2, 4, 8) if k <= per_left]
    ks += [KernelChoice("multi_matrix_right", width=W, kr=k) for k in krs]
    if case.form == "n_to_m":
        ks += [KernelChoice("multi_matrix_both", width=W, kl=kl, kr=kr)
               for kl, kr in ((2, 2), (4, 4), (4, 8), (8, 8)) if kl <= case.n_left and kr <= per_left]
    rows = 2 * case.max_lag[0] + 1
    for g in (4, 8):
        if g <= rows:
            for kr in [1] + [k for k in (4, 8) if k <= per_left]:
                ks.append(KernelChoice("grouped_overlap", width=W, g=g, kr=kr))
            if case.form == "n_to_m" and case.n_left >= 4 and per_left >= 4:
                ks.append(KernelChoice("grouped_overlap", width=W, g=g, kl=4, kr=4 if g == 4 else 2))
    if case.pairing.n_pairs <= 8 and case.h >= 64:
        ks += [KernelChoice("split_row", width=W, splits=s, g=4) for s in (8, 32) if 4 <= rows]
    out += [Choice("direct", k) for k in ks if k.fits(case.pairing)]
    return out


def table1_cases(sizes=TABLE1_SIZES):
    return [Case(form, nl, nr, s, s) for s in sizes for _, form, nl, nr in TABLE1_FORMS]


def calibration_cases(quick=False):
    """Table 1 (full-mode maps) plus window-mode maps and the EBSD n-to-mn peak cases."""
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
    return cases


class _Inputs:
    """Random inputs of one case on the GPU, and the callables that run each candidate."""

    def __init__(self, case, seed=0):
        import cupy as cp

        self.case = case
        rng = cp.random.default_rng(seed)
        p = case.pairing
        self.lefts = rng.standard_normal((p.na, case.h, case.w), dtype=cp.float32)
        self.rights = rng.standard_normal((p.n_rights, case.h, case.w), dtype=cp.float32)
        self._out = None

    def runner(self, choice):
        import cupy as cp

        c = self.case
        if choice.engine == "direct":
            shape = (c.pairing.n_pairs, 2 * c.max_lag[0] + 1, 2 * c.max_lag[1] + 1)
            if c.peaks:
                return self._engine_runner(choice)
            if self._out is None or self._out.shape != shape:
                self._out = cp.empty(shape, dtype=cp.float32)
            return lambda: correlate_maps(self.lefts, self.rights, c.pairing, c.max_lag, choice.kernel,
                                          out=self._out)
        if c.peaks or choice.engine == "fused":
            return self._engine_runner(choice)
        return self._fft_maps_runner()

    def _engine_runner(self, choice):
        from .backend import select_backend
        from .engines import EngineConfig, make_engine

        c = self.case
        if c.form == "n_to_m":
            raise ValueError("engines run the n-to-mn form")
        cfg = EngineConfig(mode=c.mode, max_shift=c.max_shift, subpixel="quadratic", compensate=False,
                           kernel=choice.kernel.label if choice.kernel else "auto")
        eng = make_engine(choice.engine, select_backend("cuda"), (c.h, c.w), cfg)
        xp = eng.xp
        e = (self.lefts.astype(xp.float64) ** 2).sum(axis=(1, 2)).astype(xp.float32)
        eng.set_reference(self.lefts, e, xp.zeros(c.n_left, dtype=xp.uint8))
        B, n = c.n_right, c.n_left
        Ny, Nx = eng.input_shape
        tiles = xp.zeros((B, n, Ny, Nx), dtype=xp.float32)
        tiles[..., :c.h, :c.w] = self.rights.reshape(B, n, c.h, c.w)
        if c.peaks:
            return lambda: eng._locate(tiles)
        return lambda: eng.correlation_maps(tiles)

    def _fft_maps_runner(self):
        import cupy as cp

        from .engines.fft import fft_shape

        c = self.case
        s = fft_shape((c.h, c.w), c.max_lag, c.mode)
        lspec = cp.conj(cp.fft.rfft2(self.lefts, s=s))
        if c.form == "n_to_m":
            def run():
                spec = cp.fft.rfft2(self.rights, s=s)
                return cp.fft.irfft2(lspec[:, None] * spec[None], s=s)
        else:
            rights = self.rights.reshape(c.n_right, c.n_left, c.h, c.w)

            def run():
                spec = cp.fft.rfft2(rights, s=s)
                spec *= lspec[None]
                return cp.fft.irfft2(spec, s=s)
        return run


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
    precompile([c.kernel for c in choices if c.engine == "direct"])
    fmas = overlap_fmas((case.h, case.w), case.max_lag, case.pairing.n_pairs)
    out, best = [], math.inf
    for choice in choices:
        if skip and choice.engine == "direct" and fmas / _ASSUMED_PEAK_FMA * 1e3 > 5 * best:
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
                         m.choice.engine, k.label if k else "", k.algorithm if k else m.choice.engine,
                         "" if m.ms is None else f"{m.ms:.6g}",
                         "" if m.tflops is None else f"{m.tflops:.4g}", m.note])


def read_csv(path):
    from .engines.definition import parse_kernel

    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            case = Case(r["form"], int(r["n_left"]), int(r["n_right"]), int(r["h"]), int(r["w"]), r["mode"],
                        int(r["max_shift"]) if r["max_shift"] else None, bool(int(r["peaks"])))
            choice = Choice(r["engine"], parse_kernel(r["kernel"]) if r["kernel"] else None)
            out.append(Measurement(case, choice, float(r["ms"]) if r["ms"] else None, r["note"]))
    return out


def to_table(measurements, gpu=None, meta=None):
    rows = [CalibrationTable.row(m.case, m.choice, m.ms) for m in measurements if m.ms is not None]
    return CalibrationTable(gpu or gpu_model(), rows, dict(meta or {}, created=time.strftime("%Y-%m-%d")))


def winners(measurements):
    """{case: (fastest Measurement, fastest definition-based Measurement or None, fft ms)}."""
    by = {}
    for m in measurements:
        if m.ms is not None:
            by.setdefault(m.case, []).append(m)
    out = {}
    for case, ms in by.items():
        best = min(ms, key=lambda m: m.ms)
        direct = [m for m in ms if m.choice.engine == "direct"]
        fft = [m.ms for m in ms if m.choice.engine == "fft"]
        out[case] = (best, min(direct, key=lambda m: m.ms) if direct else None, fft[0] if fft else None)
    return out


def table1_markdown(measurements):
    """Winner per cell (rows: forms, columns: sizes), the paper's Table 1 layout."""
    win = winners(measurements)
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
            name = best.choice.kernel.label if best.choice.kernel else best.choice.engine
            cells.append(f"{name} {best.ms:.3g} ms" + (f" (fft {fft:.3g})" if best.choice.engine != "fft"
                                                       and fft else ""))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


_FAMILY_ORDER = ("fft", "fused", "overlap_wise", "warp_per_overlap", "warp_shuffle", "multi_matrix_right",
                 "multi_matrix_both", "grouped_overlap", "split_row")


def plot_table1(measurements, path):
    """PNG: time against matrix size per Table-1 form, best of each algorithm family."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(16, 7.5), sharex=True)
    for ax, (label, form, nl, nr) in zip(axes.flat, TABLE1_FORMS):
        fam = {}
        for m in measurements:
            c = m.case
            if m.ms is None or c.peaks or c.mode != "full" or (c.form, c.n_left, c.n_right) != (form, nl, nr):
                continue
            key = m.choice.kernel.algorithm if m.choice.kernel else m.choice.engine
            fam.setdefault(key, {})
            fam[key][c.h] = min(m.ms, fam[key].get(c.h, math.inf))
        for key in sorted(fam, key=_FAMILY_ORDER.index):
            xs = sorted(fam[key])
            ax.loglog(xs, [fam[key][x] for x in xs], "o-" if key in ("fft", "fused") else ".-", label=key, ms=4,
                      color=plt.get_cmap("tab10")(_FAMILY_ORDER.index(key)))
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
