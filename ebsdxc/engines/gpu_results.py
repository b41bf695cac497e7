"""A batch's per-ROI results on the GPU, one kernel each (``kernels/results.cu``).

:meth:`CorrelationEngine._assemble` (codes, normalised heights, displacements from the peaks)
and the runner's flags for empty patterns and ROIs off the detector mask are about thirty
array operations per batch; on the GPU each is a launch the run's main thread makes in Python,
and that thread also reads ahead and writes results. These two kernels make the same values,
bit for bit, in one launch each.
"""

from __future__ import annotations

import numpy as np

from ..kernel_loader import NULL_POINTER, get_function

__all__ = ["assemble_results", "flag_results"]

_C_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
_ASSEMBLE = tuple(f"assemble_results<{c}, {v}>" for c in _C_TYPES.values() for v in _C_TYPES.values())
_THREADS = 256


def _grid(total):
    return ((total + _THREADS - 1) // _THREADS,), (_THREADS,)


def _float(a, cp):
    return a if np.dtype(a.dtype) in _C_TYPES else a.astype(cp.float64)


def assemble_results(y, x, value, border, energy, status, ref_energy, ref_status, index):
    """(disp (B, n, 2) float32, height (B, n) float32, code (B, n) uint8) from (B, n) peaks.

    ``y``, ``x``, ``value``: float32 or float64; ``border`` bool; ``energy`` float32 and
    ``status`` uint8 of the scan tiles; ``ref_energy`` float32 and ``ref_status`` uint8 (K, n)
    of the reference sets; ``index`` (B,) the set of each pattern, or None (set 0).
    """
    import cupy as cp

    B, n = y.shape
    y, x, value = (cp.ascontiguousarray(_float(a, cp)) for a in (y, x, value))
    if x.dtype != y.dtype:
        x = x.astype(y.dtype)
    args = [y, x, value, cp.ascontiguousarray(border).view(cp.uint8),
            cp.ascontiguousarray(energy, dtype=cp.float32), cp.ascontiguousarray(status, dtype=cp.uint8),
            cp.ascontiguousarray(ref_energy, dtype=cp.float32), cp.ascontiguousarray(ref_status, dtype=cp.uint8),
            NULL_POINTER if index is None else cp.ascontiguousarray(cp.asarray(index), dtype=cp.int64)]
    disp = cp.empty((B, n, 2), dtype=cp.float32)
    height = cp.empty((B, n), dtype=cp.float32)
    code = cp.empty((B, n), dtype=cp.uint8)
    total = B * n
    if total:
        name = f"assemble_results<{_C_TYPES[np.dtype(y.dtype)]}, {_C_TYPES[np.dtype(value.dtype)]}>"
        fn = get_function("results.cu", name, name_expressions=_ASSEMBLE)
        fn(*_grid(total), (*args, np.int32(n), np.int64(total), disp, height, code))
    return disp, height, code


def flag_results(disp, height, status, empty, outside=None):
    """New (disp, height, status) with the ROIs of patterns ``empty`` (B,) bool flagged
    ``MISSING_PATTERN`` and those ``outside`` (n,) bool the detector mask ``OUTSIDE_MASK``,
    neither with a height or a displacement."""
    import cupy as cp

    B, n = status.shape
    out = (cp.empty((B, n, 2), dtype=cp.float32), cp.empty((B, n), dtype=cp.float32), cp.empty((B, n), dtype=cp.uint8))
    total = B * n
    if total:
        fn = get_function("results.cu", "flag_results")
        fn(*_grid(total), (cp.ascontiguousarray(empty, dtype=cp.bool_),
                           NULL_POINTER if outside is None else cp.ascontiguousarray(outside, dtype=cp.bool_),
                           np.int32(n), np.int64(total), cp.ascontiguousarray(disp, dtype=cp.float32),
                           cp.ascontiguousarray(height, dtype=cp.float32),
                           cp.ascontiguousarray(status, dtype=cp.uint8), *out))
    return out
