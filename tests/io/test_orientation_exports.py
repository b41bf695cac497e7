"""Orientation maps written as .ang and .ctf, read back by orix (GPL-3, the oracle) and by us.

Round trips both ways: our files read by orix must hold our rotations, phases (Laue groups),
indexed points and quality columns; orix's files read by us and written again must read back
in orix as they were. Square and hexagonal grids, several phases, points not indexed. The
.ctf export is in Oxford's sample frame: orix's reading of it, turned by Rz(-90 deg) as
kikuchipy documents, is the map's TSL orientations.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import numpy as np
import pytest

from ebsdxc.errors import InputError
from ebsdxc.io import OrientationMap, PhaseInfo, ScanGrid, read_orientation_map, write_ang, write_ctf

orix = pytest.importorskip("orix")
from diffpy.structure import Lattice, Structure  # noqa: E402
from orix import io as orix_io  # noqa: E402
from orix.crystal_map import CrystalMap, PhaseList  # noqa: E402
from orix.quaternion import Orientation, Rotation  # noqa: E402

NICKEL = PhaseInfo(1, "Nickel", "m-3m", (3.52, 3.52, 3.52, 90, 90, 90), "Ni", 225)
TITANIUM = PhaseInfo(2, "Titanium", "6/mmm", (2.95, 2.95, 4.68, 90, 90, 120), "Ti", 194)
OLIVINE = PhaseInfo(3, "Forsterite", "mmm", (4.75, 10.19, 5.98, 90, 90, 90), "Mg2SiO4", 62)

# rounding of the files: 5 decimals of a radian (.ang) or of a degree (.ctf) per angle
ANG_ATOL, CTF_ATOL = 2e-5, 1e-6


def orix_load(path):
    with contextlib.redirect_stdout(io.StringIO()):  # orix prints while renaming phases
        return orix_io.load(os.fspath(path))


def random_map(rng, rows, cols, *, kind="square", frame="tsl", phases=(NICKEL, TITANIUM, OLIVINE),
               step=(2.0, 1.5), n_unindexed=4) -> OrientationMap:
    grid = ScanGrid(rows, cols, step=step, kind=kind)
    q = rng.normal(size=(rows * cols, 4))
    euler = np.degrees(Rotation(q / np.linalg.norm(q, axis=1, keepdims=True)).to_euler())
    euler = euler.reshape(rows, cols, 3)
    phase = rng.integers(0, len(phases), (rows, cols)).astype(np.int16)
    flat = np.flatnonzero(grid.in_grid())
    phase.reshape(-1)[rng.choice(flat, n_unindexed, replace=False)] = -1
    phase[~grid.in_grid()] = -1
    euler[phase < 0] = np.nan
    quality = {"iq": rng.random((rows, cols)) * 5000, "ci": rng.random((rows, cols)),
               "fit": rng.random((rows, cols)) * 2, "detector_signal": rng.random((rows, cols)) * 1e4,
               "bc": rng.integers(0, 256, (rows, cols)), "bs": rng.integers(0, 256, (rows, cols)),
               "mad": rng.random((rows, cols)), "bands": rng.integers(5, 12, (rows, cols)),
               "error": np.where(phase >= 0, 0, 3)}
    return OrientationMap("mem", grid, euler, phase, tuple(phases), quality=quality, frame=frame,
                          metadata={"pattern_centre": [0.41, 0.72, 0.65], "pattern_centre_convention": "tsl",
                                    "sample_tilt": 70.0})


def in_file_order(omap):
    """Euler angles (deg), phase, indexed and a quality getter over the map's points in file order."""
    keep = omap.grid.in_grid().reshape(-1)
    return (omap.euler_deg.reshape(-1, 3)[keep], omap.phase.reshape(-1)[keep],
            lambda name: omap.quality[name].reshape(-1)[keep])


def assert_orix_holds(omap, xmap, *, atol, rotate=None):
    """orix's reading ``xmap`` of our file holds ``omap``'s points (``rotate`` applied to orix's
    rotations first, to compare across sample frames)."""
    euler, phase, _ = in_file_order(omap)
    indexed = phase >= 0
    np.testing.assert_array_equal(xmap.is_indexed, indexed)
    ours = Rotation.from_euler(np.radians(euler[indexed]))
    theirs = xmap.rotations[xmap.is_indexed]
    if rotate is not None:
        theirs = theirs * rotate
    assert (~ours * theirs).angle.max() < atol
    orix_ids = xmap.phase_id[xmap.is_indexed]
    for index, info in enumerate(omap.phases):
        mine = phase[indexed] == index
        assert mine.any()
        ids = np.unique(orix_ids[mine])
        assert ids.size == 1
        orix_phase = xmap.phases[int(ids[0])]
        assert orix_phase.point_group.laue.name == info.laue
        np.testing.assert_allclose(orix_phase.structure.lattice.abcABG(), info.lattice, atol=1e-3)
        pg = orix_phase.point_group
        assert Orientation(ours[mine], symmetry=pg).angle_with(Orientation(theirs[mine], symmetry=pg)).max() < atol


# ----------------------------------------------------------------------------- .ang


@pytest.mark.parametrize("kind", ["square", "hexagonal"])
def test_ang_export_reads_in_orix(tmp_path, rng, kind):
    omap = random_map(rng, 6, 7, kind=kind, step=(1.5 * np.sqrt(3) / 2, 1.5) if kind == "hexagonal" else (2.0, 1.5))
    path = write_ang(tmp_path / "out.ang", omap)
    xmap = orix_load(path)
    assert xmap.size == omap.grid.n_points
    assert_orix_holds(omap, xmap, atol=ANG_ATOL)
    _, phase, quality = in_file_order(omap)
    for ours, theirs in (("iq", "iq"), ("ci", "ci"), ("fit", "fit"), ("detector_signal", "detector_signal")):
        expected = quality(ours).astype(np.float64)
        indexed = phase >= 0
        np.testing.assert_allclose(xmap.prop[theirs][indexed], expected[indexed], rtol=1e-5, atol=1e-5)
    if kind == "square":
        assert xmap.shape == (6, 7) and (xmap.dy, xmap.dx) == (2.0, 1.5)


@pytest.mark.parametrize("kind", ["square", "hexagonal"])
def test_ang_round_trip_through_ebsdxc(tmp_path, rng, kind):
    omap = random_map(rng, 5, 6, kind=kind)
    back = read_orientation_map(write_ang(tmp_path / "out.ang", omap))
    assert back.grid == omap.grid and back.frame == "tsl"
    assert [(p.id, p.name, p.laue, p.lattice, p.formula) for p in back.phases] == [
        (p.id, p.name, p.laue, p.lattice, p.formula) for p in omap.phases]
    np.testing.assert_array_equal(back.phase, omap.phase)
    diff = (back.euler_deg - omap.euler_deg + 180.0) % 360.0 - 180.0
    np.testing.assert_allclose(np.nan_to_num(diff), 0.0, atol=np.degrees(6e-6))
    assert np.isnan(back.euler_deg[omap.phase < 0]).all()
    indexed = omap.indexed
    for name in ("iq", "ci", "fit", "detector_signal"):
        np.testing.assert_allclose(back.quality[name][indexed], omap.quality[name][indexed], rtol=1e-5, atol=1e-5)
    assert back.metadata["pattern_centre"] == [0.41, 0.72, 0.65]
    assert set(back.quality) == {"iq", "ci", "fit", "detector_signal"}


def test_orix_ang_through_ebsdxc_back_to_orix(tmp_path, rng):
    rows, cols, n = 5, 4, 20
    phase_id = rng.integers(0, 2, n)
    phase_id[[2, 13]] = -1
    pl = PhaseList(ids=[0, 1], names=["al", "mg"], point_groups=["m-3m", "6/mmm"],
                   structures=[Structure(lattice=Lattice(4.05, 4.05, 4.05, 90, 90, 90)),
                               Structure(lattice=Lattice(3.21, 3.21, 5.21, 90, 90, 120))])
    y, x = np.mgrid[0:rows, 0:cols]
    original = CrystalMap(rotations=Rotation.random(n), phase_id=phase_id, x=x.ravel() * 0.5, y=y.ravel() * 0.5,
                          phase_list=pl, prop={"iq": rng.random(n), "ci": rng.random(n)})
    first = tmp_path / "orix.ang"
    orix_io.save(os.fspath(first), original)
    ours = read_orientation_map(first)
    second = write_ang(tmp_path / "ebsdxc.ang", ours)
    a, b = orix_load(first), orix_load(second)
    np.testing.assert_array_equal(a.is_indexed, b.is_indexed)
    assert (~a.rotations[a.is_indexed] * b.rotations[b.is_indexed]).angle.max() < ANG_ATOL
    np.testing.assert_allclose(a.prop["iq"], b.prop["iq"], atol=1e-5)
    np.testing.assert_allclose(a.prop["ci"], b.prop["ci"], atol=1e-5)
    def groups(xmap):
        return [xmap.phases[i].point_group.name for i in xmap.phases.ids if i >= 0]

    assert groups(a) == groups(b) == ["432", "622"]


def test_ang_marks_points_not_indexed_as_oim_does(tmp_path, rng):
    omap = random_map(rng, 3, 4, phases=(NICKEL,), n_unindexed=2)
    omap = OrientationMap(omap.path, omap.grid, omap.euler_deg, omap.phase, omap.phases)  # no quality
    path = tmp_path / "out.ang"
    write_ang(path, omap)
    table = np.loadtxt(path)
    indexed = omap.indexed.reshape(-1)
    np.testing.assert_allclose(table[~indexed, :3], 4 * np.pi, atol=1e-5)
    np.testing.assert_array_equal(table[~indexed, 6:8], [[-1, 0]] * 2)
    np.testing.assert_array_equal(table[indexed, 6:8], [[1, 1]] * 10)  # CI 1 without a CI, phase 1
    assert (table[~indexed, 9] == 180).all()
    text = path.read_text()
    assert "# GRID: SqrGrid" in text and "# NCOLS_ODD: 4" in text and "# Symmetry              43" in text


def test_ang_export_of_maps_in_other_frames(tmp_path, rng):
    omap = random_map(rng, 3, 5, frame="bruker")
    back = read_orientation_map(write_ang(tmp_path / "out.ang", omap))
    assert back.frame == "tsl"
    assert_orix_holds(back.in_frame("bruker"), orix_load(tmp_path / "out.ang"), atol=ANG_ATOL,
                      rotate=Rotation.from_axes_angles([0, 0, 1], np.pi / 2))
    again = back.in_frame("bruker")
    got = Rotation.from_euler(np.radians(again.euler_deg[again.indexed]))
    want = Rotation.from_euler(np.radians(omap.euler_deg[omap.indexed]))
    assert (~got * want).angle.max() < ANG_ATOL


# ----------------------------------------------------------------------------- .ctf


def test_ctf_export_reads_in_orix_in_oxfords_frame(tmp_path, rng):
    omap = random_map(rng, 6, 5)  # TSL frame, as read from an .ang file
    ctf, ang = write_ctf(tmp_path / "out.ctf", omap), write_ang(tmp_path / "out.ang", omap)
    from_ctf, from_ang = orix_load(ctf), orix_load(ang)
    # as stored: Oxford's frame
    assert_orix_holds(omap.in_frame("oxford"), from_ctf, atol=CTF_ATOL)
    # kikuchipy: G_tsl = G_oxford * Rz(-90 deg); so the .ctf and the .ang hold the same crystal
    rz = Rotation.from_axes_angles([0, 0, 1], -np.pi / 2)
    assert_orix_holds(omap, from_ctf, atol=CTF_ATOL, rotate=rz)
    both = from_ctf.is_indexed
    assert (~(from_ctf.rotations[both] * rz) * from_ang.rotations[both]).angle.max() < ANG_ATOL
    assert from_ctf.shape == (6, 5) and (from_ctf.dy, from_ctf.dx) == (2.0, 1.5)
    indexed = omap.indexed.reshape(-1)
    np.testing.assert_array_equal(from_ctf.prop["BC"][indexed], omap.quality["bc"].reshape(-1)[indexed])
    np.testing.assert_allclose(from_ctf.prop["MAD"][indexed], omap.quality["mad"].reshape(-1)[indexed], atol=1e-5)


def test_ctf_round_trip_through_ebsdxc(tmp_path, rng):
    omap = random_map(rng, 4, 6, frame="oxford")
    back = read_orientation_map(write_ctf(tmp_path / "out.ctf", omap))
    assert back.grid == omap.grid and back.frame == "oxford"
    assert [(p.id, p.name, p.laue, p.lattice, p.space_group) for p in back.phases] == [
        (p.id, p.name, p.laue, p.lattice, p.space_group) for p in omap.phases]
    np.testing.assert_array_equal(back.phase, omap.phase)
    np.testing.assert_allclose(np.nan_to_num(back.euler_deg - omap.euler_deg), 0.0, atol=6e-6)
    for name in ("bands", "error", "bc", "bs"):
        np.testing.assert_array_equal(back.quality[name], omap.quality[name])
    np.testing.assert_allclose(back.quality["mad"], omap.quality["mad"], atol=6e-6)
    assert back.metadata["sample_tilt"] == 70.0
    # and a second round gives the same file
    again = write_ctf(tmp_path / "again.ctf", back)
    assert again != os.fspath(tmp_path / "out.ctf")
    def strip(p):
        return [ln for ln in Path(p).read_text().splitlines() if not ln.startswith("Prj")]

    assert strip(again) == strip(tmp_path / "out.ctf")


def test_ctf_without_quality_marks_unindexed_points(tmp_path, rng):
    full = random_map(rng, 2, 5, phases=(NICKEL,), n_unindexed=3)
    omap = OrientationMap(full.path, full.grid, full.euler_deg, full.phase, full.phases)
    path = tmp_path / "out.ctf"
    write_ctf(path, omap)
    lines = path.read_text().splitlines()
    start = lines.index("Phase\tX\tY\tBands\tError\tEuler1\tEuler2\tEuler3\tMAD\tBC\tBS") + 1
    table = np.loadtxt(lines[start:])
    indexed = omap.indexed.reshape(-1)
    np.testing.assert_array_equal(table[~indexed][:, [0, 4, 5, 6, 7]], [[0, 3, 0, 0, 0]] * 3)
    np.testing.assert_array_equal(table[indexed][:, [0, 4]], [[1, 0]] * 7)
    assert "JobMode\tGrid" in lines and "Phases\t1" in lines
    assert "3.5200;3.5200;3.5200\t90.0000;90.0000;90.0000\tNickel\t11\t225" in path.read_text()


def test_ctf_refuses_hexagonal_maps(tmp_path, rng):
    omap = random_map(rng, 3, 4, kind="hexagonal")
    with pytest.raises(ValueError, match="omap is on a hexagonal grid.*write_ang"):
        write_ctf(tmp_path / "out.ctf", omap)
    assert not os.listdir(tmp_path)


# ----------------------------------------------------------------------------- writing safely


@pytest.mark.parametrize("write", [write_ang, write_ctf])
def test_writers_never_overwrite_silently(tmp_path, rng, write):
    omap = random_map(rng, 2, 3)
    path = tmp_path / "map.out"
    path.write_text("precious")
    with pytest.raises(InputError, match="already exists; pass overwrite=True") as exc:
        write(path, omap)
    assert str(exc.value).startswith(os.fspath(path))
    assert path.read_text() == "precious"
    assert write(path, omap, overwrite=True) == os.fspath(path)
    assert read_orientation_map(path).grid == omap.grid
    assert sorted(os.listdir(tmp_path)) == ["map.out"]  # no .part left behind
    with pytest.raises(InputError, match="is a directory"):
        write(tmp_path, omap, overwrite=True)
    with pytest.raises(InputError, match="cannot be written"):
        write(tmp_path / "missing" / "map.out", omap)
    with pytest.raises(ValueError, match="omap must be an OrientationMap"):
        write(tmp_path / "x", {"euler": 1})


@pytest.mark.parametrize("module", ["ang", "ctf"])
def test_a_failed_write_leaves_the_old_file(tmp_path, rng, monkeypatch, module):
    import importlib

    mod = importlib.import_module(f"ebsdxc.io.{module}")
    write = getattr(mod, f"write_{module}")
    omap = random_map(rng, 2, 3)
    path = tmp_path / f"map.{module}"
    write(path, omap)
    before = path.read_bytes()

    def broken(fh, *args, **kwargs):
        fh.write("half a file")
        raise OSError("disk full")

    monkeypatch.setattr(mod, "write_rows", broken)
    with pytest.raises(OSError, match="disk full"):
        write(path, random_map(rng, 2, 3), overwrite=True)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == [f"map.{module}"]


def test_export_without_step_and_a_line_scan(tmp_path, rng):
    full = random_map(rng, 1, 6)
    omap = OrientationMap(full.path, ScanGrid(1, 6), full.euler_deg, full.phase, full.phases, quality=full.quality)
    for write in (write_ang, write_ctf):
        back = read_orientation_map(write(tmp_path / f"line.{write.__name__}", omap))
        assert (back.grid.rows, back.grid.cols) == (1, 6)
        np.testing.assert_array_equal(back.phase, omap.phase)
    assert "JobMode\tLineScan" in (tmp_path / "line.write_ctf").read_text()
    assert "# XSTEP: 1.000000" in (tmp_path / "line.write_ang").read_text()
