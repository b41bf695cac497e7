"""Detector and pattern-centre (PC) geometry, with explicit conventions.

Conventions
-----------
Pixels
    ``x`` = column (to the right), ``y`` = row (down), origin at the centre of pixel (0, 0), as
    everywhere in ebsdxc. Pixel coordinates are given as ``[x, y]`` in a last axis of 2.
Pattern centre (PC)
    Stored and used in the Bruker convention exactly as kikuchipy's ``EBSDDetector`` uses it,
    for a (binned) detector of ``shape = (H, W)``: ``PCx`` is the distance of the PC from the
    left edge of the detector as a fraction of ``W``, ``PCy`` from the top edge as a fraction
    of ``H``, and ``PCz`` the sample-to-detector distance as a fraction of ``H``. In pixels::

        x_pc = PCx * W - 0.5        y_pc = PCy * H - 0.5        L = PCz * H

    :func:`convert_pc` converts from and to EDAX TSL, Oxford and EMsoft PCs as kikuchipy does.
Detector frame
    ``Xd`` right on the detector, ``Yd`` up, ``Zd = Xd x Yd`` from the sample towards the
    detector; pixel ``(x, y)`` is seen along ``(x - x_pc, -(y - y_pc), L)``.
Sample frame and tilts
    kikuchipy's sample frame with sample tilt ``sigma`` about the microscope X and detector tilt
    ``theta`` about the detector horizontal (azimuthal and twist 0). With ``beta = 90 deg -
    sigma + theta`` the detector axes in sample coordinates are ``Xd = (0, 1, 0)``,
    ``Yd = (-cos beta, 0, sin beta)``, ``Zd = (sin beta, 0, cos beta)``: the transpose of
    kikuchipy's ``EBSDDetector.sample_to_detector`` matrix.

:func:`pixel_directions` and :func:`project` take NumPy or CuPy arrays and answer in kind.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .backend import array_module

__all__ = [
    "canonical_convention",
    "PC_CONVENTIONS", "Detector", "check_pc", "check_shape", "convert_pc", "detector_axes",
    "extrapolate_pc", "fit_pc_plane", "pc_pixels", "pixel_directions", "project",
]

PC_CONVENTIONS = ("bruker", "tsl", "oxford", "emsoft", "emsoft4")
# kikuchipy's aliases; "emsoft" is EMsoft 5 and later, whose xpc points right
_ALIASES = {"edax": "tsl", "amatek": "tsl", "aztec": "oxford", "emsoft5": "emsoft"}


def canonical_convention(name) -> str:
    """The name in :data:`PC_CONVENTIONS` of a convention or alias (case-insensitive), or ValueError."""
    key = str(name).lower()
    key = _ALIASES.get(key, key)
    if key not in PC_CONVENTIONS:
        options = ", ".join(PC_CONVENTIONS + tuple(_ALIASES))
        raise ValueError(f"unknown PC convention {name!r}; use one of {options}")
    return key


def _positive(name, value, *, allow_none=False):
    if value is None and allow_none:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = np.nan
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return value


def check_shape(shape) -> tuple[int, int]:
    """Return a detector (or scan) ``shape`` as two positive ints ``(rows, cols)``."""
    try:
        h, w = (int(s) for s in shape)
    except (TypeError, ValueError):
        raise ValueError(f"shape must be (rows, cols), got {shape!r}") from None
    if h < 1 or w < 1 or (h, w) != tuple(shape):
        raise ValueError(f"shape must be two positive integers (rows, cols), got {shape!r}")
    return h, w


def _pc_array(pc, xp=np):
    pc = xp.asarray(pc, dtype=xp.float64)
    if pc.shape[-1:] != (3,):
        raise ValueError(f"pattern centre must be (PCx, PCy, PCz), got shape {pc.shape}")
    # checking values on a GPU array would wait for the device; callers there check upstream
    if xp is np and (not np.all(np.isfinite(pc)) or np.any(pc[..., 2] <= 0)):
        raise ValueError("pattern centre must be finite with PCz > 0")
    return pc


def pc_pixels(pc, shape):
    """The PC in pixels: ``(x_pc, y_pc, L)`` = ``(PCx W - 0.5, PCy H - 0.5, PCz H)`` for Bruker PCs
    ``(..., 3)`` (NumPy or CuPy) on a detector ``(H, W)``; the ``- 0.5`` because pixel (0, 0)'s
    centre, not its corner, is the origin."""
    h, w = shape
    return pc[..., 0] * w - 0.5, pc[..., 1] * h - 0.5, pc[..., 2] * h


def check_pc(pc, shape, *, what: str = "pattern centre") -> np.ndarray:
    """Check Bruker PCs ``(3,)`` or ``(..., 3)`` for use: finite, ``PCz > 0``, on the detector.

    Returns the PCs as float64. ``shape`` ``(H, W)`` states an off-detector PC in pixels and
    ``what`` names the PC in the message: one line with the first offending value and, for
    many PCs, its index, raised as ``ValueError``.
    """
    h, w = check_shape(shape)
    pc = np.asarray(pc, dtype=np.float64)
    if pc.shape[-1:] != (3,):
        raise ValueError(f"{what} must be (PCx, PCy, PCz), got shape {pc.shape}")
    flat = pc.reshape(-1, 3)
    outside = "is outside [0, 1]: the PC lies {} the detector"
    checks = [
        (~np.isfinite(flat).all(axis=1), "{pc} is not finite"),
        (flat[:, 2] <= 0, "PCz = {z:g} must be positive (it is the detector distance)"),
        (flat[:, 0] < 0, "PCx = {x:g} " + outside.format("left of") + " (x = {xp:.1f} px)"),
        (flat[:, 0] > 1, "PCx = {x:g} " + outside.format("right of") + " (x = {xp:.1f} px, "
                         "width {w} px)"),
        (flat[:, 1] < 0, "PCy = {y:g} " + outside.format("above") + " (y = {yp:.1f} px)"),
        (flat[:, 1] > 1, "PCy = {y:g} " + outside.format("below") + " (y = {yp:.1f} px, "
                         "height {h} px)"),
    ]
    for bad, problem in checks:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            x, y, z = flat[i]
            at = f" at index {tuple(int(j) for j in np.unravel_index(i, pc.shape[:-1]))}"
            raise ValueError(f"{what}{at if pc.ndim > 1 else ''}: " + problem.format(
                pc=flat[i].tolist(), x=x, y=y, z=z, xp=x * w - 0.5, yp=y * h - 0.5, w=w, h=h))
    return pc


def detector_axes(sample_tilt: float = 70.0, detector_tilt: float = 0.0) -> np.ndarray:
    """3x3 matrix whose columns are ``Xd, Yd, Zd`` in sample coordinates (detector -> sample).

    Tilts in degrees: kikuchipy's ``sample_tilt`` and ``tilt``.
    """
    for name, value in (("sample_tilt", sample_tilt), ("detector_tilt", detector_tilt)):
        if not np.isfinite(value):
            raise ValueError(f"{name} must be a finite angle in degrees, got {value!r}")
    beta = np.deg2rad(90.0 - float(sample_tilt) + float(detector_tilt))
    cb, sb = np.cos(beta), np.sin(beta)
    return np.array([[0.0, -cb, sb], [1.0, 0.0, 0.0], [0.0, sb, cb]])


def pixel_directions(xy, shape, pc, *, sample_tilt: float = 70.0, detector_tilt: float = 0.0):
    """Unit vectors, in the sample frame, from the source point to pixel coordinates ``xy``.

    Parameters
    ----------
    xy : array_like
        Pixel coordinates ``[x, y]``, shape ``(..., 2)`` (sub-pixel, may be off the detector).
    shape : tuple of int
        Detector shape ``(H, W)``.
    pc : array_like
        Bruker PC ``(3,)``, or ``(..., 3)`` broadcasting against the leading dimensions of
        ``xy`` (e.g. ``(B, 1, 3)`` against ``(B, n, 2)``).
    sample_tilt, detector_tilt : float, optional
        Tilts in degrees (kikuchipy's ``sample_tilt`` and ``tilt``).

    Returns
    -------
    ndarray
        float64 ``(..., 3)``, NumPy or CuPy as the inputs. Equal (to rounding) to kikuchipy's
        direction cosines of the same pixels.
    """
    xp = array_module(xy, pc)
    xy = xp.asarray(xy, dtype=xp.float64)
    if xy.shape[-1:] != (2,):
        raise ValueError(f"xy must have shape (..., 2) [x, y], got {xy.shape}")
    x_pc, y_pc, dist = pc_pixels(_pc_array(pc, xp), check_shape(shape))
    axes = xp.asarray(detector_axes(sample_tilt, detector_tilt))
    u = xy[..., 0] - x_pc
    v = y_pc - xy[..., 1]
    d = xp.stack([u, v, xp.broadcast_to(dist, u.shape)], axis=-1)
    r = d @ axes.T
    return r / xp.linalg.norm(r, axis=-1, keepdims=True)


def project(vectors, shape, pc, *, sample_tilt: float = 70.0, detector_tilt: float = 0.0):
    """Pixel coordinates where sample-frame directions meet the detector plane.

    The inverse of :func:`pixel_directions` (a gnomonic projection); ``vectors`` need not be
    unit vectors, and ``pc`` (``(3,)`` or ``(..., 3)``) broadcasts as there.

    Returns
    -------
    ndarray
        float64 ``(..., 2)`` pixel ``[x, y]``, possibly off the detector; NaN for directions
        that do not point towards the detector plane.
    """
    xp = array_module(vectors, pc)
    v = xp.asarray(vectors, dtype=xp.float64)
    if v.shape[-1:] != (3,):
        raise ValueError(f"vectors must have shape (..., 3), got {v.shape}")
    x_pc, y_pc, dist = pc_pixels(_pc_array(pc, xp), check_shape(shape))
    d = v @ xp.asarray(detector_axes(sample_tilt, detector_tilt))
    ahead = d[..., 2] > 0
    scale = xp.where(ahead, dist / xp.where(ahead, d[..., 2], 1.0), xp.nan)
    return xp.stack([x_pc + d[..., 0] * scale, y_pc - d[..., 1] * scale], axis=-1)


def convert_pc(pc, *, from_convention: str, to_convention: str, shape, pixel_size=None,
               binning: float = 1) -> np.ndarray:
    """Convert PCs between conventions, as kikuchipy's ``EBSDDetector`` does.

    With ``(H, W)`` the binned detector shape, ``b`` the binning and ``delta`` the unbinned
    pixel size, Bruker ``(x, y, z)`` relates to

    * TSL (EDAX, Amatek): ``(x, 1 - y, z H / min(H, W))``;
    * Oxford (AZtec): ``(x, (1 - y) H / W, z H / W)``;
    * EMsoft 5+: ``((0.5 - x) W b, (0.5 - y) H b, z H b delta)`` (pixels from the detector
      centre, x right, y up, L in microns); ``"emsoft4"``: the same with the sign of xpc
      flipped (xpc pointed left before EMsoft 5).

    Parameters
    ----------
    pc : array_like
        PCs ``(3,)`` or ``(..., 3)`` in ``from_convention``.
    from_convention, to_convention : str
        One of :data:`PC_CONVENTIONS` or an alias (``"edax"``, ``"amatek"``, ``"aztec"``,
        ``"emsoft5"``); case-insensitive.
    shape : tuple of int
        Detector shape ``(H, W)`` of the (binned) patterns.
    pixel_size : float, optional
        Unbinned detector pixel size in microns; needed only for EMsoft.
    binning : float, optional
        Detector binning factor (EMsoft only).

    Returns
    -------
    numpy.ndarray
        float64 ``(..., 3)``.
    """
    src, dst = canonical_convention(from_convention), canonical_convention(to_convention)
    h, w = check_shape(shape)
    pc = np.array(pc, dtype=np.float64)
    if pc.shape[-1:] != (3,):
        raise ValueError(f"pattern centre must be (PCx, PCy, PCz), got shape {pc.shape}")
    b = _positive("binning", binning)
    if "emsoft" in (src[:6], dst[:6]):
        if pixel_size is None:
            raise ValueError("EMsoft PCs need pixel_size (the unbinned detector pixel size in microns)")
        delta = _positive("pixel_size", pixel_size)
    x, y, z = pc[..., 0], pc[..., 1], pc[..., 2]
    # to Bruker
    if src == "tsl":
        y, z = 1 - y, z * min(h, w) / h
    elif src == "oxford":
        y, z = 1 - y * w / h, z * w / h
    elif src.startswith("emsoft"):
        x = 0.5 - (-x if src == "emsoft4" else x) / (w * b)
        y, z = 0.5 - y / (h * b), z / (h * b * delta)
    # from Bruker
    if dst == "tsl":
        y, z = 1 - y, z * h / min(h, w)
    elif dst == "oxford":
        y, z = (1 - y) * h / w, z * h / w
    elif dst.startswith("emsoft"):
        x = (0.5 - x) * w * b * (-1 if dst == "emsoft4" else 1)
        y, z = (0.5 - y) * h * b, z * h * b * delta
    return np.stack(np.broadcast_arrays(x, y, z), axis=-1)


def fit_pc_plane(pc, *, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares plane ``PC = a + b col + c row`` through a map of PCs, per component.

    Parameters
    ----------
    pc : array_like
        ``(rows, cols, 3)`` PCs (any convention in which the PC is linear over the scan).
    mask : array_like of bool, optional
        ``(rows, cols)``; points where it is False are left out, as are non-finite PCs.

    Returns
    -------
    fitted : numpy.ndarray
        float64 ``(rows, cols, 3)``, the plane at every point.
    coefficients : numpy.ndarray
        float64 ``(3, 3)``; row ``k`` is ``(a, b, c)`` of PC component ``k``.
    """
    pc = np.asarray(pc, dtype=np.float64)
    if pc.ndim != 3 or pc.shape[-1] != 3:
        raise ValueError(f"pc must have shape (rows, cols, 3), got {pc.shape}")
    rows, cols = pc.shape[:2]
    use = np.isfinite(pc).all(axis=-1)
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (rows, cols):
            raise ValueError(f"mask must have shape {(rows, cols)}, got {mask.shape}")
        use &= mask
    row, col = np.indices((rows, cols), dtype=np.float64)
    design = np.stack([np.ones_like(row), col, row], axis=-1)
    if use.sum() < 3:
        raise ValueError(f"a PC plane needs at least 3 usable points, got {int(use.sum())}")
    coef, _, rank, _ = np.linalg.lstsq(design[use], pc[use], rcond=None)
    if rank < 3:
        raise ValueError("the usable PC points lie on one line; a plane through them is not "
                         "determined")
    return design @ coef, coef.T.copy()


def extrapolate_pc(pc0, *, grid_shape, step, pixel_size, binning: float = 1,
                   sample_tilt: float = 70.0, detector_tilt: float = 0.0, point=None,
                   shape) -> np.ndarray:
    """PC of every scan point from the Bruker PC ``pc0`` measured at one point.

    The beam moves with the scan; as in kikuchipy's ``EBSDDetector.extrapolate_pc`` (Singh
    et al. 2017, appendix A), with ``alpha = 90 - sample_tilt + detector_tilt``, ``(y0, x0)``
    = ``point`` and ``f = pixel_size * binning``::

        PCx = PCx0 + (x0 - x) step_x / (f W)
        PCy = PCy0 + (y0 - y) step_y cos(alpha) / (f H)
        PCz = PCz0 - (y0 - y) step_y sin(alpha) / (f H)

    kikuchipy's arguments map as ``navigation_shape = grid_shape``, ``step_sizes = step``,
    ``px_size = pixel_size``, ``pc_indices = point``, and its (averaged) ``pc`` is ``pc0``.

    Parameters
    ----------
    pc0 : array_like
        ``(3,)`` Bruker PC at ``point``.
    grid_shape, shape : tuple of int
        Scan grid ``(rows, cols)``; detector shape ``(H, W)`` of the (binned) patterns.
    step : tuple of float
        Scan steps ``(step_y, step_x)`` in the unit of ``pixel_size`` (microns).
    pixel_size, binning : float
        Unbinned detector pixel size (microns) and binning factor.
    sample_tilt, detector_tilt : float, optional
        Tilts in degrees.
    point : tuple of float, optional
        Scan position ``(row, col)`` of ``pc0``, may be fractional or off the grid. Default:
        the map centre ``((rows - 1) / 2, (cols - 1) / 2)``. (kikuchipy rounds the mean
        position of its PCs to integers; give integers to match it exactly.)

    Returns
    -------
    numpy.ndarray
        float64 ``(rows, cols, 3)`` Bruker PCs.
    """
    rows, cols = check_shape(grid_shape)
    h, w = check_shape(shape)
    pc0 = _pc_array(pc0)
    if pc0.shape != (3,):
        raise ValueError(f"pc0 must be one PC (3,), got shape {pc0.shape}")
    step = np.asarray(step, dtype=np.float64)
    if step.shape != (2,) or not np.all(np.isfinite(step)):
        raise ValueError(f"step must be two finite numbers (step_y, step_x), got {step!r}")
    f = _positive("pixel_size", pixel_size) * _positive("binning", binning)
    ref = np.asarray(((rows - 1) / 2, (cols - 1) / 2) if point is None else point, float)
    if ref.shape != (2,) or not np.all(np.isfinite(ref)):
        raise ValueError(f"point must be a scan position (row, col), got {point!r}")
    y0, x0 = ref
    alpha = np.deg2rad(90.0 - float(sample_tilt) + float(detector_tilt))
    y, x = np.indices((rows, cols), dtype=np.float64)
    dy = (y0 - y) * step[0] / (f * h)
    return np.stack([pc0[0] + (x0 - x) * step[1] / (f * w),
                     pc0[1] + dy * np.cos(alpha),
                     pc0[2] - dy * np.sin(alpha)], axis=-1)


@dataclass(frozen=True, eq=False)
class Detector:
    """A detector: pattern shape, Bruker PC (one, or one per scan point) and tilts.

    ``pc`` is ``(3,)`` or ``(rows, cols, 3)``; ``pixel_size`` (unbinned, microns) and
    ``binning`` matter only for EMsoft PCs. :meth:`directions` and :meth:`project` give a
    result for every PC and every pixel or vector: shape ``pc.shape[:-1] + xy.shape[:-1]``.
    """

    shape: tuple
    pc: np.ndarray
    sample_tilt: float = 70.0
    detector_tilt: float = 0.0
    pixel_size: float | None = None
    binning: float = 1

    def __post_init__(self):
        pc = _pc_array(np.array(self.pc, dtype=np.float64))
        if pc.ndim not in (1, 3):
            raise ValueError(f"pc must have shape (3,) or (rows, cols, 3), got {pc.shape}")
        pc.flags.writeable = False
        detector_axes(self.sample_tilt, self.detector_tilt)
        binning = _positive("binning", self.binning)
        for name, value in (("shape", check_shape(self.shape)), ("pc", pc),
                            ("sample_tilt", float(self.sample_tilt)),
                            ("detector_tilt", float(self.detector_tilt)),
                            ("pixel_size", _positive("pixel_size", self.pixel_size,
                                                     allow_none=True)),
                            ("binning", int(binning) if binning.is_integer() else binning)):
            object.__setattr__(self, name, value)

    @classmethod
    def from_convention(cls, pc, convention, shape, *, sample_tilt=70.0, detector_tilt=0.0,
                        pixel_size=None, binning=1) -> Detector:
        """A detector from PCs given in ``convention`` (see :func:`convert_pc`)."""
        pc = convert_pc(pc, from_convention=convention, to_convention="bruker", shape=shape,
                        pixel_size=pixel_size, binning=binning)
        return cls(shape, pc, sample_tilt, detector_tilt, pixel_size, binning)

    def pc_as(self, convention) -> np.ndarray:
        """The PCs in ``convention`` (see :func:`convert_pc`)."""
        return convert_pc(self.pc, from_convention="bruker", to_convention=convention,
                          shape=self.shape, pixel_size=self.pixel_size, binning=self.binning)

    def _per_pc(self, pc, points):
        pc = self.pc if pc is None else pc
        xp = array_module(points, pc)
        pc = _pc_array(pc, xp)
        return pc.reshape(pc.shape[:-1] + (1,) * (xp.ndim(points) - 1) + (3,))

    def directions(self, xy, pc=None):
        """Sample-frame unit vectors ``(*pc_lead, ..., 3)`` of pixels ``xy`` ``(..., 2)``."""
        return pixel_directions(xy, self.shape, self._per_pc(pc, xy),
                                sample_tilt=self.sample_tilt, detector_tilt=self.detector_tilt)

    def project(self, v, pc=None):
        """Pixels ``[x, y]`` ``(*pc_lead, ..., 2)`` of sample-frame vectors ``v`` ``(..., 3)``."""
        return project(v, self.shape, self._per_pc(pc, v), sample_tilt=self.sample_tilt,
                       detector_tilt=self.detector_tilt)

    def to_dict(self) -> dict:
        """JSON-able description (Bruker PC), e.g. for results-file attributes."""
        return {"shape": list(self.shape), "pc": self.pc.tolist(), "pc_convention": "bruker",
                "sample_tilt": self.sample_tilt, "detector_tilt": self.detector_tilt,
                "pixel_size": self.pixel_size, "binning": self.binning}

    @classmethod
    def from_dict(cls, d) -> Detector:
        """The inverse of :meth:`to_dict`; ``pc_convention`` may be any known convention."""
        d = dict(d)
        missing = {"shape", "pc"} - d.keys()
        unknown = d.keys() - {"shape", "pc", "pc_convention", "sample_tilt", "detector_tilt",
                              "pixel_size", "binning"}
        if missing or unknown:
            raise ValueError(f"detector description: missing keys {sorted(missing)}, "
                             f"unknown keys {sorted(unknown)}")
        return cls.from_convention(d.pop("pc"), d.pop("pc_convention", "bruker"),
                                   d.pop("shape"), **d)
