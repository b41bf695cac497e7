"""Inverse-compositional Gauss-Newton (IC-GN) registration, batched, on NumPy or CuPy.

One engine for whole-pattern HR-EBSD refinement (a homography per pattern) and DIC subsets
(an affine warp per subset): a *template* is a set of reference pixels with weights; a
*problem* matches one template against one image under a warp. Many problems run together,
on the array module of the images.

The model
---------
Template pixel ``x`` is written in normalised coordinates ``u = (x - o) / s`` about the
template's origin ``o`` with scale ``s`` (for a pattern: its centre and half its size), so
the parameters of a warp are of comparable size. A warp is a 3x3 matrix ``H`` acting on
``(u, v, 1)``; the template pixel shows in the image at ``o + s W(u; H)`` with
``W = (H u)_{1,2} / (H u)_3``. Shape functions:

- ``"homography"``: 8 parameters ``H = [[1 + p0, p1, p2], [p3, 1 + p4, p5], [p6, p7, 1]]``.
  The projection of a deformed crystal onto a flat screen is exactly a homography (Ernould
  et al. 2020), so one warp covers the whole pattern, rotations of 10 degrees included.
- ``"affine"``: 6 parameters (the first six), the first-order subset shape function of DIC.
- ``"quadratic"``: 12 parameters, the second-order subset shape function of DIC: the six affine
  ones and ``p6 .. p11 = (u_uu, u_uv, u_vv, v_uu, v_uv, v_vv)`` with
  ``u' = (1 + p0) u + p1 v + p2 + p6 u^2 / 2 + p7 u v + p8 v^2 / 2`` (and ``v'`` alike with
  ``p3, p4, p5, p9, p10, p11``). Its warp is the 6x6 matrix of Gao et al. (2015) acting on
  ``(u^2, u v, v^2, u, v, 1)``: rows 4 and 5 give ``u'`` and ``v'`` exactly, rows 1-3 their
  products to second order. Matrix products compose and invert warps (exactly for affine
  ones, to second order otherwise), which is what the inverse-compositional update needs; after
  each update the parameters are read from rows 4 and 5 and the matrix is rebuilt.

The criterion is the weighted zero-mean normalised sum of squared differences (ZNSSD,
robust to the brightness and contrast of each pattern), minimised by inverse-compositional
Gauss-Newton (Baker & Matthews 2004; Pan et al. 2013): the Jacobian ``J = grad f . dW/dp``
and the Hessian ``sum w J^T J`` are the template's, computed once; each iteration warps the
image, takes ``dp = -Hess^-1 sum w J^T (f~ - (df/dg) g~)`` and composes ``H <- H dH(dp)^-1``.

Interpolation
-------------
Cubic B-spline (images prefiltered to spline coefficients once, scipy's / CuPy's
``spline_filter`` with mirror boundaries), not Keys bicubic: the B-spline interpolant is
C2-smooth and its error at sub-pixel shifts is several times smaller for the smooth,
band-limited content of Kikuchi patterns (Schreier, Braasch & Sutton 2000, who show the
systematic phase error falling with spline order), which is what sub-1e-5 strain needs.
The template's gradients are the exact derivatives of its own B-spline at the pixels.
The sums of an iteration run in one fused CUDA kernel on the GPU (``kernels/icgn.cu``) and in
vectorised NumPy on the CPU, in float64; images and templates are float32. On the GPU the rest
of an iteration (the step, its composition, convergence) is a second kernel for 3x3 warps, so
an iteration waits for the device once; the starting-warp fit (``kernels/warp_fit.cu``) and
the B-spline coefficients (``kernels/spline_prefilter.cu``) are kernels too. The NumPy code is
the oracle each of them is tested against.

Pixels whose warped position leaves the image are left out, exactly: for such a problem the
template's own constants (mean, norm, ``sum w J f~``, ``sum w J``, the Hessian) are recomputed
over the pixels still inside, so the criterion solved is the ZNSSD of the overlap. A problem
that loses more than ``max_outside`` of its template's weight fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import numpy as np

from .backend import array_module

__all__ = ["SHAPE_FUNCTIONS", "Templates", "IcgnResult", "spline_coefficients", "make_templates",
           "register", "warp_points", "parameters_to_warp", "warp_parameters", "as_quadratic", "fit_warp",
           "translation_warp",
           "ICGN_CONVERGED", "ICGN_MAX_ITERATIONS", "ICGN_FAILED", "ICGN_LEFT_IMAGE", "ICGN_NO_START",
           "ICGN_DESCRIPTIONS"]

#: Number of parameters of each shape function.
SHAPE_FUNCTIONS = {"homography": 8, "affine": 6, "quadratic": 12}

ICGN_CONVERGED = 0
ICGN_MAX_ITERATIONS = 1
ICGN_FAILED = 2
ICGN_LEFT_IMAGE = 3
ICGN_NO_START = 4
ICGN_DESCRIPTIONS = {
    ICGN_CONVERGED: "converged",
    ICGN_MAX_ITERATIONS: "not converged within max_iterations",
    ICGN_FAILED: "failed: no contrast in the image, or the warp became singular or not finite",
    ICGN_LEFT_IMAGE: "the warp moved more than max_outside of the template's weight off the image",
    ICGN_NO_START: "no starting warp (too few valid subregion matches to start from)",
}

_MAX_GRID_Y = 65535  # CUDA's limit on a grid's rows: the sums kernel takes problems in parts of this many
_CHUNK_PIXELS = 1 << 22  # host path: problems x pixels per vectorised chunk (a few 100 MB of temporaries)


def _n_param(shape_function: str) -> int:
    try:
        return SHAPE_FUNCTIONS[shape_function]
    except KeyError:
        raise ValueError(f"shape_function must be one of {sorted(SHAPE_FUNCTIONS)}, got {shape_function!r}") from None


# --------------------------------------------------------------------------- interpolation


def spline_coefficients(images):
    """Cubic B-spline coefficients of images ``(..., H, W)`` (mirror boundaries), float32.

    Sampling the returned coefficients with the cubic B-spline basis reproduces the images
    at the pixels and interpolates smoothly between them. NumPy in, NumPy out; CuPy in, CuPy out.
    """
    xp = array_module(images)
    if xp is not np:
        return _spline_coefficients_gpu(images)
    a = np.asarray(images, dtype=np.float64)
    if a.ndim < 2:
        raise ValueError(f"images must have at least 2 dimensions (H, W), got shape {a.shape}")
    from scipy.ndimage import spline_filter1d

    for axis in (-2, -1):
        if a.shape[axis] > 1:
            a = spline_filter1d(a, order=3, axis=axis, mode="mirror", output=np.float64)
    return a.astype(np.float32)


def _spline_coefficients_gpu(images):
    """:func:`spline_coefficients` on the GPU (kernels/spline_prefilter.cu): the columns' pass
    into float64, the rows' pass into float32; float32 and float64 images are read as they are."""
    import cupy as cp

    from .kernel_loader import get_function

    a = images if images.dtype in (cp.float32, cp.float64) else images.astype(cp.float32)
    if a.ndim < 2:
        raise ValueError(f"images must have at least 2 dimensions (H, W), got shape {a.shape}")
    shape = a.shape
    h, w = shape[-2:]
    a = cp.ascontiguousarray(a).reshape(-1, h, w)
    n = a.size
    if n == 0:
        return cp.empty(shape, dtype=cp.float32)
    names = ("spline_prefilter<float, double>", "spline_prefilter<double, double>", "spline_prefilter<double, float>")
    rows = n // w

    def run(src, dst_dtype, along_x):
        dst = cp.empty(src.shape, dtype=dst_dtype)
        quads = rows * -(-w // 4) if along_x else (n // (h * w)) * -(-h // 4) * w  # 4 outputs a thread
        name = f"spline_prefilter<{'float' if src.dtype == cp.float32 else 'double'}, " \
               f"{'float' if dst_dtype == cp.float32 else 'double'}>"
        get_function("spline_prefilter.cu", name, name_expressions=names)(
            (min(-(-quads // 256), 1 << 20),), (256,), (src, dst, np.int64(quads), np.int32(h), np.int32(w),
                                                         np.int32(along_x)))
        return dst

    a = run(a, cp.float64, 0) if h > 1 else a.astype(cp.float64)
    a = run(a, cp.float32, 1) if w > 1 else a.astype(cp.float32)
    return a.reshape(shape)


def _mirror(i, n, xp):
    if n == 1:
        return xp.zeros_like(i)
    period = 2 * (n - 1)
    i = i % period
    return xp.where(i < n, i, period - i)


def _bspline_weights(t, xp):
    t2 = t * t
    t3 = t2 * t
    s = 1.0 - t
    return (s * s * s / 6.0, (3.0 * t3 - 6.0 * t2 + 4.0) / 6.0, (-3.0 * t3 + 3.0 * t2 + 3.0 * t + 1.0) / 6.0,
            t3 / 6.0)


def _sample(coef, image, x, y, xp):
    """B-spline samples of ``coef[image]`` at (x, y) (all (C, N)), and the outside mask."""
    _, h, w = coef.shape
    outside = ~((x >= 0) & (x <= w - 1) & (y >= 0) & (y <= h - 1))
    x = xp.nan_to_num(xp.clip(x, 0.0, w - 1.0))
    y = xp.nan_to_num(xp.clip(y, 0.0, h - 1.0))
    fx, fy = xp.floor(x), xp.floor(y)
    wx = _bspline_weights(x - fx, xp)
    wy = _bspline_weights(y - fy, xp)
    ix = fx.astype(np.int64) - 1
    iy = fy.astype(np.int64) - 1
    flat = coef.reshape(-1)
    base = image.astype(np.int64)[:, None] * (h * w)
    cols = [_mirror(ix + a, w, xp) for a in range(4)]
    g = 0.0
    for b in range(4):
        row = base + _mirror(iy + b, h, xp) * w
        r = 0.0
        for a in range(4):
            r = r + wx[a] * flat[row + cols[a]]
        g = g + wy[b] * r
    return g, outside


# --------------------------------------------------------------------------- warps


def _quadratic_matrix(p, xp):
    """Gao et al.'s 6x6 warp matrix ``(..., 6, 6)`` of quadratic parameters ``(..., 12)``."""
    A, B, C = 1.0 + p[..., 0], p[..., 1], p[..., 2]
    D, E, F = p[..., 3], 1.0 + p[..., 4], p[..., 5]
    q6, q7, q8 = 0.5 * p[..., 6], p[..., 7], 0.5 * p[..., 8]
    q9, q10, q11 = 0.5 * p[..., 9], p[..., 10], 0.5 * p[..., 11]
    rows = [
        [A * A + 2 * C * q6, 2 * A * B + 2 * C * q7, B * B + 2 * C * q8, 2 * A * C, 2 * B * C, C * C],
        [A * D + C * q9 + F * q6, A * E + B * D + C * q10 + F * q7, B * E + C * q11 + F * q8, A * F + C * D,
         B * F + C * E, C * F],
        [D * D + 2 * F * q9, 2 * D * E + 2 * F * q10, E * E + 2 * F * q11, 2 * D * F, 2 * E * F, F * F],
        [q6, q7, q8, A, B, C],
        [q9, q10, q11, D, E, F],
    ]
    M = xp.zeros(p.shape[:-1] + (6, 6), dtype=xp.float64)
    for i, row in enumerate(rows):
        for j, value in enumerate(row):
            M[..., i, j] = value
    M[..., 5, 5] = 1.0
    return M


def warp_parameters(H):
    """Parameter vectors ``(..., n)`` of warps: ``(..., 3, 3)`` as a homography (8), ``(..., 6, 6)``
    as quadratic (12); the inverse of :func:`parameters_to_warp`."""
    xp = array_module(H)
    H = xp.asarray(H, dtype=xp.float64)
    if H.shape[-1] == 6:
        r, s = H[..., 3, :], H[..., 4, :]
        return xp.stack([r[..., 3] - 1.0, r[..., 4], r[..., 5], s[..., 3], s[..., 4] - 1.0, s[..., 5],
                         2 * r[..., 0], r[..., 1], 2 * r[..., 2], 2 * s[..., 0], s[..., 1], 2 * s[..., 2]], -1)
    H = H / H[..., 2:3, 2:3]
    return xp.stack([H[..., 0, 0] - 1.0, H[..., 0, 1], H[..., 0, 2], H[..., 1, 0], H[..., 1, 1] - 1.0, H[..., 1, 2],
                     H[..., 2, 0], H[..., 2, 1]], -1)


def as_quadratic(H):
    """Affine warps ``(..., 3, 3)`` as quadratic ones ``(..., 6, 6)`` (a start for quadratic IC-GN);
    quadratic warps are returned as they are."""
    xp = array_module(H)
    H = xp.asarray(H, dtype=xp.float64)
    if H.shape[-1] == 6:
        return H
    p = warp_parameters(H)[..., :6]
    return _quadratic_matrix(xp.concatenate([p, xp.zeros(p.shape[:-1] + (6,))], -1), xp)


def parameters_to_warp(p, shape_function: str = "homography"):
    """Warp matrices ``(..., 3, 3)`` (``(..., 6, 6)`` for ``"quadratic"``) of parameter vectors
    ``(..., n)`` (see the module docstring)."""
    xp = array_module(p)
    n = _n_param(shape_function)
    p = xp.asarray(p, dtype=xp.float64)
    if p.shape[-1] != n:
        raise ValueError(f"a {shape_function} has {n} parameters, got {p.shape[-1]}")
    if n == 12:
        return _quadratic_matrix(p, xp)
    H = xp.zeros(p.shape[:-1] + (3, 3), dtype=xp.float64)
    H[..., 0, 0] = 1.0 + p[..., 0]
    H[..., 0, 1] = p[..., 1]
    H[..., 0, 2] = p[..., 2]
    H[..., 1, 0] = p[..., 3]
    H[..., 1, 1] = 1.0 + p[..., 4]
    H[..., 1, 2] = p[..., 5]
    if n == 8:
        H[..., 2, 0] = p[..., 6]
        H[..., 2, 1] = p[..., 7]
    H[..., 2, 2] = 1.0
    return H


def _monomials(u, v, xp):
    return xp.stack([u * u, u * v, v * v, u, v, xp.ones_like(u)], -1)


def warp_points(H, uv):
    """Apply warps ``(..., 3, 3)`` or quadratic ``(..., 6, 6)`` to normalised points ``(..., m, 2)``
    -> ``(..., m, 2)``."""
    xp = array_module(H)
    uv = xp.asarray(uv, dtype=xp.float64)
    if H.shape[-1] == 6:
        xi = _monomials(uv[..., 0], uv[..., 1], xp)
        return xi @ xp.swapaxes(H[..., 3:5, :], -1, -2)
    q = uv @ xp.swapaxes(H[..., :, :2], -1, -2) + H[..., None, :, 2]
    return q[..., :2] / q[..., 2:3]


def translation_warp(shift_uv, shape_function: str = "homography"):
    """Warps ``(..., 3, 3)`` (``(..., 6, 6)`` for ``"quadratic"``) that shift by ``(..., 2)``
    normalised units."""
    xp = array_module(shift_uv)
    s = xp.asarray(shift_uv, dtype=xp.float64)
    H = xp.broadcast_to(xp.eye(3), s.shape[:-1] + (3, 3)).copy()
    H[..., 0, 2] = s[..., 0]
    H[..., 1, 2] = s[..., 1]
    return as_quadratic(H) if _n_param(shape_function) == 12 else H


def _masked_median(a, mask, xp):
    """Median of ``a`` (B, m) over ``mask`` per row; 0 for empty rows (no warning)."""
    s = xp.sort(xp.where(mask, a, xp.inf), axis=1)
    k = mask.sum(axis=1)
    lo = xp.take_along_axis(s, xp.maximum((k - 1) // 2, 0)[:, None], axis=1)[:, 0]
    hi = xp.take_along_axis(s, xp.maximum(k // 2, 0)[:, None], axis=1)[:, 0]
    return xp.where(k > 0, 0.5 * (lo + hi), 0.0)


def fit_warp(uv, uv_moved, valid, *, shape_function: str = "homography", reject: float = 4.0,
             floor: float = 0.0):
    """Least-squares warps from point correspondences, rejecting outliers one at a time.

    Parameters
    ----------
    uv : (m, 2) array
        Points in the template's normalised coordinates.
    uv_moved : (B, m, 2) array
        Where each point was found, per problem (normalised coordinates; NaN where unknown).
    valid : (B, m) bool array
        Which correspondences to use.
    shape_function : str
    reject : float
        While the worst used point's residual exceeds ``reject`` robust standard deviations
        (``median / 1.1774``, as for a 2-D Gaussian error) and ``floor``, it is dropped and the
        warp refitted (the rule of :func:`ebsdxc.strain.fit_strain`).
    floor : float
        Residuals (normalised units) below this are never rejected.

    Returns
    -------
    H : (B, 3, 3) float64
        NaN where fewer points than a warp needs (4 for a homography, 3 affine) were valid,
        or where the used points do not determine one (all on one line).
    used : (B, m) bool
    """
    xp = array_module(uv_moved)
    n = _n_param(shape_function)
    if n == 12:
        raise ValueError("fit_warp fits homographies and affine warps; start quadratic IC-GN from an affine "
                         "fit (as_quadratic)")
    uv = xp.asarray(uv, dtype=xp.float64)
    q = xp.asarray(uv_moved, dtype=xp.float64)
    if xp is not np:
        return _fit_warp_gpu(uv, q, xp.asarray(valid, dtype=bool), n, float(reject), float(floor))
    used = xp.asarray(valid, dtype=bool) & xp.isfinite(q).all(axis=-1)
    q = xp.where(used[..., None], q, 0.0)
    u, v = uv[:, 0], uv[:, 1]
    B, m = q.shape[:2]
    zero = xp.zeros((B, m), dtype=xp.float64)
    one = zero + 1.0
    uu, vv = zero + u, zero + v
    # (1 + p0) u + p1 v + p2 - u' (p6 u + p7 v) = u' (1 + ...): linear in p for a fixed u'
    rows_u = [uu, vv, one, zero, zero, zero]
    rows_v = [zero, zero, zero, uu, vv, one]
    if n == 8:
        rows_u += [-q[..., 0] * u, -q[..., 0] * v]
        rows_v += [-q[..., 1] * u, -q[..., 1] * v]
    A = xp.concatenate([xp.stack(rows_u, -1), xp.stack(rows_v, -1)], axis=1)  # (B, 2m, n)
    b = xp.concatenate([q[..., 0] - u, q[..., 1] - v], axis=1)
    need = 4 if n == 8 else 3
    enough = used.sum(axis=1) >= need
    H = None
    for _ in range(m):
        w = xp.concatenate([used, used], axis=1).astype(xp.float64)
        Aw = A * w[..., None]
        N = xp.swapaxes(Aw, 1, 2) @ A + (~enough)[:, None, None] * xp.eye(n)
        p = _solve_each(N, xp.swapaxes(Aw, 1, 2) @ b[..., None])[..., 0]
        H = parameters_to_warp(p, shape_function)
        res = xp.linalg.norm(warp_points(H, uv) - q, axis=-1)
        med = _masked_median(res, used, xp)
        sigma = med / 1.1774100225154747
        thr = xp.maximum(reject * sigma, floor)
        worst = xp.argmax(xp.where(used, res, -1.0), axis=1)
        worst_res = xp.take_along_axis(res, worst[:, None], axis=1)[:, 0]
        drop = enough & (worst_res > thr) & (used.sum(axis=1) > need + 1)
        if not bool(drop.any()):
            break
        used[xp.arange(B)[drop], worst[drop]] = False
    ok = enough & xp.isfinite(H).all(axis=(1, 2))  # singular systems solve to NaN: no warp
    H = xp.where(ok[:, None, None], H, xp.nan)
    return H, used & ok[:, None]


def _solve_each(N, rhs):
    """``numpy.linalg.solve`` of a stack, with NaN for the systems that are singular (all used
    points on one line, say) in place of an error for the whole stack: as the GPU fit's
    elimination gives."""
    try:
        return np.linalg.solve(N, rhs)
    except np.linalg.LinAlgError:
        out = np.full(np.broadcast_shapes(N.shape[:-1], rhs.shape[:-1]) + rhs.shape[-1:], np.nan)
        for i in range(N.shape[0]):
            with contextlib.suppress(np.linalg.LinAlgError):
                out[i] = np.linalg.solve(N[i], rhs[i])
        return out


def _fit_warp_gpu(uv, q, valid, n, reject, floor):
    """:func:`fit_warp` on the GPU, a thread per problem (kernels/warp_fit.cu)."""
    import cupy as cp

    from .kernel_loader import get_function

    B, m = q.shape[:2]
    H = cp.empty((B, 3, 3), dtype=cp.float64)
    used = cp.empty((B, m), dtype=cp.uint8)
    if B == 0:
        return H, used.astype(bool)
    size = 8
    while size < m:
        size *= 2
    fn = get_function("warp_fit.cu", "fit_warp", defines=(("NPARAM", n), ("MAXM", size)))
    fn((-(-B // 64),), (64,), (cp.ascontiguousarray(uv), cp.ascontiguousarray(q),
                              cp.ascontiguousarray(cp.broadcast_to(valid, (B, m)), dtype=cp.uint8), np.int32(B),
                              np.int32(m), np.float64(reject), np.float64(floor), H, used))
    return H, used.view(bool)


# --------------------------------------------------------------------------- templates


@dataclass
class Templates:
    """Reference pixels prepared once for IC-GN (arrays on one array module).

    ``u``, ``v`` (T, N) normalised coordinates; ``f`` (T, N) weighted-zero-mean values;
    ``fu``, ``fv`` (T, N) gradients in normalised units; ``w`` (T, N) weights (0 = unused
    padding); float32. ``origin`` (T, 2) [x, y] px and ``scale`` (T,) float64. Per template
    (float64): ``sum_w``, ``delta_f`` (``sqrt(sum w f^2)``), ``a`` = ``sum w J f``, ``c`` =
    ``sum w J`` (T, n) and ``hessian_inv`` (T, n, n). ``corners`` (T, 4, 2): the template's
    bounding box (normalised), where convergence is measured.
    """

    shape_function: str
    u: object
    v: object
    f: object
    fu: object
    fv: object
    w: object
    origin: object
    scale: object
    sum_w: object
    delta_f: object
    a: object
    c: object
    hessian_inv: object
    corners: object

    @property
    def n_param(self) -> int:
        return SHAPE_FUNCTIONS[self.shape_function]

    @property
    def n_templates(self) -> int:
        return int(self.u.shape[0])

    @property
    def n_pixels(self) -> int:
        return int(self.u.shape[1])


def _jacobian(fu, fv, u, v, n, xp):
    cols = [fu * u, fu * v, fu, fv * u, fv * v, fv]
    if n == 8:
        radial = fu * u + fv * v
        cols += [-radial * u, -radial * v]
    elif n == 12:
        uu, uv, vv = 0.5 * u * u, u * v, 0.5 * v * v
        cols += [fu * uu, fu * uv, fu * vv, fv * uu, fv * uv, fv * vv]
    return xp.stack(cols, axis=-1)


def _gradients(coef, image, x, y, xp):
    """Exact x and y derivatives of the B-spline of ``coef[image]`` at integer pixels (C, N)."""
    _, h, w = coef.shape
    flat = coef.reshape(-1)
    base = image.astype(np.int64)[:, None] * (h * w)
    xi, yi = x.astype(np.int64), y.astype(np.int64)

    def at(dx, dy):
        return flat[base + _mirror(yi + dy, h, xp) * w + _mirror(xi + dx, w, xp)].astype(xp.float64)

    # At a node the basis values are (1, 4, 1) / 6 and the derivatives (-1, 0, 1) / 2.
    smooth_y = [(at(d, -1) + 4.0 * at(d, 0) + at(d, 1)) / 6.0 for d in (-1, 1)]
    gx = (smooth_y[1] - smooth_y[0]) / 2.0
    smooth_x = [(at(-1, d) + 4.0 * at(0, d) + at(1, d)) / 6.0 for d in (-1, 1)]
    gy = (smooth_x[1] - smooth_x[0]) / 2.0
    return gx, gy


def make_templates(images, *, pixels, weights=None, image_index=None, origin, scale,
                   shape_function: str = "homography", coefficients=None) -> Templates:
    """Prepare IC-GN templates from reference images.

    Parameters
    ----------
    images : (M, H, W) array
        Reference images (float; NumPy or CuPy: the templates live on the same module).
    pixels : (N, 2) or (T, N, 2) int array
        Template pixels ``[x, y]``: one set shared by every template, or one per template.
    weights : (N,) or (T, N) array, optional
        Non-negative pixel weights (0 excludes a pixel); default 1.
    image_index : (T,) int array, optional
        The image each template is cut from; default ``arange(M)`` (template k from image k).
    origin : (2,) or (T, 2) array
        ``[x, y]`` px about which the warp acts (its normalised coordinates' origin).
    scale : float or (T,) array
        Pixels per normalised unit.
    shape_function : {"homography", "affine", "quadratic"}
    coefficients : (M, H, W) array, optional
        The images' B-spline coefficients when already made (:func:`spline_coefficients`):
        many batches of subsets of one large image need them once.

    Returns
    -------
    Templates
    """
    xp = array_module(images)
    n = _n_param(shape_function)
    images = xp.asarray(images)
    if images.ndim != 3:
        raise ValueError(f"images must have shape (M, H, W), got {images.shape}")
    M, h, w = images.shape
    index = xp.arange(M) if image_index is None else xp.asarray(image_index, dtype=np.int64).reshape(-1)
    T = int(index.shape[0])
    pix = xp.asarray(pixels)
    if pix.ndim == 2:
        pix = xp.broadcast_to(pix, (T,) + pix.shape)
    if pix.ndim != 3 or pix.shape[0] != T or pix.shape[-1] != 2:
        raise ValueError(f"pixels must have shape (N, 2) or ({T}, N, 2), got {tuple(pixels.shape)}")
    N = int(pix.shape[1])
    if N == 0:
        raise ValueError("pixels is empty: a template needs pixels")
    px = pix[..., 0].astype(np.int64)
    py = pix[..., 1].astype(np.int64)
    if bool(((px < 0) | (px >= w) | (py < 0) | (py >= h)).any()):
        raise ValueError(f"pixels must lie inside the {h}x{w} images")
    wt = xp.ones((T, N), dtype=xp.float64) if weights is None else xp.asarray(weights, dtype=xp.float64)
    wt = xp.broadcast_to(wt, (T, N)).astype(xp.float32).astype(xp.float64)
    if bool((wt < 0).any()) or not bool(xp.isfinite(wt).all()):
        raise ValueError("weights must be finite and non-negative")
    if bool((wt.sum(axis=1) <= 0).any()):
        raise ValueError("every template needs a pixel of positive weight")
    origin = xp.broadcast_to(xp.asarray(origin, dtype=xp.float64), (T, 2))
    scale = xp.broadcast_to(xp.asarray(scale, dtype=xp.float64), (T,))
    if not bool((scale > 0).all()):
        raise ValueError("scale must be positive")

    coef = spline_coefficients(images) if coefficients is None else coefficients
    f = images.astype(xp.float64)[index[:, None], py, px]
    gx, gy = _gradients(coef, index, px, py, xp)
    u32 = ((px - origin[:, 0:1]) / scale[:, None]).astype(xp.float32)
    v32 = ((py - origin[:, 1:2]) / scale[:, None]).astype(xp.float32)
    fu32 = (gx * scale[:, None]).astype(xp.float32)
    fv32 = (gy * scale[:, None]).astype(xp.float32)
    sum_w = wt.sum(axis=1)
    fbar = (wt * f).sum(axis=1) / sum_w
    f32 = (f - fbar[:, None]).astype(xp.float32)
    # Constants from the float32 values the kernel reads, so both sides solve the same problem.
    u, v, fc, fu, fv = (a.astype(xp.float64) for a in (u32, v32, f32, fu32, fv32))
    fc = fc - (wt * fc).sum(axis=1, keepdims=True) / sum_w[:, None]
    f32 = fc.astype(xp.float32)
    fc = f32.astype(xp.float64)
    delta_f = xp.sqrt((wt * fc * fc).sum(axis=1))
    if not bool((delta_f > 0).all()):
        raise ValueError("a template has no contrast (constant over its pixels)")
    J = _jacobian(fu, fv, u, v, n, xp)  # (T, N, n)
    Jw = J * wt[..., None]
    hess = xp.swapaxes(Jw, 1, 2) @ J
    a = (Jw * fc[..., None]).sum(axis=1)
    c = Jw.sum(axis=1)
    try:
        hinv = xp.linalg.inv(hess)
    except np.linalg.LinAlgError:
        raise ValueError("a template's Hessian is singular: too few pixels or no gradient") from None
    if not bool(xp.isfinite(hinv).all()):
        raise ValueError("a template's Hessian is singular: too few pixels or no gradient")
    lo = xp.stack([u.min(axis=1), v.min(axis=1)], -1)
    hi = xp.stack([u.max(axis=1), v.max(axis=1)], -1)
    corners = xp.stack([lo, xp.stack([hi[:, 0], lo[:, 1]], -1), hi, xp.stack([lo[:, 0], hi[:, 1]], -1)], axis=1)
    # C order: the CUDA kernel indexes them as (T, N) rows
    per_pixel = [xp.ascontiguousarray(x) for x in (u32, v32, f32, fu32, fv32, wt.astype(xp.float32))]
    return Templates(shape_function, *per_pixel, xp.ascontiguousarray(origin), xp.ascontiguousarray(scale),
                     sum_w, delta_f, a, c, hinv, corners)


# --------------------------------------------------------------------------- the iteration


def _warped_pixels(tpl: Templates, t, H, xp):
    """Image pixel coordinates (C, N) of templates ``t`` under warps ``H`` (C, 3, 3) or (C, 6, 6)."""
    u = tpl.u[t].astype(xp.float64)
    v = tpl.v[t].astype(xp.float64)
    if H.shape[-1] == 6:
        r, s = H[:, 3], H[:, 4]
        up = r[:, 0:1] * u * u + r[:, 1:2] * u * v + r[:, 2:3] * v * v + r[:, 3:4] * u + r[:, 4:5] * v + r[:, 5:6]
        vp = s[:, 0:1] * u * u + s[:, 1:2] * u * v + s[:, 2:3] * v * v + s[:, 3:4] * u + s[:, 4:5] * v + s[:, 5:6]
        return tpl.origin[t, 0:1] + tpl.scale[t, None] * up, tpl.origin[t, 1:2] + tpl.scale[t, None] * vp, u, v
    den = H[:, 2, 0:1] * u + H[:, 2, 1:2] * v + H[:, 2, 2:3]
    up = (H[:, 0, 0:1] * u + H[:, 0, 1:2] * v + H[:, 0, 2:3]) / den
    vp = (H[:, 1, 0:1] * u + H[:, 1, 1:2] * v + H[:, 1, 2:3]) / den
    return tpl.origin[t, 0:1] + tpl.scale[t, None] * up, tpl.origin[t, 1:2] + tpl.scale[t, None] * vp, u, v


def _inside_constants(tpl: Templates, t, H, shape, xp):
    """The template constants of problems whose warp moved pixels off the image, over the
    pixels still inside: ``sum_w``, the shift of the template's mean, ``delta_f``, ``a``, ``c``,
    ``hessian_inv`` (each with a leading problem axis)."""
    h, w_img = shape
    n = tpl.n_param
    out = {k: [] for k in ("sum_w", "shift", "delta_f", "a", "c", "hessian_inv")}
    step = max(1, _CHUNK_PIXELS // (4 * tpl.n_pixels * n))
    for s in range(0, int(t.shape[0]), step):
        tt, hh = t[s:s + step], H[s:s + step]
        x, y, u, v = _warped_pixels(tpl, tt, hh, xp)
        inside = (x >= 0) & (x <= w_img - 1) & (y >= 0) & (y <= h - 1)
        w = xp.where(inside, tpl.w[tt].astype(xp.float64), 0.0)
        sw = w.sum(axis=1)
        f = tpl.f[tt].astype(xp.float64)
        shift = (w * f).sum(axis=1) / xp.where(sw > 0, sw, 1.0)
        f = f - shift[:, None]
        J = _jacobian(tpl.fu[tt].astype(xp.float64), tpl.fv[tt].astype(xp.float64), u, v, n, xp)
        Jw = J * w[..., None]
        hess = xp.swapaxes(Jw, 1, 2) @ J
        # a singular Hessian (almost nothing left inside) gives NaN steps: the problem fails
        ok = sw > 0
        hess = xp.where(ok[:, None, None], hess, xp.eye(n))
        hinv = xp.where(ok[:, None, None], xp.linalg.inv(hess), xp.nan)
        out["sum_w"].append(sw)
        out["shift"].append(shift)
        out["delta_f"].append(xp.sqrt((w * f * f).sum(axis=1)))
        out["a"].append((Jw * f[..., None]).sum(axis=1))
        out["c"].append(Jw.sum(axis=1))
        out["hessian_inv"].append(hinv)
    return {k: xp.concatenate(v) for k, v in out.items()}


def _sums_host(coef, tpl: Templates, tidx, midx, H):
    """(P, n + 4) float64 sums of one iteration (see kernels/icgn.cu), NumPy."""
    n = tpl.n_param
    P, N = len(tidx), tpl.n_pixels
    out = np.zeros((P, n + 4))
    step = max(1, _CHUNK_PIXELS // N)
    for s in range(0, P, step):
        t = tidx[s:s + step]
        m = midx[s:s + step]
        x, y, u, v = _warped_pixels(tpl, t, H[s:s + step], np)
        g, outside = _sample(coef, m, x, y, np)
        w = tpl.w[t].astype(np.float64)
        wg = np.where(outside, 0.0, w * g)
        J = _jacobian(tpl.fu[t].astype(np.float64), tpl.fv[t].astype(np.float64), u, v, n, np)
        out[s:s + step, 0] = wg.sum(axis=1)
        out[s:s + step, 1] = (wg * g).sum(axis=1)
        out[s:s + step, 2:2 + n] = np.einsum("cn,cnk->ck", wg, J)
        out[s:s + step, 2 + n] = (wg * tpl.f[t].astype(np.float64)).sum(axis=1)
        out[s:s + step, 3 + n] = (w * outside).sum(axis=1)
    return out


def _sums_kernel(coef, tpl: Templates):
    """The sums kernel with ``coef`` and ``tpl`` bound -> (launch, blocks): ``launch(tidx32,
    midx32, warp, active, partial)`` runs it over ``len(tidx32)`` problems (at most
    ``_MAX_GRID_Y``: they are the grid's rows), ``blocks`` partial sums each."""
    import cupy as cp

    N = tpl.n_pixels
    threads = 128  # the kernel's launch bounds
    blocks = max(1, min(64, -(-N // (threads * 8))))
    _, h, w = coef.shape
    head = (cp.ascontiguousarray(coef), np.int32(h), np.int32(w),
            *(cp.ascontiguousarray(a) for a in (tpl.u, tpl.v, tpl.f, tpl.fu, tpl.fv, tpl.w)),
            cp.ascontiguousarray(tpl.origin), cp.ascontiguousarray(tpl.scale), np.int32(N))
    fn = _kernel("icgn_sums", tpl.n_param)

    def launch(tidx32, midx32, warp, active, partial):
        fn((blocks, int(tidx32.shape[0])), (threads,), (*head, tidx32, midx32, warp, active, partial))

    return launch, blocks


def _sums_gpu(coef, tpl: Templates, tidx, midx, H):
    import cupy as cp

    from .kernel_loader import NULL_POINTER

    P = int(tidx.shape[0])
    launch, blocks = _sums_kernel(coef, tpl)
    partial = cp.empty((P, blocks, tpl.n_param + 4), dtype=cp.float64)
    t32, m32, warp = tidx.astype(cp.int32), midx.astype(cp.int32), _kernel_warp(H)
    for s in range(0, P, _MAX_GRID_Y):
        part = slice(s, s + _MAX_GRID_Y)
        launch(t32[part], m32[part], warp[part], NULL_POINTER, partial[part])  # no active flags: every problem
    return partial.sum(axis=1)


def _kernel(name, n_param):
    """``name`` of kernels/icgn.cu for ``n_param`` parameters (the update kernel: 3x3 warps only)."""
    from .kernel_loader import get_function

    names = ("icgn_sums",) if n_param == 12 else ("icgn_sums", "icgn_update")
    return get_function("icgn.cu", name, name_expressions=names, defines=(("NPARAM", n_param),))


def _kernel_warp(H):
    """What the kernel reads per problem: the 9 entries of a 3x3 warp, or the 12 of the rows of
    a quadratic one that give u' and v'."""
    import cupy as cp

    P = H.shape[0]
    return cp.ascontiguousarray(H[:, 3:5, :].reshape(P, 12) if H.shape[-1] == 6 else H.reshape(P, 9))


def _sums(coef, tpl, tidx, midx, H):
    if array_module(coef) is np:
        return _sums_host(coef, tpl, tidx, midx, H)
    return _sums_gpu(coef, tpl, tidx, midx, H)


@dataclass
class _State:
    """What :func:`register` updates per problem: warps, status, iterations, ZNCC, the fraction
    off the image, and whether the problem still iterates."""

    H: object
    status: object
    iterations: object
    zncc: object
    outside: object
    active: object


def _step(templates: Templates, S, tidx, idx, state: _State, shape, tolerance, max_outside):
    """One IC-GN step of problems ``idx`` from their sums ``S`` (len(idx), n + 4): the
    Gauss-Newton update, composed into ``state.H``; convergence and failure into the status
    (kernels/icgn.cu's ``icgn_update`` is this step on the GPU)."""
    xp = array_module(S)
    n = templates.n_param
    quadratic = n == 12
    t, h = tidx[idx], state.H[idx]
    sw, df = templates.sum_w[t], templates.delta_f[t]
    a, c, hinv = templates.a[t], templates.c[t], templates.hessian_inv[t]
    sfg = S[:, 2 + n]
    out = S[:, 3 + n] / sw
    part = out > 0
    if bool(part.any()):
        k = xp.nonzero(part)[0]
        inside = _inside_constants(templates, t[k], h[k], shape, xp)
        sw, df, a, c, hinv = (x.copy() for x in (sw, df, a, c, hinv))
        sfg = sfg.copy()
        sw[k], df[k], a[k], c[k], hinv[k] = (inside[name] for name in ("sum_w", "delta_f", "a", "c",
                                                                        "hessian_inv"))
        sfg[k] = sfg[k] - inside["shift"] * S[k, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        gbar = S[:, 0] / sw
        dg = xp.sqrt(xp.maximum(S[:, 1] - sw * gbar * gbar, 0.0))
        state.zncc[idx] = sfg / (df * dg)
        b = a - (df / dg)[:, None] * (S[:, 2:2 + n] - gbar[:, None] * c)
    state.outside[idx] = out
    with np.errstate(divide="ignore", invalid="ignore"):  # failed problems carry NaN; flagged below
        dp = -(hinv @ b[..., None])[..., 0]
        dH = parameters_to_warp(xp.nan_to_num(dp, nan=0.0), templates.shape_function)
        Hn = h @ xp.linalg.inv(dH)
        # back to a warp of the shape function (quadratic: its parameters, read from rows 4 and 5)
        Hn = _quadratic_matrix(warp_parameters(Hn), xp) if quadratic else Hn / Hn[:, 2:3, 2:3]
        Hn = xp.where(xp.isfinite(dp).all(axis=1)[:, None, None], Hn, xp.nan)
    corners = templates.corners[t]
    move = xp.linalg.norm(warp_points(Hn, corners) - warp_points(h, corners), axis=-1).max(axis=1)
    move = move * templates.scale[t]
    bad = ~(xp.isfinite(Hn).all(axis=(1, 2)) & xp.isfinite(move) & (dg > 0) & (df > 0))
    left = (out > max_outside) & ~bad
    state.H[idx] = xp.where((bad | left)[:, None, None], h, Hn)
    state.iterations[idx] += 1
    done = ~bad & ~left & (move < tolerance)
    state.status[idx[bad]] = ICGN_FAILED
    state.status[idx[left]] = ICGN_LEFT_IMAGE
    state.status[idx[done]] = ICGN_CONVERGED
    state.active[idx[bad | left | done]] = False


def _iterate_gpu(templates: Templates, coef, tidx, midx, state: _State, max_iterations, tolerance, max_outside):
    """:func:`register`'s iterations on the GPU for 3x3 warps: per iteration the sums kernel and
    the update kernel over every problem (finished ones skip), and one wait for the device, for
    how many are left. Problems with pixels off the image take :func:`_step` for that iteration."""
    import cupy as cp

    n = templates.n_param
    P = int(tidx.shape[0])
    sums, blocks = _sums_kernel(coef, templates)
    update = _kernel("icgn_update", n)
    partial = cp.empty((P, blocks, n + 4), dtype=cp.float64)
    scale = cp.ascontiguousarray(templates.scale)
    constants = [cp.ascontiguousarray(a, dtype=cp.float64) for a in (templates.sum_w, templates.delta_f, templates.a,
                                                                      templates.c, templates.hessian_inv,
                                                                      templates.corners)]
    t32, m32 = tidx.astype(cp.int32), midx.astype(cp.int32)
    active = state.active.view(cp.uint8)  # bool and uint8 share their bytes
    needs_inside = cp.zeros(P, dtype=cp.uint8)
    counts = cp.zeros(2, dtype=cp.int32)
    for _ in range(max_iterations):
        sums(t32, m32, state.H, active, partial)
        counts.fill(0)
        update((-(-P // 128),), (128,), (partial, np.int32(blocks), t32, np.int32(P), *constants, scale,
                                         np.float64(tolerance), state.H, state.status, state.iterations,
                                         state.zncc, state.outside, active, needs_inside, counts))
        left, flagged = (int(v) for v in counts.get())
        if flagged:
            idx = cp.nonzero(needs_inside)[0]
            needs_inside[idx] = 0
            _step(templates, partial[idx].sum(axis=1), tidx, idx, state, coef.shape[1:], tolerance, max_outside)
            left += int(state.active[idx].sum())
        if not left:
            break


@dataclass
class IcgnResult:
    """Per problem: ``warp`` (P, 3, 3), or (P, 6, 6) quadratic, float64 (NaN where it failed), ``iterations`` int16,
    ``status`` uint8 (``ICGN_*``), ``zncc`` float32 (zero-mean normalised correlation of the
    template and the image at the last evaluated warp), ``outside`` float32 (fraction of the
    template's weight that fell off the image), on the images' array module."""

    warp: object
    iterations: object
    status: object
    zncc: object
    outside: object


def register(templates: Templates, coefficients, *, template_index, image_index=None, initial,
             max_iterations: int = 50, tolerance: float = 1e-4, max_outside: float = 0.25) -> IcgnResult:
    """Refine warps by IC-GN, all problems at once.

    Parameters
    ----------
    templates : Templates
    coefficients : (M, H, W) float32 array
        B-spline coefficients of the images (:func:`spline_coefficients`); same array module
        as the templates.
    template_index : (P,) int array
        Template of each problem.
    image_index : (P,) int array, optional
        Image of each problem; default ``arange(P)``.
    initial : (P, 3, 3) array, (P, 6, 6) for quadratic templates
        Starting warps (NaN: no start; the problem is reported ``ICGN_NO_START``); an affine
        start for quadratic templates is made quadratic (:func:`as_quadratic`).
    max_iterations : int
    tolerance : float
        Converged when an update moves no corner of the template's bounding box by more than
        this many pixels.
    max_outside : float
        Largest fraction of a template's weight allowed to fall off the image (the rest is
        registered exactly over the overlap).

    Returns
    -------
    IcgnResult
    """
    xp = array_module(coefficients)
    if int(max_iterations) != max_iterations or max_iterations < 1:
        raise ValueError(f"max_iterations must be a whole number >= 1, got {max_iterations}")
    if not tolerance > 0:
        raise ValueError(f"tolerance must be positive, got {tolerance}")
    if not 0 <= max_outside <= 1:
        raise ValueError(f"max_outside must be in [0, 1], got {max_outside}")
    n = templates.n_param
    tidx = xp.asarray(template_index, dtype=np.int64).reshape(-1)
    P = int(tidx.shape[0])
    midx = xp.arange(P, dtype=np.int64) if image_index is None else xp.asarray(image_index, dtype=np.int64)
    H = xp.array(initial, dtype=xp.float64)
    quadratic = n == 12
    if quadratic and H.shape[-1] == 3:
        H = as_quadratic(H)
    k = 6 if quadratic else 3
    H = H.reshape(P, k, k)
    if coefficients.ndim != 3:
        raise ValueError(f"coefficients must have shape (M, H, W), got {coefficients.shape}")

    status = xp.full(P, ICGN_MAX_ITERATIONS, dtype=xp.uint8)
    iterations = xp.zeros(P, dtype=xp.int16)
    zncc = xp.full(P, np.nan, dtype=xp.float64)
    outside = xp.zeros(P, dtype=xp.float64)
    start = xp.isfinite(H).all(axis=(1, 2))
    status[~start] = ICGN_NO_START
    active = start.copy()
    state = _State(H, status, iterations, zncc, outside, active)
    if xp is not np and not quadratic:
        for s in range(0, P, _MAX_GRID_Y):  # the sums kernel's problems are its grid's rows
            part = slice(s, s + _MAX_GRID_Y)
            _iterate_gpu(templates, coefficients, tidx[part], midx[part],
                         _State(*(getattr(state, f.name)[part] for f in dataclasses.fields(state))),
                         int(max_iterations), float(tolerance), float(max_outside))
    else:
        for _ in range(int(max_iterations)):
            idx = xp.nonzero(active)[0]
            if idx.size == 0:
                break
            S = _sums(coefficients, templates, tidx[idx], midx[idx], H[idx])
            _step(templates, S, tidx, idx, state, coefficients.shape[1:], tolerance, max_outside)
    failed = status != ICGN_CONVERGED
    warp = xp.where(failed[:, None, None] & (status != ICGN_MAX_ITERATIONS)[:, None, None], xp.nan, H)
    warp = xp.where(start[:, None, None], warp, xp.nan)
    return IcgnResult(warp, iterations, status, zncc.astype(xp.float32), outside.astype(xp.float32))
