"""Crystal orientations and symmetry: Bunge Euler angles, Laue groups and misorientation.

Orientations are matrices ``g`` taking sample to crystal coordinates (``v_c = g v_s``), as
:func:`ebsdxc.simulate.bunge_to_matrix` and orix (``Rotation.from_euler(...).to_matrix()``)
give them. Bunge angles ``(phi1, Phi, phi2)`` are in degrees in ebsdxc's API.

Symmetry is that of the crystal's Laue group: its proper rotations (the inversion centre adds
nothing to a misorientation). The operators act in the crystal's Cartesian frame with the
conventions of orix and EMsoft: the principal axis along z and, for trigonal and hexagonal
crystals, ``a1`` along x. The monoclinic 2-fold axis is z, as orix's ``C2`` has it.

Everything broadcasts and runs where its arrays live (NumPy or CuPy).
"""

from __future__ import annotations

import functools

import numpy as np

from .backend import array_module

__all__ = ["LAUE_GROUPS", "euler_to_matrix", "laue_group", "matrix_to_euler", "misorientation_angle",
           "rotation_angle", "rotation_from_vector", "symmetry_operators"]

#: Laue group names, lowest symmetry first.
LAUE_GROUPS = ("-1", "2/m", "mmm", "4/m", "4/mmm", "-3", "-3m", "6/m", "6/mmm", "m-3", "m-3m")

# Other names of each Laue group: its point groups (Hermann-Mauguin, with and without the bar
# written as a minus), crystal families and structures, the Oxford .ctf Laue group numbers
# (1..11, in LAUE_GROUPS order) and the EDAX/TSL .ang symmetry codes.
_ALIASES = {
    "-1": ("1", "triclinic", "ctf:1", "tsl:1"),
    "2/m": ("2", "m", "112", "121", "211", "12/m1", "112/m", "monoclinic", "ctf:2", "tsl:2", "tsl:20", "tsl:21"),
    "mmm": ("222", "mm2", "orthorhombic", "ctf:3", "tsl:22"),
    "4/m": ("4", "-4", "ctf:4", "tsl:4"),
    "4/mmm": ("422", "4mm", "-42m", "-4m2", "tetragonal", "ctf:5", "tsl:42"),
    "-3": ("3", "ctf:6", "tsl:3"),
    "-3m": ("32", "3m", "-3m1", "-31m", "321", "312", "3m1", "31m", "trigonal", "ctf:7", "tsl:32"),
    "6/m": ("6", "-6", "ctf:8", "tsl:6"),
    "6/mmm": ("622", "6mm", "-6m2", "-62m", "hexagonal", "hcp", "ctf:9", "tsl:62"),
    "m-3": ("23", "m3", "ctf:10", "tsl:23"),
    "m-3m": ("432", "-43m", "m3m", "cubic", "fcc", "bcc", "diamond", "ctf:11", "tsl:43"),
}
_LOOKUP = {alias: name for name, aliases in _ALIASES.items() for alias in (name, *aliases)}


def laue_group(spec) -> str:
    """The Laue group name (one of :data:`LAUE_GROUPS`) of a symmetry specification.

    Parameters
    ----------
    spec : str or int
        A Laue or point group name (``"m-3m"``, ``"432"``, ``"m3m"``, ``"6/mmm"``), a crystal
        family or structure (``"cubic"``, ``"fcc"``, ``"bcc"``, ``"hexagonal"``, ``"hcp"``),
        ``"ctf:N"`` for an Oxford .ctf Laue group number, ``"tsl:N"`` or a bare int for an
        EDAX/TSL .ang symmetry code (43 cubic, 62 hexagonal, ...).

    Raises
    ------
    ValueError
        When the specification names no Laue group.
    """
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        key = f"tsl:{int(spec)}"
    elif isinstance(spec, str):
        key = spec.strip().lower().replace(" ", "")
    else:
        key = None
    if key not in _LOOKUP:
        raise ValueError(f"laue: {spec!r} names no Laue group; give one of {', '.join(LAUE_GROUPS)}, "
                         "a point group (e.g. 432), cubic/fcc/bcc/hexagonal/hcp, ctf:N or a TSL code")
    return _LOOKUP[key]


def _axis_rotation(axis, angle) -> np.ndarray:
    a = np.asarray(axis, dtype=np.float64)
    a = a / np.linalg.norm(a)
    k = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * (k @ k)


def _close(generators) -> np.ndarray:
    """The group the rotation matrices ``generators`` generate (products until nothing new)."""
    group = [np.eye(3)]
    frontier = [np.eye(3)]
    while frontier:
        new = []
        for a in frontier:
            for b in generators:
                c = np.round(a @ b, 12) + 0.0  # + 0.0 turns -0.0 into 0.0 for the comparison below
                if not any(np.allclose(c, h, atol=1e-9) for h in group):
                    group.append(c)
                    new.append(c)
        frontier = new
    return np.array(group)


@functools.cache
def _operators(name: str) -> np.ndarray:
    z, x = (0, 0, 1), (1, 0, 0)
    fold = {"-1": 1, "2/m": 2, "4/m": 4, "-3": 3, "6/m": 6, "mmm": 2, "4/mmm": 4, "-3m": 3, "6/mmm": 6}
    if name in fold:
        gens = [_axis_rotation(z, 2 * np.pi / fold[name])]
        if name in ("mmm", "4/mmm", "-3m", "6/mmm"):
            gens.append(_axis_rotation(x, np.pi))
    else:
        gens = [_axis_rotation(z, np.pi), _axis_rotation(x, np.pi), _axis_rotation((1, 1, 1), 2 * np.pi / 3)]
        if name == "m-3m":
            gens.append(_axis_rotation(z, np.pi / 2))
    ops = _close(gens)
    ops.setflags(write=False)
    return ops


def symmetry_operators(laue) -> np.ndarray:
    """(N, 3, 3) float64: the proper rotations of a Laue group (24 for m-3m, 12 for 6/mmm, ...).

    Identity first. ``laue`` is anything :func:`laue_group` accepts.
    """
    return _operators(laue_group(laue))


def euler_to_matrix(euler_deg, *, xp=None):
    """Orientation matrices ``g`` (sample -> crystal) of Bunge Euler angles in degrees.

    Parameters
    ----------
    euler_deg : (..., 3) array_like
        ``(phi1, Phi, phi2)`` in degrees.

    Returns
    -------
    (..., 3, 3) float64 array
        ``g = Rz(phi2) Rx(Phi) Rz(phi1)`` (passive rotations), equal to orix's
        ``Rotation.from_euler(np.radians(euler)).to_matrix()``.
    """
    xp = xp or array_module(euler_deg)
    e = xp.deg2rad(xp.asarray(euler_deg, dtype=xp.float64))
    if e.shape[-1:] != (3,):
        raise ValueError(f"euler_deg must have a last axis of 3 (phi1, Phi, phi2), got shape {e.shape}")
    c1, c, c2 = xp.cos(e[..., 0]), xp.cos(e[..., 1]), xp.cos(e[..., 2])
    s1, s, s2 = xp.sin(e[..., 0]), xp.sin(e[..., 1]), xp.sin(e[..., 2])
    rows = [[c1 * c2 - s1 * s2 * c, s1 * c2 + c1 * s2 * c, s2 * s],
            [-c1 * s2 - s1 * c2 * c, -s1 * s2 + c1 * c2 * c, c2 * s],
            [s1 * s, -c1 * s, c]]
    return xp.stack([xp.stack(r, axis=-1) for r in rows], axis=-2)


def matrix_to_euler(g, *, xp=None):
    """Bunge Euler angles in degrees of orientation matrices (inverse of :func:`euler_to_matrix`).

    Returns ``(..., 3)`` with ``phi1, phi2`` in [0, 360) and ``Phi`` in [0, 180]. Where ``Phi``
    is 0 or 180 only ``phi1 +- phi2`` is defined: ``phi2`` is set to 0.
    """
    xp = xp or array_module(g)
    g = xp.asarray(g, dtype=xp.float64)
    if g.shape[-2:] != (3, 3):
        raise ValueError(f"g must have shape (..., 3, 3), got {g.shape}")
    Phi = xp.arccos(xp.clip(g[..., 2, 2], -1.0, 1.0))
    s = xp.sqrt(g[..., 2, 0] ** 2 + g[..., 2, 1] ** 2)
    regular = s > 1e-10
    # Away from Phi = 0, 180: phi1 from row 3 (s1 s, -c1 s), phi2 from column 3 (s2 s, c2 s).
    phi1 = xp.where(regular, xp.arctan2(g[..., 2, 0], -g[..., 2, 1]), xp.arctan2(g[..., 0, 1], g[..., 0, 0]))
    phi2 = xp.where(regular, xp.arctan2(g[..., 0, 2], g[..., 1, 2]), 0.0)
    out = xp.stack([phi1, Phi, phi2], axis=-1)
    out = xp.rad2deg(out)
    out[..., 0] %= 360.0
    out[..., 2] %= 360.0
    return out


def rotation_from_vector(w, *, xp=None):
    """Rotation matrices (..., 3, 3) of rotation vectors ``w`` (..., 3): axis times angle in
    radians (Rodrigues' formula), NumPy or CuPy."""
    xp = xp or array_module(w)
    w = xp.asarray(w, dtype=xp.float64)
    theta = xp.linalg.norm(w, axis=-1)[..., None, None]
    k = xp.zeros(w.shape[:-1] + (3, 3))
    k[..., 0, 1], k[..., 0, 2], k[..., 1, 2] = -w[..., 2], w[..., 1], -w[..., 0]
    k[..., 1, 0], k[..., 2, 0], k[..., 2, 1] = w[..., 2], -w[..., 1], w[..., 0]
    safe = xp.where(theta > 0, theta, 1.0)
    a = xp.where(theta > 0, xp.sin(safe) / safe, 1.0)
    b = xp.where(theta > 0, (1 - xp.cos(safe)) / safe**2, 0.5)
    return xp.eye(3) + a * k + b * (k @ k)


def rotation_angle(R, *, xp=None):
    """Rotation angle in radians (0 .. pi) of rotation matrices ``(..., 3, 3)``.

    From both the trace and the antisymmetric part, so small angles keep full precision
    (``arccos`` of the trace alone loses half the digits near 0).
    """
    xp = xp or array_module(R)
    R = xp.asarray(R, dtype=xp.float64)
    cos = (R[..., 0, 0] + R[..., 1, 1] + R[..., 2, 2] - 1.0) / 2.0
    ax = xp.stack([R[..., 2, 1] - R[..., 1, 2], R[..., 0, 2] - R[..., 2, 0], R[..., 1, 0] - R[..., 0, 1]], axis=-1)
    sin = xp.sqrt((ax**2).sum(axis=-1)) / 2.0
    return xp.arctan2(sin, cos)


def misorientation_angle(g1, g2, laue="m-3m", *, xp=None):
    """Smallest rotation angle (radians) between orientations, over the crystal's symmetry.

    Parameters
    ----------
    g1, g2 : (..., 3, 3) array
        Orientation matrices (sample -> crystal); they broadcast against each other.
    laue : str
        The crystal's Laue group (anything :func:`laue_group` accepts); both orientations
        belong to it (points of different phases have no misorientation).

    Returns
    -------
    (...) float64 array
        ``min_S angle(S g2 g1^T)`` over the proper rotations ``S`` of the group, in [0, pi].
    """
    xp = xp or array_module(g1, g2)
    g1 = xp.asarray(g1, dtype=xp.float64)
    g2 = xp.asarray(g2, dtype=xp.float64)
    if g1.shape[-2:] != (3, 3) or g2.shape[-2:] != (3, 3):
        raise ValueError(f"g1 and g2 must have shape (..., 3, 3), got {g1.shape} and {g2.shape}")
    S = xp.asarray(symmetry_operators(laue))
    d = g2 @ xp.swapaxes(g1, -1, -2)
    # trace(S_i d) for every operator at once; the largest trace is the smallest angle
    # as one matrix product (twice as fast as an einsum): trace(S_i d) = vec(d) . vec(S_i^T)
    traces = d.reshape(*d.shape[:-2], 9) @ xp.swapaxes(S, 1, 2).reshape(len(S), 9).T
    best = xp.argmax(traces, axis=-1)
    return rotation_angle(S[best] @ d, xp=xp)
