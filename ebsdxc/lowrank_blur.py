"""A separable Gaussian low-pass as four matrix products, for the dynamic background on the GPU.

:meth:`ebsdxc.preprocess.PatternPreprocessor`'s blur reflect-pads a pattern, multiplies its
spectrum by a Gaussian and crops it back. Along one axis that is a fixed ``n x n`` operator;
with only the ``K`` frequencies above a tolerance kept (the band), its rank is ``2K - 1``: 103
at 512 px for a 12 px blur, 61 at 256 px. So the blur is ``Gy (Fy X Fx^T) Gx^T`` with ``F``
``(r, n)`` (the pad folded in) and ``G`` ``(n, r)`` (:func:`lowpass_factors`): four products
of ``n^2 r`` multiply-adds at most, which on the GPU take less time than the band's FFTs where
the rank is low (H200, 512 patterns of 512x512: 2.6 against 4.3 ms; BENCHMARKS.md, session 32).

The products are our own kernel (``kernels/lowrank_blur.cu``), not cuBLAS: cuBLAS picks its
kernels, and so its rounding, by a product's sizes, so a pattern's blur would depend on its
batch. Each pattern is centred on its mean first and the mean added back through a spare slot
of the factors (a blur keeps constants), so float32's rounding scales with the pattern's
contrast, not with its level.
"""

from __future__ import annotations

import numpy as np

from .kernel_loader import NULL_POINTER, get_function

__all__ = ["lowpass_factors", "with_mean_slot", "LowRankBlur", "MAX_RANK"]

#: Above this rank of an axis's operator the FFTs stay cheaper: with the mean's slot, up to 128
#: columns fill one tile of the products; past it, two (H200: 512 px, 8 px, rank 147: 5.2 ms
#: against the FFTs' 4.6 ms for 512 patterns; 1024 px, 20 px, rank 119: 2.6 against 3.7 ms).
MAX_RANK = 127

_TYPES = {np.dtype(np.float32): "float", np.dtype(np.uint16): "unsigned short", np.dtype(np.int16): "short",
          np.dtype(np.uint8): "unsigned char", np.dtype(np.int32): "int", np.dtype(np.uint32): "unsigned int"}
_PRODUCTS = tuple(f"batched_products<{t}, {bn}>" for t in _TYPES.values() for bn in (64, 128))
_MEANS = tuple(f"pattern_means<{t}>" for t in _TYPES.values())
_TILE = 128
_MAX_GRID_Z = 65535


def lowpass_factors(n: int, before: int, after: int, sigma: float, tolerance: float):
    """One axis of the Gaussian low-pass as float64 factors ``(F (r, n), G (n, r))``, ``G @ F``
    the operator.

    The operator: the line reflect-padded (as ``np.pad(mode="reflect")``) by ``before`` and
    ``after``, its spectrum on the padded length ``N`` multiplied by the Gaussian of std
    ``sigma`` px, the frequencies where that is below ``tolerance`` of its peak left out, the
    inverse cropped to the line. ``F`` gives the real and imaginary parts of the kept
    frequencies of the padded line; ``G`` the cropped inverse with the Gaussian. None where
    the band reaches the Nyquist frequency (not this form, and no smaller than the FFTs).
    """
    N = n + before + after
    k = np.arange(N // 2 + 1)
    g = np.exp(-2.0 * np.pi**2 * sigma**2 * (k / N) ** 2)
    K = int(np.flatnonzero(g > tolerance * g[0])[-1]) + 1
    if 2 * (K - 1) >= N:
        return None
    p = np.arange(N)
    src = p - before
    src = np.where(src < 0, -src, np.where(src >= n, 2 * (n - 1) - src, src))  # np.pad's "reflect"
    phase = 2.0 * np.pi * np.outer(k[:K], p) / N
    cos = np.stack([np.bincount(src, weights=c, minlength=n) for c in np.cos(phase)])
    sin = np.array([np.bincount(src, weights=-s, minlength=n) for s in np.sin(phase[1:])]).reshape(K - 1, n)
    out = phase[:, before:before + n]
    G = np.concatenate([g[0] * np.cos(out[:1]), 2.0 * g[1:K, None] * np.cos(out[1:]),
                        -2.0 * g[1:K, None] * np.sin(out[1:])]).T / N
    return np.concatenate([cos, sin]), G


class LowRankBlur:
    """The low-pass of :func:`lowpass_factors` on both axes of (B, H, W) CuPy patterns.

    Parameters
    ----------
    fy, fx : tuple of (F, G)
        Each axis's factors, from :func:`lowpass_factors` (H and W long).

    Calling it with (B, H, W) patterns (float32 or an integer type, converted as read) gives
    the (B, H, W) float32 blur. A pattern's result does not depend on the others in its batch.
    """

    def __init__(self, fy, fx):
        import cupy as cp

        self.shape = (fy[1].shape[0], fx[1].shape[0])
        self.iy, self.ix = len(fy[0]), len(fx[0])  # the spare slots: the mean's row and column
        self.Fy, self.FxT, self.Gy, self.GxT = (cp.asarray(m, dtype=cp.float32) for m in with_mean_slot(fy, fx))

    @property
    def rank(self) -> tuple[int, int]:
        """Each axis's rank, the mean's slot included."""
        return self.Fy.shape[0], self.FxT.shape[1]

    def __call__(self, x):
        import cupy as cp

        B, H, W = x.shape
        if (H, W) != self.shape:
            raise ValueError(f"patterns of {H}x{W} px given to a blur made for {self.shape[0]}x{self.shape[1]}")
        if x.dtype not in _TYPES:
            x = x.astype(cp.float32)
        x = cp.ascontiguousarray(x)
        if B <= _MAX_GRID_Z:
            return self._blur(x)
        # a launch's grid takes at most 65,535 patterns; each pattern's result is its own anyway
        return cp.concatenate([self._blur(x[s:s + _MAX_GRID_Z]) for s in range(0, B, _MAX_GRID_Z)])

    def _blur(self, x):
        import cupy as cp

        B, H, W = x.shape
        ry, rx = self.rank
        t = _TYPES[x.dtype]
        mean = cp.empty(B, dtype=cp.float32)
        if B:
            get_function("lowrank_blur.cu", f"pattern_means<{t}>", name_expressions=_MEANS)(
                (B,), (256,), (x, np.int64(H * W), mean))
        t1 = _products(x, H * W, W, mean, self.FxT, 0, rx, H, rx, W, B, t)  # (B, H, rx)
        t2 = _products(self.Fy, 0, H, None, t1, H * rx, rx, ry, rx, H, B, "float")  # (B, ry, rx)
        t2[:, self.iy, self.ix] = mean
        t3 = _products(self.Gy, 0, ry, None, t2, ry * rx, rx, H, rx, ry, B, "float")  # (B, H, rx)
        return _products(t3, H * rx, rx, None, self.GxT, 0, W, H, W, rx, B, "float")  # (B, H, W)


def with_mean_slot(fy, fx):
    """The four float64 operands ``(Fy, Fx^T, Gy, Gx^T)`` of the blur of centred patterns, each
    with one more row or column: ``Fy``'s and ``Fx^T``'s are zeros (a centred pattern's products
    leave the slot ``(len(Fy), len(Fx))`` at zero, where the mean is put), ``Gy``'s and ``Gx^T``'s
    ones (which add the mean back to every pixel). So with ``T = Fy (X - m) Fx^T``,
    ``T[iy, ix] = m``: ``Gy T Gx^T`` is the blur of ``X``."""
    (Fy, Gy), (Fx, Gx) = fy, fx
    iy, ix = len(Fy), len(Fx)
    H, W = Gy.shape[0], Gx.shape[0]
    fy_ = np.zeros((iy + 1, H))
    fy_[:iy] = Fy
    fxt = np.zeros((W, ix + 1))
    fxt[:, :ix] = Fx.T
    gy = np.zeros((H, iy + 1))
    gy[:, :iy] = Gy
    gy[:, iy] = 1.0
    gxt = np.zeros((ix + 1, W))
    gxt[:ix] = Gx.T
    gxt[ix] = 1.0
    return fy_, fxt, gy, gxt


def _products(a, sa, lda, shift, b, sb, ldb, M, N, K, batch, a_type):
    """(batch, M, N) float32 = (a - shift) @ b per pattern, with batch strides ``sa``, ``sb``."""
    import cupy as cp

    out = cp.empty((batch, M, N), dtype=cp.float32)
    if batch:
        bn = 64 if N <= 64 else 128
        grid = (-(-N // bn), -(-M // _TILE), batch)
        get_function("lowrank_blur.cu", f"batched_products<{a_type}, {bn}>", name_expressions=_PRODUCTS)(
            grid, (256,), (a, np.int64(sa), np.int32(lda), NULL_POINTER if shift is None else shift, b,
                           np.int64(sb), np.int32(ldb), out, np.int64(M * N), np.int32(N), np.int32(M),
                           np.int32(N), np.int32(K)))
    return out
