"""The whole IC-GN of affine DIC subsets in one CUDA launch (``kernels/dic_subset_icgn.cu``).

:func:`ebsdxc.icgn.register` is the general engine (homographies, quadratic warps, weights,
pixels leaving the image, any template): each iteration is a kernel for the sums plus array
operations and a wait for the device to decide which problems are still active. For the
commonest DIC case -- square subsets, unit weights, the affine shape function, a subset that
leaves the frame fails -- one block per subset builds its template (values, exact B-spline
gradients, Hessian and its inverse) and iterates to convergence without returning to the host.
It computes what ``make_templates`` + ``register`` compute (same float32 rounding of the template,
float64 sums), so the two agree to rounding (``tests/test_subset_icgn.py``).
"""

from __future__ import annotations

import numpy as np

from . import icgn
from .kernel_loader import get_function

__all__ = ["register_subsets", "NO_CONTRAST", "MAX_HALF"]

#: Status of a subset whose reference pixels are all equal (no template).
NO_CONTRAST = 5
#: Largest half-side of a subset (61 px): its pixel data fill 74 KB of shared memory.
MAX_HALF = 30


def register_subsets(reference, reference_coefficients, coefficients, points, *, subset: int, initial,
                     max_iterations: int, tolerance: float):
    """Affine IC-GN of the subsets centred on ``points`` (N, 2) [x, y] px (CuPy arrays throughout).

    Parameters
    ----------
    reference : (H, W) float32
        The reference image (template values).
    reference_coefficients, coefficients : (H, W) float32
        Cubic B-spline coefficients of the reference and of the frame
        (:func:`ebsdxc.icgn.spline_coefficients`).
    points : (N, 2) float64
        Subset centres; the subset is the ``subset`` x ``subset`` pixels about ``rint(points)``, its
        warp acts in coordinates ``(x - points) / (subset // 2)`` (as :mod:`ebsdxc.dic` makes them).
    initial : (N, 3, 3) float64
        Starting affine warps in those coordinates.

    Returns
    -------
    warp : (N, 3, 3) float64 (NaN where it failed), zncc (N,) float32, iterations (N,) int16,
    status (N,) uint8: the ``ebsdxc.icgn`` codes, or :data:`NO_CONTRAST`.
    """
    import cupy as cp

    half = int(subset) // 2
    if not (int(subset) % 2 == 1 and 1 <= half <= MAX_HALF):
        raise ValueError(f"subset must be odd, from 3 to {2 * MAX_HALF + 1} px, got {subset!r}")
    pts = cp.asarray(points, dtype=cp.float64).reshape(-1, 2)
    n = int(pts.shape[0])
    h, w = (int(v) for v in reference.shape)
    if n == 0:
        return (cp.zeros((0, 3, 3)), cp.zeros(0, cp.float32), cp.zeros(0, cp.int16), cp.zeros(0, cp.uint8))
    centre = cp.rint(pts).astype(cp.int32)
    p0 = icgn.warp_parameters(cp.asarray(initial, dtype=cp.float64).reshape(n, 3, 3))[:, :6]
    params = cp.empty((n, 6), cp.float64)
    zncc = cp.empty(n, cp.float32)
    its = cp.empty(n, cp.int16)
    status = cp.empty(n, cp.uint8)
    fn = get_function("dic_subset_icgn.cu", "dic_subset_icgn", defines=(("HALF", half),))
    side = 2 * half + 1
    smem = 5 * side * side * 4
    if smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = smem
    threads = 256 if side * side >= 512 else 128
    fn((n,), (threads,),
       (cp.ascontiguousarray(reference, dtype=cp.float32), cp.ascontiguousarray(reference_coefficients),
        cp.ascontiguousarray(coefficients), np.int32(h), np.int32(w), centre, cp.ascontiguousarray(pts),
        np.float64(half), cp.ascontiguousarray(p0), np.int32(max_iterations), np.float64(tolerance),
        params, zncc, its, status), shared_mem=smem)
    return icgn.parameters_to_warp(params, "affine"), zncc, its, status
