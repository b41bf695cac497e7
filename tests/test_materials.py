"""ebsdxc.materials: Material records, hexagonal stiffness, lattice presets and phase-name lookup
(cubic parsing and stiffness rotation are tested in test_strain.py)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from ebsdxc import crystal, materials

KIKUCHIPY_DATA = None
try:  # the phase names real files carry (kikuchipy ships them; read with h5py only)
    import importlib.util

    _spec = importlib.util.find_spec("kikuchipy")
    if _spec and _spec.submodule_search_locations:
        KIKUCHIPY_DATA = os.path.join(list(_spec.submodule_search_locations)[0], "data")
except (ImportError, ValueError):
    pass


@pytest.mark.parametrize("name, structure, laue, a, c, b", [
    ("Ni", "fcc", "m-3m", 3.5238e-10, None, 3.5238e-10 / math.sqrt(2)),
    ("Cu", "fcc", "m-3m", 3.6150e-10, None, 3.6150e-10 / math.sqrt(2)),
    ("Al", "fcc", "m-3m", 4.0494e-10, None, 4.0494e-10 / math.sqrt(2)),
    ("Fe", "bcc", "m-3m", 2.8664e-10, None, 2.8664e-10 * math.sqrt(3) / 2),
    ("Si", "diamond", "m-3m", 5.4307e-10, None, 5.4307e-10 / math.sqrt(2)),
    ("Ti", "hcp", "6/mmm", 2.9504e-10, 4.6833e-10, 2.9504e-10),
    ("Mg", "hcp", "6/mmm", 3.2094e-10, 5.2103e-10, 3.2094e-10),
])
def test_presets(name, structure, laue, a, c, b):
    m = materials.material(name.lower())
    assert (m.name, m.structure, m.laue, m.a, m.c) == (name, structure, laue, a, c)
    assert m.burgers == pytest.approx(b, rel=1e-12)
    assert crystal.laue_group(m.structure) == m.laue
    # the nearest-neighbour distance is the Burgers vector of these structures
    assert m.burgers == pytest.approx({"fcc": a / math.sqrt(2), "bcc": a * math.sqrt(3) / 2, "hcp": a,
                                       "diamond": a / math.sqrt(2)}[structure])
    assert not m.stiffness.flags.writeable
    np.testing.assert_array_equal(m.stiffness, materials.parse_material(name)[1])
    np.testing.assert_array_equal(m.stiffness_tensor(), materials.stiffness_tensor(m.stiffness))


def test_hexagonal_c_over_a_is_the_literature_value():
    assert materials.material("Ti").c_over_a == pytest.approx(1.587, abs=2e-3)
    assert materials.material("Mg").c_over_a == pytest.approx(1.624, abs=2e-3)
    assert materials.material("Ni").c_over_a is None


def test_hexagonal_stiffness_is_transversely_isotropic():
    C = materials.hexagonal_stiffness(*materials.HEXAGONAL_PRESETS["Ti"])
    assert C[5, 5] == pytest.approx((C[0, 0] - C[0, 1]) / 2)
    t = materials.stiffness_tensor(C)
    # any rotation about c (z) leaves it unchanged: hexagonal elasticity is isotropic in the basal plane
    for angle in (17.0, 60.0, 123.4):
        q = Rotation.from_euler("z", angle, degrees=True).as_matrix()
        np.testing.assert_allclose(materials.rotate_stiffness(t, q), t, atol=1e-9)
    # but a rotation that tips c does not
    q = Rotation.from_euler("x", 30, degrees=True).as_matrix()
    assert np.abs(materials.rotate_stiffness(t, q) - t).max() > 1.0
    # the 6/mmm operators are symmetries of it
    for op in crystal.symmetry_operators("6/mmm"):
        np.testing.assert_allclose(materials.rotate_stiffness(t, op), t, atol=1e-9)
    # the compliance gives the textbook Young's modulus along c: 1 / S33
    E_c = 1 / np.linalg.inv(C)[2, 2]
    c11, c12, c13, c33, _ = materials.HEXAGONAL_PRESETS["Ti"]
    assert E_c == pytest.approx(c33 - 2 * c13**2 / (c11 + c12))


def test_hexagonal_spec_and_presets_through_parse_material():
    name, C = materials.parse_material("hexagonal:162.4,92,69,180.7,46.7")
    np.testing.assert_allclose(C, materials.hexagonal_stiffness(162.4, 92, 69, 180.7, 46.7))
    assert name == "hexagonal:162.4,92,69,180.7,46.7"
    assert materials.parse_material("titanium")[0] == "Ti"
    assert materials.parse_material("MG")[1][2, 2] == 61.60
    with pytest.raises(ValueError, match="expected hexagonal:C11,C12,C13,C33,C44"):
        materials.parse_material("hexagonal:1,2,3")
    with pytest.raises(ValueError, match="positive definite"):
        materials.parse_material("hexagonal:100,150,20,100,30")
    with pytest.raises(ValueError, match="unknown material 'unobtainium'"):
        materials.parse_material("unobtainium")


def test_specs_without_lattice_and_overrides(tmp_path):
    m = materials.material("cubic:246.5,147.3,124.7")
    assert (m.structure, m.laue, m.a, m.c, m.burgers) == (None, None, None, None, None)
    m = materials.material("cubic:246.5,147.3,124.7", structure="FCC", a=3.52e-10)
    assert (m.structure, m.laue) == ("fcc", "m-3m") and m.burgers == pytest.approx(3.52e-10 / math.sqrt(2))
    m = materials.material("hexagonal:59.4,25.61,21.44,61.6,16.4", structure="hcp", a=3.2e-10, c=5.2e-10)
    assert (m.laue, m.burgers, m.c_over_a) == ("6/mmm", 3.2e-10, pytest.approx(1.625))
    # a file (even one named like a preset) knows no lattice
    p = tmp_path / "Ni"
    np.savetxt(p, materials.cubic_stiffness(*materials.CUBIC_PRESETS["Ni"]))
    assert materials.material(str(p)).a is None
    # an array too
    assert materials.material(materials.cubic_stiffness(200, 100, 80)).name == "user C_ij"
    # a Material passes through; overriding a keeps the structure, the Burgers vector follows
    ni = materials.material("Ni")
    assert materials.material(ni) is not ni and materials.material(ni).a == ni.a
    m = materials.material(ni, a=3.6e-10)
    assert m.structure == "fcc" and m.burgers == pytest.approx(3.6e-10 / math.sqrt(2))
    assert materials.material(ni, burgers=2.5e-10).burgers == 2.5e-10
    with pytest.raises(ValueError, match="metres"):
        materials.material("Ni", a=3.52)  # Angstrom
    with pytest.raises(ValueError, match="structure must be one of"):
        materials.material("Ni", structure="bct")
    with pytest.raises(ValueError, match="needs the lattice parameter c"):
        materials.material("cubic:200,100,80", structure="hcp", a=3e-10)
    with pytest.raises(ValueError, match="hcp crystals only"):
        materials.material("Ni", c=5e-10)


@pytest.mark.parametrize("phase, expected", [
    ("Nickel", "Ni"), ("Ni", "Ni"), ("ni", "Ni"), ("Iron bcc (old)", "Fe"), ("Iron (Alpha)", "Fe"),
    ("Ferrite", "Fe"), ("alpha-Fe", "Fe"), ("Aluminium", "Al"), ("Aluminum", "Al"), ("Copper", "Cu"),
    ("Silicon", "Si"), ("Ti-Hex", "Ti"), ("Titanium (Alpha)", "Ti"), ("Magnesium", "Mg"),
    # another structure than the preset's, several elements, or none: no match rather than a wrong one
    ("Iron fcc", None), ("Austenite", None), ("Iron - Gamma", None), ("Titanium cubic", None),
    ("Titanium (Beta)", None), ("Ti-6Al-4V", None), ("NiAl", None), ("Quartz", None), ("", None),
])
def test_material_for_phase(phase, expected):
    m = materials.material_for_phase(phase)
    assert (m.name if m else None) == expected


def test_material_for_phase_checks_the_laue_group():
    assert materials.material_for_phase("Nickel", laue="m-3m").name == "Ni"
    assert materials.material_for_phase("Nickel", laue="6/mmm") is None
    assert materials.material_for_phase("Titanium", laue=crystal.laue_group(62)).name == "Ti"


def test_phase_names_of_real_files():
    h5py = pytest.importorskip("h5py")
    if KIKUCHIPY_DATA is None or not os.path.isdir(KIKUCHIPY_DATA):
        pytest.skip("kikuchipy's data files are not installed")
    found = []

    def visit(name, obj):
        leaf = name.rsplit("/", 1)[-1].lower()
        if isinstance(obj, h5py.Dataset) and leaf in ("name", "materialname", "material_name"):
            value = obj[()]
            value = value[0] if np.ndim(value) else value
            found.append(value.decode() if isinstance(value, bytes) else str(value))

    for sub in ("kikuchipy_h5ebsd/patterns.h5", "edax_h5ebsd/patterns.h5"):
        with h5py.File(os.path.join(KIKUCHIPY_DATA, sub), "r") as f:
            f.visititems(visit)
    phases = [p for p in found if p.strip()]
    assert {"ni", "Nickel"} <= set(phases)  # what those nickel scans call their phase
    assert all(materials.material_for_phase(p).name == "Ni" for p in phases)
