"""The tensor engine's Hopper path: one left matrix against many right matrices as one GEMM
on the warpgroup tensor cores (``kernels/tensorgemm.cu``, wgmma, sm_90a).

The lags are the GEMM's rows (a Toeplitz operand gathered from the packed left matrix), the
right matrices its columns and their pixels its depth, so each gathered value feeds a whole
block of right matrices: the form of a reference subregion shared by a batch of patterns.
:func:`plan` says whether and how a case runs here; :func:`maps` runs it. Where it does not
apply (another GPU, tf32/fp32 inputs, few right matrices per left, tiles too wide for the
shared memory) the tensor engine keeps its ``mma.sync`` kernel (``kernels/tensorcorr.cu``).
"""

from __future__ import annotations

import functools

import numpy as np

from ..kernel_loader import NULL_POINTER, get_function

__all__ = ["SHAPES", "MIN_RIGHTS", "available", "plan", "maps"]

#: (64-lag tiles per warpgroup, right matrices per block) compiled: the accumulators per thread
#: (MT * NN / 2) of one block per SM, or two (64 or fewer).
SHAPES = ((4, 64), (3, 96), (2, 128), (1, 256), (2, 64), (1, 128), (1, 64))
#: Work per second of each shape relative to (2, 64), padding counted as work (H100, 512 patterns;
#: BENCHMARKS.md): the plan weighs the padded work by it. Rows up to 96 pixels (86 ROIs of 96x96
#: at +-16), and wider (45 of 128x128 at +-24), where a block of fewer lags copies the same
#: right rows more often.
_EFFICIENCY = {(2, 64): 1.0, (3, 96): 0.95, (1, 128): 0.94, (4, 64): 0.88, (2, 128): 0.89, (1, 64): 0.84,
               (1, 256): 0.79}
_EFFICIENCY_WIDE = {(2, 64): 1.0, (3, 96): 1.04, (1, 128): 0.76, (4, 64): 0.93, (2, 128): 1.0, (1, 64): 0.92,
                    (1, 256): 0.7}
#: Most A registers of a batch of steps (KB MT 4), and the step counts a batch may have.
_BATCH_REGS = 32
_BATCHES = (8, 6, 4, 3, 2, 1)
#: Fewest right matrices per left for this path: with 32 half of a 64-column block is padding,
#: and the mma.sync kernel was faster at +-16 (H100 dispatch table, 2026-11-27).
MIN_RIGHTS = 48
_STAGES = 4  # kernels/tensorgemm.cu STAGES
_AHEAD = 2  # kernels/tensorgemm.cu AHEAD
#: Rows of a stage barrier (kernels/tensorgemm.cu RPS): two halve the barriers of one.
ROWS_PER_BARRIER = 2
_PREC = {"bf16": 2, "fp16": 3}
_OPTIONS = ("-arch=sm_90a",)


@functools.cache
def _device_ok(device_id):
    import cupy as cp

    return cp.cuda.Device(device_id).compute_capability == "90"


def available():
    """True on a compute capability 9.0 GPU (H100, H200), the one that has wgmma."""
    try:
        import cupy as cp

        return _device_ok(cp.cuda.Device().id)
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device
        return False


@functools.lru_cache(maxsize=256)
def plan(h, w, max_lag, nb, precision, smem_limit, *, na=1, sms=132, shape=None, least=MIN_RIGHTS):
    """Launch of :func:`maps` for ``na`` left (h, w) matrices, lags ``max_lag`` = (ry, rx) and
    ``nb`` right matrices per left on ``sms`` multiprocessors: a dict (mt, nn, kb, rps, wk, lw,
    ring, smem, blocks), or None where the path does not apply (fewer than ``least`` right matrices
    per left, or fewer blocks than multiprocessors: the mma.sync kernel spreads such a case
    wider). ``shape`` = (mt, nn) fixes the block (benchmarks, tests)."""
    if precision not in _PREC or nb < least:
        return None
    ry, rx = max_lag
    my, mx = 2 * ry + 1, 2 * rx + 1
    best = None
    for mt, nn in ((shape,) if shape else SHAPES):
        # Steps of a batch: the most within the registers that divide the row's steps, else the
        # row padded to a multiple of the most.
        # Rows of 32-pixel atoms (the 64-byte swizzle of the stages): an even number of steps.
        steps = -(-w // 32) * 2
        fit = [b for b in _BATCHES if b * mt * 4 <= _BATCH_REGS]
        kb = next((b for b in fit if steps % b == 0 and b > 1), fit[0])
        wk = -(-steps // kb) * kb * 16
        lw = -(-(wk + 2 * rx) // 4) * 4
        bm = 2 * mt * 64
        span = min(my, (bm - 1) // mx + 2)  # rows of lags (dy) one block meets
        # More rows of L than are in use at once: the span, the rows copied ahead, a barrier's.
        ring = 1 << (span + _AHEAD + ROWS_PER_BARRIER - 2).bit_length()
        smem = _STAGES * nn * wk * 2 + ring * lw * 4 + 512  # and up to 512 bytes to align the stages
        if smem > smem_limit:
            continue
        blocks = (-(-my * mx // bm), -(-nb // nn))
        total = na * blocks[0] * blocks[1]
        if shape is None and total < sms:
            continue
        # Least time: whole waves of blocks (one or two an SM), each the work of a block with
        # the padding of lags and right matrices, at the shape's rate.
        per_sm = 2 if mt * nn <= 128 and 2 * smem <= smem_limit else 1
        waves = -(-total // (sms * per_sm))
        rate = (_EFFICIENCY if wk <= 96 else _EFFICIENCY_WIDE).get((mt, nn), 0.5)
        key = (waves * per_sm * bm * nn / rate, -nn)
        if best is None or key < best[0]:
            best = (key, dict(mt=mt, nn=nn, kb=kb, rps=ROWS_PER_BARRIER, wk=wk, lw=lw, ring=ring, smem=smem,
                                   blocks=blocks))
    return None if best is None else best[1]


def maps(lp, sl, rp, sr, pairing, tile_shape, max_lag, precision, out, launch):
    """Window-mode maps of ``pairing`` into ``out`` by the launch of :func:`plan`, from the packed
    operands of ``tc_pack_left`` and ``tc_pack_right`` (:func:`ebsdxc.engines.tensor.tensor_maps`
    makes them): left rows of ``launch["lw"]`` words from column -rx, right rows of
    ``launch["wk"]`` 16-bit values; ``sl``, ``sr`` the fp16 scales (or None)."""
    import cupy as cp

    h, w = tile_shape
    ry, rx = max_lag
    fn = get_function("tensorgemm.cu",
                      f"tg_maps<{_PREC[precision]}, {launch['mt']}, {launch['nn']}, {launch['kb']}, {launch['rps']}>",
                      options=_OPTIONS)
    fn.max_dynamic_shared_size_bytes = launch["smem"]
    null = NULL_POINTER
    args = (lp, rp.view(cp.uint16), out, null if sl is None else sl, null if sr is None else sr, np.int32(h),
            np.int32(w), np.int32(ry), np.int32(rx), *pairing.as_struct(), np.int32(launch["wk"]),
            np.int32(launch["lw"]), np.int32(launch["ring"]), *(np.int32(b) for b in launch["blocks"]))
    fn((pairing.na * launch["blocks"][0] * launch["blocks"][1],), (256,), args, shared_mem=launch["smem"])
    return out
