"""HR-EBSD: deformation gradient, elastic strain and lattice rotation from ROI shifts.

The fit
-------
An ROI centred at pixel ``p`` of the reference pattern looks along the unit direction
``r0`` (sample frame, from the reference pattern centre). In the scan pattern its content is
found at ``p + q`` (the measured displacement), i.e. along ``r1`` seen from that point's
pattern centre. A crystal deformed by ``F`` (sample frame) shows at ``F r0`` what the
reference shows at ``r0``, so ``F r0`` must be parallel to ``r1``: for two unit vectors
``e_a, e_b`` perpendicular to ``r1``,

    e_a . (F r0) = 0,   e_b . (F r0) = 0.

For ``F = I + A`` with small ``A`` and the detector frame, this is Wilkinson's relation
(Wilkinson, Meaden & Dingley 2006) ``r_z q_x = r_z (A r)_x - r_x (A r)_z`` (same for ``y``);
written with directions it holds for any rotation and for a pattern centre that differs
between reference and scan point, so shifts caused by the beam moving are not taken for
strain. Any multiple of ``F`` satisfies it: the equations fix ``F`` up to a scale, i.e. the
eight deviatoric components. Writing ``F = s (I + D)`` with ``D`` traceless, the eight
components of ``D`` come from weighted least squares per point (rows weighted by the source
to detector distance of the ROI, so residuals are in pixels), and the scale ``s`` from the
traction-free surface condition ``sigma_33 = 0`` (sample frame) with the crystal's stiffness.

Strain and rotation
-------------------
``F = V R`` (polar decomposition, left stretch). ``strain = V - I`` (sample frame; equal to
the small-strain tensor to first order), ``rotation = log(R)``: the antisymmetric rotation
tensor ``w`` in radians (``R = expm(w)``, ``R ~ I + w``; ``w_21`` is the rotation about the
sample ``z`` axis). In the crystal frame: ``strain_crystal = g' strain g'^T`` with the
deformed crystal's orientation ``g' = g R^T`` and ``rotation_crystal = g w g^T``, where ``g``
(sample to crystal, ``v_c = g v_s``) is the orientation of the reference crystal.

Rejection of ROIs (the rule)
----------------------------
1. An ROI is used only if its correlation status is ok, its peak height is at least
   ``min_peak_height`` and its displacement is finite.
2. Fit; compute each used ROI's residual: the distance in pixels between where the fitted
   ``F`` puts it and where it was measured. Estimate the noise robustly,
   ``sigma = median(residual) / 1.1774`` (the median of a 2-D Gaussian error's length).
3. If the worst used ROI's residual exceeds ``max(outlier_sigma * sigma, residual_floor_px)``
   and more than ``min_rois`` ROIs are in use, drop that one ROI and go to 2.
A point with fewer than ``min_rois`` (at least 4: eight unknowns, two equations per ROI)
usable ROIs is flagged ``TOO_FEW_ROIS`` and not fitted (NaN).

ROIs that do not fix ``F``
--------------------------
The equations map the detector plane to itself by a homography, which ROI centres all on one
line, or all but one on one line, do not fix however many they are (a row of ROIs left by a
mask, say). Such a point's least-squares system is singular: the fit is flagged ``FAILED``
(NaN), not solved. The test is the reciprocal condition number of the normal equations with
their diagonal scaled to one: at most 2e-9 for such layouts, 1e-2 and more for a 5 x 5 grid, two
of its rows, its four corners or five ROIs at random (240 x 320 px); :data:`MIN_RCOND` lies
between.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from . import geometry
from .backend import array_module, to_host

__all__ = ["FitOptions", "StrainFit", "fit_strain", "rotation_log", "remap_pattern", "polar_decomposition",
           "traction_free", "FIT_OK", "FIT_TOO_FEW_ROIS", "FIT_NOT_PROCESSED", "FIT_FAILED", "FIT_DESCRIPTIONS",
           "MIN_RCOND"]

FIT_OK = 0
FIT_TOO_FEW_ROIS = 1
FIT_NOT_PROCESSED = 2
FIT_FAILED = 3
FIT_DESCRIPTIONS = {
    FIT_OK: "ok",
    FIT_TOO_FEW_ROIS: "fewer valid ROIs than min_rois: not fitted",
    FIT_NOT_PROCESSED: "scan point not processed or without a pattern (no displacements)",
    FIT_FAILED: "fit failed (usable ROIs all, or all but one, on one line: F not fixed; or non-finite values)",
}

_RAYLEIGH_MEDIAN = 1.1774100225154747  # sqrt(2 ln 2): median length of a unit 2-D Gaussian error


@dataclass(frozen=True)
class FitOptions:
    """How ROIs are selected and rejected (see the module docstring for the rule).

    Attributes
    ----------
    min_peak_height : float
        ROIs whose normalised correlation peak is lower are not used.
    outlier_sigma : float
        Residual, in robust standard deviations, above which the worst ROI is dropped.
    residual_floor_px : float
        Residuals below this many pixels are never called outliers (so noise-free data keep
        all ROIs).
    min_rois : int
        Fewest ROIs a point may be fitted with (>= 4).
    """

    min_peak_height: float = 0.3
    outlier_sigma: float = 4.0
    residual_floor_px: float = 0.25
    min_rois: int = 4

    def __post_init__(self):
        if not -1.0 <= self.min_peak_height <= 1.0:
            raise ValueError(f"min_peak_height must be in [-1, 1], got {self.min_peak_height}")
        if not self.outlier_sigma > 0:
            raise ValueError(f"outlier_sigma must be positive, got {self.outlier_sigma}")
        if not self.residual_floor_px >= 0:
            raise ValueError(f"residual_floor_px must be >= 0, got {self.residual_floor_px}")
        if int(self.min_rois) != self.min_rois or self.min_rois < 4:
            raise ValueError(f"min_rois must be a whole number >= 4 (8 unknowns, 2 equations per ROI), "
                             f"got {self.min_rois}")


@dataclass
class StrainFit:
    """Per-point results of :func:`fit_strain` (arrays on the input's backend).

    ``F``, ``strain``, ``rotation``, ``strain_crystal``, ``rotation_crystal``: (B, 3, 3);
    ``residual_px`` RMS pixel residual of the used ROIs, ``angular_error`` their mean angle
    between measured and fitted directions (rad), ``n_used`` (B,), ``used`` (B, n) bool,
    ``status`` (B,) uint8 (``FIT_*``). Points not fitted are NaN.
    """

    F: object
    strain: object
    rotation: object
    strain_crystal: object
    rotation_crystal: object
    residual_px: object
    angular_error: object
    n_used: object
    used: object
    status: object


def _cross(a, b, xp):
    return xp.stack([a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
                     a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
                     a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]], axis=-1)


def _unit(a, xp):
    return a / xp.linalg.norm(a, axis=-1, keepdims=True)


# The eight traceless basis matrices of D: six off-diagonal units, then E11-E33 and E22-E33.
_OFF = ((0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1))


def _design(e, r0, xp):
    """Coefficients (..., 8) of the traceless D in e . (D r0)."""
    o = e[..., :, None] * r0[..., None, :]
    cols = [o[..., i, j] for i, j in _OFF]
    cols += [o[..., 0, 0] - o[..., 2, 2], o[..., 1, 1] - o[..., 2, 2]]
    return xp.stack(cols, axis=-1)


#: Below this reciprocal condition number (diagonal scaled to one) the normal equations do not
#: fix F: the usable ROIs lie on one line, or all but one do (module docstring).
MIN_RCOND = 1e-6


def _rcond(N, xp):
    """Reciprocal condition number of each of the (B, 8, 8) normal matrices ``N``, their rows
    and columns scaled to a unit diagonal first (so that units and weights do not count)."""
    d = xp.sqrt(xp.diagonal(N, axis1=1, axis2=2))
    d = xp.where(d > 0, d, 1.0)
    ev = xp.linalg.eigvalsh(N / d[:, :, None] / d[:, None, :])
    return ev[:, 0] / xp.maximum(ev[:, -1], 1e-300)


def _traceless(p, xp):
    D = xp.zeros(p.shape[:-1] + (3, 3), dtype=p.dtype)
    for k, (i, j) in enumerate(_OFF):
        D[..., i, j] = p[..., k]
    D[..., 0, 0] = p[..., 6]
    D[..., 1, 1] = p[..., 7]
    D[..., 2, 2] = -p[..., 6] - p[..., 7]
    return D


def rotation_log(R, xp=None):
    """Antisymmetric rotation tensors ``w = log(R)`` (radians) of rotation matrices (..., 3, 3)."""
    xp = xp or array_module(R)
    c = xp.clip((xp.trace(R, axis1=-2, axis2=-1) - 1) / 2, -1.0, 1.0)
    theta = xp.arccos(c)
    s = xp.sin(theta)
    small = s < 1e-8
    f = xp.where(small, 0.5 + theta**2 / 12, theta / (2 * xp.where(small, 1.0, s)))
    return f[..., None, None] * (R - xp.swapaxes(R, -1, -2))


def polar_decomposition(F, xp=np):
    """Left polar decomposition F = V R (V symmetric positive definite, R proper rotation)."""
    U, S, Wt = xp.linalg.svd(F)
    R = U @ Wt
    V = (U * S[..., None, :]) @ xp.swapaxes(U, -1, -2)
    return V, R


def _traction_free_scale(F, stiffness, g, xp):
    """Scale s with sigma_33(s F) = 0 (sample frame), and F's polar factors V, R."""
    V, R = polar_decomposition(F, xp)
    g_def = g @ xp.swapaxes(R, -1, -2)
    # Only sigma_33 is needed: row 33 of the stiffness in the deformed crystal's frame.
    u = g_def[..., :, 2]
    m = xp.einsum("...a,...e,aecd->...cd", u, u, xp.asarray(stiffness, dtype=xp.float64))
    c33 = xp.swapaxes(g_def, -1, -2) @ m @ g_def
    # sigma_33 = c33 : (s V - I) is linear in s
    return xp.trace(c33, axis1=-2, axis2=-1) / (c33 * V).sum(axis=(-2, -1)), V, R


def traction_free(F, stiffness, orientation):
    """The multiple ``s F`` of deformation gradients (..., 3, 3) whose stress has ``sigma_33 = 0``.

    ``stiffness`` is the crystal-frame tensor (3, 3, 3, 3), ``orientation`` the reference
    orientation (sample to crystal). This is the condition :func:`fit_strain` applies; it
    makes simulated deformations consistent with a free surface.
    """
    xp = array_module(F)
    F = xp.asarray(F, dtype=xp.float64)
    g = xp.broadcast_to(xp.asarray(orientation, dtype=xp.float64), F.shape)
    return _traction_free_scale(F, stiffness, g, xp)[0][..., None, None] * F


def fit_strain(displacement, peak_height, roi_status, *, centres, shape, pc, pc_ref, stiffness,
               orientation, sample_tilt: float = 70.0, detector_tilt: float = 0.0,
               options: FitOptions | None = None, reference_F=None) -> StrainFit:
    """Fit the deformation gradient, strain and rotation of a batch of scan points.

    Parameters
    ----------
    displacement : (B, n, 2) array
        Measured ROI shifts ``[dx, dy]`` px (NaN where the match failed). NumPy or CuPy: the
        fit runs where the array lives, in float64.
    peak_height : (B, n) array
    roi_status : (B, n) array
        Per-ROI status codes (:mod:`ebsdxc.status`); only ``OK`` ROIs are used.
    centres : (n, 2) array
        ROI centres ``[x, y]`` px in the reference pattern.
    shape : (int, int)
        Detector shape (H, W).
    pc : (3,) or (B, 3) array
        Pattern centre of each scan point (Bruker, :mod:`ebsdxc.geometry`).
    pc_ref : (3,) or (B, 3) array
        Pattern centre of the reference pattern (of each point's reference, when the points of
        a batch use different references: a reference per grain).
    stiffness : (3, 3, 3, 3) array
        Crystal-frame stiffness tensor (:func:`ebsdxc.materials.stiffness_tensor`), GPa.
    orientation : (3, 3) or (B, 3, 3) array
        Reference crystal orientation, sample to crystal (``v_c = g v_s``).
    sample_tilt, detector_tilt : float
        Degrees.
    options : FitOptions, optional
    reference_F : (B, 3, 3) array, optional
        Deformation the reference image already carries (a remapped reference): the
        directions ``r0`` then belong to the remapped image and the result is
        ``F = F_fit @ reference_F``.

    Returns
    -------
    StrainFit
    """
    options = options or FitOptions()
    xp = array_module(displacement)
    f8 = xp.float64
    q = xp.asarray(displacement, dtype=f8)
    if q.ndim != 3 or q.shape[-1] != 2:
        raise ValueError(f"displacement must have shape (points, rois, 2), got {q.shape}")
    B, n = q.shape[:2]
    c = xp.asarray(centres, dtype=f8)
    if c.shape != (n, 2):
        raise ValueError(f"centres must have shape ({n}, 2) to match the displacements, got {c.shape}")
    h = xp.asarray(peak_height, dtype=f8).reshape(B, n)
    st = xp.asarray(roi_status).reshape(B, n)
    pc = xp.broadcast_to(xp.asarray(pc, dtype=f8), (B, 3))
    pc_ref = xp.asarray(pc_ref, dtype=f8)
    tilts = {"sample_tilt": sample_tilt, "detector_tilt": detector_tilt}

    xy1 = c + q
    used = (st == 0) & (h >= options.min_peak_height) & xp.isfinite(xy1).all(axis=-1)
    xy1 = xp.where(used[..., None], xy1, c)  # keep the arithmetic finite; unused rows carry weight 0
    # (n, 3), or (B, n, 3) when each point has its own reference
    r0 = geometry.pixel_directions(c, shape, pc_ref if pc_ref.ndim == 1 else pc_ref[:, None, :], **tilts)
    r1 = geometry.pixel_directions(xy1, shape, pc[:, None, :], **tilts)  # (B, n, 3)
    up = xp.asarray(geometry.detector_axes(sample_tilt, detector_tilt)[:, 1])
    ea = _unit(_cross(r1, up, xp), xp)
    eb = _cross(r1, ea, xp)
    # Weight rows by the source-to-ROI distance in pixels: angle x distance ~ pixels on the screen.
    x_pc, y_pc, L = geometry.pc_pixels(pc, shape)
    dist = xp.sqrt((xy1[..., 0] - x_pc[:, None]) ** 2 + (xy1[..., 1] - y_pc[:, None]) ** 2 + L[:, None] ** 2)
    A = xp.concatenate([_design(ea, r0, xp), _design(eb, r0, xp)], axis=1) * xp.concatenate([dist, dist], 1)[..., None]
    b = -xp.concatenate([(ea * r0).sum(-1), (eb * r0).sum(-1)], axis=1) * xp.concatenate([dist, dist], 1)

    enough = used.sum(axis=1) >= options.min_rois
    eye = xp.eye(3, dtype=f8)
    for _ in range(n):
        w = xp.concatenate([used, used], axis=1).astype(f8) * enough[:, None]
        Aw = A * w[..., None]
        AwT = xp.swapaxes(Aw, 1, 2)  # batched matmul (BLAS / cuBLAS), not einsum: 10x faster here
        N = AwT @ A + (~enough)[:, None, None] * xp.eye(8, dtype=f8)
        # ROIs that do not fix F: not solved (NumPy would raise for the whole batch), flagged below
        singular = enough & ~(_rcond(N, xp) >= MIN_RCOND)
        N = xp.where(singular[:, None, None], xp.eye(8, dtype=f8), N)
        p = xp.linalg.solve(N, AwT @ b[..., None])[..., 0]
        p = xp.where(singular[:, None], 0.0, p)  # F = I keeps its residuals finite until it is flagged
        Fh = eye + _traceless(p, xp)
        pred = geometry.project(r0 @ xp.swapaxes(Fh, 1, 2), shape, pc[:, None, :], **tilts)
        res = xp.linalg.norm(pred - xy1, axis=-1)
        res_used = xp.where(used, res, xp.nan)
        sigma = xp.nanmedian(xp.where(enough[:, None], res_used, 0.0), axis=1) / _RAYLEIGH_MEDIAN
        thr = xp.maximum(options.outlier_sigma * sigma, options.residual_floor_px)
        worst = xp.argmax(xp.where(used, res, -1.0), axis=1)
        worst_res = xp.take_along_axis(res, worst[:, None], axis=1)[:, 0]
        drop = enough & ~singular & (worst_res > thr) & (used.sum(axis=1) > options.min_rois)
        if not bool(drop.any()):
            break
        used[xp.arange(B)[drop], worst[drop]] = False

    n_used = used.sum(axis=1)
    residual = xp.sqrt(xp.where(used, res**2, 0.0).sum(axis=1) / xp.maximum(n_used, 1))
    v = r0 @ xp.swapaxes(Fh, 1, 2)
    ang = xp.arctan2(xp.linalg.norm(_cross(v, r1, xp), axis=-1), (v * r1).sum(-1))
    angular = xp.where(used, ang, 0.0).sum(axis=1) / xp.maximum(n_used, 1)

    if reference_F is not None:
        Fh = Fh @ xp.asarray(reference_F, dtype=f8)
    g = xp.broadcast_to(xp.asarray(orientation, dtype=f8), (B, 3, 3))
    scale, V, R = _traction_free_scale(Fh, stiffness, g, xp)
    g_def = g @ xp.swapaxes(R, -1, -2)
    F = scale[:, None, None] * Fh
    strain = scale[:, None, None] * V - eye
    rot = rotation_log(R, xp)
    strain_c = g_def @ strain @ xp.swapaxes(g_def, -1, -2)
    rot_c = g @ rot @ xp.swapaxes(g, -1, -2)

    status = xp.full(B, FIT_OK, dtype=xp.uint8)
    # status 4 = NOT_PROCESSED, 5 = MISSING_PATTERN, 7 = NO_REFERENCE: no measurement to fit, not a failed fit
    processed = xp.isfinite(q).any(axis=(1, 2)) | ((st != 4) & (st != 5) & (st != 7)).any(axis=1)
    finite = xp.isfinite(F).all(axis=(1, 2)) & xp.isfinite(scale) & (scale > 0) & ~singular
    status[~finite] = FIT_FAILED
    status[~enough] = FIT_TOO_FEW_ROIS
    status[~processed] = FIT_NOT_PROCESSED
    bad = status != FIT_OK
    nan = xp.nan
    out = [xp.where(bad[:, None, None], nan, a) for a in (F, strain, rot, strain_c, rot_c)]
    residual = xp.where(bad, nan, residual)
    angular = xp.where(bad, nan, angular)
    used &= ~bad[:, None]
    return StrainFit(*out, residual, angular, xp.where(bad, 0, n_used).astype(xp.int16), used, status)


def source_coordinates(F, shape, pc, *, sample_tilt: float = 70.0, detector_tilt: float = 0.0, xp=np):
    """Where :func:`remap_pattern` samples its image: ``[row, col]`` of the source of every pixel.

    The pixel at ``(x, y)`` shows direction ``r`` (seen from ``pc``), taken from the image at
    the projection of ``F^-1 r``. Rays through one point map plane to plane by a homography:
    with ``A`` the detector axes (:func:`ebsdxc.geometry.detector_axes`) and
    ``d = (x - x_pc, y_pc - y, L)``, the source is ``d' = M d``, ``M = A^T F^-1 A``, at
    ``(x_pc + L d'_x / d'_z, y_pc - L d'_y / d'_z)`` (NaN where ``d'_z <= 0``, a direction away
    from the screen). This is :func:`ebsdxc.geometry.project` of
    :func:`ebsdxc.geometry.pixel_directions` without the (H, W, 3) direction arrays, to
    rounding; on the GPU it is one kernel.

    Sources are clipped to the image (the "nearest edge value" rule) and snapped to an
    integer within 1e-6 px: CuPy's ``map_coordinates`` (14.x) returns wrong values for a
    coordinate a rounding error below an integer (e.g. 13 - 1e-13) with ``mode="nearest"``;
    1e-6 px is far below anything a correlation resolves.

    Parameters
    ----------
    F : (3, 3) or (B, 3, 3) array
    shape : (int, int)
        Image shape (H, W).
    pc : (3,) array
        Bruker pattern centre.
    xp : module
        Array module of the result (NumPy or CuPy).

    Returns
    -------
    (2, H, W) or (2, B, H, W) float64 array
    """
    H, W = geometry.check_shape(shape)
    F = xp.asarray(F, dtype=xp.float64)
    axes = xp.asarray(geometry.detector_axes(sample_tilt, detector_tilt))
    M = axes.T @ xp.linalg.inv(F) @ axes
    x_pc, y_pc, L = (float(v) for v in geometry.pc_pixels(np.asarray(to_host(pc), dtype=np.float64), (H, W)))
    coords = xp.empty((2, *F.shape[:-2], H, W), dtype=xp.float64)
    if xp is not np:
        _source_kernel()(xp.ascontiguousarray(M.reshape(-1, 9)), np.float64(x_pc), np.float64(y_pc), np.float64(L),
                         np.int32(H), np.int32(W),
                         coords[0], coords[1])
        return coords
    m = M[..., None, None, :, :]
    u = np.arange(W, dtype=np.float64) - x_pc
    v = (y_pc - np.arange(H, dtype=np.float64))[:, None]
    dz = m[..., 2, 0] * u + m[..., 2, 1] * v + m[..., 2, 2] * L
    scale = np.where(dz > 0, L / np.where(dz > 0, dz, 1.0), np.nan)
    coords[0] = y_pc - (m[..., 1, 0] * u + m[..., 1, 1] * v + m[..., 1, 2] * L) * scale
    coords[1] = x_pc + (m[..., 0, 0] * u + m[..., 0, 1] * v + m[..., 0, 2] * L) * scale
    np.clip(coords[0], 0, H - 1, out=coords[0])
    np.clip(coords[1], 0, W - 1, out=coords[1])
    nearest = np.rint(coords)
    np.copyto(coords, nearest, where=np.abs(coords - nearest) < 1e-6)
    return coords


# One thread per source pixel: M d, the projection, the clip (NaN stays NaN, as np.clip keeps
# it) and the snap of source_coordinates, in the same order of operations as its NumPy code.
_SOURCE_BODY = """
const long long px = i % ((long long)H * W);
const long long b = i / ((long long)H * W);
const double u = (double)(px % W) - xpc, v = ypc - (double)(px / W);
const double* m = &M[9 * b];
const double dz = m[6] * u + m[7] * v + m[8] * L;
const double scale = dz > 0.0 ? L / dz : __longlong_as_double(0x7ff8000000000000LL);
double r = ypc - (m[3] * u + m[4] * v + m[5] * L) * scale;
double c = xpc + (m[0] * u + m[1] * v + m[2] * L) * scale;
if (!isnan(r)) r = fmin(fmax(r, 0.0), (double)(H - 1));
if (!isnan(c)) c = fmin(fmax(c, 0.0), (double)(W - 1));
const double rr = rint(r), rc = rint(c);
row = fabs(r - rr) < 1e-6 ? rr : r;
col = fabs(c - rc) < 1e-6 ? rc : c;
"""


@functools.cache
def _source_kernel():
    import cupy as cp

    return cp.ElementwiseKernel("raw float64 M, float64 xpc, float64 ypc, float64 L, int32 H, int32 W",
                                "float64 row, float64 col", _SOURCE_BODY, "ebsdxc_remap_source")


def remap_pattern(image, F, *, pc, sample_tilt: float = 70.0, detector_tilt: float = 0.0, order: int = 3,
                  workers: int = 1):
    """The pattern of a crystal deformed by ``F``, made from ``image`` (Britton & Wilkinson 2012).

    The new pattern shows at direction ``r`` what ``image`` shows at ``F^-1 r`` (both seen
    from pattern centre ``pc``); with ``F`` a rotation this is the reference rotated by the
    lattice rotation found in a first pass. Pixels whose source falls outside ``image``
    take the nearest edge value.

    Parameters
    ----------
    image : (H, W) array (NumPy or CuPy)
    F : (3, 3) or (B, 3, 3) array
        Sample-frame deformation (normally a rotation); a stack gives a stack of patterns.
    pc : (3,) array
        Bruker pattern centre of ``image``.
    order : int
        Spline order of the interpolation (3: cubic, keeps sub-pixel detail).
    workers : int
        NumPy only: threads over the patterns of a stack (SciPy's interpolation runs without
        the GIL). The result does not depend on it.

    Returns
    -------
    (H, W) or (B, H, W) float32 array on the input's backend.
    """
    xp = array_module(image)
    tilts = {"sample_tilt": sample_tilt, "detector_tilt": detector_tilt}
    if xp is not np:
        from cupyx.scipy.ndimage import map_coordinates

        coords = source_coordinates(F, image.shape, pc, **tilts, xp=xp)
        out = map_coordinates(xp.asarray(image, dtype=xp.float32), coords, order=order, mode="nearest")
        return out.astype(xp.float32, copy=False)
    from scipy.ndimage import map_coordinates

    image = np.asarray(image, dtype=np.float32)
    F = np.asarray(F, dtype=np.float64)
    stack = F.reshape(-1, 3, 3)
    out = np.empty((len(stack), *image.shape), dtype=np.float32)
    # Patterns a few at a time: the coordinates of a whole stack are 16 bytes a pixel, and
    # made at once they spend more time in memory than in arithmetic (400 patterns of 256x256
    # on a 2-core machine: 0.9-4.9 s at once, 0.30-0.33 s four at a time).
    step = max(1, _HOST_REMAP_PIXELS // image.size)

    def part(k):
        sl = slice(k, k + step)
        map_coordinates(image, source_coordinates(stack[sl], image.shape, pc, **tilts), order=order, mode="nearest",
                        output=out[sl])
    starts = range(0, len(stack), step)
    if workers > 1 and len(starts) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(workers, len(starts)), thread_name_prefix="ebsdxc-remap") as pool:
            list(pool.map(part, starts))
    else:
        for k in starts:
            part(k)
    return out.reshape(*F.shape[:-2], *image.shape)


#: Pixels of the patterns :func:`remap_pattern` makes at a time with NumPy (its coordinates:
#: 16 bytes a pixel, 4 MB).
_HOST_REMAP_PIXELS = 1 << 18
