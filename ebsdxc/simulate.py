"""EBSD patterns of a deformed crystal, projected from a master pattern, with known truth.

This module makes test data for the correlation pipeline: a pattern of a crystal with a given
orientation and deformation gradient ``F``, as seen on a detector with a given pattern centre
(PC), and the displacement that every reference-pattern feature undergoes ("ground truth").
It needs NumPy (and h5py only to read the master pattern); kikuchipy is never imported.

Conventions
-----------
The detector geometry is :mod:`ebsdxc.geometry` (same conventions, restated here).

Pixels
    ``x`` = column (to the right), ``y`` = row (down), origin at the centre of pixel (0, 0), as
    everywhere in ebsdxc. Pixel arrays are indexed ``[y, x]``.
Pattern centre (PC)
    Bruker convention exactly as kikuchipy's ``EBSDDetector`` uses it for a detector of
    ``shape = (H, W)``: ``PCx`` is the distance of the PC from the left edge of the detector
    (the left edge of pixel column 0) as a fraction of the width ``W``, ``PCy`` the distance
    from the top edge as a fraction of the height ``H``, and ``PCz`` the sample-to-detector
    distance as a fraction of the height ``H``. In pixel units::

        x_pc = PCx * W - 0.5        y_pc = PCy * H - 0.5        L = PCz * H

    (the ``- 0.5`` because the origin is the centre, not the corner, of pixel (0, 0)).
Detector frame
    ``Xd`` to the right on the detector, ``Yd`` up, ``Zd = Xd x Yd`` along the detector normal,
    pointing from the sample towards the detector. The pixel ``(x, y)`` is seen from the source
    point along ``(x - x_pc, -(y - y_pc), L)`` in this frame.
Sample frame and tilts
    kikuchipy's (EMsoft's / EDAX TSL's) sample frame, with sample tilt ``sigma`` about the
    microscope X and detector tilt ``theta`` about the detector horizontal (azimuthal and twist
    angles are 0). With ``beta = 90 deg - sigma + theta`` the detector axes in sample
    coordinates are::

        Xd = (0, 1, 0)     Yd = (-cos beta, 0, sin beta)     Zd = (sin beta, 0, cos beta)

    which is the transpose of kikuchipy's ``EBSDDetector.sample_to_detector`` matrix.
Orientation
    A 3x3 rotation matrix ``g`` that takes SAMPLE coordinates to CRYSTAL coordinates,
    ``v_crystal = g @ v_sample`` (Bunge's orientation matrix). It is ``rot.to_matrix()`` of the
    orix ``Rotation``/``Orientation`` ``rot`` that kikuchipy's
    ``EBSDMasterPattern.get_patterns`` takes, so both give the same pattern.
Deformation gradient
    ``F`` is a 3x3 deformation gradient in the SAMPLE frame (``det F > 0``). A lattice
    direction ``r`` becomes ``F r``; lattice-plane traces (Kikuchi band centre lines) follow the
    directions in them, so the pattern of the deformed crystal shows at direction ``r`` what
    the undeformed one shows at ``F^-1 r`` (normalised). Band widths (Bragg angles) are not
    changed; that is below what cross-correlation resolves.
Master pattern
    Square Lambert (Rosca-Lambert equal-area) projection of both hemispheres, EMsoft's
    ``mLPNH``/``mLPSH``, as an array ``(2, n, n)`` = [north (crystal z >= 0), south]; row index
    follows the Lambert ``Y`` coordinate, column index the Lambert ``X`` coordinate, and pixel
    ``k`` sits at normalised coordinate ``2 k / (n - 1) - 1`` in ``[-1, 1]`` (pixel centres on
    the square's edges). This is how kikuchipy reads and projects EMsoft files.

Polycrystals
------------
:func:`simulate_polycrystal` makes a scan of Voronoi grains, each with its own orientation, a
uniform elastic strain and a constant lattice curvature, with the exact truth per point
(orientation, ``F``, grain id, Nye tensor) and, through
:meth:`SimulatedPolycrystal.truth_relative`, what HR-EBSD measures against a reference point
per grain. ``POLYCRYSTAL_CONVENTIONS`` defines every array (map and sample axes, curvature and
Nye tensor signs); the truth file of :meth:`SimulatedPolycrystal.save` carries it as text.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
from dataclasses import dataclass

import numpy as np

from .backend import array_module
from .crystal import euler_to_matrix, matrix_to_euler, misorientation_angle, rotation_from_vector
from .geometry import check_shape, detector_axes, pc_pixels, pixel_directions, project
from .gnd import MAP_AXES
from .strain import polar_decomposition, rotation_log

__all__ = [
    "load_nickel_master_pattern",
    "detector_directions",
    "project_to_detector",
    "simulate_pattern",
    "simulate_patterns",
    "nickel_master_pattern_path",
    "displacement_truth",
    "poisson_noise",
    "smooth_deformation_field",
    "simulate_polycrystal",
    "SimulatedPolycrystal",
    "RelativeTruth",
    "POLYCRYSTAL_CONVENTIONS",
    "MIN_GRAIN_MISORIENTATION_DEG",
]

_NICKEL_FILE = os.path.join(
    "data", "emsoft_ebsd_master_pattern", "ni_mc_mp_20kv_uint8_gzip_opts9.h5"
)


# --------------------------------------------------------------------------- master pattern


def load_nickel_master_pattern() -> np.ndarray:
    """Return kikuchipy's small nickel master pattern (20 kV) in the square Lambert projection.

    The file shipped inside the installed kikuchipy package is read with
    :func:`ebsdxc.io.master_pattern.read_master_pattern` (h5py); kikuchipy itself is not
    imported (its import is slow). The arrays are returned unflipped, exactly as
    ``kikuchipy.data.nickel_ebsd_master_pattern_small(projection="lambert",
    hemisphere="both").data`` holds them.

    Returns
    -------
    numpy.ndarray
        float32 array of shape ``(2, 401, 401)``: ``[north, south]`` hemispheres (EMsoft's
        ``mLPNH``, ``mLPSH``), intensities 0-255.

    Raises
    ------
    ValueError
        If kikuchipy is not installed or its data file is missing or malformed.
    """
    from .io.master_pattern import read_master_pattern

    return np.array(read_master_pattern(nickel_master_pattern_path()).lambert)


def nickel_master_pattern_path() -> str:
    """Path of kikuchipy's small nickel master pattern file (EMsoft HDF5, 20 kV), found in the
    installed kikuchipy package without importing it; ``ValueError`` when it is not there."""
    spec = importlib.util.find_spec("kikuchipy")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "the nickel master pattern comes from kikuchipy's package data, but kikuchipy is "
            "not installed (pip install kikuchipy)"
        )
    for folder in spec.submodule_search_locations:
        candidate = os.path.join(folder, _NICKEL_FILE)
        if os.path.isfile(candidate):
            return candidate
    raise ValueError(
        f"kikuchipy is installed but its data file {_NICKEL_FILE} was not found in "
        f"{list(spec.submodule_search_locations)}"
    )


def _check_master(master) -> np.ndarray:
    master = np.asarray(master)
    if master.ndim == 2:
        master = np.stack([master, master])
    if master.ndim != 3 or master.shape[0] != 2 or master.shape[1] != master.shape[2]:
        raise ValueError(
            f"master pattern must have shape (2, n, n) [north, south] or (n, n), got {master.shape}"
        )
    if master.shape[1] < 2:
        raise ValueError("master pattern must be at least 2x2 pixels")
    return master


def _lambert_square(v, xp=np):
    """Rosca-Lambert equal-area projection of unit vectors onto the square [-1, 1]^2.

    Returns the normalised coordinates (X, Y); the hemisphere is chosen by the sign of z. With
    ``s = sqrt(1 - |z|)`` (the radius of the Lambert azimuthal projection, scaled so the
    equator maps onto the square's edge), the base-2 sector where ``|y| <= |x|`` maps to
    ``X = sign(x) s``, ``Y = sign(x) s (4 / pi) atan(y / x)``, the other sector symmetrically.
    ``v`` is a NumPy or CuPy array (``xp`` its module).
    """
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    s = xp.sqrt(xp.clip(1.0 - xp.abs(z), 0.0, None))
    ax, ay = xp.abs(x), xp.abs(y)
    x_major = ay <= ax
    quiet = np.errstate(divide="ignore", invalid="ignore") if xp is np else contextlib.nullcontext()
    with quiet:
        # one atan of the minor/major ratio serves both sectors; at the poles (x = y = 0) s = 0
        ratio = xp.where(x_major, y / xp.where(ax > 0, x, 1.0), x / xp.where(ay > 0, y, 1.0))
    t = (4.0 / np.pi) * xp.arctan(ratio)
    sign_major = xp.where(x_major, xp.sign(x), xp.sign(y))
    major = sign_major * s
    minor = sign_major * s * t
    big_x = xp.where(x_major, major, minor)
    big_y = xp.where(x_major, minor, major)
    return big_x, big_y


def _sample_master(master, v_crystal, xp=np):
    """Bilinear interpolation of the (2, n, n) master pattern at unit crystal directions."""
    n = master.shape[-1]
    big_x, big_y = _lambert_square(v_crystal, xp)
    half = (n - 1) / 2.0
    col = (big_x + 1.0) * half
    row = (big_y + 1.0) * half
    c0 = xp.clip(xp.floor(col), 0, n - 2).astype(xp.intp)
    r0 = xp.clip(xp.floor(row), 0, n - 2).astype(xp.intp)
    dc = xp.clip(col - c0, 0.0, 1.0)
    dr = xp.clip(row - r0, 0.0, 1.0)
    hemi = xp.where(v_crystal[..., 2] >= 0, 0, 1).astype(xp.intp)
    flat = master.reshape(-1)
    base = hemi * (n * n) + r0 * n + c0
    m00 = flat[base]
    m01 = flat[base + 1]
    m10 = flat[base + n]
    m11 = flat[base + n + 1]
    top = m00 * (1.0 - dc) + m01 * dc
    bottom = m10 * (1.0 - dc) + m11 * dc
    return top * (1.0 - dr) + bottom * dr


# --------------------------------------------------------------------------- geometry


def detector_directions(shape, pc, *, sample_tilt: float = 70.0, detector_tilt: float = 0.0):
    """Unit vectors, in the sample frame, from the source point to every detector pixel.

    Parameters
    ----------
    shape : tuple of int
        Detector shape ``(H, W)`` = (rows, cols).
    pc : array_like
        Pattern centre ``(PCx, PCy, PCz)``, Bruker convention as kikuchipy uses it (see the
        module docstring): PC at pixel ``(PCx W - 0.5, PCy H - 0.5)``, distance ``PCz H`` px.
    sample_tilt : float, optional
        Sample tilt about the microscope X axis in degrees (kikuchipy's ``sample_tilt``).
    detector_tilt : float, optional
        Detector tilt about the detector horizontal in degrees (kikuchipy's ``tilt``).

    Returns
    -------
    numpy.ndarray
        float64 array ``(H, W, 3)``; element ``[y, x]`` is the direction of pixel ``(x, y)``.
        Equal (to rounding) to kikuchipy's direction cosines for the same ``EBSDDetector``.

    See Also
    --------
    ebsdxc.geometry.pixel_directions : the same for any pixel coordinates.
    """
    h, w = check_shape(shape)
    pc = np.asarray(pc, dtype=np.float64)
    if pc.shape != (3,):
        raise ValueError(f"pattern centre must be (PCx, PCy, PCz), got shape {pc.shape}")
    yy, xx = np.meshgrid(np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64),
                         indexing="ij")
    return pixel_directions(np.stack([xx, yy], axis=-1), (h, w), pc,
                            sample_tilt=sample_tilt, detector_tilt=detector_tilt)


def project_to_detector(vectors, shape, pc, *, sample_tilt: float = 70.0,
                        detector_tilt: float = 0.0):
    """Pixel coordinates where sample-frame directions hit the detector (gnomonic projection).

    The inverse of :func:`detector_directions`. Directions need not be normalised.

    Parameters
    ----------
    vectors : array_like
        Directions in the sample frame, shape ``(..., 3)``.
    shape : tuple of int
        Detector shape ``(H, W)``.
    pc : array_like
        Pattern centre ``(PCx, PCy, PCz)``, Bruker convention (see the module docstring); a
        ``(..., 3)`` array broadcasts against the leading dimensions of ``vectors``.
    sample_tilt, detector_tilt : float, optional
        Tilts in degrees, as in :func:`detector_directions`.

    Returns
    -------
    numpy.ndarray
        float64 array ``(..., 2)`` of pixel ``[x, y]``; may lie outside the detector. NaN for
        directions that point away from the detector plane (not in front of it).
    """
    return project(np.asarray(vectors, dtype=np.float64), shape, pc, sample_tilt=sample_tilt,
                   detector_tilt=detector_tilt)


def _check_rotation(orientation) -> np.ndarray:
    g = np.asarray(orientation, dtype=np.float64)
    if g.shape != (3, 3) or not np.all(np.isfinite(g)):
        raise ValueError(f"orientation must be a finite 3x3 rotation matrix, got shape {g.shape}")
    if not np.allclose(g @ g.T, np.eye(3), atol=1e-6) or np.linalg.det(g) <= 0:
        raise ValueError("orientation must be a proper rotation matrix (g g^T = I, det g = +1)")
    return g


def _check_F(F, *, allow_batch: bool = False) -> np.ndarray:
    if F is None:
        return np.eye(3)
    F = np.asarray(F, dtype=np.float64)
    if F.shape[-2:] != (3, 3) or (F.ndim != 2 and not allow_batch):
        raise ValueError(f"F must be a 3x3 deformation gradient, got shape {F.shape}")
    if not np.all(np.isfinite(F)) or np.any(np.linalg.det(F) <= 0):
        raise ValueError("F must be finite with det(F) > 0")
    return F


def _background(shape: tuple[int, int]) -> np.ndarray:
    """Smooth multiplicative background in [0.25, 1]: a broad Gaussian, brightest just below
    the detector centre, like the backscatter yield seen on a real phosphor screen."""
    h, w = shape
    yy, xx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    cx, cy = 0.5 * (w - 1), 0.55 * (h - 1)
    sigma = 0.4 * max(h, w)
    g = np.exp(-(((xx - cx) ** 2) + 0.8 * (yy - cy) ** 2) / (2 * sigma**2))
    return 0.25 + 0.75 * g


def simulate_pattern(master, *, shape, pc, orientation, F=None, sample_tilt: float = 70.0,
                     detector_tilt: float = 0.0, background: bool = True) -> np.ndarray:
    """Project a master pattern onto the detector for a (possibly deformed) crystal.

    Parameters
    ----------
    master : array_like
        Master pattern ``(2, n, n)`` [north, south] in the square Lambert projection (e.g.
        :func:`load_nickel_master_pattern`); an ``(n, n)`` array is used for both hemispheres.
    shape : tuple of int
        Detector shape ``(H, W)``.
    pc : array_like
        Pattern centre ``(PCx, PCy, PCz)``, Bruker convention (module docstring).
    orientation : array_like
        3x3 rotation matrix taking SAMPLE to CRYSTAL coordinates (``v_c = g @ v_s``), i.e.
        orix's ``Rotation.to_matrix()`` of the rotation given to kikuchipy's ``get_patterns``.
    F : array_like, optional
        3x3 deformation gradient in the sample frame; ``None`` means identity. The pattern
        shows at direction ``r`` what the undeformed crystal shows at ``F^-1 r`` normalised.
    sample_tilt, detector_tilt : float, optional
        Tilts in degrees (kikuchipy's ``sample_tilt`` and ``tilt``).
    background : bool, optional
        Multiply by a smooth, broad, centre-bright background (values 0.25 to 1), so that
        background correction matters. The background belongs to the detector, not the
        crystal: it is not deformed by ``F``.

    Returns
    -------
    numpy.ndarray
        float64 intensities ``(H, W)`` (in the master pattern's units, times the background).
    """
    master = _check_master(master)
    g = _check_rotation(orientation)
    F = _check_F(F)
    shape = check_shape(shape)
    r = detector_directions(shape, pc, sample_tilt=sample_tilt, detector_tilt=detector_tilt)
    # undeformed direction F^-1 r, then into the crystal frame: v_c = g F^-1 r (row vectors)
    m = g @ np.linalg.inv(F)
    v = r @ m.T
    v /= np.linalg.norm(v, axis=-1, keepdims=True)
    pattern = _sample_master(master.astype(np.float64, copy=False), v)
    if background:
        pattern = pattern * _background(shape)
    return pattern


def _master_on(master, xp):
    """The (2, n, n) Lambert array of a MasterPattern or an array, on ``xp``'s device.

    float64 on the CPU (the same sums as :func:`simulate_pattern`); float32 on a GPU, where
    the gathers are what costs (EMsoft's intensities are float32 or 8-bit anyway)."""
    lam = getattr(master, "lambert", master)
    on_gpu = type(lam).__module__.startswith("cupy")
    if on_gpu and xp is np:
        lam = lam.get()
        on_gpu = False
    if not on_gpu:
        lam = _check_master(lam)
    elif lam.ndim == 2:
        lam = xp.stack([lam, lam])
    if lam.ndim != 3 or lam.shape[0] != 2 or lam.shape[1] != lam.shape[2] or lam.shape[1] < 2:
        raise ValueError(f"master pattern must have shape (2, n, n) [north, south] or (n, n), got {lam.shape}")
    return xp.ascontiguousarray(xp.asarray(lam, dtype=np.float64 if xp is np else np.float32))


def _check_rotations(g, xp) -> None:
    if xp is not np:
        return  # checking on a GPU array would wait for the device; callers there check upstream
    if not np.all(np.isfinite(g)):
        raise ValueError("orientations must be finite 3x3 rotation matrices")
    gram = np.einsum("bij,bkj->bik", g, g)
    bad = ~(np.all(np.abs(gram - np.eye(3)) <= 1e-6, axis=(1, 2)) & (np.linalg.det(g) > 0))
    if bad.any():
        raise ValueError(f"orientations[{int(np.flatnonzero(bad)[0])}] is not a proper rotation matrix "
                         "(g g^T = I, det g = +1)")


# pixels per chunk of the vectorised projection: about 200 bytes of temporaries each
_CHUNK_PIXELS = {"cpu": 2**20, "gpu": 2**24}


def simulate_patterns(master, *, shape, pc, orientations, F=None, sample_tilt: float = 70.0,
                      detector_tilt: float = 0.0, background: bool = False):
    """Project a master pattern for many crystals at once, on the CPU or a GPU.

    The physics of :func:`simulate_pattern` (whose result is ``simulate_patterns(...)[0]`` to
    float32 rounding), batched: every pattern has its own orientation, and may have its own PC
    and deformation gradient.

    Parameters
    ----------
    master : MasterPattern or array_like
        :class:`ebsdxc.io.master_pattern.MasterPattern`, or a ``(2, n, n)`` [north, south]
        (or ``(n, n)``) square Lambert array, NumPy or CuPy. It is moved to the device of
        ``orientations`` on each call: to simulate many batches on a GPU, pass a CuPy array
        (``cupy.asarray(mp.lambert)``) so it stays resident.
    shape : tuple of int
        Detector shape ``(H, W)``.
    pc : array_like
        Bruker PC ``(3,)`` for all patterns, or ``(B, 3)`` one per pattern.
    orientations : array_like
        ``(B, 3, 3)`` rotation matrices, sample -> crystal (``v_c = g v_s``). Its array
        module (NumPy or CuPy) is where the work is done and the result lives.
    F : array_like, optional
        ``(B, 3, 3)`` (or one ``(3, 3)``) deformation gradients in the sample frame; ``None``
        is identity.
    sample_tilt, detector_tilt : float, optional
        Tilts in degrees (kikuchipy's ``sample_tilt`` and ``tilt``).
    background : bool, optional
        Multiply by :func:`simulate_pattern`'s smooth detector background.

    Returns
    -------
    ndarray
        float32 ``(B, H, W)`` intensities in the master pattern's units, NumPy or CuPy as
        ``orientations``.
    """
    xp = array_module(orientations)
    H, W = check_shape(shape)
    g = xp.asarray(orientations, dtype=xp.float64)
    if g.ndim != 3 or g.shape[1:] != (3, 3):
        raise ValueError(f"orientations must have shape (B, 3, 3), got {g.shape}")
    _check_rotations(g, xp)
    B = g.shape[0]
    pc = xp.asarray(pc, dtype=xp.float64)
    if pc.shape == (3,):
        pc = xp.broadcast_to(pc, (B, 3))
    if pc.shape != (B, 3):
        raise ValueError(f"pc must have shape (3,) or ({B}, 3), got {pc.shape}")
    if xp is np and (not np.all(np.isfinite(pc)) or np.any(pc[:, 2] <= 0)):
        raise ValueError("pc must be finite with PCz > 0")
    m = g
    if F is not None:
        F = xp.asarray(F, dtype=xp.float64)
        if F.shape == (3, 3):
            F = xp.broadcast_to(F, (B, 3, 3))
        if F.shape != (B, 3, 3):
            raise ValueError(f"F must have shape (3, 3) or ({B}, 3, 3), got {F.shape}")
        if xp is np:
            _check_F(F, allow_batch=True)
        m = g @ xp.linalg.inv(F)
    # crystal direction of pixel (x, y) = m @ axes @ (x - x_pc, y_pc - y, L), unnormalised
    n = m @ xp.asarray(detector_axes(sample_tilt, detector_tilt))
    x_pc, y_pc, dist = pc_pixels(pc, (H, W))
    lam = _master_on(master, xp)
    out = xp.empty((B, H, W), dtype=xp.float32)
    if B == 0:
        return out
    if xp is not np:
        _project_gpu(lam, n, x_pc, y_pc, dist, out)
    else:
        _project_vectorised(lam, n, x_pc, y_pc, dist, out, xp, _CHUNK_PIXELS["cpu"])
    if background:
        out *= xp.asarray(_background((H, W)), dtype=xp.float32)
    return out


# One thread per output pixel: direction -> Lambert square -> bilinear, in double precision
# (the NumPy path's sums), float32 out. ``i`` runs over out = (B, H, W).
_PROJECT_BODY = r"""
long long b = i / ((long long)H * W);
long long rem = i - b * (long long)H * W;
int y = (int)(rem / W);
int x = (int)(rem - (long long)y * W);
const double* nb = &nmat[9 * b];
double u = x - xpc[b], v = ypc[b] - y, L = dist[b];
double cx = nb[0] * u + nb[1] * v + nb[2] * L;
double cy = nb[3] * u + nb[4] * v + nb[5] * L;
double cz = nb[6] * u + nb[7] * v + nb[8] * L;
double norm = sqrt(cx * cx + cy * cy + cz * cz);
cx /= norm; cy /= norm; cz /= norm;
double s = sqrt(fmax(1.0 - fabs(cz), 0.0));
double ax = fabs(cx), ay = fabs(cy);
double X, Y;
if (ay <= ax) {
    double sg = (double)((cx > 0.0) - (cx < 0.0));
    double t = ax > 0.0 ? 1.2732395447351628 * atan(cy / cx) : 0.0;
    X = sg * s; Y = sg * s * t;
} else {
    double sg = (double)((cy > 0.0) - (cy < 0.0));
    double t = 1.2732395447351628 * atan(cx / cy);
    Y = sg * s; X = sg * s * t;
}
double half = (M - 1) / 2.0;
double col = (X + 1.0) * half, row = (Y + 1.0) * half;
int c0 = (int)fmin(fmax(floor(col), 0.0), (double)(M - 2));
int r0 = (int)fmin(fmax(floor(row), 0.0), (double)(M - 2));
double dc = fmin(fmax(col - c0, 0.0), 1.0), dr = fmin(fmax(row - r0, 0.0), 1.0);
long long base = (cz >= 0.0 ? 0LL : (long long)M * M) + (long long)r0 * M + c0;
double top = lam[base] * (1.0 - dc) + lam[base + 1] * dc;
double bottom = lam[base + M] * (1.0 - dc) + lam[base + M + 1] * dc;
out = (float)(top * (1.0 - dr) + bottom * dr);
"""


@functools.cache
def _project_kernel():
    cp = importlib.import_module("cupy")
    return cp.ElementwiseKernel(
        "raw float32 lam, raw float64 nmat, raw float64 xpc, raw float64 ypc, raw float64 dist, "
        "int32 H, int32 W, int32 M",
        "float32 out", _PROJECT_BODY, "ebsdxc_project_master")


def _project_gpu(lam, n, x_pc, y_pc, dist, out) -> None:
    """:func:`_project_vectorised` as one CuPy kernel launch (no temporaries)."""
    cp = importlib.import_module("cupy")
    B, H, W = out.shape
    _project_kernel()(lam, cp.ascontiguousarray(n), cp.ascontiguousarray(x_pc), cp.ascontiguousarray(y_pc),
                      cp.ascontiguousarray(dist), np.int32(H), np.int32(W), np.int32(lam.shape[-1]), out)


def _project_vectorised(lam, n, x_pc, y_pc, dist, out, xp, chunk_pixels) -> None:
    """``out[b] = master at normalise(n[b] @ (x - x_pc, y_pc - y, L))``, array code in chunks."""
    B, H, W = out.shape
    xs = xp.arange(W, dtype=xp.float64)[None, None, :]
    ys = xp.arange(H, dtype=xp.float64)[None, :, None]
    step = max(1, chunk_pixels // (H * W))
    for b0 in range(0, B, step):
        sl = slice(b0, b0 + step)
        u = xs - x_pc[sl, None, None]
        v = y_pc[sl, None, None] - ys
        d = dist[sl, None, None]
        nb = n[sl, :, :, None, None]
        vc = xp.stack([nb[:, k, 0] * u + nb[:, k, 1] * v + nb[:, k, 2] * d for k in range(3)], axis=-1)
        vc /= xp.linalg.norm(vc, axis=-1, keepdims=True)
        out[sl] = _sample_master(lam, vc, xp)


def displacement_truth(centres, *, shape, pc_ref, pc, F=None, sample_tilt: float = 70.0,
                       detector_tilt: float = 0.0) -> np.ndarray:
    """True displacement of reference-pattern features in a pattern of a deformed crystal.

    For each centre ``p`` (pixel ``[x, y]`` of the reference pattern, recorded with
    ``pc_ref``): ``r0`` = direction of ``p``; the feature moves to ``r1 = F r0 / |F r0|``;
    the displacement is ``project(r1, pc) - p`` in the scan pattern recorded with ``pc``. It
    does not depend on the crystal orientation.

    Parameters
    ----------
    centres : array_like
        ``(n, 2)`` pixel coordinates ``[x, y]`` in the reference pattern (e.g. ROI centres).
    shape : tuple of int
        Detector shape ``(H, W)``.
    pc_ref : array_like
        Pattern centre ``(3,)`` of the reference pattern (Bruker, module docstring).
    pc : array_like
        Pattern centre of the scan pattern: ``(3,)``, or ``(..., 3)`` for many scan points.
    F : array_like, optional
        Deformation gradient in the sample frame, ``(3, 3)`` or ``(..., 3, 3)``; ``None`` is
        identity. Leading dimensions of ``pc`` and ``F`` broadcast together.
    sample_tilt, detector_tilt : float, optional
        Tilts in degrees.

    Returns
    -------
    numpy.ndarray
        float64 ``(..., n, 2)`` displacements ``[dx, dy]`` in pixels (``(n, 2)`` for a single
        scan point). Positive ``dx``: the feature moved right; positive ``dy``: down.
    """
    p = np.asarray(centres, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] != 2:
        raise ValueError(f"centres must have shape (n, 2) [x, y], got {p.shape}")
    pc_ref = np.asarray(pc_ref, dtype=np.float64)
    if pc_ref.shape != (3,):
        raise ValueError(f"pc_ref must be one pattern centre (3,), got shape {pc_ref.shape}")
    pc = np.asarray(pc, dtype=np.float64)
    F = _check_F(F, allow_batch=True)
    tilts = {"sample_tilt": sample_tilt, "detector_tilt": detector_tilt}
    r0 = pixel_directions(p, shape, pc_ref, **tilts)  # (n, 3)
    if pc.shape[-1:] != (3,):
        raise ValueError(f"pattern centre must be (PCx, PCy, PCz), got shape {pc.shape}")
    lead = np.broadcast_shapes(pc.shape[:-1], F.shape[:-2])
    F = np.broadcast_to(F, lead + (3, 3))
    pc = np.broadcast_to(pc, lead + (3,))
    r1 = np.einsum("...ij,nj->...ni", F, r0)
    return project(r1, shape, pc[..., None, :], **tilts) - p


# --------------------------------------------------------------------------- noise, fields


def poisson_noise(pattern, *, counts: float, rng) -> np.ndarray:
    """Shot noise: scale a pattern to a mean of ``counts`` per pixel and draw Poisson counts.

    Parameters
    ----------
    pattern : array_like
        Non-negative intensities, any shape, with a positive mean.
    counts : float
        Mean number of counts per pixel after scaling.
    rng : numpy.random.Generator or int or None
        Random generator, or a seed for :func:`numpy.random.default_rng`.

    Returns
    -------
    numpy.ndarray
        uint16 counts of the same shape, clipped to ``[0, 65535]``.
    """
    a = np.asarray(pattern, dtype=np.float64)
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError("pattern must be finite and non-negative")
    mean = a.mean() if a.size else 0.0
    if mean <= 0:
        raise ValueError("pattern must have a positive mean")
    if not (np.isfinite(counts) and counts > 0):
        raise ValueError(f"counts must be a positive number, got {counts!r}")
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    draws = rng.poisson(a * (float(counts) / mean))
    return np.clip(draws, 0, np.iinfo(np.uint16).max).astype(np.uint16)


def smooth_deformation_field(rows: int, cols: int, *, strain: float = 1e-3,
                             rotation: float = 1e-3, seed: int = 0) -> np.ndarray:
    """Smoothly varying small deformation gradients over a scan grid.

    ``F = (I + eps) R``: ``eps`` is a symmetric small-strain tensor and ``R`` a rotation, both
    in the sample frame. Every independent component (6 of ``eps``: deviatoric part of
    amplitude ``strain``, volumetric part ``strain / 2``; 3 of the rotation vector, amplitude
    ``rotation`` radians) is a sum of two low-order 2-D sinusoids over the map with random
    wave vectors (0.2 to 1 periods across the map) and phases, drawn from ``seed``.

    Parameters
    ----------
    rows, cols : int
        Scan grid shape.
    strain : float, optional
        Typical magnitude of the strain components.
    rotation : float, optional
        Typical lattice rotation angle about each axis, in radians.
    seed : int, optional
        Seed of the random wave vectors and phases (the field is deterministic).

    Returns
    -------
    numpy.ndarray
        float64 ``(rows, cols, 3, 3)`` deformation gradients with ``det F > 0``.
    """
    rows, cols = int(rows), int(cols)
    if rows < 1 or cols < 1:
        raise ValueError(f"rows and cols must be positive, got {rows}, {cols}")
    for name, value in (("strain", strain), ("rotation", rotation)):
        if not np.isfinite(value) or value < 0 or value > 0.1:
            raise ValueError(f"{name} must be in [0, 0.1] (a small deformation), got {value!r}")
    rng = np.random.default_rng(seed)
    yy, xx = np.meshgrid(np.arange(rows) / max(rows, 1), np.arange(cols) / max(cols, 1),
                         indexing="ij")

    def field() -> np.ndarray:
        out = np.zeros((rows, cols))
        for _ in range(2):
            kx, ky = rng.uniform(0.2, 1.0, size=2) * rng.choice([-1, 1], size=2)
            phase = rng.uniform(0, 2 * np.pi)
            out += np.sin(2 * np.pi * (kx * xx + ky * yy) + phase)
        return out / np.sqrt(2.0)

    eps = np.zeros((rows, cols, 3, 3))
    for i, j in ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)):
        eps[..., i, j] = eps[..., j, i] = strain * field()
    trace = np.trace(eps, axis1=-2, axis2=-1)
    eps -= (trace / 3.0)[..., None, None] * np.eye(3)  # deviatoric part, amplitude ~ strain
    eps += (0.5 * strain * field())[..., None, None] * np.eye(3)  # volumetric part
    w = rotation * np.stack([field() for _ in range(3)], axis=-1)
    F = (np.eye(3) + eps) @ rotation_from_vector(w)
    return F


def bunge_to_matrix(phi1: float, Phi: float, phi2: float) -> np.ndarray:
    """Orientation matrix g (sample -> crystal, v_c = g v_s) of Bunge Euler angles in degrees.

    Equals orix ``Rotation.from_euler(np.radians([phi1, Phi, phi2])).to_matrix()[0]``
    (:func:`ebsdxc.crystal.euler_to_matrix` for one orientation).
    """
    return euler_to_matrix([phi1, Phi, phi2])


@dataclass
class SimulatedScan:
    """A simulated strained scan and what is needed for its ground truth.

    Attributes
    ----------
    patterns : (rows, cols, H, W) uint16 (with noise) or float32 (without)
    reference : (H, W) pattern of the undeformed crystal at ``pc_ref``
    F : (rows, cols, 3, 3) deformation gradients (sample frame)
    pc : (rows, cols, 3) pattern centres (Bruker)
    pc_ref : (3,) reference pattern centre
    """

    patterns: np.ndarray
    reference: np.ndarray
    F: np.ndarray
    pc: np.ndarray
    pc_ref: np.ndarray
    sample_tilt: float = 70.0
    detector_tilt: float = 0.0

    def save(self, folder, *, euler_deg=None, scan_name="scan.h5", ref_name="ref.tif"):
        """Write the scan (HDF5, with per-point PCs, tilts and ``euler_angles`` as attributes) and
        the reference (TIFF with its PC in the description), as a user's files would come.

        Returns ``(scan_path, ref_path)``.
        """
        import json

        import h5py
        import tifffile

        os.makedirs(folder, exist_ok=True)
        scan, ref = os.path.join(folder, scan_name), os.path.join(folder, ref_name)
        with h5py.File(scan, "w") as f:
            ds = f.create_dataset("patterns", data=self.patterns, chunks=(1, *self.patterns.shape[1:]))
            ds.attrs["pattern_centre"] = self.pc
            ds.attrs["pattern_centre_convention"] = "bruker"
            ds.attrs["sample_tilt"] = self.sample_tilt
            ds.attrs["detector_tilt"] = self.detector_tilt
            if euler_deg is not None:
                ds.attrs["euler_angles"] = np.asarray(euler_deg, dtype=np.float64)
        tifffile.imwrite(ref, self.reference, description=json.dumps({"pattern_centre": self.pc_ref.tolist()}))
        return scan, ref

    def truth(self, centres) -> np.ndarray:
        """(rows, cols, n, 2) true [dx, dy] of the ROI ``centres`` ((n, 2) [x, y] px)."""
        return displacement_truth(centres, shape=self.patterns.shape[2:], pc_ref=self.pc_ref, pc=self.pc,
                                  F=self.F, sample_tilt=self.sample_tilt, detector_tilt=self.detector_tilt)


def simulate_scan(rows: int, cols: int, *, shape=(256, 256), counts: float | None = 1000,
                  strain: float = 1e-3, rotation: float = 1e-3, pc_shift_px: float = 0.9,
                  euler_deg=(160.0, 40.0, 20.0), pc_ref=(0.5, 0.45, 0.6), seed: int = 1,
                  master=None, F=None) -> SimulatedScan:
    """A Ni scan under a smoothly varying small deformation, with a pattern centre that moves.

    Parameters
    ----------
    rows, cols : int
        Scan grid.
    shape : (int, int)
        Pattern (H, W).
    counts : float or None
        Mean counts per pixel of the Poisson noise (the reference gets 8 times more);
        ``None`` for noise-free float32 patterns.
    strain, rotation : float
        Magnitudes of :func:`smooth_deformation_field`.
    pc_shift_px : float
        The beam scan moves the pattern centre by up to this many pixels in x and y at the
        map edges (a near-uniform pattern shift on top of the deformation).
    euler_deg : (float, float, float)
        Crystal orientation, Bunge angles in degrees.
    pc_ref : (float, float, float)
        Reference pattern centre (Bruker).
    master : (2, n, n) array, optional
        Master pattern; default :func:`load_nickel_master_pattern`.
    F : (rows, cols, 3, 3) array, optional
        Deformation gradients to use instead of :func:`smooth_deformation_field`'s.
    """
    rng = np.random.default_rng(seed)
    master = load_nickel_master_pattern() if master is None else master
    master = _check_master(master).astype(np.float64)  # once: simulate_pattern would per pattern
    g = bunge_to_matrix(*euler_deg)
    H, W = check_shape(shape)
    pc_ref = np.asarray(pc_ref, dtype=np.float64)
    if F is None:
        F = smooth_deformation_field(rows, cols, strain=strain, rotation=rotation, seed=seed)
    else:
        F = _check_F(F, allow_batch=True)
        if F.shape != (rows, cols, 3, 3):
            raise ValueError(f"F must have shape ({rows}, {cols}, 3, 3), got {F.shape}")
    yy, xx = np.meshgrid(np.linspace(-1, 1, rows), np.linspace(-1, 1, cols), indexing="ij")
    pc = np.empty((rows, cols, 3))
    pc[..., 0] = pc_ref[0] + pc_shift_px * xx / W
    pc[..., 1] = pc_ref[1] + pc_shift_px * yy / H
    pc[..., 2] = pc_ref[2] * (1 + 5e-4 * yy)
    noisy = counts is not None
    pats = np.empty((rows, cols, H, W), dtype=np.uint16 if noisy else np.float32)
    for i in range(rows):
        for j in range(cols):
            p = simulate_pattern(master, shape=(H, W), pc=pc[i, j], orientation=g, F=F[i, j])
            pats[i, j] = poisson_noise(p, counts=counts, rng=rng) if noisy else p * 1000
    ref = simulate_pattern(master, shape=(H, W), pc=pc_ref, orientation=g)
    ref = poisson_noise(ref, counts=8 * counts, rng=rng) if noisy else (ref * 1000).astype(np.float32)
    return SimulatedScan(pats, ref, F, pc, pc_ref)


# --------------------------------------------------------------------------- polycrystal

#: Smallest misorientation (degrees, cubic symmetry) between the random grain orientations of
#: :func:`simulate_polycrystal`: far above the 5 degree tolerance a segmentation uses.
MIN_GRAIN_MISORIENTATION_DEG = 15.0

POLYCRYSTAL_CONVENTIONS = """\
Scan grid: ebsdxc.io.ScanGrid rows x cols slots, flat index r*cols + c; kind "square" or
"hexagonal" (odd rows shifted half a step right, their last slot padding: grain_id -1, NaN
truth, zero pattern). Map position of slot (r, c): X = (c + 0.5 (r odd, hexagonal)) * step_x,
Y = r * step_y, in micrometres (ScanGrid.positions).
Map and sample axes (kikuchipy's / EDAX TSL's sample frame, as ebsdxc.gnd.MAP_AXES): the map's
X (along the columns) is -y_s, its Y (down the rows) is -x_s, and z_s points out of the
surface, towards the detector: a map offset (dX, dY) is the sample vector (-dY, -dX, 0). This
is how the pattern centre moves with the beam (ebsdxc.geometry.extrapolate_pc).
Grains: Voronoi cells of random seeds (nearest seed in micrometres), each connected on the
grid (4 neighbours, 6 on a hexagonal grid); grain_id 0..n-1 numbered by each grain's first
point in row-major order (as ebsdxc.grains numbers a segmentation).
Orientation g: sample -> crystal (v_c = g v_s), per point, curvature included; Bunge Euler
angles in degrees as ebsdxc.crystal.matrix_to_euler gives them.
Per grain: mean orientation g0 (the orientation at the grain's centroid), uniform elastic
strain eps (sample frame, symmetric, deviatoric part random with largest principal value of
magnitude `strain`, volumetric part set so that sigma_33 = 0 with nickel's stiffness: a free
surface), curvature K (3x3, 1/m, only the x and y columns non-zero, Frobenius norm
`curvature`).
Lattice rotation: theta = K @ p_s (radians, sample frame), p_s the point's sample-frame
position relative to the grain's centroid, in metres, (-dY, -dX, 0) of its map offset;
R = exp([theta]x) rotates lattice vectors in the sample frame (r -> R r); g = g0 R^T.
Deformation gradient (sample frame): F = (I + eps) R, so F = V R is its left polar
decomposition with V = I + eps. Patterns are simulate_pattern(master, orientation=g0, F=F).
Nye tensor (sample frame, 1/m): kappa_ij = d theta_i / d x_j, x_j SAMPLE coordinates (j = x_s,
y_s in the surface; the z_s column is 0),
alpha = kappa^T - tr(kappa) I, i.e. alpha = K^T - tr(K) I, constant per grain (exact to first
order in theta: the finite-difference curvature of the rotation field differs by < |theta|/2).
Relative truth (reference point a, point b of the same grain): F_rel = F_b F_a^-1 = V_rel R_rel,
strain = V_rel - I, rotation = log(R_rel) (antisymmetric, radians; w_21 = rotation about z), as
ebsdxc.strain.fit_strain defines them; strain_crystal = g' strain g'^T with g' = g_a R_rel^T,
rotation_crystal = g_a w g_a^T. With a uniform strain per grain the relative strain is of
order strain x rotation (~1e-5); fit_strain recovers its deviatoric part exactly, and its
volumetric part (from sigma_33 = 0 for F_rel) to within about that order.
Pattern centres (Bruker) move with the beam as ebsdxc.geometry.extrapolate_pc says (Singh et
al. 2017), pc_ref at the map centre, with an effective detector pixel size chosen so that PCx
moves by pc_shift_px pixels at the map's left and right edges (exaggerated, as in
simulate_scan, so that a pipeline that ignored it would fail).
"""




def _quaternion_matrices(q: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 3, 3) of unit quaternions (..., 4) = (w, x, y, z)."""
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], axis=-1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], axis=-1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=-1),
    ], axis=-2)


def _distinct_orientations(n: int, rng, *, min_angle_deg: float) -> np.ndarray:
    """``n`` orientations drawn uniformly (Haar measure), each at least ``min_angle_deg`` from
    every other under cubic (m-3m) symmetry; random sequential drawing with rejection."""

    limit = np.deg2rad(min_angle_deg)
    accepted = np.empty((0, 3, 3))
    for _ in range(2000 * max(n, 1)):
        if len(accepted) == n:
            return accepted
        q = rng.normal(size=4)
        g = _quaternion_matrices(q / np.linalg.norm(q))
        if len(accepted) == 0 or misorientation_angle(accepted, g[None], "m-3m").min() > limit:
            accepted = np.concatenate([accepted, g[None]])
    raise ValueError(f"n_grains: could not draw {n} orientations {min_angle_deg} degrees apart "
                     "(cubic symmetry leaves room for a few hundred at most)")


def _slot_positions(rows: int, cols: int, step_yx, kind: str) -> np.ndarray:
    """(rows, cols, 2) [x, y] micrometres of every slot, padding slots included (they sit half a
    step beyond the row's end), so that per-slot fields such as the PC stay finite there."""
    r, c = np.mgrid[0:rows, 0:cols].astype(np.float64)
    if kind == "hexagonal":
        c += 0.5 * (r % 2)
    return np.stack([c * step_yx[1], r * step_yx[0]], axis=-1)


def _neighbour_pairs(grid) -> tuple[np.ndarray, np.ndarray]:
    """Flat slot indices (a, b) of the pairs of nearest-neighbour scan points of ``grid``: the 4
    neighbours on a square grid, the 6 on a hexagonal one (padding slots excluded)."""
    rows, cols = grid.rows, grid.cols
    idx = np.arange(rows * cols).reshape(rows, cols)
    pairs = [(idx[:, :-1], idx[:, 1:])]
    if grid.kind == "hexagonal":
        # even row r, column c touches row r + 1 at c - 1 and c; odd row r at c and c + 1
        for r in range(rows - 1):
            shift = (-1, 0) if r % 2 == 0 else (0, 1)
            for s in shift:
                c = np.arange(max(0, -s), min(cols, cols - s))
                pairs.append((idx[r, c], idx[r + 1, c + s]))
    else:
        pairs.append((idx[:-1, :], idx[1:, :]))
    a = np.concatenate([p[0].ravel() for p in pairs])
    b = np.concatenate([p[1].ravel() for p in pairs])
    ok = grid.in_grid().ravel()
    keep = ok[a] & ok[b]
    return a[keep], b[keep]


def _components(labels: np.ndarray, pairs) -> np.ndarray:
    """Connected-component number of every slot: slots with equal ``labels`` (>= 0) joined by
    neighbour ``pairs``; -1 where the label is negative. Label propagation to the minimum."""
    lab = labels.ravel()
    a, b = pairs
    same = (lab[a] == lab[b]) & (lab[a] >= 0)
    a, b = a[same], b[same]
    comp = np.where(lab >= 0, np.arange(lab.size), -1)
    while True:
        m = np.minimum(comp[a], comp[b])
        new = comp.copy()
        np.minimum.at(new, a, m)
        np.minimum.at(new, b, m)
        new[new >= 0] = new[new[new >= 0]]  # pointer jumping: converges in few passes
        if np.array_equal(new, comp):
            return comp.reshape(labels.shape)
        comp = new


def _voronoi_grains(positions, in_grid, n_grains: int, rng, grid, *, min_points: int):
    """Seeds (n, 2) [x, y] um and grain ids (rows, cols) of a Voronoi tessellation whose grains
    each hold at least ``min_points`` scan points and are connected on the grid."""
    pts = positions[in_grid]
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    area = max(float(np.prod(np.maximum(hi - lo, 1e-12))), 1e-12)
    # seeds no closer than ~0.6 of the mean spacing: no sliver grains, as in a real tessellation
    min_gap = 0.6 * np.sqrt(area / n_grains)
    pairs = _neighbour_pairs(grid)
    for _ in range(200):
        seeds = np.empty((0, 2))
        for _ in range(1000 * n_grains):
            if len(seeds) == n_grains:
                break
            s = lo + rng.random(2) * (hi - lo)
            if len(seeds) == 0 or np.linalg.norm(seeds - s, axis=1).min() >= min_gap:
                seeds = np.vstack([seeds, s])
        if len(seeds) < n_grains:
            min_gap *= 0.9
            continue
        d = np.linalg.norm(positions[..., None, :] - seeds, axis=-1)
        gid = np.where(in_grid, np.argmin(np.where(np.isfinite(d), d, np.inf), axis=-1), -1)
        counts = np.bincount(gid[in_grid], minlength=n_grains)
        if counts.min() < min_points:
            continue
        comp = _components(gid, pairs)
        if all(np.unique(comp[gid == k]).size == 1 for k in range(n_grains)):
            # number grains by their first point in row-major order, as ebsdxc.grains does, so
            # that a segmentation's ids compare with these directly
            first = np.array([np.flatnonzero(gid.ravel() == k)[0] for k in range(n_grains)])
            order = np.argsort(first)
            rank = np.empty(n_grains, dtype=np.int64)
            rank[order] = np.arange(n_grains)
            return seeds[order], np.where(gid >= 0, rank[np.maximum(gid, 0)], -1).astype(np.int32)
    raise ValueError(f"n_grains: could not make {n_grains} connected grains of at least {min_points} "
                     f"points each on a {grid.rows} x {grid.cols} grid; use fewer grains or a larger scan")


def _grain_strain(g: np.ndarray, magnitude: float, rng, stiffness) -> np.ndarray:
    """Random symmetric strain (sample frame): deviatoric part of largest principal value
    ``magnitude``, volumetric part so that sigma_33 = 0 (free surface) in the crystal ``g``."""
    a = rng.normal(size=(3, 3))
    a = 0.5 * (a + a.T)
    a -= np.trace(a) / 3.0 * np.eye(3)
    a *= magnitude / np.abs(np.linalg.eigvalsh(a)).max()
    from .materials import rotate_stiffness

    c33 = rotate_stiffness(stiffness, g)[2, 2]  # sigma_33 = C_33kl eps_kl, sample frame
    return a - (np.sum(c33 * a) / np.trace(c33)) * np.eye(3)


@dataclass
class RelativeTruth:
    """What HR-EBSD measures at each point against its grain's reference point, exactly.

    All arrays ``(rows, cols, 3, 3)`` float64, NaN at hexagonal padding slots, defined as
    :func:`ebsdxc.strain.fit_strain` defines its results (module docstring of
    :mod:`ebsdxc.simulate`, ``POLYCRYSTAL_CONVENTIONS``).

    Attributes
    ----------
    F : ``F_point @ inv(F_reference)`` (sample frame)
    strain : ``V - I`` of ``F = V R`` (sample frame)
    rotation : ``log(R)``, antisymmetric, radians (sample frame)
    strain_crystal, rotation_crystal : the same in the reference crystal's frame
    reference_index : (rows, cols) int64 flat slot index of each point's reference, -1 at padding
    """

    F: np.ndarray
    strain: np.ndarray
    rotation: np.ndarray
    strain_crystal: np.ndarray
    rotation_crystal: np.ndarray
    reference_index: np.ndarray


@dataclass
class SimulatedPolycrystal:
    """A simulated polycrystal scan and its ground truth (``POLYCRYSTAL_CONVENTIONS``).

    Per slot arrays are ``(rows, cols, ...)`` over the grid's slots; hexagonal padding slots
    hold zero patterns, ``grain_id`` -1 and NaN truth.

    Attributes
    ----------
    patterns : (rows, cols, H, W) uint16 (Poisson noise) or float32 (noise-free)
    grid : ebsdxc.io.ScanGrid (step (step_y, step_x) in micrometres, kind)
    grain_id : (rows, cols) int32, 0..n_grains-1
    orientation : (rows, cols, 3, 3) g of each point (sample -> crystal, curvature included)
    F : (rows, cols, 3, 3) deformation gradient, sample frame, F = (I + eps) R
    lattice_rotation : (rows, cols, 3) rotation vector theta (radians, sample frame): R = exp([theta]x)
    nye : (rows, cols, 3, 3) Nye tensor alpha (1/m, sample frame)
    pc : (rows, cols, 3) Bruker pattern centres
    image_quality : (rows, cols) float32 pattern contrast (std / mean of the noise-free pattern
        without its background), 0 at padding
    grain_orientation : (n, 3, 3) g0, the orientation at each grain's centroid
    grain_strain : (n, 3, 3) eps of each grain (sample frame)
    grain_curvature : (n, 3, 3) K = kappa of each grain (1/m)
    grain_centre : (n, 2) [x, y] micrometres, the centroid where theta = 0
    seeds : (n, 2) [x, y] micrometres, the Voronoi seeds
    pc_ref : (3,) PC at the map centre (where the PC would be; not necessarily a scan point)
    sample_tilt, detector_tilt : degrees
    parameters : dict of the arguments that made it (JSON-friendly)
    """

    patterns: np.ndarray
    grid: object
    grain_id: np.ndarray
    orientation: np.ndarray
    F: np.ndarray
    lattice_rotation: np.ndarray
    nye: np.ndarray
    pc: np.ndarray
    image_quality: np.ndarray
    grain_orientation: np.ndarray
    grain_strain: np.ndarray
    grain_curvature: np.ndarray
    grain_centre: np.ndarray
    seeds: np.ndarray
    pc_ref: np.ndarray
    sample_tilt: float = 70.0
    detector_tilt: float = 0.0
    parameters: dict | None = None

    @property
    def n_grains(self) -> int:
        """Number of grains."""
        return int(self.grain_orientation.shape[0])

    @property
    def euler_deg(self) -> np.ndarray:
        """(rows, cols, 3) Bunge angles in degrees of :attr:`orientation` (NaN at padding)."""

        out = np.full(self.orientation.shape[:-1], np.nan)
        ok = self.grain_id >= 0
        out[ok] = matrix_to_euler(self.orientation[ok])
        return out

    def _reference_slots(self, reference_points) -> np.ndarray:
        ref = np.asarray(reference_points)
        if not np.issubdtype(ref.dtype, np.integer):
            raise ValueError("reference_points must be integers: flat slot indices r * cols + c "
                             "(n_grains,) or [row, col] pairs (n_grains, 2)")
        rows, cols = self.grain_id.shape
        if ref.shape == (self.n_grains, 2):
            if np.any((ref[:, 0] < 0) | (ref[:, 0] >= rows) | (ref[:, 1] < 0) | (ref[:, 1] >= cols)):
                raise ValueError(f"reference_points: [row, col] outside the {rows} x {cols} grid")
            ref = ref[:, 0] * cols + ref[:, 1]
        elif ref.shape != (self.n_grains,):
            raise ValueError(f"reference_points must hold one point per grain: shape ({self.n_grains},) "
                             f"flat indices or ({self.n_grains}, 2) [row, col], got {ref.shape}")
        if np.any((ref < 0) | (ref >= rows * cols)):
            raise ValueError(f"reference_points: flat index outside 0..{rows * cols - 1}")
        owner = self.grain_id.ravel()[ref]
        wrong = np.flatnonzero(owner != np.arange(self.n_grains))
        if wrong.size:
            k = int(wrong[0])
            raise ValueError(f"reference_points: the reference of grain {k} (slot {int(ref[k])}) lies in "
                             f"grain {int(owner[k])}, not in grain {k}")
        return ref.astype(np.int64)

    def truth_relative(self, reference_points) -> RelativeTruth:
        """Each point's deformation, strain and rotation relative to its grain's reference point.

        Parameters
        ----------
        reference_points : array_like of int
            The reference point of every grain, in grain order: ``(n_grains,)`` flat slot
            indices ``r * cols + c`` or ``(n_grains, 2)`` ``[row, col]``; each must lie in its
            grain.

        Returns
        -------
        RelativeTruth
            ``F_point @ inv(F_ref)`` and its strain and rotation as ``fit_strain`` defines them.
            Strain is relative too: with a uniform strain per grain it is of order strain x
            rotation (~1e-5), the relative rotation carries the curvature.
        """
        ref = self._reference_slots(reference_points)
        rows, cols = self.grain_id.shape
        ok = self.grain_id >= 0
        ref_index = np.where(ok, ref[np.maximum(self.grain_id, 0)], -1)
        flatF = self.F.reshape(-1, 3, 3)
        flatg = self.orientation.reshape(-1, 3, 3)
        nan = np.full((rows, cols, 3, 3), np.nan)
        F, strain, rot, strain_c, rot_c = (nan.copy() for _ in range(5))
        Fp = self.F[ok]
        Fr = flatF[ref_index[ok]]
        gr = flatg[ref_index[ok]]
        Frel = Fp @ np.linalg.inv(Fr)
        V, R = polar_decomposition(Frel)
        eps = V - np.eye(3)
        w = rotation_log(R)
        g_def = gr @ np.swapaxes(R, -1, -2)
        F[ok], strain[ok], rot[ok] = Frel, eps, w
        strain_c[ok] = g_def @ eps @ np.swapaxes(g_def, -1, -2)
        rot_c[ok] = gr @ w @ np.swapaxes(gr, -1, -2)
        return RelativeTruth(F, strain, rot, strain_c, rot_c, ref_index.astype(np.int64))

    def truth_displacement(self, centres, reference_points) -> np.ndarray:
        """(rows, cols, n, 2) true ``[dx, dy]`` px of ROI ``centres`` ((n, 2) [x, y] px) of each
        grain's reference pattern, seen in every point's pattern (NaN at padding slots).

        Uses :func:`displacement_truth` with the reference point's PC and the relative ``F``.
        """
        c = np.asarray(centres, dtype=np.float64)
        rel = self.truth_relative(reference_points)
        out = np.full(self.grain_id.shape + (len(c), 2), np.nan)
        flat_pc = self.pc.reshape(-1, 3)
        ref = rel.reference_index
        for k in range(self.n_grains):
            mask = self.grain_id == k
            r = int(ref[mask][0])
            out[mask] = displacement_truth(c, shape=self.patterns.shape[2:], pc_ref=flat_pc[r], pc=self.pc[mask],
                                           F=rel.F[mask], sample_tilt=self.sample_tilt,
                                           detector_tilt=self.detector_tilt)
        return out

    def save(self, folder, *, scan_name: str = "scan.h5", orientation_name: str = "scan.ang",
             truth_name: str | None = "truth.h5", compression_level: int = 6, note: str | None = None):
        """Write the scan, an orientation file and (optionally) the ground truth into ``folder``.

        - ``scan_name`` (HDF5): ``/patterns`` (rows, cols, H, W), gzip + shuffle, one scan row
          per chunk; attributes (on the root and the dataset) ``pattern_centre`` (rows, cols, 3)
          with ``pattern_centre_convention`` ``"bruker"``, ``step_x``, ``step_y``, ``step_unit``
          ``"um"``, ``grid_kind``, ``sample_tilt``, ``detector_tilt``, ``note``. No
          ``euler_angles``: the orientations differ per point and live in the orientation file.
        - ``orientation_name``: the per-point orientations (Bunge degrees, TSL/kikuchipy frame:
          ebsdxc's), phase 1 "Ni" (m-3m, space group 225), image quality, confidence index 1,
          the TSL pattern centre of ``pc_ref``; an EDAX/TSL .ang file (``ebsdxc.io.ang``).
        - ``truth_name`` (HDF5, skipped when ``None``): every truth array of this object, the
          conventions (``POLYCRYSTAL_CONVENTIONS``) and the parameters.

        Files are written without time stamps, so the same object gives the same bytes.
        Returns the paths ``(scan, orientations, truth or None)``.
        """
        import json

        import h5py

        if not (isinstance(compression_level, (int, np.integer)) and 0 <= compression_level <= 9):
            raise ValueError(f"compression_level must be an integer 0..9, got {compression_level!r}")
        os.makedirs(folder, exist_ok=True)
        rows, cols = self.grain_id.shape
        note = note or ("Simulated polycrystal (not measured): kikuchipy's EMsoft nickel master pattern "
                        "projected with ebsdxc.simulate.simulate_polycrystal, Poisson noise.")
        step_y, step_x = self.grid.step
        attrs = {
            "pattern_centre": self.pc,
            "pattern_centre_convention": "bruker",
            "step_x": float(step_x),
            "step_y": float(step_y),
            "step_unit": "um",
            "grid_kind": self.grid.kind,
            "sample_tilt": float(self.sample_tilt),
            "detector_tilt": float(self.detector_tilt),
            "note": note,
        }
        scan = os.path.join(folder, scan_name)
        with h5py.File(scan, "w", track_order=True) as f:
            ds = f.create_dataset("patterns", data=self.patterns, chunks=(1, cols) + self.patterns.shape[2:],
                                  compression="gzip", compression_opts=int(compression_level), shuffle=True,
                                  track_times=False)
            for target in (f.attrs, ds.attrs):
                for key, value in attrs.items():
                    target[key] = value
            ds.attrs["dims"] = "scan_row, scan_col, pattern_row (y), pattern_col (x)"
        orientations = os.path.join(folder, orientation_name)
        self._write_orientations(orientations)
        truth = None
        if truth_name is not None:
            truth = os.path.join(folder, truth_name)
            arrays = {
                "grain_id": self.grain_id, "orientation": self.orientation, "euler_deg": self.euler_deg,
                "F": self.F, "lattice_rotation": self.lattice_rotation, "nye_tensor": self.nye,
                "pattern_centre": self.pc, "pattern_centre_ref": self.pc_ref,
                "image_quality": self.image_quality, "grains/orientation": self.grain_orientation,
                "grains/strain": self.grain_strain, "grains/curvature": self.grain_curvature,
                "grains/centre": self.grain_centre, "grains/seed": self.seeds,
            }
            with h5py.File(truth, "w", track_order=True) as f:
                for name, data in arrays.items():
                    f.create_dataset(name, data=data, track_times=False)
                f.attrs["sample_tilt"] = float(self.sample_tilt)
                f.attrs["detector_tilt"] = float(self.detector_tilt)
                f.attrs["detector_shape"] = np.asarray(self.patterns.shape[2:], dtype=np.int64)
                f.attrs["grid_kind"] = self.grid.kind
                f.attrs["step"] = np.asarray(self.grid.step, dtype=np.float64)
                f.attrs["step_unit"] = "um"
                f.attrs["conventions"] = POLYCRYSTAL_CONVENTIONS
                f.attrs["parameters"] = json.dumps(self.parameters or {}, sort_keys=True)
                f.attrs["note"] = note
        return scan, orientations, truth

    def _write_orientations(self, path) -> None:
        from .geometry import convert_pc
        from .io.ang import write_ang
        from .io.orientation_map import OrientationMap, PhaseInfo

        ok = self.grain_id >= 0
        nickel = PhaseInfo(id=1, name="Ni", laue="m-3m", lattice=(3.524, 3.524, 3.524, 90.0, 90.0, 90.0),
                           formula="Ni", space_group=225)
        star = convert_pc(self.pc_ref, from_convention="bruker", to_convention="tsl",
                          shape=self.patterns.shape[2:])
        omap = OrientationMap(
            path=os.fspath(path), grid=self.grid, euler_deg=self.euler_deg,
            phase=np.where(ok, 0, -1).astype(np.int16), phases=(nickel,),
            quality={"iq": self.image_quality, "ci": ok.astype(np.float32)}, frame="tsl",
            metadata={"pattern_centre": np.asarray(star, dtype=np.float64).tolist(),
                      "pattern_centre_convention": "tsl", "scan_id": "ebsdxc simulated polycrystal"},
        )
        write_ang(path, omap, overwrite=True)


def simulate_polycrystal(rows: int, cols: int, *, n_grains: int = 4, shape=(128, 128),
                         counts: float | None = 1000, strain: float = 1e-3, curvature: float = 2e3,
                         step=0.5, grid_kind: str = "square", seed: int = 1,
                         pc_ref=(0.5, 0.45, 0.6), pc_shift_px: float = 0.9, master=None,
                         orientations=None, sample_tilt: float = 70.0, detector_tilt: float = 0.0,
                         min_misorientation: float = MIN_GRAIN_MISORIENTATION_DEG,
                         min_grain_points: int | None = None) -> SimulatedPolycrystal:
    """A nickel polycrystal scan: Voronoi grains, a uniform strain and a lattice curvature per grain.

    Conventions, and the exact definition of every truth array, are in
    ``POLYCRYSTAL_CONVENTIONS`` (also written into the truth file by
    :meth:`SimulatedPolycrystal.save`).

    Parameters
    ----------
    rows, cols : int
        Scan grid (slots; on a hexagonal grid odd rows hold ``cols - 1`` points).
    n_grains : int
        Number of grains (Voronoi cells of random seeds, each connected and holding at least
        ``min_grain_points`` points).
    shape : (int, int)
        Pattern (H, W).
    counts : float or None
        Mean counts per pixel of the Poisson noise; ``None`` for noise-free float32 patterns
        (intensities x 1000).
    strain : float
        Largest principal value of each grain's random deviatoric strain (sample frame); the
        volumetric part makes ``sigma_33 = 0`` (nickel). In [0, 0.05].
    curvature : float
        Frobenius norm of each grain's curvature tensor ``K`` in rad/m (0: unbent grains, for
        the GND noise floor).
    step : float or (float, float)
        Scan step in micrometres: ``step_x``; ``step_y`` equals it on a square grid and is
        ``step * sqrt(3) / 2`` on a hexagonal one (as EDAX/TSL). Or ``(step_y, step_x)``.
    grid_kind : {"square", "hexagonal"}
    seed : int
        Seed of everything random (grains, orientations, strains, curvatures; the noise uses
        the stream ``[seed, 1]``, so ``counts`` changes the noise only).
    pc_ref : (float, float, float)
        Bruker PC at the map centre.
    pc_shift_px : float
        How far PCx moves, in pixels, at the map's left and right edges; the beam moves the PC
        as :func:`ebsdxc.geometry.extrapolate_pc` says, with the detector pixel size this
        implies (0: a fixed PC).
    master : (2, n, n) array, optional
        Master pattern; default :func:`load_nickel_master_pattern`.
    orientations : array_like, optional
        Mean grain orientations instead of random ones: ``(n_grains, 3)`` Bunge degrees or
        ``(n_grains, 3, 3)`` matrices (sample -> crystal), used as given (not checked against
        ``min_misorientation``).
    sample_tilt, detector_tilt : float
        Degrees.
    min_misorientation : float
        Random grain orientations are at least this far apart (degrees, m-3m symmetry).
    min_grain_points : int, optional
        Fewest scan points of a grain; default ``max(4, n_points // (4 n_grains))``.

    Returns
    -------
    SimulatedPolycrystal
    """
    from .io import ScanGrid
    from .materials import parse_material, stiffness_tensor

    rows, cols, n_grains = int(rows), int(cols), int(n_grains)
    if rows < 1 or cols < 1:
        raise ValueError(f"rows and cols must be positive, got {rows}, {cols}")
    if n_grains < 1:
        raise ValueError(f"n_grains must be at least 1, got {n_grains}")
    H, W = check_shape(shape)
    if counts is not None and not (np.isfinite(counts) and counts > 0):
        raise ValueError(f"counts must be a positive number or None, got {counts!r}")
    if not (np.isfinite(strain) and 0 <= strain <= 0.05):
        raise ValueError(f"strain must be in [0, 0.05] (a small elastic strain), got {strain!r}")
    if not (np.isfinite(curvature) and curvature >= 0):
        raise ValueError(f"curvature must be a finite number >= 0 (rad/m), got {curvature!r}")
    if grid_kind not in ("square", "hexagonal"):
        raise ValueError(f"grid_kind must be 'square' or 'hexagonal', got {grid_kind!r}")
    step_arr = np.atleast_1d(np.asarray(step, dtype=np.float64))
    if step_arr.shape == (1,):
        sx = float(step_arr[0])
        step_yx = (sx * np.sqrt(3.0) / 2.0 if grid_kind == "hexagonal" else sx, sx)
    elif step_arr.shape == (2,):
        step_yx = (float(step_arr[0]), float(step_arr[1]))
    else:
        raise ValueError(f"step must be one number or (step_y, step_x) in micrometres, got {step!r}")
    if not all(np.isfinite(s) and s > 0 for s in step_yx):
        raise ValueError(f"step must be positive (micrometres), got {step!r}")
    pc_ref = np.asarray(pc_ref, dtype=np.float64)
    if pc_ref.shape != (3,) or not np.all(np.isfinite(pc_ref)):
        raise ValueError(f"pc_ref must be one Bruker pattern centre (PCx, PCy, PCz), got {pc_ref!r}")
    if not (np.isfinite(pc_shift_px) and pc_shift_px >= 0):
        raise ValueError(f"pc_shift_px must be a finite number of pixels >= 0, got {pc_shift_px!r}")
    grid = ScanGrid(rows, cols, step=step_yx, kind=grid_kind)
    in_grid = grid.in_grid()
    n_points = grid.n_points
    if min_grain_points is None:
        min_grain_points = max(4, n_points // (4 * n_grains))
    if n_grains * int(min_grain_points) > n_points:
        raise ValueError(f"n_grains: {n_grains} grains of at least {min_grain_points} points do not fit "
                         f"the {n_points} points of the scan")
    if orientations is not None:
        o = np.asarray(orientations, dtype=np.float64)
        if o.shape == (n_grains, 3):
            o = euler_to_matrix(o)
        elif o.shape == (n_grains, 3, 3):
            o = np.array([_check_rotation(m) for m in o])
        else:
            raise ValueError(f"orientations must be ({n_grains}, 3) Bunge degrees or ({n_grains}, 3, 3) "
                             f"matrices for n_grains={n_grains}, got shape {o.shape}")

    rng = np.random.default_rng(seed)
    positions = _slot_positions(rows, cols, step_yx, grid_kind)
    seeds, gid = _voronoi_grains(np.where(in_grid[..., None], positions, np.nan), in_grid, n_grains, rng,
                                 grid, min_points=int(min_grain_points))
    g0 = _distinct_orientations(n_grains, rng, min_angle_deg=min_misorientation) if orientations is None else o
    C = stiffness_tensor(parse_material("Ni")[1])
    eps = np.array([_grain_strain(g0[k], strain, rng, C) for k in range(n_grains)])
    K = np.zeros((n_grains, 3, 3))
    K[:, :, :2] = rng.normal(size=(n_grains, 3, 2))
    K *= curvature / np.linalg.norm(K, axis=(1, 2))[:, None, None]
    centre = np.array([positions[gid == k].mean(axis=0) for k in range(n_grains)])

    ok = gid >= 0
    k = np.maximum(gid, 0)
    d = np.zeros(gid.shape + (3,))
    d[..., :2] = (positions - centre[k]) * 1e-6  # map offset, metres
    theta = np.einsum("...ij,jk,...k->...i", K[k], MAP_AXES, d)
    R = rotation_from_vector(theta)
    g = g0[k] @ np.swapaxes(R, -1, -2)
    F = (np.eye(3) + eps[k]) @ R
    trK = np.trace(K, axis1=-2, axis2=-1)
    nye_grain = np.swapaxes(K, -1, -2) - trK[:, None, None] * np.eye(3)
    nye = nye_grain[k]
    for a in (theta, g, F, nye):
        a[~ok] = np.nan

    # PC moving with the beam as extrapolate_pc (Singh et al. 2017), about the map centre
    lo, hi = positions[in_grid].min(axis=0), positions[in_grid].max(axis=0)
    half = 0.5 * (hi - lo)
    lead = half[0] if half[0] > 0 else half[1]
    um_per_px = lead / pc_shift_px if pc_shift_px > 0 and lead > 0 else np.inf
    dX, dY = np.moveaxis(0.5 * (lo + hi) - positions, -1, 0)  # (x0 - x, y0 - y)
    alpha = np.deg2rad(90.0 - sample_tilt + detector_tilt)
    pc = np.empty((rows, cols, 3))
    pc[..., 0] = pc_ref[0] + dX / (um_per_px * W)
    pc[..., 1] = pc_ref[1] + dY * np.cos(alpha) / (um_per_px * H)
    pc[..., 2] = pc_ref[2] - dY * np.sin(alpha) / (um_per_px * H)

    master = _check_master(load_nickel_master_pattern() if master is None else master)
    master = master.astype(np.float64)  # once, not per pattern
    bg = _background((H, W))
    noise_rng = np.random.default_rng([seed, 1])
    noisy = counts is not None
    pats = np.zeros((rows, cols, H, W), dtype=np.uint16 if noisy else np.float32)
    iq = np.zeros((rows, cols), dtype=np.float32)
    tilts = {"sample_tilt": sample_tilt, "detector_tilt": detector_tilt}
    for i, j in zip(*np.nonzero(ok)):
        p = simulate_pattern(master, shape=(H, W), pc=pc[i, j], orientation=g0[gid[i, j]], F=F[i, j],
                             background=False, **tilts)
        iq[i, j] = p.std() / p.mean()
        p = p * bg
        pats[i, j] = poisson_noise(p, counts=counts, rng=noise_rng) if noisy else p * 1000
    if noisy and pats.max() >= np.iinfo(np.uint16).max:
        raise ValueError("counts: patterns would clip at 65535 counts; lower counts")

    params = {
        "rows": rows, "cols": cols, "n_grains": n_grains, "shape": [H, W],
        "counts": None if counts is None else float(counts), "strain": float(strain),
        "curvature": float(curvature), "step_yx_um": list(step_yx), "grid_kind": grid_kind,
        "seed": int(seed), "pc_ref": pc_ref.tolist(), "pc_shift_px": float(pc_shift_px),
        "orientations_given": orientations is not None, "sample_tilt": float(sample_tilt),
        "detector_tilt": float(detector_tilt), "min_misorientation_deg": float(min_misorientation),
        "min_grain_points": int(min_grain_points), "material": "Ni",
    }
    return SimulatedPolycrystal(
        patterns=pats, grid=grid, grain_id=gid, orientation=g, F=F, lattice_rotation=theta, nye=nye, pc=pc,
        image_quality=iq, grain_orientation=g0, grain_strain=eps, grain_curvature=K, grain_centre=centre,
        seeds=seeds, pc_ref=pc_ref, sample_tilt=float(sample_tilt), detector_tilt=float(detector_tilt),
        parameters=params,
    )
