"""Elastic stiffness of crystals, for the traction-free condition of HR-EBSD.

Stiffness is held as a 6x6 matrix in Voigt notation (GPa) in the CRYSTAL frame, with the
order 11, 22, 33, 23, 13, 12 and no factors of 2 (``sigma_I = C_IJ epsilon_J`` with
engineering shear strains ``epsilon_4 = 2 e_23``). :func:`stiffness_tensor` turns it into
the 3x3x3x3 tensor and :func:`rotate_stiffness` expresses that tensor in another frame.

The presets are room-temperature single-crystal constants (Simmons & Wang, *Single Crystal
Elastic Constants and Calculated Aggregate Properties*, MIT Press 1971), cubic ``C11, C12,
C44`` in GPa.
"""

from __future__ import annotations

import os
import re

import numpy as np

__all__ = ["CUBIC_PRESETS", "parse_material", "cubic_stiffness", "stiffness_tensor", "rotate_stiffness"]

#: name -> (C11, C12, C44) GPa
CUBIC_PRESETS = {
    "Ni": (246.5, 147.3, 124.7),
    "Fe": (231.4, 134.7, 116.4),  # alpha (bcc) iron
    "Al": (107.3, 60.9, 28.3),
    "Cu": (168.4, 121.4, 75.4),
    "Si": (165.7, 63.9, 79.6),
}
_ALIASES = {"nickel": "Ni", "iron": "Fe", "alpha-fe": "Fe", "ferrite": "Fe", "aluminium": "Al",
            "aluminum": "Al", "copper": "Cu", "silicon": "Si"}

_VOIGT = ((0, 0), (1, 1), (2, 2), (1, 2), (0, 2), (0, 1))


def cubic_stiffness(c11: float, c12: float, c44: float) -> np.ndarray:
    """6x6 Voigt stiffness of a cubic crystal (GPa) from its three constants."""
    c = np.zeros((6, 6))
    c[:3, :3] = c12
    c[[0, 1, 2], [0, 1, 2]] = c11
    c[[3, 4, 5], [3, 4, 5]] = c44
    return c


def _check_stiffness(c, where: str) -> np.ndarray:
    c = np.asarray(c, dtype=np.float64)
    if c.shape != (6, 6) or not np.all(np.isfinite(c)):
        raise ValueError(f"{where}: the stiffness must be a finite 6x6 Voigt matrix (GPa), got shape {c.shape}")
    if not np.allclose(c, c.T, rtol=1e-6, atol=1e-9 * np.abs(c).max()):
        raise ValueError(f"{where}: the stiffness matrix must be symmetric (C_ij = C_ji)")
    if np.linalg.eigvalsh(c).min() <= 0:
        raise ValueError(f"{where}: the stiffness matrix must be positive definite (a stable crystal)")
    return c


def parse_material(spec) -> tuple[str, np.ndarray]:
    """Name and 6x6 crystal-frame stiffness (GPa) of a material specification.

    Parameters
    ----------
    spec : str or array_like
        A preset name (``Ni``, ``Fe``, ``Al``, ``Cu``, ``Si``; case-insensitive, also
        ``nickel``, ``aluminium``, ...); ``"cubic:C11,C12,C44"`` in GPa; the path of a text
        file with a 6x6 Voigt matrix (whitespace or commas); or a 6x6 array.

    Returns
    -------
    (str, numpy.ndarray)
        A label for the results file and the 6x6 matrix.

    Raises
    ------
    ValueError
        For an unknown name, a malformed matrix, or one that is not symmetric positive definite.
    """
    if not isinstance(spec, (str, os.PathLike)):
        return "user C_ij", _check_stiffness(spec, "material")
    text = os.fspath(spec).strip()
    key = {k.lower(): k for k in CUBIC_PRESETS}.get(text.lower()) or _ALIASES.get(text.lower())
    if key:
        return key, cubic_stiffness(*CUBIC_PRESETS[key])
    if text.lower().startswith("cubic:"):
        try:
            vals = [float(v) for v in text[6:].split(",")]
        except ValueError:
            vals = []
        if len(vals) != 3:
            raise ValueError(f"material {text!r}: expected cubic:C11,C12,C44 in GPa")
        return text, _check_stiffness(cubic_stiffness(*vals), f"material {text!r}")
    if os.path.isfile(text):
        try:
            with open(text) as f:
                vals = [float(v) for v in re.split(r"[\s,;]+", f.read().strip()) if v]
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"{text}: cannot read a 6x6 stiffness matrix ({e})") from None
        if len(vals) != 36:
            raise ValueError(f"{text}: expected 36 numbers (a 6x6 Voigt stiffness in GPa), found {len(vals)}")
        return os.path.basename(text), _check_stiffness(np.reshape(vals, (6, 6)), text)
    raise ValueError(f"unknown material {text!r}: give one of {', '.join(CUBIC_PRESETS)}, "
                     "cubic:C11,C12,C44 (GPa) or a file with a 6x6 stiffness matrix")


def stiffness_tensor(voigt) -> np.ndarray:
    """The 3x3x3x3 stiffness tensor ``C_ijkl`` of a 6x6 Voigt matrix."""
    c = np.asarray(voigt, dtype=np.float64)
    t = np.empty((3, 3, 3, 3))
    for p, (i, j) in enumerate(_VOIGT):
        for q, (k, m) in enumerate(_VOIGT):
            t[i, j, k, m] = t[j, i, k, m] = t[i, j, m, k] = t[j, i, m, k] = c[p, q]
    return t


def rotate_stiffness(tensor, g, xp=np):
    """Express a crystal-frame stiffness tensor in the sample frame.

    Parameters
    ----------
    tensor : (3, 3, 3, 3) array
        ``C_abcd`` in the crystal frame.
    g : (..., 3, 3) array
        Orientation matrices taking sample to crystal coordinates (``v_c = g v_s``).

    Returns
    -------
    (..., 3, 3, 3, 3) array
        ``C_ijkl = g_ai g_bj g_ck g_dl C_abcd``.
    """
    t = xp.asarray(tensor)
    return xp.einsum("...ai,...bj,...ck,...dl,abcd->...ijkl", g, g, g, g, t, optimize=True)
