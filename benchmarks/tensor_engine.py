"""Tensor-core window engine against the other engines, a cuBLAS-on-Toeplitz baseline and the
GPU's measured GEMM peak, in one process (issue 17).

Engine alone: float32 tiles on the device (B patterns x n ROIs), references resident, to peaks
with the quadratic 3x3 fit (``locate``) and to maps only (``maps``). The cuBLAS baseline
multiplies each pattern's fp16 ROI (as a row of h*w pixels) by a precomputed fp16 matrix per
reference ROI, T[(y, x), (dy, dx)] = L[y - dy, x - dx] (every lag of the window as a column):
the same sums as the tensor engine's, from a batched GEMM (cupy.matmul: cublasGemmStridedBatchedEx)
whose reference operand costs h w (2 r + 1)^2 2 bytes per ROI in device memory.

From patterns (``--from-patterns``): B uint16 patterns of 256x256 on the device and the
paper's 86 ROIs of 96x96 (only with --rois 86 --tile 96), to peaks, as the runner calls an
engine: the tile pass writing float32 tiles then ``match`` (the tensor engine's path before it
read the ROIs itself), and ``match_rois`` (the tile statistics, then kernels that prepare each
value as they read it; for the tensor engine in bf16 the tile pass also writes its packed right
operand), for the tensor and fused engines; and the parts alone.

Usage::

    python benchmarks/tensor_engine.py [--patterns 50] [--rois 86] [--tile 96] [--max-shift 16] [--sweep]
        [--from-patterns]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import median_ms, paper_layout_patterns  # noqa: E402


def gemm_peak_tflops(dtype="float16", n=8192):
    """Dense GEMM TFLOP/s of cupy.matmul (cuBLAS) on n x n matrices: the bound tensor cores give here."""
    import cupy as cp

    a = cp.random.standard_normal((n, n), dtype=cp.float32).astype(dtype)
    b = cp.random.standard_normal((n, n), dtype=cp.float32).astype(dtype)
    ms = median_ms(lambda: cp.matmul(a, b), reps=10)
    return 2 * n ** 3 / (ms * 1e-3) / 1e12


def toeplitz_operands(lefts, r):
    """(n, h w, (2r+1)^2) fp16 T[(y, x), (dy, dx)] = L[y - dy, x - dx] (zero outside)."""
    import cupy as cp

    n, h, w = lefts.shape
    m = 2 * r + 1
    T = cp.zeros((n, h, w, m, m), dtype=cp.float16)
    src = lefts.astype(cp.float16)
    for iy in range(m):
        dy = iy - r
        for ix in range(m):
            dx = ix - r
            ys, yd = slice(max(0, -dy), min(h, h - dy)), slice(max(0, dy), min(h, h + dy))
            xs, xd = slice(max(0, -dx), min(w, w - dx)), slice(max(0, dx), min(w, w + dx))
            T[:, yd, xd, iy, ix] = src[:, ys, xs]
    return T.reshape(n, h * w, m * m)


def accuracy(grid, r):
    """Displacements of every precision against the direct engine's (fp32) on a noisy simulated scan:
    RMS and largest difference, ROIs whose peaks are a lag or more apart (another integer peak),
    and ROIs whose statuses differ."""
    import cupy as cp

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, make_engine
    from ebsdxc.engines.base import PRECISIONS
    from ebsdxc.preprocess import prepare_tiles, window_1d, window_2d
    from ebsdxc.rois import extract_tiles, grid_layout
    from ebsdxc.simulate import simulate_scan

    rows, cols = (int(v) for v in grid.lower().split("x"))
    scan = simulate_scan(rows, cols, shape=(256, 256), counts=300, strain=5e-3, rotation=5e-3, seed=7)
    be = select_backend("cuda")
    xp = be.xp
    pats = xp.asarray(scan.patterns.reshape(rows * cols, 256, 256), dtype=xp.float32)
    size = 64
    lay = grid_layout((256, 256), grid=(7, 7), size=size)
    win = window_2d((size, size), xp=xp)
    rt, re, rs = prepare_tiles(extract_tiles(xp.asarray(scan.reference, dtype=xp.float32)[None], lay, xp)[0], win, xp)
    results = {}
    for engine, prec in [("direct", "auto")] + [("tensor", p) for p in PRECISIONS]:
        cfg = EngineConfig(mode="window", max_shift=r, subpixel="quadratic", precision=prec)
        eng = make_engine(engine, be, (size, size), cfg, window_1d=(window_1d(size), window_1d(size)))
        eng.set_reference(rt, re, rs)
        d, st = [], []
        for i in range(0, rows * cols, 200):
            t, e, s = prepare_tiles(extract_tiles(pats[i:i + 200], lay, xp), win, xp)
            res = eng.match(t, e, s)
            d.append(cp.asnumpy(res.displacement))
            st.append(cp.asnumpy(res.status))
        results[prec if engine == "tensor" else "direct"] = (np.concatenate(d), np.concatenate(st))
    d0, s0 = results.pop("direct")
    n = s0.size
    print(f"accuracy: {rows * cols} simulated noisy Ni patterns (300 counts/px), {n} ROIs of {size}x{size}, "
          f"window +-{r}, quadratic; against the direct engine (fp32); {(s0 == 0).mean():.2%} of ROIs OK")
    summary = {}
    for prec, (d1, s1) in results.items():
        both = (s0 == 0) & (s1 == 0)
        diff = np.abs(d1 - d0)[both]
        far = int((diff.max(axis=-1) >= 0.5).sum())
        rms = float(np.sqrt(np.mean(diff ** 2)))
        summary[prec] = {"rois": n, "rms_px": rms, "max_px": float(diff.max()), "other_peak": far,
                         "same_peak_fraction": 1 - far / n, "status_differs": int((s0 != s1).sum())}
        print(f"  {prec}: RMS {rms:.2e} px, max {diff.max():.2e} px, another integer peak in {far} of {n} "
              f"({1 - far / n:.5%} the same), statuses differ in {int((s0 != s1).sum())}")
    return summary


def from_patterns(B, r, report):
    """Engines from B uint16 256x256 patterns on the device (paper layout, +-r, quadratic):
    prepare_tiles_padded + match, and match_rois; the tile pass, the tile statistics and the
    tensor maps (from tiles, from the patterns) alone."""
    import cupy as cp

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, make_engine
    from ebsdxc.engines.definition import Pairing
    from ebsdxc.engines.gpu_ops import PaddedTileBuffer, prepare_tiles_padded, tile_statistics
    from ebsdxc.engines.roi_tiles import PackedBuffer, roi_tiles
    from ebsdxc.engines.tensor import right_layout, tensor_maps
    from ebsdxc.preprocess import window_1d, window_2d

    be = select_backend("cuda")
    h = w = 96
    pats, origins = paper_layout_patterns(B, np.random.default_rng(1))
    n = int(origins.shape[0])
    win = window_2d((h, w), xp=cp)
    figures = {}
    print(f"from {B} uint16 patterns of 256x256, {n} ROIs of 96x96, +-{r}, quadratic:", flush=True)
    frames = PaddedTileBuffer((h, w)).get(B * n)
    figures["tile pass (float32 tiles)"] = report(
        "tile pass (float32 tiles)", median_ms(lambda: prepare_tiles_padded(pats, origins, (h, w), win, frames)))
    figures["tile statistics"] = report("tile statistics", median_ms(lambda: tile_statistics(pats, origins, (h, w),
                                                                                              win)))
    rt = roi_tiles(pats, origins, win, (h, w))[0]
    lefts = cp.ascontiguousarray(frames[:n])
    pairing = Pairing.n_to_mn(n, B)
    mp = cp.empty((B * n, 2 * r + 1, 2 * r + 1), dtype=cp.float32)
    layout = right_layout((h, w), (r, r), pairing, "bf16")
    words = PackedBuffer().get(B * n, h, *layout)
    figures["tile statistics + bf16 operand"] = report(
        "tile statistics + bf16 operand", median_ms(lambda: roi_tiles(pats, origins, win, (h, w),
                                                                      packed=(words, *layout, "bf16"))))
    packed = roi_tiles(pats, origins, win, (h, w), packed=(words, *layout, "bf16"))[0]
    figures["tensor maps bf16 from the tile pass's operand"] = report(
        "tensor maps bf16 from the tile pass's operand", median_ms(lambda: tensor_maps(lefts, packed, pairing, (r, r),
                                                                                       out=mp)))
    figures["tensor maps bf16 from float32 tiles"] = report(
        "tensor maps bf16 from float32 tiles", median_ms(lambda: tensor_maps(lefts, frames, pairing, (r, r), out=mp)))
    figures["tensor maps bf16 from the patterns"] = report(
        "tensor maps bf16 from the patterns", median_ms(lambda: tensor_maps(lefts, rt, pairing, (r, r), out=mp)))
    for engine in ("tensor", "fused"):
        cfg = EngineConfig(mode="window", max_shift=r, subpixel="quadratic")
        eng = make_engine(engine, be, (h, w), cfg, window_1d=(window_1d(h), window_1d(w)))
        ref = PaddedTileBuffer(eng.input_shape).get(n)
        e, s = prepare_tiles_padded(pats[:1], origins, (h, w), win, ref)
        eng.set_reference(cp.ascontiguousarray(ref[:, :h, :w]), e, s)
        tiles = PaddedTileBuffer(eng.input_shape).get(B * n)

        def both(eng=eng, tiles=tiles):
            e, s = prepare_tiles_padded(pats, origins, (h, w), win, tiles)
            return eng.match(tiles.reshape(B, n, *tiles.shape[1:]), e.reshape(B, n), s.reshape(B, n))
        figures[f"{engine}: tiles, match"] = report(f"{engine}: tiles, match", median_ms(both))
        figures[f"{engine}: match_rois"] = report(
            f"{engine}: match_rois", median_ms(lambda eng=eng: eng.match_rois(pats, origins, win)))
    return figures


def main(argv=None):
    import cupy as cp

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, make_engine, tensor_wgmma
    from ebsdxc.engines.base import PRECISIONS
    from ebsdxc.engines.definition import Pairing, overlap_fmas
    from ebsdxc.engines.tensor import launch_shape, tensor_maps
    from ebsdxc.preprocess import window_1d, window_2d

    ap = argparse.ArgumentParser()
    ap.add_argument("--patterns", type=int, default=50)
    ap.add_argument("--rois", type=int, default=86)
    ap.add_argument("--tile", type=int, default=96)
    ap.add_argument("--max-shift", type=int, default=16)
    ap.add_argument("--sweep", action="store_true", help="also time other launch shapes")
    ap.add_argument("--skip", default="", help="comma-separated engines not to time (e.g. direct)")
    ap.add_argument("--accuracy", metavar="RxC", help="also compare every precision with the direct engine "
                    "(fp32) on a simulated noisy Ni scan of R x C patterns of 256x256 (7x7 ROIs of 64x64)")
    ap.add_argument("--from-patterns", action="store_true", help="also time the engines from uint16 patterns "
                    "(the paper's layout): tiles written then matched, and match_rois")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args(argv)
    be = select_backend("cuda")
    h = w = a.tile
    B, n, r = a.patterns, a.rois, a.max_shift
    skip = set(filter(None, a.skip.split(",")))
    rng = np.random.default_rng(0)
    win = window_2d((h, w))
    ref = (rng.standard_normal((n, h, w)) * win).astype(np.float32)
    tiles = cp.asarray((rng.standard_normal((B, n, h, w)) * win).astype(np.float32))
    lefts = cp.asarray(ref)
    rights = tiles.reshape(B * n, h, w)
    pairing = Pairing.n_to_mn(n, B)
    useful = 2 * overlap_fmas((h, w), (r, r), B * n)
    gpu = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    print(f"{gpu}: {n} ROIs {w}x{h}, {B} patterns, window +-{r} ({(2 * r + 1) ** 2} lags); "
          f"useful {useful / B / 1e9:.3f} GFLOP per pattern; median of 20 (CUDA events)", flush=True)
    out = {"gpu": gpu, "rois": n, "tile": h, "patterns": B, "max_shift": r}

    peak16 = gemm_peak_tflops("float16")
    print(f"cuBLAS fp16 GEMM 8192^3: {peak16:.0f} TFLOP/s (the measured tensor peak)", flush=True)
    out["gemm_peak_tflops_fp16"] = peak16

    def report(label, ms):
        rate = B / (ms * 1e-3)
        tf = useful / (ms * 1e-3) / 1e12
        print(f"  {label:34s} {ms:8.3f} ms  {rate:10,.0f} patterns/s  {tf:6.1f} useful TFLOP/s", flush=True)
        out[label] = {"ms": ms, "patterns_per_s": rate, "useful_tflops": tf}
        return rate

    print("maps only:")
    mp = cp.empty((B * n, 2 * r + 1, 2 * r + 1), dtype=cp.float32)
    attrs = cp.cuda.Device().attributes
    smem, sms = attrs.get("MaxSharedMemoryPerBlockOptin", 227 * 1024), attrs["MultiProcessorCount"]
    for prec in PRECISIONS:
        report(f"tensor maps {prec}",
               median_ms(lambda prec=prec: tensor_maps(lefts, rights, pairing, (r, r), prec, out=mp)))
        gp = tensor_wgmma.plan(h, w, (r, r), B, prec, smem, na=n, sms=sms) if tensor_wgmma.available() else None
        if gp is not None:  # the default was the wgmma GEMM: the mma.sync kernel too, and every block
            print(f"    wgmma launch: {json.dumps(gp)}")
            report(f"tensor maps {prec} mma.sync",
                   median_ms(lambda prec=prec: tensor_maps(lefts, rights, pairing, (r, r), prec, out=mp,
                                                           gemm=False)))
            if a.sweep:
                for blk in tensor_wgmma.SHAPES:
                    try:
                        ms = median_ms(lambda prec=prec, blk=blk: tensor_maps(lefts, rights, pairing, (r, r), prec,
                                                                              out=mp, gemm=blk))
                    except ValueError:
                        continue
                    print(f"    wgmma block {blk}: {ms:7.3f} ms {B / (ms * 1e-3):10,.0f} patterns/s", flush=True)
        ls = launch_shape(h, w, (r, r), B, prec)
        print(f"    launch: {json.dumps(ls)}")
        if a.sweep:
            for warps, mtw, yc, stages in ((2, 4, 8, 2), (4, 2, 8, 2), (8, 1, 8, 2), (2, 4, 8, 1), (4, 2, 8, 1),
                                           (4, 4, 8, 1), (8, 2, 8, 1), (4, 2, 16, 1), (2, 2, 8, 1), (4, 1, 8, 1),
                                           (8, 1, 16, 1), (4, 2, 4, 2), (2, 2, 8, 2)):
                if mtw * (2 if prec in ("fp32", "tf32") else 1) > 4:
                    continue
                try:
                    s = launch_shape(h, w, (r, r), B, prec, warps=warps, yc=yc, mtw=mtw, stages=stages)
                except ValueError:
                    continue
                ms = median_ms(lambda prec=prec, s=s: tensor_maps(lefts, rights, pairing, (r, r), prec,
                                                                  out=mp, shape=s, gemm=False))
                print(f"    warps={warps} mtw={mtw} yc={yc:2d} stages={stages} smem={s['smem'] / 1024:6.1f} KB: "
                      f"{ms:7.3f} ms {B / (ms * 1e-3):10,.0f} patterns/s", flush=True)

    T = toeplitz_operands(lefts, r)
    rows16 = tiles.astype(cp.float16).transpose(1, 0, 2, 3).reshape(n, B, h * w).copy()
    res = cp.empty((n, B, (2 * r + 1) ** 2), dtype=cp.float16)
    report("cuBLAS on Toeplitz fp16", median_ms(lambda: cp.matmul(rows16, T, out=res)))
    out["toeplitz_bytes_per_roi"] = int(T[0].nbytes)
    print(f"  memory per reference ROI: tensor {h * w * 4:,} B (the float32 tile), "
          f"cuBLAS Toeplitz {T[0].nbytes:,} B")
    T = None  # noqa: F841  (its memory back before the engines run)

    print("engine alone, to peaks (quadratic):")
    e = cp.asarray((ref.astype(np.float64) ** 2).sum(axis=(1, 2)), cp.float32)
    for engine, prec in [("tensor", p) for p in PRECISIONS] + [("fft", "auto"), ("fused", "auto"),
                                                                ("direct", "auto")]:
        if engine in skip:
            continue
        cfg = EngineConfig(mode="window", max_shift=r, subpixel="quadratic", precision=prec)
        try:
            eng = make_engine(engine, be, (h, w), cfg, window_1d=(window_1d(h), window_1d(w)))
        except Exception as ex:  # noqa: BLE001 - an engine that does not serve this size
            print(f"  {engine}: {ex}")
            continue
        eng.set_reference(lefts, e, cp.zeros(n, cp.uint8))
        Ny, Nx = eng.input_shape
        t = tiles
        if (Ny, Nx) != (h, w):
            t = cp.zeros((B, n, Ny, Nx), cp.float32)
            t[..., :h, :w] = tiles
        report(f"{engine} {prec}" if engine == "tensor" else engine, median_ms(lambda eng=eng, t=t: eng.locate(t)))
    if a.from_patterns:
        out["from_patterns"] = from_patterns(B, r, report)
    if a.accuracy:
        out["accuracy"] = accuracy(a.accuracy, r)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
