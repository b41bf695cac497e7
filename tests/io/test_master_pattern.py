"""ebsdxc.io.master_pattern: EMsoft EBSD master patterns, read from the real files kikuchipy ships."""

from __future__ import annotations

import json
import os
import shutil

import h5py
import numpy as np
import pytest

from ebsdxc.errors import InputError
from ebsdxc.io.master_pattern import read_master_pattern
from ebsdxc.materials import material

kikuchipy_data = pytest.importorskip("kikuchipy.data")
FOLDER = os.path.join(os.path.dirname(kikuchipy_data.__file__), "emsoft_ebsd_master_pattern")
NICKEL = os.path.join(FOLDER, "ni_mc_mp_20kv_uint8_gzip_opts9.h5")
DUMMY = os.path.join(FOLDER, "master_patterns.h5")  # 11 energies, 10-20 keV, 13 x 13, Al2Cu (140)


def raw(path, name):
    with h5py.File(path, "r") as f:
        return f["EMData/EBSDmaster"][name][()].astype(np.float64)


def test_nickel_file_as_stored():
    mp = read_master_pattern(NICKEL)
    assert mp.lambert.shape == (2, 401, 401) and mp.lambert.dtype == np.float32
    np.testing.assert_array_equal(mp.lambert[0], raw(NICKEL, "mLPNH")[0, 0])
    np.testing.assert_array_equal(mp.lambert[1], raw(NICKEL, "mLPSH")[0, 0])
    assert not mp.lambert.flags.writeable
    assert mp.energies.tolist() == [20.0] and mp.voltage_kv == pytest.approx(20.1)
    assert mp.space_group == 225 and mp.laue == "m-3m"
    assert mp.lattice == pytest.approx((0.35236, 0.35236, 0.35236, 90, 90, 90))
    assert mp.xtalname == "ni2/ni2.xtal" and mp.path == NICKEL
    d = mp.to_dict()
    assert json.loads(json.dumps(d)) == d and d["space_group"] == 225 and "lambert" not in d


def test_nickel_equals_kikuchipy_and_simulate_loader():
    kp = pytest.importorskip("kikuchipy")
    from ebsdxc.simulate import load_nickel_master_pattern

    theirs = kp.data.nickel_ebsd_master_pattern_small(projection="lambert", hemisphere="both").data
    mp = read_master_pattern(NICKEL)
    np.testing.assert_array_equal(mp.lambert, theirs.astype(np.float32))
    np.testing.assert_array_equal(load_nickel_master_pattern(), mp.lambert)


def test_energies_of_the_multi_energy_file():
    kp = pytest.importorskip("kikuchipy")
    north, south = raw(DUMMY, "mLPNH"), raw(DUMMY, "mLPSH")  # (1, 11, 13, 13)
    # default: the highest energy, as kikuchipy uses by default
    mp = read_master_pattern(DUMMY)
    assert mp.energies.tolist() == [float(e) for e in range(10, 21)]
    np.testing.assert_allclose(mp.lambert, np.stack([north[0, -1], south[0, -1]]), rtol=1e-6)
    assert "20 keV" in mp.energy_used and mp.space_group == 140 and mp.laue == "4/mmm"
    # a number: the nearest bin; kikuchipy's reader as the oracle
    mp = read_master_pattern(DUMMY, energy=14.3)
    theirs = kp.load(DUMMY, projection="lambert", hemisphere="both", energy=14).data
    np.testing.assert_allclose(mp.lambert, theirs, rtol=1e-6)
    assert mp.energy_used.startswith("14 keV")
    # a range without a Monte-Carlo histogram in the file: the plain mean of its bins
    mp = read_master_pattern(DUMMY, energy=(12, 15))
    np.testing.assert_allclose(mp.lambert, np.stack([north[0, 2:6].mean(0), south[0, 2:6].mean(0)]), rtol=1e-6)
    assert "4 bins" in mp.energy_used and "plain mean" in mp.energy_used


def test_energy_range_weighted_by_the_monte_carlo_histogram(tmp_path):
    path = tmp_path / "weighted.h5"
    shutil.copy(DUMMY, path)
    counts = np.arange(1, 12, dtype=np.int32)  # electrons per energy bin, 10..20 keV
    accum = np.zeros((7, 7, 11), dtype=np.int32)
    accum[3, 3] = counts - 1
    accum[2, 4] = 1
    with h5py.File(path, "a") as f:
        f.create_dataset("EMData/MCOpenCL/accum_e", data=accum)
    mp = read_master_pattern(path, energy=(12, 15))
    north = raw(path, "mLPNH")[0, 2:6]
    w = counts[2:6] / counts[2:6].sum()
    np.testing.assert_allclose(mp.lambert[0], np.tensordot(w, north, axes=(0, 0)), rtol=1e-6)
    assert "weighted by the Monte-Carlo" in mp.energy_used


@pytest.mark.parametrize("energy, words", [(30, "covers 10.0-20.0 keV, asked 30 keV"),
                                           (5.0, "covers 10.0-20.0 keV, asked 5 keV"),
                                           ((21, 25), "covers 10.0-20.0 keV, asked 21-25 keV")])
def test_energy_outside_the_file(energy, words):
    with pytest.raises(InputError, match=words) as e:
        read_master_pattern(DUMMY, energy=energy)
    assert str(e.value).startswith(DUMMY) and "\n" not in str(e.value)


def test_bad_energy_argument():
    for bad in (-1, float("nan"), (15, 12), "high", (1, 2, 3)):
        with pytest.raises(ValueError, match="energy"):
            read_master_pattern(DUMMY, energy=bad)


def test_material_check():
    assert read_master_pattern(NICKEL, material=material("Ni")).checked_material == "Ni"
    assert read_master_pattern(NICKEL, material=("fcc", 3.5238e-10)).checked_material is not None
    with pytest.raises(InputError, match="space group 225.*Fe is bcc") as e:
        read_master_pattern(NICKEL, material=material("Fe"))
    assert str(e.value).startswith(NICKEL)
    with pytest.raises(InputError, match=r"lattice parameter a = 0.35236 nm differs from material Al's 0.40494 nm"):
        read_master_pattern(NICKEL, material=material("Al"))  # fcc too, 15% larger
    with pytest.raises(InputError, match="lattice parameter"):
        read_master_pattern(NICKEL, material=("fcc", 3.6e-10))  # 2.2% off
    # a material of unknown structure and lattice (user stiffness) checks nothing
    assert read_master_pattern(NICKEL, material=material("cubic:200,100,80")).checked_material is None
    with pytest.raises(ValueError, match="not the name"):
        read_master_pattern(NICKEL, material="Ni")
    with pytest.raises(ValueError, match="metres"):
        read_master_pattern(NICKEL, material=("fcc", 0.352))


def _copy_without(tmp_path, name, edit):
    path = tmp_path / name
    shutil.copy(DUMMY, path)
    with h5py.File(path, "a") as f:
        edit(f)
    return os.fspath(path)


def test_bad_files(tmp_path):
    text = tmp_path / "notes.h5"
    text.write_text("not hdf5")
    cases = [(os.fspath(text), "not an HDF5 file")]
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["data"] = np.zeros((4, 4))
    cases.append((os.fspath(other), "not an EMsoft EBSD master-pattern file"))
    cases.append((_copy_without(tmp_path, "south.h5", lambda f: f.__delitem__("EMData/EBSDmaster/mLPSH")),
                  "south hemisphere EMData/EBSDmaster/mLPSH is missing"))

    def rectangular(f):
        for name in ("mLPNH", "mLPSH"):
            del f["EMData/EBSDmaster"][name]
            f["EMData/EBSDmaster"][name] = np.zeros((1, 11, 13, 12), dtype=np.float32)

    cases.append((_copy_without(tmp_path, "rect.h5", rectangular), "is not square"))

    def energies(f):
        del f["EMData/EBSDmaster/EkeVs"]
        f["EMData/EBSDmaster/EkeVs"] = np.arange(10, 20, dtype=np.float32)  # 10 for 11 bins

    cases.append((_copy_without(tmp_path, "ebins.h5", energies), "11 energy bins but EkeVs lists 10"))
    truncated = tmp_path / "truncated.h5"
    with open(NICKEL, "rb") as fh:
        data = fh.read()
    truncated.write_bytes(data[: len(data) // 2])
    cases.append((os.fspath(truncated), ""))
    cases.append((os.fspath(tmp_path / "missing.h5"), "no such file"))
    for path, words in cases:
        with pytest.raises(InputError, match=words or None) as e:
            read_master_pattern(path)
        message = str(e.value)
        assert message.startswith(path) and "\n" not in message, message
