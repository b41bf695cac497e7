"""Crystals ebsdxc knows: elastic stiffness, structure, lattice parameters, Burgers vector.

Stiffness is held as a 6x6 matrix in Voigt notation (GPa) in the CRYSTAL frame, with the
order 11, 22, 33, 23, 13, 12 and no factors of 2 (``sigma_I = C_IJ epsilon_J`` with
engineering shear strains ``epsilon_4 = 2 e_23``). :func:`stiffness_tensor` turns it into
the 3x3x3x3 tensor and :func:`rotate_stiffness` expresses that tensor in another frame.
Hexagonal crystals use the crystal frame of orix and EMsoft: ``c`` along z, ``a1`` along x
(their stiffness is transversely isotropic, so only ``c`` along z matters here).

A :class:`Material` adds what the dislocation analysis (:mod:`ebsdxc.gnd`) needs: the
crystal structure, its Laue group, the lattice parameters ``a`` (and ``c``) in metres and the
magnitude of the usual Burgers vector (``a/sqrt(2)`` fcc and diamond, ``a sqrt(3)/2`` bcc,
``a`` hcp). :func:`material` builds one from the same specifications :func:`parse_material`
accepts; only the presets know their structure and lattice.

Sources of the presets (room temperature):

- cubic stiffness ``C11, C12, C44``: Simmons & Wang, *Single Crystal Elastic Constants and
  Calculated Aggregate Properties*, MIT Press 1971;
- hexagonal stiffness ``C11, C12, C13, C33, C44``: alpha titanium from Fisher & Renken,
  Phys. Rev. 135, A482 (1964), magnesium from Slutsky & Garland, Phys. Rev. 107, 972 (1957)
  (both also in Simmons & Wang);
- lattice parameters: Wyckoff, *Crystal Structures* vol. 1, 2nd ed., Interscience 1963.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

import numpy as np

__all__ = ["CUBIC_PRESETS", "HEXAGONAL_PRESETS", "LATTICE_PRESETS", "STRUCTURES", "Material", "parse_material",
           "material", "material_for_phase", "cubic_stiffness", "hexagonal_stiffness", "lattice_length",
           "stiffness_tensor", "rotate_stiffness"]

#: name -> (C11, C12, C44) GPa
CUBIC_PRESETS = {
    "Ni": (246.5, 147.3, 124.7),
    "Fe": (231.4, 134.7, 116.4),  # alpha (bcc) iron
    "Al": (107.3, 60.9, 28.3),
    "Cu": (168.4, 121.4, 75.4),
    "Si": (165.7, 63.9, 79.6),
}
#: name -> (C11, C12, C13, C33, C44) GPa
HEXAGONAL_PRESETS = {
    "Ti": (162.4, 92.0, 69.0, 180.7, 46.7),  # alpha (hcp) titanium
    "Mg": (59.40, 25.61, 21.44, 61.60, 16.40),
}
#: name -> (structure, a, c) with the lattice parameters in metres (c only for hcp)
LATTICE_PRESETS = {
    "Ni": ("fcc", 3.5238e-10, None),
    "Fe": ("bcc", 2.8664e-10, None),
    "Al": ("fcc", 4.0494e-10, None),
    "Cu": ("fcc", 3.6150e-10, None),
    "Si": ("diamond", 5.4307e-10, None),
    "Ti": ("hcp", 2.9504e-10, 4.6833e-10),
    "Mg": ("hcp", 3.2094e-10, 5.2103e-10),
}
#: crystal structures a Material may name, with their Laue group
STRUCTURES = {"fcc": "m-3m", "bcc": "m-3m", "diamond": "m-3m", "hcp": "6/mmm"}

_ALIASES = {"nickel": "Ni", "iron": "Fe", "alpha-fe": "Fe", "ferrite": "Fe", "aluminium": "Al",
            "aluminum": "Al", "copper": "Cu", "silicon": "Si", "titanium": "Ti", "alpha-ti": "Ti",
            "magnesium": "Mg"}

_VOIGT = ((0, 0), (1, 1), (2, 2), (1, 2), (0, 2), (0, 1))


def cubic_stiffness(c11: float, c12: float, c44: float) -> np.ndarray:
    """6x6 Voigt stiffness of a cubic crystal (GPa) from its three constants."""
    c = np.zeros((6, 6))
    c[:3, :3] = c12
    c[[0, 1, 2], [0, 1, 2]] = c11
    c[[3, 4, 5], [3, 4, 5]] = c44
    return c


def hexagonal_stiffness(c11: float, c12: float, c13: float, c33: float, c44: float) -> np.ndarray:
    """6x6 Voigt stiffness of a hexagonal crystal (GPa), ``c`` along z; ``C66 = (C11 - C12) / 2``."""
    c = np.zeros((6, 6))
    c[0, 0] = c[1, 1] = c11
    c[0, 1] = c[1, 0] = c12
    c[0, 2] = c[2, 0] = c[1, 2] = c[2, 1] = c13
    c[2, 2] = c33
    c[3, 3] = c[4, 4] = c44
    c[5, 5] = (c11 - c12) / 2
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


def _preset_key(text: str) -> str | None:
    low = text.lower()
    names = {k.lower(): k for k in (*CUBIC_PRESETS, *HEXAGONAL_PRESETS)}
    return names.get(low) or _ALIASES.get(low)


def _preset_stiffness(key: str) -> np.ndarray:
    if key in CUBIC_PRESETS:
        return cubic_stiffness(*CUBIC_PRESETS[key])
    return hexagonal_stiffness(*HEXAGONAL_PRESETS[key])


def _constants(text: str, prefix: str, names: str) -> list[float]:
    try:
        vals = [float(v) for v in text[len(prefix):].split(",")]
    except ValueError:
        vals = []
    if len(vals) != len(names.split(",")):
        raise ValueError(f"material {text!r}: expected {prefix}{names} in GPa")
    return vals


def parse_material(spec) -> tuple[str, np.ndarray]:
    """Name and 6x6 crystal-frame stiffness (GPa) of a material specification.

    Parameters
    ----------
    spec : str or array_like
        A preset name (``Ni``, ``Fe``, ``Al``, ``Cu``, ``Si``, ``Ti``, ``Mg``;
        case-insensitive, also ``nickel``, ``aluminium``, ``titanium``, ...);
        ``"cubic:C11,C12,C44"`` or ``"hexagonal:C11,C12,C13,C33,C44"`` in GPa; the path of a
        text file with a 6x6 Voigt matrix (whitespace or commas); or a 6x6 array.

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
    key = _preset_key(text)
    if key:
        return key, _preset_stiffness(key)
    if text.lower().startswith("cubic:"):
        vals = _constants(text, "cubic:", "C11,C12,C44")
        return text, _check_stiffness(cubic_stiffness(*vals), f"material {text!r}")
    if text.lower().startswith("hexagonal:"):
        vals = _constants(text, "hexagonal:", "C11,C12,C13,C33,C44")
        return text, _check_stiffness(hexagonal_stiffness(*vals), f"material {text!r}")
    if os.path.isfile(text):
        try:
            with open(text) as f:
                vals = [float(v) for v in re.split(r"[\s,;]+", f.read().strip()) if v]
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"{text}: cannot read a 6x6 stiffness matrix ({e})") from None
        if len(vals) != 36:
            raise ValueError(f"{text}: expected 36 numbers (a 6x6 Voigt stiffness in GPa), found {len(vals)}")
        return os.path.basename(text), _check_stiffness(np.reshape(vals, (6, 6)), text)
    raise ValueError(f"unknown material {text!r}: give one of {', '.join((*CUBIC_PRESETS, *HEXAGONAL_PRESETS))}, "
                     "cubic:C11,C12,C44, hexagonal:C11,C12,C13,C33,C44 (GPa) or a file with a 6x6 stiffness matrix")


@dataclass(frozen=True, eq=False)
class Material:
    """A crystal: stiffness and, where known, structure, lattice and Burgers vector.

    Attributes
    ----------
    name : str
        Label for results files (the preset name, or the specification).
    stiffness : numpy.ndarray
        (6, 6) Voigt stiffness, GPa, crystal frame (read-only).
    structure : str or None
        ``"fcc"``, ``"bcc"``, ``"hcp"``, ``"diamond"``, or None when unknown.
    laue : str or None
        Laue group name (``"m-3m"``, ``"6/mmm"``, as :mod:`ebsdxc.crystal` names them), or None.
    a, c : float or None
        Lattice parameters in metres (``c`` for hcp only).
    burgers : float or None
        Magnitude of the usual Burgers vector in metres (the ``<a>`` one for hcp).
    """

    name: str
    stiffness: np.ndarray = field(repr=False)
    structure: str | None = None
    laue: str | None = None
    a: float | None = None
    c: float | None = None
    burgers: float | None = None

    @property
    def c_over_a(self) -> float | None:
        """``c / a`` of an hcp crystal, else None."""
        return None if self.a is None or self.c is None else self.c / self.a

    def stiffness_tensor(self) -> np.ndarray:
        """The (3, 3, 3, 3) crystal-frame stiffness tensor, GPa."""
        return stiffness_tensor(self.stiffness)


def lattice_length(name: str, value) -> float:
    """``value`` as a lattice length in metres, or a ValueError naming ``name``."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = math.nan
    # 1e-8 m = 100 Angstrom: anything larger is a length given in Angstrom or nm, not metres
    if not (math.isfinite(value) and 0 < value < 1e-8):
        raise ValueError(f"{name} must be a lattice length in metres (e.g. 3.52e-10), got {value!r}")
    return value


def _default_burgers(structure: str | None, a: float | None) -> float | None:
    if structure is None or a is None:
        return None
    return {"fcc": a / math.sqrt(2), "diamond": a / math.sqrt(2), "bcc": a * math.sqrt(3) / 2, "hcp": a}[structure]


def material(spec, *, structure: str | None = None, a: float | None = None, c: float | None = None,
             burgers: float | None = None) -> Material:
    """The :class:`Material` of a specification, with structure and lattice where known.

    Parameters
    ----------
    spec : str, array_like or Material
        Anything :func:`parse_material` accepts. Presets (``Ni``, ``Fe``, ``Al``, ``Cu``,
        ``Si``, ``Ti``, ``Mg`` and their aliases) carry structure, lattice and Burgers vector;
        ``cubic:...``, ``hexagonal:...``, files and arrays leave them None unless given here.
        A Material passes through (with the overrides applied).
    structure : {"fcc", "bcc", "hcp", "diamond"}, optional
        Overrides the preset's; sets the Laue group.
    a, c : float, optional
        Lattice parameters in metres (``c`` for hcp).
    burgers : float, optional
        Burgers vector magnitude in metres; default from the structure and ``a``
        (``a/sqrt(2)`` fcc and diamond, ``a sqrt(3)/2`` bcc, ``a`` hcp).

    Returns
    -------
    Material

    Raises
    ------
    ValueError
        For what :func:`parse_material` rejects, an unknown structure, lengths that are not
        in metres, or an hcp crystal without ``c``.
    """
    if isinstance(spec, Material):
        name, voigt = spec.name, spec.stiffness
        base = (spec.structure, spec.a, spec.c, spec.burgers)
    else:
        name, voigt = parse_material(spec)
        key = _preset_key(os.fspath(spec).strip()) if isinstance(spec, (str, os.PathLike)) else None
        base = (*LATTICE_PRESETS[key], None) if key else (None, None, None, None)
    if structure is not None:
        structure = str(structure).strip().lower()
        if structure not in STRUCTURES:
            raise ValueError(f"structure must be one of {', '.join(STRUCTURES)}, got {structure!r}")
    overridden = structure is not None or a is not None
    structure = structure if structure is not None else base[0]
    a = lattice_length("a", a) if a is not None else base[1]
    c = lattice_length("c", c) if c is not None else (base[2] if structure == "hcp" else None)
    if structure == "hcp" and a is not None and c is None:
        raise ValueError("an hcp material needs the lattice parameter c (metres) as well as a")
    if structure != "hcp" and c is not None:
        raise ValueError(f"c is a lattice parameter of hcp crystals only, not of {structure or 'this material'}")
    if burgers is not None:
        burgers = lattice_length("burgers", burgers)
    elif overridden or base[3] is None:
        burgers = _default_burgers(structure, a)
    else:
        burgers = base[3]
    voigt = np.array(voigt, dtype=np.float64)
    voigt.setflags(write=False)
    return Material(name=name, stiffness=voigt, structure=structure,
                    laue=STRUCTURES.get(structure) if structure else None, a=a, c=c, burgers=burgers)


# Phase names of .ang / .ctf files: element names and symbols, and the words that say which
# structure is meant. A word naming another structure than the preset's (Iron fcc, Titanium
# beta, austenite) means the preset is the wrong crystal: no match rather than a wrong one.
_ELEMENT_WORDS = {
    "Ni": ("ni", "nickel"), "Fe": ("fe", "iron", "ferrite"), "Al": ("al", "aluminium", "aluminum"),
    "Cu": ("cu", "copper"), "Si": ("si", "silicon"), "Ti": ("ti", "titanium"), "Mg": ("mg", "magnesium"),
}
_STRUCTURE_WORDS = {
    "fcc": "fcc", "gamma": "fcc", "austenite": "fcc", "bcc": "bcc", "beta": "beta", "hcp": "hcp",
    "hex": "hcp", "hexagonal": "hcp", "cubic": "cubic", "diamond": "diamond", "alpha": "alpha",
}


def _fits(preset: str, word: str) -> bool:
    structure = LATTICE_PRESETS[preset][0]
    meaning = _STRUCTURE_WORDS[word]
    if meaning == "alpha":  # alpha iron is bcc, alpha titanium hcp: each element's preset phase
        return preset in ("Fe", "Ti")
    if meaning == "beta":
        return False
    if meaning == "cubic":
        return structure in ("fcc", "bcc", "diamond")
    return meaning == structure


def material_for_phase(name, *, laue: str | None = None) -> Material | None:
    """The preset :class:`Material` a phase name of a scan file means, or None.

    Matches element names and symbols in the phase name ("Nickel", "Ni", "Iron bcc (old)",
    "Ferrite", "Iron (Alpha)", "Ti-Hex", "Titanium (Alpha)", "Magnesium", ...), case and
    punctuation aside. None when the name holds no element, several, or a structure word
    that contradicts the preset ("Iron fcc", "Austenite", "Titanium beta", "Titanium cubic").

    Parameters
    ----------
    name : str
        The phase name as the file writes it.
    laue : str, optional
        The phase's Laue group name (:func:`ebsdxc.crystal.laue_group`); a preset of another
        Laue group is no match.
    """
    words = re.findall(r"[a-z]+", str(name).lower())
    found = {key for key, aliases in _ELEMENT_WORDS.items() for w in words if w in aliases}
    if len(found) != 1:
        return None
    key = found.pop()
    if not all(_fits(key, w) for w in words if w in _STRUCTURE_WORDS):
        return None
    m = material(key)
    if laue is not None and m.laue != laue:
        return None
    return m


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
