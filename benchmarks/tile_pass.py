"""The tile pass (mean, energy, status of every ROI; ``kernels/tiles.cu``) with each kernel and
block size, on random patterns on the device: ``prepare_tiles`` (two reads of the tile from
global memory) against ``prepare_tiles_shaped`` (compiled for the tile's shape, one read, the
tile kept in shared memory) at several block sizes and rows in flight, and the choice
:func:`ebsdxc.engines.gpu_ops._tile_kernel` makes (marked ``*``). Three uses: statistics only
(the fused engine), statistics and the tensor engine's bf16 operand, and writing the prepared
float32 tiles.

Usage::

    python benchmarks/tile_pass.py
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import median_ms  # noqa: E402

# (pattern side, batch, ROI side, dtype): the realistic HR-EBSD sizes and the paper's layout
CASES = [(512, 512, 128, np.uint16), (1024, 128, 256, np.uint16), (256, 512, 96, np.uint16),
         (512, 256, 128, np.float32)]


def main():
    import cupy as cp

    from ebsdxc.engines.gpu_ops import _TILE_NAMES, _TILE_TYPES, _smem_optin, _tile_kernel
    from ebsdxc.kernel_loader import NULL_POINTER, get_function

    rng = np.random.default_rng(0)
    print(f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}: 49 ROIs per pattern (81 at 256), "
          "median of 20 (CUDA events)", flush=True)
    for side, B, roi, dtype in CASES:
        grid = 9 if side == 256 else 7
        pats = cp.asarray(rng.integers(0, 60000, (B, side, side)).astype(dtype))
        step = (side - roi) // (grid - 1)
        origins = cp.asarray(np.array([[x, y] for y in range(0, side - roi + 1, step)
                                       for x in range(0, side - roi + 1, step)][:grid * grid], np.int32))
        n = origins.shape[0]
        win = cp.asarray(np.outer(np.hanning(roi), np.hanning(roi)).astype(np.float32))
        T, ny = B * n, roi + 32
        c_type = _TILE_TYPES[np.dtype(dtype)]
        variants = [(f"prepare_tiles<{c_type}>", 256, 0)]
        if np.dtype(dtype).itemsize <= 2:
            variants += [(f"prepare_tiles_shaped<{c_type}, {roi}, {roi}, {th}, {ru}>", th,
                          roi * roi * np.dtype(dtype).itemsize)
                         for th, ru in ((128, 3), (128, 4), (256, 1), (256, 3), (1024, 1), (1024, 2))]
        chosen = _tile_kernel(dtype, roi, roi, smem_limit=_smem_optin(cp.cuda.Device().id))
        if chosen not in variants:
            variants.append(chosen)
        for use in ("statistics", "+ bf16 operand", "writing tiles"):
            out = cp.zeros((T, ny, ny), cp.float32) if use == "writing tiles" else None
            pk = cp.zeros((T, roi, roi), cp.uint16) if use == "+ bf16 operand" else None
            en, stt, mean = cp.empty(T, cp.float32), cp.empty(T, cp.uint8), cp.empty(T, cp.float32)
            line = []
            for name, th, smem in variants:
                fn = get_function("tiles.cu", name, name_expressions=_TILE_NAMES if name in _TILE_NAMES else (name,))
                if smem > 48 * 1024:
                    fn.max_dynamic_shared_size_bytes = smem
                args = (pats, np.int32(side), np.int32(side), origins, np.int32(n), np.int32(roi), np.int32(roi), win,
                        NULL_POINTER if out is None else out, np.int32(ny), np.int32(ny), en, stt,
                        NULL_POINTER if out is not None else mean, NULL_POINTER if pk is None else pk,
                        np.int32(roi), np.int32(0))
                ms = median_ms(lambda f=fn, g=T, t=th, a=args, s=smem: f((g,), (t,), a, shared_mem=s))
                mark = "*" if (name, th, smem) == chosen else ""
                short = "pt" if "shaped" not in name else "shaped/" + name.rsplit(",", 1)[1].strip(" >") + "rows"
                line.append(f"{short}/{th}{mark} {ms:.3f}")
            print(f"{side}x{side} x{B}, {n} ROIs of {roi} {np.dtype(dtype).name}, {use}: " + ", ".join(line) + " ms",
                  flush=True)

if __name__ == "__main__":
    main()
