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
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import numpy as np

from .geometry import check_shape, pixel_directions, project

__all__ = [
    "load_nickel_master_pattern",
    "detector_directions",
    "project_to_detector",
    "simulate_pattern",
    "displacement_truth",
    "poisson_noise",
    "smooth_deformation_field",
]

_NICKEL_FILE = os.path.join(
    "data", "emsoft_ebsd_master_pattern", "ni_mc_mp_20kv_uint8_gzip_opts9.h5"
)


# --------------------------------------------------------------------------- master pattern


def load_nickel_master_pattern() -> np.ndarray:
    """Return kikuchipy's small nickel master pattern (20 kV) in the square Lambert projection.

    The file shipped inside the installed kikuchipy package is read with h5py directly;
    kikuchipy itself is not imported (its import is slow). The arrays are returned unflipped,
    exactly as ``kikuchipy.data.nickel_ebsd_master_pattern_small(projection="lambert",
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
    import h5py

    spec = importlib.util.find_spec("kikuchipy")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "the nickel master pattern comes from kikuchipy's package data, but kikuchipy is "
            "not installed (pip install kikuchipy)"
        )
    path = None
    for folder in spec.submodule_search_locations:
        candidate = os.path.join(folder, _NICKEL_FILE)
        if os.path.isfile(candidate):
            path = candidate
            break
    if path is None:
        raise ValueError(
            f"kikuchipy is installed but its data file {_NICKEL_FILE} was not found in "
            f"{list(spec.submodule_search_locations)}"
        )
    with h5py.File(path, "r") as f:
        try:
            group = f["EMData/EBSDmaster"]
            halves = [group[name][()] for name in ("mLPNH", "mLPSH")]
        except KeyError as exc:
            raise ValueError(f"{path}: not an EMsoft EBSD master pattern file ({exc})") from None
    out = []
    for half in halves:
        # EMsoft layout (numset, [energies,] n, n): sum over sites, take the last (highest)
        # energy, as kikuchipy does by default.
        half = np.asarray(half, dtype=np.float64)
        if half.ndim == 4:
            half = half[:, -1]
        if half.ndim == 3:
            half = half.sum(axis=0)
        if half.ndim != 2 or half.shape[0] != half.shape[1]:
            raise ValueError(f"{path}: unexpected master pattern shape {half.shape}")
        out.append(half)
    return np.stack(out).astype(np.float32)


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


def _lambert_square(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rosca-Lambert equal-area projection of unit vectors onto the square [-1, 1]^2.

    Returns the normalised coordinates (X, Y); the hemisphere is chosen by the sign of z. With
    ``s = sqrt(1 - |z|)`` (the radius of the Lambert azimuthal projection, scaled so the
    equator maps onto the square's edge), the base-2 sector where ``|y| <= |x|`` maps to
    ``X = sign(x) s``, ``Y = sign(x) s (4 / pi) atan(y / x)``, the other sector symmetrically.
    """
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    s = np.sqrt(np.clip(1.0 - np.abs(z), 0.0, None))
    ax, ay = np.abs(x), np.abs(y)
    x_major = ay <= ax
    with np.errstate(divide="ignore", invalid="ignore"):
        # one atan of the minor/major ratio serves both sectors; at the poles (x = y = 0) s = 0
        ratio = np.where(x_major, y / np.where(ax > 0, x, 1.0), x / np.where(ay > 0, y, 1.0))
    t = (4.0 / np.pi) * np.arctan(ratio)
    sign_major = np.where(x_major, np.sign(x), np.sign(y))
    major = sign_major * s
    minor = sign_major * s * t
    big_x = np.where(x_major, major, minor)
    big_y = np.where(x_major, minor, major)
    return big_x, big_y


def _sample_master(master: np.ndarray, v_crystal: np.ndarray) -> np.ndarray:
    """Bilinear interpolation of the (2, n, n) master pattern at unit crystal directions."""
    n = master.shape[-1]
    big_x, big_y = _lambert_square(v_crystal)
    half = (n - 1) / 2.0
    col = (big_x + 1.0) * half
    row = (big_y + 1.0) * half
    c0 = np.clip(np.floor(col), 0, n - 2).astype(np.intp)
    r0 = np.clip(np.floor(row), 0, n - 2).astype(np.intp)
    dc = np.clip(col - c0, 0.0, 1.0)
    dr = np.clip(row - r0, 0.0, 1.0)
    hemi = np.where(v_crystal[..., 2] >= 0, 0, 1).astype(np.intp)
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


def _rotation_matrices(w: np.ndarray) -> np.ndarray:
    """Rodrigues: rotation matrices (..., 3, 3) for rotation vectors w (..., 3) in radians."""
    theta = np.linalg.norm(w, axis=-1)[..., None, None]
    k = np.zeros(w.shape[:-1] + (3, 3))
    k[..., 0, 1], k[..., 0, 2], k[..., 1, 2] = -w[..., 2], w[..., 1], -w[..., 0]
    k[..., 1, 0], k[..., 2, 0], k[..., 2, 1] = w[..., 2], -w[..., 1], w[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(theta > 0, np.sin(theta) / theta, 1.0)
        b = np.where(theta > 0, (1 - np.cos(theta)) / theta**2, 0.5)
    return np.eye(3) + a * k + b * (k @ k)


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
    F = (np.eye(3) + eps) @ _rotation_matrices(w)
    return F


def bunge_to_matrix(phi1: float, Phi: float, phi2: float) -> np.ndarray:
    """Orientation matrix g (sample -> crystal, v_c = g v_s) of Bunge Euler angles in degrees.

    Equals orix ``Rotation.from_euler(np.radians([phi1, Phi, phi2])).to_matrix()[0]``.
    """
    p1, P, p2 = np.radians([phi1, Phi, phi2])
    c1, s1, c, s, c2, s2 = np.cos(p1), np.sin(p1), np.cos(P), np.sin(P), np.cos(p2), np.sin(p2)
    return np.array([
        [c1 * c2 - s1 * s2 * c, s1 * c2 + c1 * s2 * c, s2 * s],
        [-c1 * s2 - s1 * c2 * c, -s1 * s2 + c1 * c2 * c, c2 * s],
        [s1 * s, -c1 * s, c],
    ])


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
