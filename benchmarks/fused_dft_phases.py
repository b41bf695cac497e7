"""Where the fused ``dft`` kernel spends its time: clock cycles per phase, per (ROI, block).

Compiles an instrumented copy of ``kernels/fftcorr.cu`` (the file in the checkout it runs from is
left alone): thread 0 of every block reads ``clock64()`` at the boundaries of ``fused_dft``'s phases
and adds the cycles since the last boundary to a per-phase counter. Every barrier lines thread 0
up with the block, so a phase's figure is the block's time in it, waits included. Phases are
summed over the stencil passes (``passes/ROI``). The stamps cost 1-3% of the kernel's time.

Data: smooth random reference tiles (Gaussian-filtered noise), each scan tile the reference shifted
by up to 2.5 px plus 5% noise, 50 patterns, window compensation on, as EBSD subregions behave
(random tiles put peaks in noise and change how many passes run).

Usage::

    python benchmarks/fused_dft_phases.py 128:24 96:0 256:24   # tile:max_shift, 0 = full mode

The anchors below match ``kernels/fftcorr.cu`` from commit 6ce0174 (the refinement before its
stencil tables were merged) and later; a phase whose anchor is missing reads 0.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import median_ms, shifted_smooth_tiles  # noqa: E402

STAMP = ("{ if (threadIdx.x == 0) { long long _n = clock64(); "
         "atomicAdd(&fc_phase[%d], (unsigned long long)(_n - fc_last)); fc_last = _n; } }")
PASSES = 31  # counter of stencil passes
NAMES = ["correlate", "integer start", "row weights (6ce0174)", "window autocorr. (6ce0174)", "tables",
         "map pass", "warp sums", "barrier (6ce0174)", "nine sums (6ce0174)", "finish", "step", "step barrier",
         "end", "  start: the block's argmax", "  start: warp 0's 3x3"]

# (phase, anchor, where): the stamp goes before or after the anchor (in this order: the step
# barrier's anchor holds the step's)
ANCHORS = [
    (0, "              true, s);\n    const float* Mf = reinterpret_cast<const float*>(S);\n    integer_start(Mf, d,",
     "inside"),
    (0, "              true, s, pk);\n    const float* Mf = reinterpret_cast<const float*>(S);\n"
        "    integer_start(Mf, d,", "inside"),
    (1, "    integer_start(Mf, d, lag_y, lag_y + NY, comp, true, sval, sidx, t, out_value, out_border, s);\n", "after"),
    (1, "    integer_start(Mf, d, lag_y, lag_y + NY, comp, true, sval, sidx, t, out_value, out_border, s, pk);\n",
     "after"),
    (2, "        d.wy[i] = weight_full(tt - NY * rint(tt / NY));\n    }\n", "after_if_stencil"),
    (3, "    if (STENCIL && 9 * NWARPS <= 6 * NYL) {", "before_if_stencil"),
    (4, "        column_weights(d, xc, h, c, q);\n", "after"),
    (4, "    stencil_tables(d, yc, xc, h, comp, Sy, Sx, s);\n", "after"),
    (4, "    stencil_tables(d, yc, xc, h, comp, Sy, Sx, step_cs, s);\n", "after"),
    (4, "    stencil_tables(d, yc, xc, h, comp, Sy, Sx, step_cs, s, kc);\n", "after"),
    (5, "#pragma unroll\n        for (int u = 0; u < 3; ++u) {\n#pragma unroll\n"
        "            for (int v = 0; v < 3; ++v) {\n                const double s = warp_sum_all", "before"),
    (5, "#pragma unroll\n    for (int u = 0; u < 3; ++u) {\n#pragma unroll\n        for (int v = 0; v < 3; ++v) {\n"
        "            const double t = warp_sum_all", "before"),
    (5, "    const double t = warp_sum9(acc);", "before"),
    (6, "        __syncthreads();\n        if (threadIdx.x < 9) {\n            double a = 0.0;", "before"),
    (6, "    stencil_finish(d, comp, sy_sum, sx_sum);\n}", "before"),
    (7, "        if (threadIdx.x < 9) {\n            double a = 0.0;\n"
        "            for (int w = 0; w < NWARPS", "before"),
    (8, "        grid_finish(d, R, comp);\n        return;", "before"),
    (9, "        grid_finish(d, R, comp);\n        return;", "after_return"),
    (9, "    stencil_finish(d, comp, sy_sum, sx_sum);\n}", "after_call"),
    (11, "            d.pos[5] = beyond ? 1.0 : 0.0;\n        }\n        __syncthreads();\n", "after_count"),
    (10, "            d.pos[5] = beyond ? 1.0 : 0.0;\n        }\n", "after"),
    (12, "    if (threadIdx.x == 0 && s == 0) {\n        const bool stuck", "before"),
    # the integer start split (from the eleventh session's code on; the rest stays "integer start")
    (13, "    const bool lead = map_argmax(Mf, s, sval, sidx, pk, best, bi);\n"
         "    if (threadIdx.x < 32) {  // warp 0 (thread 0 leads)\n", "after"),
    (13, "    const bool lead = map_argmax(Mf, s, true, sval, sidx, pk, best, bi);"
         "  // correlate(..., all_rows = true)\n"
         "    if (threadIdx.x < 32) {  // warp 0 (thread 0 leads)\n", "after"),
    (14, "        start_3x3(Mf, ly, lx, lag_y, lag_x, comp, s, v, flat);\n        if (lead) {\n", "after"),
]


def instrument(src):
    src = src.replace("namespace fc {\n\nconstexpr int H",
                      "__device__ unsigned long long fc_phase[32];\n__shared__ long long fc_last;\n"
                      "namespace fc {\n\nconstexpr int H", 1)
    anchor = "    const GridScratch d = grid_scratch(S, 3);\n"
    src = src.replace(anchor, anchor + "    if (threadIdx.x == 0) fc_last = clock64();\n", 1)
    for phase, anchor, where in ANCHORS:
        if anchor not in src:
            continue
        st = STAMP % phase
        if where == "inside":
            end = "true, s, pk);\n" if "s, pk);" in anchor else "true, s);\n"
            new = anchor.replace(end, f"{end}    {st}\n", 1)
        elif where == "after":
            new = anchor + f"    {st}\n"
        elif where == "after_if_stencil":
            new = anchor + f"    if (STENCIL) {st}\n"
        elif where == "before_if_stencil":
            new = f"    if (STENCIL) {st}\n" + anchor
        elif where == "before":
            new = f"    {st}\n" + anchor
        elif where == "after_return":
            new = anchor.replace("\n        return;", f"\n        {st}\n        return;")
        elif where == "after_call":
            new = anchor.replace(");\n}", f");\n    {st}\n}}")
        else:  # after_count: the step barrier, then one more pass
            new = anchor + f"        {st}\n        if (threadIdx.x == 0) atomicAdd(&fc_phase[{PASSES}], 1ULL);\n"
        src = src.replace(anchor, new)
    return src


def run(tile, shift, patterns=50, *, subpixel="dft", names=None, counted="passes"):
    """Cycles per phase of the fused ``subpixel`` kernel compiled from the instrumented source
    (``names``: its phases, this module's by default; ``counted``: what counter PASSES counts)."""
    import cupy as cp

    import ebsdxc.kernel_loader as kl
    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, make_engine
    from ebsdxc.engines.fused import _KERNELS
    from ebsdxc.preprocess import window_1d

    names = NAMES if names is None else names
    h = w = tile
    n = 86 if tile == 96 else 45
    ref, scan = shifted_smooth_tiles(patterns, n, h, w, noise=0.05)
    tiles = cp.asarray(scan)
    cfg = EngineConfig(mode="window" if shift else "full", max_shift=shift or None, subpixel=subpixel)
    eng = make_engine("fused", select_backend("cuda"), (h, w), cfg, window_1d=(window_1d(h), window_1d(w)))
    eng.set_reference(cp.asarray(ref), np.ones(n), np.zeros(n, np.uint8))
    eng.locate(tiles)
    mod = kl._module(cp.cuda.Device().id, "fftcorr.cu", tuple(_KERNELS), eng.plan.defines())
    counters = cp.ndarray((32,), cp.uint64, mod.get_global("fc_phase"))
    counters[:] = 0
    eng.locate(tiles)
    cp.cuda.Device().synchronize()
    c = counters.get().astype(float)
    blocks = patterns * n * eng.plan.split
    total = c[:len(names)].sum()
    mode = f"window +-{shift}" if shift else "full"
    print(f"{tile}x{tile}, {mode}: FFT {eng.plan.fft}, split {eng.plan.split}, cols {eng.plan.cols}, "
          f"{eng.plan.threads} threads; {counted}/ROI {c[PASSES] / blocks:.2f}; "
          f"cycles per ROI and block {total / blocks:,.0f}")
    for i, name in enumerate(names):
        if c[i]:
            print(f"   {name:28s} {c[i] / blocks:9,.0f}  {100 * c[i] / total:5.1f}%")
    ms = median_ms(lambda: eng.locate(tiles))
    print(f"   instrumented kernel: {ms:.3f} ms = {patterns / ms * 1e3:,.0f} patterns/s", flush=True)


def main(argv=None):
    import ebsdxc.kernel_loader as kl

    plain = kl.kernel_source.__wrapped__
    kl.kernel_source = lambda name: instrument(plain(name)) if name == "fftcorr.cu" else plain(name)
    for spec in (argv if argv is not None else sys.argv[1:]) or ["128:24"]:
        tile, shift = (int(v) for v in spec.split(":"))
        run(tile, shift)


if __name__ == "__main__":
    main()
