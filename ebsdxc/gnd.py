"""Geometrically necessary dislocations (GND): the Nye tensor of a rotation map and the
lower-bound dislocation densities that produce it.

Frames and signs
----------------
Rotations are those ebsdxc stores as ``/ebsdxc/rotation``: the antisymmetric ``w = log(R)``
of the lattice rotation ``R`` in ``F = R U`` (:mod:`ebsdxc.strain`), in the SAMPLE frame;
``R ~ I + w`` rotates lattice vectors, so the rotation vector is
``theta = (w_32, w_13, w_21)`` (``w_ij = -e_ijk theta_k``). Full rotation matrices ``R`` are
accepted as well. Between two neighbours the rotation vector of ``R_n R_p^T`` is used, so a
large common rotation (a grain's reference orientation) does not bias the gradients.

The map and the sample frame are not the same axes. Map positions are ``x = column * step_x``
and ``y = row * step_y`` (an ``.ang`` file's x/y columns, :meth:`ScanGrid.positions`). ebsdxc's
sample frame is kikuchipy's (EDAX TSL's RD-TD-ND, :mod:`ebsdxc.geometry`), in which the beam
moving along the scan's columns moves the pattern centre as :func:`ebsdxc.geometry.extrapolate_pc`
says: one step along the map's ``x`` is a step along ``-y_s``, one step along the map's ``y``
(down the rows) a step along ``-x_s``, and ``z_s`` points out of the sample surface (towards
the detector). :data:`MAP_AXES` holds these three map axes (x, y, and z into the surface)
as its columns in sample coordinates; the tests derive it from ``extrapolate_pc``.

Curvature ``kappa_ij = d theta_i / d x_j`` (sample frame) and the Nye tensor
``alpha = kappa^T - tr(kappa) I`` (Nye 1953; Pantleon 2008, Scripta Mater. 58, 994), elastic
strain gradients neglected: lattice curvature dominates them by orders of magnitude in
deformed metals, and only their in-plane derivatives would be measurable. With
``alpha_ij = sum_t rho_t b_i l_j`` this is the Burgers circuit convention ``b = -(closure of
the circuit right-handed about l)``; it fixes the sign of each type's density, not the
total. A map has no ``d/dz``: ``kappa_13, kappa_23, kappa_33`` are unknown, hence so are
``alpha_11 = -kappa_22 - kappa_33``, ``alpha_22 = -kappa_11 - kappa_33``, ``alpha_31 =
kappa_13`` and ``alpha_32 = kappa_23`` (NaN); ``alpha_12, alpha_13, alpha_21, alpha_23`` and
``alpha_33 = -kappa_11 - kappa_22`` are measured (:data:`MEASURED`).

Gradients
---------
Per point, a least-squares plane through the rotation vectors of its grid neighbours (4 on a
square grid, 6 on a hexagonal one) relative to itself: central differences inside a grain,
one-sided at its edge. A neighbour counts only when it is valid, finite, of the same grain
and (optionally) within ``max_angle``; a point whose usable neighbours do not span both map
directions gets NaN.

Dislocation densities
---------------------
The measured components constrain ``sum_t rho_t (b_t (x) l_t)`` expressed in the sample frame
(crystal vectors to sample: ``v_s = g^T v_c``); of the many solutions the one of least
``sum_t w_t |rho_t|`` is a lower bound of the GND content (Wilkinson & Randman 2010, Phil. Mag.
90, 1159; Pantleon 2008). ``w_t = 1`` minimises the total line length (default); ``"energy"``
weights by the line energy ``|b|^2`` (screw) and ``|b|^2 / (1 - nu)`` (edge). The linear
programmes (5 equations, 2T non-negative variables) are solved all at once by a two-phase simplex
vectorised over points (NumPy or CuPy), exact like any simplex (the tests compare it with
scipy's HiGHS).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass

import numpy as np

from . import crystal
from ._resources import data_dir
from .backend import array_module
from .io.source import GRID_KINDS, ScanGrid
from .materials import Material, lattice_length

__all__ = ["MAP_AXES", "MEASURED", "UNMEASURED", "DislocationTypes", "GndResult", "NoiseFloor",
           "lattice_curvature", "nye_from_curvature", "nye_tensor", "slip_dislocations", "fcc_dislocations",
           "bcc_dislocations", "hcp_dislocations", "read_slip_systems", "dislocation_types", "gnd_density",
           "nye_noise_rms", "noise_floor", "DEFAULT_HCP_SLIP_FILE"]

#: The map's x (along columns), y (down the rows) and z (into the surface) axes, as columns in
#: sample coordinates: ``v_sample = MAP_AXES @ v_map``.
MAP_AXES = np.array([[0.0, -1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
#: Nye tensor components (i, j) a 2-D map measures, and those it cannot.
MEASURED = ((0, 1), (0, 2), (1, 0), (1, 2), (2, 2))
UNMEASURED = ((0, 0), (1, 1), (2, 0), (2, 1))
#: The example hcp slip-system file shipped with ebsdxc (alpha titanium, 33 dislocation types).
DEFAULT_HCP_SLIP_FILE = "slip_systems_hcp_ti.csv"

_WEIGHTINGS = ("length", "energy")


# ----------------------------------------------------------------------------- rotations


def _skew_to_vector(w, xp):
    return xp.stack([w[..., 2, 1], w[..., 0, 2], w[..., 1, 0]], axis=-1)


def _expm_skew(w, xp):
    """Rotation matrices ``exp(w)`` of antisymmetric (..., 3, 3) tensors (Rodrigues)."""
    v = _skew_to_vector(w, xp)
    t = xp.sqrt((v * v).sum(-1))[..., None, None]
    w = (w - xp.swapaxes(w, -1, -2)) / 2  # the antisymmetric part only, whatever rounding left
    # sin(t)/t and (1 - cos t)/t^2 through sinc: exact and finite at t = 0
    a = xp.sinc(t / np.pi)
    b = 0.5 * xp.sinc(t / (2 * np.pi)) ** 2
    return xp.eye(3, dtype=xp.float64) + a * w + b * (w @ w)


def _rotation_vector(R, xp):
    """Rotation vectors (axis x angle, angle < pi) of rotation matrices (..., 3, 3)."""
    s = _skew_to_vector(R - xp.swapaxes(R, -1, -2), xp) / 2  # sin(angle) * axis
    sn = xp.sqrt((s * s).sum(-1))
    angle = xp.arctan2(sn, (xp.trace(R, axis1=-2, axis2=-1) - 1) / 2)
    return s * (angle / xp.where(sn > 0, sn, 1.0) + (sn == 0))[..., None]


def _as_rotations(rotation, form, xp):
    """(..., 3, 3) rotation matrices from logs or matrices; ValueError for anything else."""
    if form not in ("auto", "log", "matrix"):
        raise ValueError(f"form must be 'auto', 'log' or 'matrix', got {form!r}")
    finite = xp.isfinite(rotation).all(axis=(-2, -1))
    r = xp.where(finite[..., None, None], rotation, 0.0)
    if form == "auto":
        scale = max(float(xp.abs(r).max()), 1e-300)
        antisym = float(xp.abs(r + xp.swapaxes(r, -1, -2)).max()) <= 1e-9 * scale
        orth = xp.abs(r @ xp.swapaxes(r, -1, -2) - xp.eye(3)).max(axis=(-2, -1))
        orthogonal = bool(((orth <= 1e-6) | ~finite).all())
        if not (antisym or orthogonal):
            raise ValueError("rotation must hold antisymmetric rotation tensors (ebsdxc's /ebsdxc/rotation) "
                             "or proper rotation matrices, per point")
        form = "matrix" if orthogonal and not antisym else "log"
    R = r if form == "matrix" else _expm_skew(r, xp)
    return xp.where(finite[..., None, None], R, xp.nan)


# ----------------------------------------------------------------------------- gradients


def _steps(step, grid_kind) -> tuple[float, float]:
    """(step_y, step_x) in metres; a scalar on a hexagonal grid means step_y = step * sqrt(3) / 2."""
    vals = np.atleast_1d(np.asarray(step, dtype=np.float64))
    if vals.size == 1:
        sx = float(vals[0])
        sy = sx * math.sqrt(3) / 2 if grid_kind == "hexagonal" else sx
    elif vals.size == 2:
        sy, sx = (float(v) for v in vals)
    else:
        raise ValueError(f"step must be one number or (step_y, step_x), in metres, got {step!r}")
    if not (math.isfinite(sx) and math.isfinite(sy) and sx > 0 and sy > 0):
        raise ValueError(f"step must be positive and finite (metres), got {step!r}")
    return sy, sx


def _neighbour_offsets(kind):
    """(d_row, d_col on even rows, d_col on odd rows) of a slot's grid neighbours."""
    if kind == "square":
        return ((0, -1, -1), (0, 1, 1), (-1, 0, 0), (1, 0, 0))
    # hexagonal: odd rows sit half a step right of even rows
    return ((0, -1, -1), (0, 1, 1), (-1, -1, 0), (-1, 0, 1), (1, -1, 0), (1, 0, 1))


def lattice_curvature(rotation, *, step, grid_kind: str = "square", grain_id=None, valid=None,
                      max_angle: float | None = None, form: str = "auto", xp=None):
    """Lattice curvature ``kappa_ij = d theta_i / d x_j`` of a rotation map, sample frame, 1/m.

    Parameters
    ----------
    rotation : (rows, cols, 3, 3) array
        Antisymmetric rotation tensors ``w = log(R)`` in radians (``/ebsdxc/rotation``) or
        rotation matrices ``R``, sample frame; NaN at points without a result.
    step : float or (float, float)
        Scan step in METRES, one number or ``(step_y, step_x)``. One number on a hexagonal
        grid is the step along a row; rows are then ``step * sqrt(3) / 2`` apart.
    grid_kind : {"square", "hexagonal"}
        As :class:`ebsdxc.io.source.ScanGrid`; hexagonal padding slots are never used.
    grain_id : (rows, cols) int array, optional
        Gradients never cross between different ids; negative ids are no grain (unused).
    valid : (rows, cols) bool array, optional
        Points to use (besides being finite).
    max_angle : float, optional
        Neighbours rotated by more than this (radians) are not used.
    form : {"auto", "log", "matrix"}
        What ``rotation`` holds; "auto" tells antisymmetric tensors from rotation matrices.
    xp : module, optional
        NumPy or CuPy; default: where ``rotation`` lives.

    Returns
    -------
    (rows, cols, 3, 3) float64 array
        ``kappa``; column ``j = 2`` (``d/dz``) is NaN, and the whole tensor where a point has
        too few usable neighbours.
    """
    xp = xp or array_module(rotation)
    rot = xp.asarray(rotation, dtype=xp.float64)
    if rot.ndim != 4 or rot.shape[-2:] != (3, 3):
        raise ValueError(f"rotation must have shape (rows, cols, 3, 3), got {tuple(rot.shape)}")
    if grid_kind not in GRID_KINDS:
        raise ValueError(f"grid_kind must be one of {', '.join(GRID_KINDS)}, got {grid_kind!r}")
    rows, cols = rot.shape[:2]
    sy, sx = _steps(step, grid_kind)
    grid = ScanGrid(rows, cols, step=(sy, sx), kind=grid_kind)
    n = rows * cols
    R = _as_rotations(rot, form, xp).reshape(n, 3, 3)

    ok = xp.isfinite(R).all(axis=(1, 2)) & xp.asarray(grid.in_grid().reshape(n))
    if valid is not None:
        v = xp.asarray(valid)
        if v.shape != (rows, cols):
            raise ValueError(f"valid must have shape ({rows}, {cols}), got {tuple(v.shape)}")
        ok &= v.reshape(n).astype(bool)
    gid = None
    if grain_id is not None:
        gid = xp.asarray(grain_id)
        if gid.shape != (rows, cols):
            raise ValueError(f"grain_id must have shape ({rows}, {cols}), got {tuple(gid.shape)}")
        gid = gid.reshape(n)
        ok &= gid >= 0
    if max_angle is not None and not (math.isfinite(max_angle) and max_angle > 0):
        raise ValueError(f"max_angle must be a positive angle in radians, got {max_angle!r}")
    R = xp.where(ok[:, None, None], R, xp.eye(3))  # finite arithmetic; unused points carry weight 0
    Rt = xp.swapaxes(R, 1, 2)
    pos = xp.asarray(np.nan_to_num(grid.positions().reshape(n, 2)))

    r_idx, c_idx = np.divmod(np.arange(n), cols)
    sxx = xp.zeros((n, 2, 2))
    stx = xp.zeros((n, 3, 2))
    for dr, dc_even, dc_odd in _neighbour_offsets(grid_kind):
        rr = r_idx + dr
        cc = c_idx + np.where(r_idx % 2 == 0, dc_even, dc_odd)
        inside = (rr >= 0) & (rr < rows) & (cc >= 0) & (cc < cols)
        nb = np.where(inside, rr * cols + cc, np.arange(n))
        nb_x = xp.asarray(nb)
        use = ok & ok[nb_x] & xp.asarray(inside)
        if gid is not None:
            use &= gid[nb_x] == gid
        dtheta = _rotation_vector(R[nb_x] @ Rt, xp)
        if max_angle is not None:
            use &= xp.sqrt((dtheta * dtheta).sum(-1)) <= max_angle
        dx = (pos[nb_x] - pos) * use[:, None]
        sxx += dx[:, :, None] * dx[:, None, :]
        stx += dtheta[:, :, None] * dx[:, None, :]
    det = sxx[:, 0, 0] * sxx[:, 1, 1] - sxx[:, 0, 1] * sxx[:, 1, 0]
    tr = sxx[:, 0, 0] + sxx[:, 1, 1]
    # the neighbours must span both map directions: two collinear ones give det ~ 0
    spans = ok & (det > 1e-6 * tr * tr)
    inv = xp.stack([xp.stack([sxx[:, 1, 1], -sxx[:, 0, 1]], -1), xp.stack([-sxx[:, 1, 0], sxx[:, 0, 0]], -1)], -2)
    inv = inv / xp.where(spans, det, 1.0)[:, None, None]
    grad = stx @ inv  # (n, 3, 2): d theta / d (map x, map y)
    # d/dx_sample_j = sum_a d/dX_a * dX_a/dx_j = sum_a d/dX_a * MAP_AXES[j, a]
    kappa = grad @ xp.asarray(MAP_AXES[:, :2].T)
    kappa[:, :, 2] = xp.nan
    kappa = xp.where(spans[:, None, None], kappa, xp.nan)
    return kappa.reshape(rows, cols, 3, 3)


def nye_from_curvature(kappa, xp=None):
    """The Nye tensor ``alpha = kappa^T - tr(kappa) I`` of curvature tensors (..., 3, 3).

    Written so that NaN in the unmeasured ``d/dz`` column of ``kappa`` reaches only the
    components that need it (``alpha_33 = -kappa_11 - kappa_22`` stays finite).
    """
    xp = xp or array_module(kappa)
    k = xp.asarray(kappa, dtype=xp.float64)
    alpha = xp.swapaxes(k, -1, -2).copy()
    d = [k[..., 0, 0], k[..., 1, 1], k[..., 2, 2]]
    alpha[..., 0, 0] = -d[1] - d[2]
    alpha[..., 1, 1] = -d[0] - d[2]
    alpha[..., 2, 2] = -d[0] - d[1]
    return alpha


def nye_tensor(rotation, *, step, grid_kind: str = "square", grain_id=None, valid=None,
               max_angle: float | None = None, form: str = "auto", xp=None):
    """The Nye (dislocation density) tensor of a rotation map, sample frame, 1/m.

    Parameters are those of :func:`lattice_curvature`.

    Returns
    -------
    (rows, cols, 3, 3) float64 array
        ``alpha``; ``alpha_11, alpha_22, alpha_31, alpha_32`` (:data:`UNMEASURED`) are NaN
        everywhere, all components where the gradient is unknown.
    """
    kappa = lattice_curvature(rotation, step=step, grid_kind=grid_kind, grain_id=grain_id, valid=valid,
                              max_angle=max_angle, form=form, xp=xp)
    return nye_from_curvature(kappa)


# ----------------------------------------------------------------------------- dislocation types


@dataclass(frozen=True, eq=False)
class DislocationTypes:
    """Dislocation types of a crystal, crystal frame.

    Attributes
    ----------
    names : tuple of str
        One per type, e.g. ``"{111}<110> edge (1 1 1)[-1 1 0]"``, ``"<110> screw [-1 1 0]"``.
    burgers : (T, 3) float64
        Burgers vectors in metres, crystal Cartesian frame (hexagonal: ``a1`` along x, ``c``
        along z).
    line : (T, 3) float64
        Unit line directions: ``n x b / |n x b|`` for edges (``n`` the slip plane normal),
        ``b / |b|`` for screws.
    screw : (T,) bool
    laue : str
        The Laue group whose operators made the variants.
    """

    names: tuple
    burgers: np.ndarray
    line: np.ndarray
    screw: np.ndarray
    laue: str

    def __len__(self) -> int:
        return len(self.names)

    def nye(self, orientation=None, xp=None):
        """Nye tensors ``b (x) l`` of one dislocation per unit area (1/m per 1/m^2).

        ``orientation`` (..., 3, 3) (sample to crystal) puts them in the sample frame
        (``b_s = g^T b``); without it they are in the crystal frame. Shape (..., T, 3, 3).
        """
        xp = xp or array_module(orientation)
        b = xp.asarray(self.burgers)
        line = xp.asarray(self.line)
        if orientation is not None:
            g = xp.asarray(orientation, dtype=xp.float64)
            b = xp.einsum("...ji,tj->...ti", g, b)
            line = xp.einsum("...ji,tj->...ti", g, line)
        return b[..., :, None] * line[..., None, :]

    def weights(self, weighting: str = "length", *, poisson: float = 0.3) -> np.ndarray:
        """(T,) cost per unit density: 1 (``"length"``) or the line energy per length up to
        ``G / 4 pi ln(R/r0)`` (``"energy"``): ``|b|^2`` screw, ``|b|^2 / (1 - nu)`` edge, in
        units of the largest ``|b|^2``."""
        if weighting not in _WEIGHTINGS:
            raise ValueError(f"weighting must be one of {', '.join(_WEIGHTINGS)}, got {weighting!r}")
        if weighting == "length":
            return np.ones(len(self))
        if not (-1.0 < poisson < 0.5):
            raise ValueError(f"poisson must be a Poisson ratio in (-1, 0.5), got {poisson!r}")
        b2 = (self.burgers**2).sum(1)
        return b2 / b2.max() * np.where(self.screw, 1.0, 1.0 / (1.0 - poisson))


def _canonical(v) -> tuple:
    """A sign-free key of a direction: unit vector with its first nonzero component positive."""
    u = v / np.linalg.norm(v)
    first = u[np.flatnonzero(np.abs(u) > 1e-9)[0]]
    return tuple(np.round(u * np.sign(first), 6) + 0.0)


def _integers(v, max_index: int = 12) -> list[int]:
    """The smallest integer multiple of a direction's ratios (for names)."""
    v = np.asarray(v, dtype=np.float64)
    v = v / np.abs(v).max()
    v = v / np.abs(v[np.abs(v) > 1e-9]).min()
    for k in range(1, max_index + 1):
        if np.allclose(v * k, np.round(v * k), atol=1e-6):
            w = np.round(v * k).astype(int)
            return (w // math.gcd(*[abs(int(x)) for x in w])).tolist()
    return np.round(v, 3).tolist()


class _Lattice:
    """Cartesian crystal frame of a cubic or hexagonal lattice (orix/EMsoft: a1 along x, c along z)."""

    def __init__(self, a: float, c: float | None = None):
        self.hexagonal = c is not None
        if self.hexagonal:
            self.basis = np.array([[a, -a / 2, 0.0], [0.0, a * math.sqrt(3) / 2, 0.0], [0.0, 0.0, c]])
        else:
            self.basis = a * np.eye(3)  # columns: a1, a2, a3

    def plane_name(self, n) -> str:
        hkl = _integers(self.basis.T @ n)
        if self.hexagonal:
            h, k, l_ = hkl
            g = math.gcd(h, k, l_) or 1
            return "(" + " ".join(str(x // g) for x in (h, k, -(h + k), l_)) + ")"
        return "(" + " ".join(map(str, hkl)) + ")"

    def direction_name(self, b) -> str:
        uvw = np.linalg.solve(self.basis, b)
        if self.hexagonal:
            u3, v3, w3 = uvw
            four = [(2 * u3 - v3) / 3, (2 * v3 - u3) / 3, -(u3 + v3) / 3, w3]
            return "[" + " ".join(map(str, _integers(four))) + "]"
        return "[" + " ".join(map(str, _integers(uvw))) + "]"


def slip_dislocations(systems, *, laue: str, lattice: _Lattice | None = None) -> DislocationTypes:
    """Edge and screw dislocation types of slip-system families, all symmetric variants.

    Parameters
    ----------
    systems : iterable of (str, (3,) array, (3,) array)
        ``(family, n, b)``: a label, a slip plane normal and the Burgers vector (metres),
        crystal Cartesian frame; ``b`` must lie in the plane.
    laue : str
        Laue group whose proper rotations make the variants (:func:`ebsdxc.crystal.symmetry_operators`).
    lattice : optional
        Used for the index names of types (Cartesian components otherwise).

    Returns
    -------
    DislocationTypes
        One edge type per distinct slip system (``(n, b)`` up to the signs of both) in
        family order, then one screw type per distinct Burgers vector (up to sign).
    """
    ops = crystal.symmetry_operators(laue)
    edges, screws = {}, {}
    for family, n, b in systems:
        n = np.asarray(n, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        if n.shape != (3,) or b.shape != (3,) or not (np.linalg.norm(n) > 0 and np.linalg.norm(b) > 0):
            raise ValueError(f"slip system {family!r}: plane normal and Burgers vector must be nonzero 3-vectors")
        if abs(n @ b) > 1e-6 * np.linalg.norm(n) * np.linalg.norm(b):
            raise ValueError(f"slip system {family!r}: the Burgers vector does not lie in the slip plane")
        for op in ops:
            nv, bv = op @ n, op @ b
            edges.setdefault((_canonical(nv), _canonical(bv)), (family, nv, bv))
            key = (_canonical(bv), round(float(np.linalg.norm(bv)) * 1e12, 3))
            screws.setdefault(key, (family, bv))

    def dname(v):
        return lattice.direction_name(v) if lattice else str(np.round(v / np.linalg.norm(v), 4).tolist())

    def pname(v):
        return lattice.plane_name(v) if lattice else str(np.round(v / np.linalg.norm(v), 4).tolist())

    names, burgers, lines, screw = [], [], [], []
    for family, nv, bv in edges.values():
        line = np.cross(nv, bv)
        names.append(f"{family} edge {pname(nv)}{dname(bv)}")
        burgers.append(bv)
        lines.append(line / np.linalg.norm(line))
        screw.append(False)
    for family, bv in screws.values():
        direction = family[family.index("<"):] if "<" in family else family
        names.append(f"{direction} screw {dname(bv)}")
        burgers.append(bv)
        lines.append(bv / np.linalg.norm(bv))
        screw.append(True)
    arrays = [np.array(x, dtype=np.float64) for x in (burgers, lines)]
    for a in arrays:
        a.setflags(write=False)
    sc = np.array(screw, dtype=bool)
    sc.setflags(write=False)
    return DislocationTypes(names=tuple(names), burgers=arrays[0], line=arrays[1], screw=sc,
                            laue=crystal.laue_group(laue))


def fcc_dislocations(a: float) -> DislocationTypes:
    """The 18 types of fcc {111}<110> slip (12 edge, 6 screw), ``b = a/2 <110>``; ``a`` in metres.

    Also the types of diamond-cubic crystals (Si), which slip on the same systems.
    """
    a = lattice_length("a", a)
    return slip_dislocations([("{111}<110>", (1, 1, 1), (-a / 2, a / 2, 0.0))], laue="m-3m", lattice=_Lattice(a))


def bcc_dislocations(a: float, *, planes=("110",)) -> DislocationTypes:
    """bcc types, ``b = a/2 <111>``: {110}<111> gives 16 (12 edge, 4 screw); with
    ``planes=("110", "112")`` the 12 {112}<111> edges make 28. ``a`` in metres."""
    a = lattice_length("a", a)
    families = {"110": ("{110}<111>", (1, 1, 0), (-a / 2, a / 2, a / 2)),
                "112": ("{112}<111>", (1, 1, 2), (a / 2, a / 2, -a / 2))}
    planes = tuple(str(p).strip("{}") for p in ((planes,) if isinstance(planes, str) else planes))
    unknown = [p for p in planes if p not in families]
    if unknown or not planes:
        raise ValueError(f"planes must name bcc slip planes among 110, 112, got {planes!r}")
    return slip_dislocations([families[p] for p in planes], laue="m-3m", lattice=_Lattice(a))


def read_slip_systems(path, *, a: float, c: float) -> list:
    """Slip-system families of an hcp crystal from a CSV file in Miller-Bravais indices.

    The file has a header row ``family,h,k,i,l,u,v,t,w`` and one row per family: a label,
    the plane ``(h k i l)`` and the slip direction ``[u v t w]`` (``i = -(h + k)``,
    ``t = -(u + v)``). Lines starting with ``#`` are comments. The Burgers vector is the
    shortest lattice translation along the direction (``1/3 <11-20>`` has length ``a``,
    ``1/3 <11-23>`` length ``sqrt(a^2 + c^2)``). Listing every variant is allowed but not
    needed: :func:`slip_dislocations` adds those the 6/mmm symmetry makes.

    Returns
    -------
    list of (str, (3,) array, (3,) array)
        ``(family, n, b)`` in the Cartesian crystal frame (``a1`` along x, ``c`` along z), b in metres.
    """
    a = lattice_length("a", a)
    c = lattice_length("c", c)
    lat = _Lattice(a, c)
    out = []
    try:
        with open(path, newline="") as f:
            lines = [(i, row) for i, row in enumerate(f, 1) if row.strip() and not row.lstrip().startswith("#")]
    except OSError as e:
        raise ValueError(f"{path}: cannot read the slip-system file ({e})") from None
    if not lines:
        raise ValueError(f"{path}: no slip systems (expected a header family,h,k,i,l,u,v,t,w and rows)")
    reader = csv.reader([row for _, row in lines])
    header = [h.strip().lower() for h in next(reader)]
    if header != ["family", "h", "k", "i", "l", "u", "v", "t", "w"]:
        raise ValueError(f"{path}: the header must be family,h,k,i,l,u,v,t,w, got {','.join(header)}")
    for (lineno, _), row in zip(lines[1:], reader):
        where = f"{path}, line {lineno}"
        if len(row) != 9:
            raise ValueError(f"{where}: expected 9 fields (family,h,k,i,l,u,v,t,w), got {len(row)}")
        try:
            h, k, i, l_, u, v, t, w = (float(x) for x in row[1:])
        except ValueError:
            raise ValueError(f"{where}: the indices must be numbers, got {row[1:]}") from None
        if abs(i + h + k) > 1e-9 or abs(t + u + v) > 1e-9:
            raise ValueError(f"{where}: Miller-Bravais indices need i = -(h + k) and t = -(u + v)")
        uvw = np.array([u - t, v - t, w])
        if not np.any(uvw) or not any((h, k, l_)):
            raise ValueError(f"{where}: plane and direction must be nonzero")
        if abs(h * uvw[0] + k * uvw[1] + l_ * uvw[2]) > 1e-9:
            raise ValueError(f"{where}: the direction [{u:g} {v:g} {t:g} {w:g}] does not lie in the plane "
                             f"({h:g} {k:g} {i:g} {l_:g})")
        if np.allclose(uvw, np.round(uvw)):
            g = math.gcd(*[abs(int(round(x))) for x in uvw])
            uvw = uvw / g
        n = np.linalg.solve(lat.basis.T, np.array([h, k, l_]))  # reciprocal-lattice vector of (hkl)
        out.append((row[0].strip(), n, lat.basis @ uvw))
    return out


def hcp_dislocations(a: float, c: float, *, slip_file=None) -> DislocationTypes:
    """hcp types from a slip-system file (:func:`read_slip_systems`); ``a``, ``c`` in metres.

    ``slip_file`` defaults to the file shipped with ebsdxc (:data:`DEFAULT_HCP_SLIP_FILE`,
    alpha titanium: basal, prismatic and pyramidal <a>, first-order pyramidal <c+a>: 24 edge
    and 9 screw types).
    """
    if slip_file is None:
        with _packaged(DEFAULT_HCP_SLIP_FILE) as path:
            systems = read_slip_systems(path, a=a, c=c)
    else:
        systems = read_slip_systems(os.fspath(slip_file), a=a, c=c)
    return slip_dislocations(systems, laue="6/mmm", lattice=_Lattice(a, c))


def _packaged(name):
    from importlib import resources

    return resources.as_file(data_dir("pipelines") / name)


def dislocation_types(material: Material, *, slip_file=None, bcc_planes=("110",)) -> DislocationTypes:
    """The dislocation types of a :class:`ebsdxc.materials.Material` by its structure.

    fcc and diamond: :func:`fcc_dislocations`; bcc: :func:`bcc_dislocations` (``bcc_planes``);
    hcp: :func:`hcp_dislocations` (``slip_file``, with the material's ``a`` and ``c``).

    Raises
    ------
    ValueError
        When the material has no structure or lattice parameter (``cubic:...`` specs: give
        them to :func:`ebsdxc.materials.material`).
    """
    if not isinstance(material, Material):
        raise ValueError(f"material must be an ebsdxc.materials.Material, got {type(material).__name__}")
    if material.structure is None or material.a is None:
        raise ValueError(f"material {material.name!r} has no crystal structure or lattice parameter; "
                         "give them, e.g. materials.material(spec, structure='fcc', a=3.52e-10)")
    if material.structure in ("fcc", "diamond"):
        return fcc_dislocations(material.a)
    if material.structure == "bcc":
        return bcc_dislocations(material.a, planes=bcc_planes)
    return hcp_dislocations(material.a, material.c, slip_file=slip_file)


# ----------------------------------------------------------------------------- L1 densities


_TOL_COST = 1e-9  # reduced costs above -this are optimal (costs and right-hand sides are O(1))
_TOL_PIVOT = 1e-9  # smaller entries are never pivoted on


def _pivot(work, wbasis, r, j, active, col, xp):
    """One simplex pivot per tableau on row ``r``, column ``j`` (``col`` = that column), in
    place; tableaux not ``active`` keep theirs."""
    rows = xp.arange(work.shape[0])
    p = xp.where(active, col[rows, r], 1.0)
    prow = work[rows, r, :] / p[:, None]
    factor = col * active[:, None]
    factor[rows, r] = 0.0
    work -= factor[:, :, None] * prow[:, None, :]
    work[rows, r, :] = xp.where(active[:, None], prow, work[rows, r, :])
    wbasis[rows, r] = xp.where(active, j, wbasis[rows, r])


def _pivot_until_optimal(tab, basis, allowed, n_art_start, *, xp, max_iter, stop_at_zero=False,
                         bland_after=50):
    """Simplex pivots on a batch of tableaux, in place, until each is optimal.

    ``tab`` (N, m+1, V+1): constraint rows, then the reduced-cost row; last column the
    right-hand side (objective row: minus the objective). ``basis`` (N, m). Entering: the
    most negative reduced cost (Dantzig); leaving: the least ratio, ties to the largest
    pivot element. After ``bland_after`` pivots both follow Bland's rule (lowest index), which
    cannot cycle. Rows whose basic variable is artificial (index >= ``n_art_start``) are out
    of the ratio test: in phase 2 they are redundant constraints at level 0.
    ``stop_at_zero``: phase 1, done as soon as the objective is 0.
    Returns (N,) bool: optimal (False: iteration limit, or no pivot row, which a bounded
    problem only meets through rounding).
    """
    N, m1, _ = tab.shape
    m = m1 - 1
    optimal = xp.zeros(N, dtype=bool)
    idx = xp.arange(N)  # the tableaux still pivoting, worked on as a compact copy once few are left
    work, wbasis = tab, basis
    for it in range(max_iter):
        n = work.shape[0]
        d = xp.where(allowed, work[:, m, :-1], xp.inf)
        j = xp.argmin(d, axis=1) if it < bland_after else xp.argmax((d < -_TOL_COST).astype(xp.int8), axis=1)
        dj = xp.take_along_axis(d, j[:, None], axis=1)[:, 0]
        done = dj >= -_TOL_COST
        if stop_at_zero:
            done |= -work[:, m, -1] <= 1e-12
        col = xp.take_along_axis(work, j[:, None, None], axis=2)[:, :, 0]  # (n, m+1)
        a = col[:, :m]
        pos = (a > _TOL_PIVOT) & (wbasis < n_art_start) if not stop_at_zero else a > _TOL_PIVOT
        ratio = xp.where(pos, xp.maximum(work[:, :m, -1], 0.0) / xp.where(pos, a, 1.0), xp.inf)
        best = ratio.min(axis=1)
        finished = done | ~xp.isfinite(best)
        n_finished = int(finished.sum())
        if n_finished:
            optimal[idx[done]] = True
            if work is not tab:
                tab[idx[finished]] = work[finished]
                basis[idx[finished]] = wbasis[finished]
        if n_finished == n:
            return optimal
        if n_finished > n // 2:  # compact: finished tableaux stop costing work
            keep = ~finished
            work, wbasis, idx = work[keep], wbasis[keep], idx[keep]
            col, a, ratio, best, j, finished = col[keep], a[keep], ratio[keep], best[keep], j[keep], finished[keep]
            n = work.shape[0]
        tie = ratio <= best[:, None] + 1e-12
        if it < bland_after:
            r = xp.argmax(xp.where(tie, a, -xp.inf), axis=1)
        else:
            r = xp.argmin(xp.where(tie, wbasis, 2**30), axis=1)
        _pivot(work, wbasis, r, j, ~finished, col, xp)
    if work is not tab:  # iteration limit: those left are not optimal
        tab[idx] = work
        basis[idx] = wbasis
    return optimal


def _drive_out_artificials(tab, basis, n_art_start, xp):
    """After phase 1: replace each basic artificial (at level 0) by the real column of largest
    entry in its row; a row without one is a redundant constraint and keeps its artificial."""
    N, m1, _ = tab.shape
    rows = xp.arange(N)
    for i in range(m1 - 1):
        row = xp.abs(tab[:, i, :n_art_start])
        j = xp.argmax(row, axis=1)
        active = (basis[:, i] >= n_art_start) & (row[rows, j] > _TOL_PIVOT)
        if bool(active.any()):
            col = xp.take_along_axis(tab, j[:, None, None], axis=2)[:, :, 0]
            _pivot(tab, basis, xp.full(N, i), j, active, col, xp)


def _l1_solve(A, rhs, w, xp, *, max_iter=None):
    """min sum_t w_t |x_t| subject to A x = rhs, for a batch: A (N, m, T), rhs (N, m), w (T,).

    Two-phase simplex on x = x+ - x-, with artificials s: S A x+ - S A x- + s = |rhs|
    (S = sign(rhs)). Returns x (N, T) and ok (N,) (False: infeasible or not converged).
    """
    N, m, T = A.shape
    V = 2 * T + m
    max_iter = max_iter or 20 * V
    s = xp.where(rhs < 0, -1.0, 1.0)
    M0 = xp.concatenate([s[:, :, None] * A, -s[:, :, None] * A, xp.broadcast_to(xp.eye(m), (N, m, m))], axis=2)
    b0 = xp.abs(rhs)
    tab = xp.empty((N, m + 1, V + 1))
    tab[:, :m, :V] = M0
    tab[:, :m, V] = b0
    basis = xp.broadcast_to(xp.arange(2 * T, V), (N, m)).copy()
    allowed = xp.ones(V, dtype=bool)
    # phase 1: minimise the sum of the artificials (cost 1 each, all basic at the start)
    c1 = xp.concatenate([xp.zeros(2 * T), xp.ones(m)])
    tab[:, m, :V] = c1 - M0.sum(axis=1)
    tab[:, m, V] = -b0.sum(axis=1)
    _pivot_until_optimal(tab, basis, allowed, 2 * T, xp=xp, max_iter=max_iter, stop_at_zero=True)
    ok = -tab[:, m, V] <= 1e-9
    # phase 2: the weighted L1 cost; artificials leave and never come back
    tab[:, :m, V] = xp.where(basis >= 2 * T, 0.0, tab[:, :m, V])
    _drive_out_artificials(tab, basis, 2 * T, xp)
    c2 = xp.concatenate([xp.asarray(w, dtype=xp.float64)] * 2 + [xp.zeros(m)])
    cb = c2[basis]
    tab[:, m, :V] = c2 - xp.einsum("ni,niv->nv", cb, tab[:, :m, :V])
    tab[:, m, V] = -(cb * tab[:, :m, V]).sum(axis=1)
    allowed[2 * T:] = False
    ok &= _pivot_until_optimal(tab, basis, allowed, 2 * T, xp=xp, max_iter=max_iter)
    # the basic values again from the original columns: no rounding carried through the pivots
    B = xp.take_along_axis(M0, basis[:, None, :], axis=2)
    good = ok & (xp.abs(xp.linalg.det(B)) > 1e-12)
    B = xp.where(good[:, None, None], B, xp.eye(m))
    xb = xp.linalg.solve(B, b0[:, :, None])[:, :, 0]
    good &= (xb > -1e-9).all(axis=1)
    xb = xp.maximum(xb, 0.0)
    full = xp.zeros((N, V + 1))
    full[xp.arange(N)[:, None], basis] = xb
    return full[:, :T] - full[:, T:2 * T], good


@dataclass
class GndResult:
    """Lower-bound GND densities (arrays on the input's backend).

    ``density`` (..., T) signed density of each type in 1/m^2 (sign: the Burgers vector of
    the type as listed, see the module docstring), ``total`` (...) ``sum_t |rho_t|`` in
    1/m^2 (line length per volume, whatever the weighting), NaN where the Nye tensor or the
    orientation is not finite or the programme had no solution; ``types`` the
    :class:`DislocationTypes`, ``weighting`` the cost that was minimised.
    """

    density: object
    total: object
    types: DislocationTypes
    weighting: str


def gnd_density(nye, orientation, *, dislocations, weighting: str = "length", poisson: float = 0.3,
                components=MEASURED, chunk: int = 16384, xp=None) -> GndResult:
    """Lower-bound densities of the dislocation types that make a Nye tensor map.

    Per point: minimise ``sum_t w_t |rho_t|`` subject to ``sum_t rho_t (b_t (x) l_t)_ij =
    alpha_ij`` for the measured components, with ``b_t, l_t`` in the sample frame
    (``g^T b``, ``g^T l``).

    Parameters
    ----------
    nye : (..., 3, 3) array
        Nye tensors in the sample frame, 1/m (:func:`nye_tensor`).
    orientation : (..., 3, 3) array
        Crystal orientation ``g`` (sample to crystal) of each point, broadcasting against
        ``nye`` (one (3, 3) for a single crystal). The indexed orientation or that of the
        grain's reference; they differ by the small lattice rotation, a second-order effect.
        Euler angles: :func:`ebsdxc.crystal.euler_to_matrix`.
    dislocations : DislocationTypes or Material
        The types (:func:`dislocation_types` builds them from a Material).
    weighting : {"length", "energy"}
        Cost per type (:meth:`DislocationTypes.weights`).
    poisson : float
        Poisson ratio of the ``"energy"`` weighting.
    components : sequence of (i, j)
        Components that constrain the densities: the five a map measures (default); all nine
        for 3-D data.
    chunk : int
        Points solved per batch (working memory about ``chunk * 300 * T`` bytes: 90 MB for
        hcp's 33 types at the default).
    xp : module, optional

    Returns
    -------
    GndResult
    """
    xp = xp or array_module(nye, orientation)
    types = dislocation_types(dislocations) if isinstance(dislocations, Material) else dislocations
    if not isinstance(types, DislocationTypes):
        raise ValueError("dislocations must be DislocationTypes or a Material")
    w = types.weights(weighting, poisson=poisson)
    comps = tuple((int(i), int(j)) for i, j in components)
    if not comps or any(not (0 <= i < 3 and 0 <= j < 3) for i, j in comps) or len(set(comps)) != len(comps):
        raise ValueError(f"components must be distinct (i, j) index pairs of a 3x3 tensor, got {components!r}")
    if int(chunk) < 1:
        raise ValueError(f"chunk must be a positive number of points, got {chunk!r}")
    alpha = xp.asarray(nye, dtype=xp.float64)
    if alpha.shape[-2:] != (3, 3):
        raise ValueError(f"nye must have shape (..., 3, 3), got {tuple(alpha.shape)}")
    g = xp.asarray(orientation, dtype=xp.float64)
    if g.shape[-2:] != (3, 3):
        raise ValueError(f"orientation must be matrices (..., 3, 3), got shape {tuple(g.shape)}")
    lead = alpha.shape[:-2]
    try:
        g = xp.broadcast_to(g, lead + (3, 3))
    except ValueError:
        raise ValueError(f"orientation of shape {tuple(g.shape)} does not broadcast against nye's {lead}") from None
    n = math.prod(lead)
    ii = [i for i, _ in comps]
    jj = [j for _, j in comps]
    rhs_all = alpha.reshape(n, 3, 3)[:, ii, jj]
    g = g.reshape(n, 3, 3)
    finite = xp.isfinite(rhs_all).all(axis=1) & xp.isfinite(g).all(axis=(1, 2))
    T = len(types)
    bscale = float(np.linalg.norm(types.burgers, axis=1).max())
    b = xp.asarray(types.burgers / bscale)
    line = xp.asarray(types.line)
    density = xp.full((n, T), xp.nan)
    for start in range(0, n, int(chunk)):
        sl = slice(start, min(start + int(chunk), n))
        fin = finite[sl]
        gg = xp.where(fin[:, None, None], g[sl], xp.eye(3))
        rhs = xp.where(fin[:, None], rhs_all[sl], 0.0)
        bs = xp.einsum("nji,tj->nti", gg, b)
        ls = xp.einsum("nji,tj->nti", gg, line)
        A = bs[:, :, ii] * ls[:, :, jj]  # (N, T, m)
        scale = xp.abs(rhs).max(axis=1)
        unit = xp.where(scale > 0, scale, 1.0)
        x, ok = _l1_solve(xp.swapaxes(A, 1, 2), rhs / unit[:, None], w, xp)
        rho = x * (unit / bscale)[:, None]
        rho = xp.where((scale > 0)[:, None], rho, 0.0)
        density[sl] = xp.where((fin & (ok | (scale == 0)))[:, None], rho, xp.nan)
    total = xp.abs(density).sum(axis=1)
    return GndResult(density.reshape(lead + (T,)), total.reshape(lead), types, weighting)


# ----------------------------------------------------------------------------- noise floor


def nye_noise_rms(sigma: float, step: float, *, grid_kind: str = "square") -> float:
    """Expected RMS norm (1/m) of the five measured Nye components of an unbent crystal whose
    rotations carry independent noise ``sigma`` (radians, per component), at inner points.

    Central differences on a square grid give each gradient component the variance
    ``sigma^2 / (2 h^2)``, the six-neighbour plane of a regular hexagonal grid
    ``sigma^2 / (3 h^2)`` (``h`` = ``step`` along a row); four measured components are one
    gradient component, ``alpha_33`` the sum of two: ``rms = sqrt(6) * sigma_gradient``.
    """
    if grid_kind not in GRID_KINDS:
        raise ValueError(f"grid_kind must be one of {', '.join(GRID_KINDS)}, got {grid_kind!r}")
    if not (sigma >= 0 and step > 0):
        raise ValueError(f"sigma must be >= 0 and step > 0, got {sigma!r}, {step!r}")
    var_gradient = sigma**2 / ((2 if grid_kind == "square" else 3) * step**2)
    return math.sqrt(6 * var_gradient)


@dataclass(frozen=True)
class NoiseFloor:
    """GND noise floor of an unbent crystal (:func:`noise_floor`), inner points only.

    ``nye_rms`` measured RMS norm of the five Nye components (1/m) and ``nye_rms_expected``
    its value from :func:`nye_noise_rms`; ``gnd_mean``, ``gnd_median``, ``gnd_p90`` of the
    lower-bound total density (1/m^2); ``points`` how many points they summarise.
    """

    nye_rms: float
    nye_rms_expected: float
    gnd_mean: float
    gnd_median: float
    gnd_p90: float
    points: int


def noise_floor(sigma: float, step: float, dislocations, *, grid_kind: str = "square", orientation=None,
                shape=(48, 48), weighting: str = "length", seed: int = 0) -> NoiseFloor:
    """The GND density an unbent crystal shows when its rotations carry noise ``sigma``.

    Simulates a ``shape`` map of independent Gaussian rotation noise (``sigma`` radians per
    component of the rotation vector) at ``step`` metres, and runs :func:`nye_tensor` and
    :func:`gnd_density` on it. ``orientation`` (3, 3): one crystal orientation; default a
    random orientation per point (the floor depends on it). Grows as ``sigma / step``.
    """
    if not (sigma > 0):
        raise ValueError(f"sigma must be a positive angle in radians, got {sigma!r}")
    rng = np.random.default_rng(seed)
    rows, cols = (int(v) for v in shape)
    if rows < 3 or cols < 3:
        raise ValueError(f"shape must be at least 3 x 3 points, got {shape!r}")
    theta = rng.normal(scale=sigma, size=(rows, cols, 3))
    w = np.zeros((rows, cols, 3, 3))
    w[..., 2, 1], w[..., 0, 2], w[..., 1, 0] = theta[..., 0], theta[..., 1], theta[..., 2]
    w -= np.swapaxes(w, -1, -2)
    alpha = nye_tensor(w, step=step, grid_kind=grid_kind, form="log", xp=np)
    if orientation is None:
        q = rng.normal(size=(rows, cols, 4))
        q /= np.linalg.norm(q, axis=-1, keepdims=True)
        orientation = _quaternion_matrix(q)
    res = gnd_density(alpha, orientation, dislocations=dislocations, weighting=weighting, xp=np)
    inner = np.zeros((rows, cols), dtype=bool)
    inner[1:-1, 1:-2 if grid_kind == "hexagonal" else -1] = True
    a = alpha[inner][:, [i for i, _ in MEASURED], [j for _, j in MEASURED]]
    tot = res.total[inner]
    return NoiseFloor(nye_rms=float(np.sqrt((a**2).sum(1).mean())),
                      nye_rms_expected=nye_noise_rms(sigma, step if np.ndim(step) == 0 else float(step[1]),
                                                     grid_kind=grid_kind),
                      gnd_mean=float(np.mean(tot)), gnd_median=float(np.median(tot)),
                      gnd_p90=float(np.percentile(tot, 90)), points=int(inner.sum()))


def _quaternion_matrix(q):
    """Rotation matrices of unit quaternions (..., 4) (w, x, y, z)."""
    w, x, y, z = (q[..., i] for i in range(4))
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], -2)
