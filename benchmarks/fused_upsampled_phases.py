"""Where the fused ``upsampled`` kernel spends its time: clock cycles per phase, per (ROI,
block), as ``fused_dft_phases.py`` does for ``dft`` (an instrumented copy of
``kernels/fftcorr.cu``; thread 0's clock between boundaries, so a phase holds the block's waits at
its barriers; a chunk's column sums are thread 0's own, the other warps' finish waits in the next
column table). Smooth shifted tiles with 5% noise, 50 patterns, window compensation on.

Usage::

    python benchmarks/fused_upsampled_phases.py 128:24 96:0 256:24   # tile:max_shift, 0 = full mode
    FAST=1 python benchmarks/fused_upsampled_phases.py 128:24         # the cheapest FFT lengths
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import fused_dft_phases as f  # noqa: E402

ST = f.STAMP
NAMES = ["correlate", "integer start", "wy table", "autocorr", "column table", "row sums", "column sums",
         "grid finish", "argmax+fit", "recentre barrier", "end"]
PASSES = f.PASSES
A = [
    (0, "              true, s, pk);\n    const float* Mf = reinterpret_cast<const float*>(S);\n"
        "    integer_start(Mf, d, lag_y, lag_y + NY, comp, false,", "inside"),
    (1, "    integer_start(Mf, d, lag_y, lag_y + NY, comp, false, sval, sidx, t, out_value, out_border, s, pk);\n",
     "after"),
    (2, "        d.wy[i] = tb.wy[u * NY + wrap(my - (j * SPLIT + s), NY)];\n    }\n", "after"),
    (3, "    double2 w[WX_EACH];\n    column_fetch(tb, mx, Q, 0, w);\n", "before"),
    (4, "        if (v0 + CW < Q) {\n            if (WX_EACH <= 2) column_fetch(tb, mx, Q, v0 + CW, w);\n"
        "        }\n", "after"),
    (5, "    __syncthreads();\n    // the grid's values in these columns: a thread per grid row u", "before"),
    (6, "                if (v < nv) d.g[u * Q + v0 + v] = a[v];\n        }\n    }\n}", "end"),
    (7, "        if (WX_EACH > 2 && v0 + CW < Q) column_fetch(tb, mx, Q, v0 + CW, w);\n    }\n"
        "    grid_finish(d, R, Q, comp, tb.lerp);\n", "after"),
    (8, "        const bool again = d.pos[5] != 0.0;\n", "before"),
    (9, "        if (!again) break;\n", "before_count"),
    (10, "    if (threadIdx.x == 0 && s == 0) {\n        const bool stuck = d.pos[5] != 0.0;  // never inside",
     "before"),
]


def instrument(src):
    src = src.replace("namespace fc {\n\nconstexpr int H",
                      "__device__ unsigned long long fc_phase[32];\n__shared__ long long fc_last;\n"
                      "namespace fc {\n\nconstexpr int H", 1)
    anchor = "    const GridScratch d = grid_scratch(S, R, nodes);\n"
    assert anchor in src
    src = src.replace(anchor, anchor + "    if (threadIdx.x == 0) fc_last = clock64();\n", 1)
    for phase, anchor, where in A:
        assert anchor in src, anchor[:60]
        st = ST % phase
        if where == "inside":
            new = anchor.replace("true, s, pk);\n", f"true, s, pk);\n    {st}\n", 1)
        elif where == "after":
            new = anchor + f"    {st}\n"
        elif where == "before":
            new = f"    {st}\n" + anchor
        elif where == "end":
            new = anchor[:-1] + f"    {st}\n}}"
        elif where == "before_count":
            new = f"        {st}\n        if (threadIdx.x == 0) atomicAdd(&fc_phase[{PASSES}], 1ULL);\n" + anchor
        src = src.replace(anchor, new, 1)
    return src


def main(argv=None):
    import ebsdxc.kernel_loader as kl
    from ebsdxc.engines import fused

    if os.environ.get("FAST"):
        fused.FAST_GRID_MAX = 100
    plain = kl.kernel_source.__wrapped__
    kl.kernel_source = lambda name: instrument(plain(name)) if name == "fftcorr.cu" else plain(name)
    for spec in (argv if argv is not None else sys.argv[1:]) or ["128:24"]:
        t, sh = (int(v) for v in spec.split(":"))
        f.run(t, sh, subpixel="upsampled", names=NAMES, counted="grids")


if __name__ == "__main__":
    main()
