"""Orientation maps read from .ang, .ctf and vendor h5 files, with orix (GPL-3) as the oracle.

orix reads .ang (EDAX/TSL, EMsoft, orix's own), .ctf and Bruker h5 files; for each, our
reader must give the same rotations (compared as rotations, per point, and modulo the
phase's symmetry), the same phases (Laue group) and the same indexed points. The files are
written by orix itself, by hand in the vendors' layouts (OIM 7 and 8 .ang, AZtec .ctf,
EMsoft), and with h5py in EDAX OIM, Bruker Esprit and Oxford H5OINA layouts; the EDAX and
H5OINA files have no orix reader, so their data are also written as .ang / .ctf files that
orix reads, and both must agree. Bad files are modified copies.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from ebsdxc.errors import InputError
from ebsdxc.io import (
    ORIENTATION_FORMATS,
    ArraySource,
    OrientationMap,
    PhaseInfo,
    ScanGrid,
    open_scan,
    read_orientation_map,
)
from ebsdxc.io.orientation_map import EULER_FRAMES, LAUE_GROUPS, laue_group_name

orix = pytest.importorskip("orix")
from diffpy.structure import Lattice, Structure  # noqa: E402
from orix import io as orix_io  # noqa: E402
from orix.crystal_map import CrystalMap, PhaseList  # noqa: E402
from orix.quaternion import Orientation, Rotation  # noqa: E402
from orix.quaternion.symmetry import get_point_group  # noqa: E402

KP_DATA = Path(importlib.util.find_spec("kikuchipy").origin).parent / "data" if importlib.util.find_spec(
    "kikuchipy") else None

NICKEL = PhaseInfo(1, "Nickel", "m-3m", (3.52, 3.52, 3.52, 90, 90, 90), "Ni", 225)
TITANIUM = PhaseInfo(2, "Titanium", "6/mmm", (2.95, 2.95, 4.68, 90, 90, 120), "Ti", 194)
TSL_CODE = {"m-3m": 43, "6/mmm": 62, "4/mmm": 42, "mmm": 22}


# ----------------------------------------------------------------------------- oracles


def orix_load(path):
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # orix prints while renaming phases
        return orix_io.load(os.fspath(path))


def assert_same_as_orix(omap, xmap, *, atol=1e-6):
    """Our map and orix's crystal map hold the same indexed points, phases and rotations.

    Points are compared in file order (padding slots of a hexagonal grid left out); the
    rotation of each point must agree as a rotation (angle of ours^-1 * theirs) and modulo
    its phase's symmetry.
    """
    keep = omap.grid.in_grid().reshape(-1)
    indexed = omap.indexed.reshape(-1)[keep]
    assert indexed.size == xmap.size
    np.testing.assert_array_equal(indexed, xmap.is_indexed)
    ours = Rotation.from_euler(np.radians(omap.euler_deg.reshape(-1, 3)[keep][indexed]))
    theirs = xmap.rotations[xmap.is_indexed]
    assert (~ours * theirs).angle.max() < atol
    phase = omap.phase.reshape(-1)[keep][indexed]
    orix_ids = xmap.phase_id[xmap.is_indexed]
    for index, info in enumerate(omap.phases):
        mine = phase == index
        if not mine.any():
            continue
        ids = np.unique(orix_ids[mine])
        assert ids.size == 1, f"phase {info.name} is several orix phases"
        pg = xmap.phases[int(ids[0])].point_group
        assert pg.laue.name == info.laue
        o1, o2 = Orientation(ours[mine], symmetry=pg), Orientation(theirs[mine], symmetry=pg)
        assert o1.angle_with(o2).max() < atol
    return ours, theirs


# ----------------------------------------------------------------------------- file makers


def random_euler_rad(rng, n):
    """Bunge angles (radians) of ``n`` rotations uniform on SO(3)."""
    q = rng.normal(size=(n, 4))
    return Rotation(q / np.linalg.norm(q, axis=1, keepdims=True)).to_euler()


def orix_written_ang(path, rng, rows=4, cols=5, *, step=(2.0, 1.5)):
    """A two-phase .ang file written by orix, with two points not indexed."""
    n = rows * cols
    phase_id = rng.integers(0, 2, n)
    phase_id[[3, n - 2]] = -1
    pl = PhaseList(ids=[0, 1], names=["nickel", "titanium"], point_groups=["m-3m", "6/mmm"],
                   structures=[Structure(lattice=Lattice(3.52, 3.52, 3.52, 90, 90, 90)),
                               Structure(lattice=Lattice(2.95, 2.95, 4.68, 90, 90, 120))])
    y, x = np.mgrid[0:rows, 0:cols]
    xmap = CrystalMap(rotations=Rotation.from_euler(random_euler_rad(rng, n)), phase_id=phase_id,
                      x=x.ravel() * step[1], y=y.ravel() * step[0], phase_list=pl,
                      prop={"iq": rng.random(n) * 100, "ci": rng.random(n)})
    orix_io.save(os.fspath(path), xmap, overwrite=True)
    return path


def tsl_ang(path, euler, phase, iq, ci, *, rows, cols, phases, kind="square", step=(1.5, 1.5),
            extra_cols=0, layout="oim7", header_extra=()):
    """A .ang file in OIM's own layout; ``euler`` in radians, one row per point in file order."""
    sy, sx = step
    hexagonal = kind == "hexagonal"
    lines = ["# TEM_PIXperUM          1.000000", "# x-star                0.413900",
             "# y-star                0.694100", "# z-star                0.673500",
             "# WorkingDistance       15.000000", "#"]
    for info in phases:
        a, b, c, al, be, ga = info.lattice
        lines += [f"# Phase {info.id}", f"# MaterialName  \t{info.name}", f"# Formula     \t{info.formula}",
                  "# Info \t\t", f"# Symmetry              {TSL_CODE.get(info.laue, info.laue)}",
                  f"# LatticeConstants      {a:.3f} {b:.3f} {c:.3f}  {al:.3f}  {be:.3f}  {ga:.3f}",
                  "# NumberFamilies        2",
                  "# hklFamilies   \t 1  1  1 1 0.000000 1",
                  "# hklFamilies   \t 2  0  0 1 0.000000 1",
                  "# ElasticConstants \t0.000000 0.000000 0.000000 0.000000 0.000000 0.000000",
                  "# Categories1 1 1 1 1 ", "#"]
    lines += [f"# GRID: {'HexGrid' if hexagonal else 'SqrGrid'}", f"# XSTEP: {sx:.6f}", f"# YSTEP: {sy:.6f}",
              f"# NCOLS_ODD: {cols}", f"# NCOLS_EVEN: {cols - 1 if hexagonal else cols}",
              f"# NROWS: {rows}", "#", "# OPERATOR: \tjane", "#", "# SAMPLEID: \t", "#", "# SCANID: \t", "#"]
    names = ["phi1", "PHI", "phi2", "x", "y", "IQ", "CI", "Phase index", "SEM", "Fit"]
    names += [f"PRIAS {i}" for i in range(extra_cols)]
    if layout == "oim8":
        lines += [f"# COLUMN_COUNT: {len(names)}", f"# COLUMN_HEADERS: {', '.join(names)}", "#"]
    lines += list(header_extra)
    xy = [(c * sx + (0.5 * sx if hexagonal and r % 2 else 0.0), r * sy)
          for r in range(rows) for c in range(cols - (1 if hexagonal and r % 2 else 0))]
    assert len(xy) == len(euler)
    for i, ((x, y), e) in enumerate(zip(xy, euler)):
        row = (f"{e[0]:9.5f} {e[1]:9.5f} {e[2]:9.5f} {x:12.5f} {y:12.5f} {iq[i]:.1f} {ci[i]:6.3f} "
               f"{int(phase[i])} {100.0 + i:.1f} {0.5:6.3f}")
        row += "".join(f" {float(j):.3f}" for j in range(extra_cols))
        lines.append(row)
    Path(path).write_text("\n".join(lines) + "\n")
    return path


def aztec_ctf(path, euler_deg, phase, *, rows, cols, phases, step=(1.5, 1.5), header_extra=(),
              laue_numbers=None):
    """A .ctf file in AZtec's layout; ``phase`` numbers 1.. (0 not indexed)."""
    sy, sx = step
    numbers = laue_numbers or [LAUE_GROUPS.index(p.laue) + 1 for p in phases]
    lines = ["Channel Text File", "Prj\tC:\\data\\Project 1.cpr", "Author\t[Unknown]", "JobMode\tGrid",
             f"XCells\t{cols}", f"YCells\t{rows}", f"XStep\t{sx}", f"YStep\t{sy}",
             "AcqE1\t0", "AcqE2\t0", "AcqE3\t0",
             "Euler angles refer to Sample Coordinate system (CS0)!\tMag\t200\tCoverage\t100\tDevice\t0\t"
             "KV\t20\tTiltAngle\t70\tTiltAxis\t0", *header_extra, f"Phases\t{len(phases)}"]
    for p, number in zip(phases, numbers):
        a, b, c, al, be, ga = p.lattice
        lines.append(f"{a:.3f};{b:.3f};{c:.3f}\t{al:.3f};{be:.3f};{ga:.3f}\t{p.name}\t{number}\t"
                     f"{p.space_group}\t\t\tComment")
    lines.append("Phase\tX\tY\tBands\tError\tEuler1\tEuler2\tEuler3\tMAD\tBC\tBS")
    for i, e in enumerate(euler_deg):
        r, c = divmod(i, cols)
        lines.append(f"{int(phase[i])}\t{c * sx:.4f}\t{r * sy:.4f}\t{8 if phase[i] else 0}\t"
                     f"{0 if phase[i] else 3}\t{e[0]:.4f}\t{e[1]:.4f}\t{e[2]:.4f}\t0.{i % 10:d}\t{100 + i % 150}"
                     f"\t{90 + i % 100}")
    Path(path).write_text("\n".join(lines) + "\n")
    return path


def scan_data(rng, rows, cols, *, kind="square", n_phases=2):
    """Random per-point data of a scan: Euler (rad), phase numbers (1.., 0 not indexed), IQ, CI."""
    n = ScanGrid(rows, cols, kind=kind).n_points
    euler = random_euler_rad(rng, n)
    phase = rng.integers(1, n_phases + 1, n)
    ci = rng.random(n)
    unindexed = rng.choice(n, 3, replace=False)
    ci[unindexed] = -1
    return euler, phase, rng.random(n) * 3000, ci, unindexed


@pytest.fixture
def rng2():
    return np.random.default_rng(2024)


# ----------------------------------------------------------------------------- .ang vs orix


def test_orix_written_ang(tmp_path, rng2):
    path = orix_written_ang(tmp_path / "orix.ang", rng2)
    omap = read_orientation_map(path)
    xmap = orix_load(path)
    assert omap.frame == "tsl" and omap.metadata["vendor"] == "orix"
    assert (omap.grid.rows, omap.grid.cols) == xmap.shape and omap.grid.step == (2.0, 1.5)
    assert [(p.id, p.name, p.laue) for p in omap.phases] == [(1, "nickel", "m-3m"), (2, "titanium", "6/mmm")]
    assert omap.phases[1].lattice == (2.95, 2.95, 4.68, 90.0, 90.0, 120.0)
    assert omap.indexed.sum() == omap.grid.size - 2
    assert_same_as_orix(omap, xmap)
    np.testing.assert_allclose(omap.quality["iq"].reshape(-1), xmap.prop["iq"], rtol=1e-6)
    np.testing.assert_allclose(omap.quality["ci"].reshape(-1), xmap.prop["ci"], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(omap.pattern_quality(), omap.quality["iq"])
    assert np.isnan(omap.euler_deg[~omap.indexed]).all() and (omap.phase[~omap.indexed] == -1).all()


@pytest.mark.parametrize("case", ["single_phase", "two_phases", "oim8_headers", "prias_14_columns"])
def test_tsl_ang_matches_orix(tmp_path, rng2, case):
    rows, cols = 5, 6
    phases = [NICKEL] if case == "single_phase" else [NICKEL, TITANIUM]
    euler, phase, iq, ci, unindexed = scan_data(rng2, rows, cols, n_phases=len(phases))
    if case == "single_phase":
        phase[:] = 0  # what OIM writes in a single-phase scan
    else:
        phase[unindexed] = 0
    path = tsl_ang(tmp_path / "tsl.ang", euler, phase, iq, ci, rows=rows, cols=cols, phases=phases,
                   layout="oim8" if case == "oim8_headers" else "oim7",
                   extra_cols=4 if case == "prias_14_columns" else 0)
    omap = read_orientation_map(path)
    assert_same_as_orix(omap, orix_load(path))
    assert omap.indexed.sum() == rows * cols - 3
    np.testing.assert_allclose(np.radians(omap.euler_deg.reshape(-1, 3)[omap.indexed.reshape(-1)]),
                               np.delete(euler, unindexed, axis=0), atol=6e-6)
    assert omap.metadata["pattern_centre"] == [0.4139, 0.6941, 0.6735]
    assert omap.metadata["pattern_centre_convention"] == "tsl" and omap.metadata["operator"] == "jane"
    assert {"iq", "ci", "detector_signal", "fit"} <= set(omap.quality)
    if case == "prias_14_columns":
        assert {"column_11", "column_14"} <= set(omap.quality)
    np.testing.assert_allclose(omap.quality["detector_signal"].reshape(-1), 100 + np.arange(rows * cols))


def test_hexagonal_ang_matches_orix(tmp_path, rng2):
    rows, cols = 5, 6
    euler, phase, iq, ci, unindexed = scan_data(rng2, rows, cols, kind="hexagonal")
    path = tsl_ang(tmp_path / "hex.ang", euler, phase, iq, ci, rows=rows, cols=cols,
                   phases=[NICKEL, TITANIUM], kind="hexagonal", step=(1.5 * np.sqrt(3) / 2, 1.5))
    omap = read_orientation_map(path)
    grid = omap.grid
    assert grid.kind == "hexagonal" and (grid.rows, grid.cols) == (rows, cols)
    assert grid.n_points == len(euler) == rows * cols - rows // 2
    assert (omap.phase[1::2, -1] == -1).all() and np.isnan(omap.euler_deg[1::2, -1]).all()
    assert np.isnan(omap.quality["iq"][1::2, -1]).all()
    assert_same_as_orix(omap, orix_load(path))
    # slot (1, 0) is the first point of the second row: record `cols`
    np.testing.assert_allclose(omap.quality["iq"][1, 0], np.float32(round(iq[cols], 1)))


def test_emsoft_ang_columns(tmp_path, rng2):
    rows, cols = 3, 4
    euler, phase, iq, ci, _ = scan_data(rng2, rows, cols, n_phases=1)
    lines = ["# TEM_PIXperUM 1.000000", "# x-star 0.0", "# y-star 0.0", "# z-star 0.0",
             "# WorkingDistance 0.0", "#", "# Phase 1", "# MaterialName Ni", "# Formula Ni",
             "# Info patterns indexed using EMsoft::EMEBSDDI", "# Symmetry 43",
             "# LatticeConstants 3.524 3.524 3.524 90.000 90.000 90.000", "# NumberFamilies 0",
             "# GRID: SqrGrid", "# XSTEP: 1.0", "# YSTEP: 1.0", "# NCOLS_ODD: 4", "# NCOLS_EVEN: 4",
             "# NROWS: 3", "#"]
    for i, e in enumerate(euler):
        r, c = divmod(i, cols)
        lines.append(f"{e[0]:.5f} {e[1]:.5f} {e[2]:.5f} {c:.5f} {r:.5f} {iq[i]:.3f} {0.8:.3f} 1")
    path = tmp_path / "emsoft.ang"
    path.write_text("\n".join(lines) + "\n")
    omap = read_orientation_map(path)
    assert omap.metadata["vendor"] == "emsoft" and set(omap.quality) == {"iq", "dp"}
    assert omap.indexed.all()
    assert_same_as_orix(omap, orix_load(path))


def test_ang_without_grid_header_takes_the_grid_from_positions(tmp_path, rng2):
    euler, phase, iq, ci, _ = scan_data(rng2, 3, 5)
    path = tsl_ang(tmp_path / "nogrid.ang", euler, phase, iq, ci, rows=3, cols=5, phases=[NICKEL, TITANIUM],
                   step=(2.0, 0.5))
    path.write_text("\n".join(ln for ln in path.read_text().splitlines()
                              if not ln.startswith(("# NROWS", "# NCOLS"))) + "\n")
    omap = read_orientation_map(path)
    assert omap.grid == ScanGrid(3, 5, step=(2.0, 0.5))
    assert_same_as_orix(omap, orix_load(path))


# ----------------------------------------------------------------------------- .ctf vs orix


@pytest.mark.parametrize("case", ["aztec", "mtex", "emsoft"])
def test_ctf_matches_orix(tmp_path, rng2, case):
    rows, cols = 4, 7
    euler, phase, *_ = scan_data(rng2, rows, cols)
    phase[[2, 9]] = 0
    extra = {"mtex": (), "aztec": (), "emsoft": ("EMsoft v. 4_1_0_9; BANDS=pattern index, MAD=CI, BC=OSM, BS=IQ",)}
    path = aztec_ctf(tmp_path / f"{case}.ctf", np.degrees(euler), phase, rows=rows, cols=cols,
                     phases=[NICKEL, TITANIUM], header_extra=extra[case])
    omap = read_orientation_map(path)
    assert omap.frame == "oxford"
    assert [(p.id, p.name, p.laue, p.space_group) for p in omap.phases] == [
        (1, "Nickel", "m-3m", 225), (2, "Titanium", "6/mmm", 194)]
    assert omap.indexed.sum() == rows * cols - 2
    assert_same_as_orix(omap, orix_load(path), atol=2e-6)  # 4 decimals of a degree
    names = {"aztec": {"bands", "error", "mad", "bc", "bs"}, "mtex": {"bands", "error", "mad", "bc", "bs"},
             "emsoft": {"bands", "error", "dp", "osm", "iq"}}[case]
    assert set(omap.quality) == names
    if case == "aztec":
        np.testing.assert_array_equal(omap.pattern_quality().reshape(-1), 100 + np.arange(rows * cols) % 150)
        assert omap.metadata["sample_tilt"] == 70.0 and omap.metadata["beam_energy"] == 20.0


def test_ctf_line_scan_and_comma_decimals(tmp_path, rng2):
    euler, phase, *_ = scan_data(rng2, 1, 9, n_phases=1)
    path = aztec_ctf(tmp_path / "line.ctf", np.degrees(euler), phase, rows=1, cols=9, phases=[NICKEL])
    text = path.read_text().replace("JobMode\tGrid", "JobMode\tLineScan").replace("3.520;3.520;3.520",
                                                                                   "3,520;3,520;3,520")
    path.write_text(text)
    omap = read_orientation_map(path)
    assert (omap.grid.rows, omap.grid.cols) == (1, 9)
    assert omap.phases[0].lattice[:3] == (3.52, 3.52, 3.52)


# ----------------------------------------------------------------------------- symmetry tables


@pytest.mark.parametrize("code", [1, 2, 20, 22, 3, 32, 4, 42, 6, 62, 23, 43])
def test_tsl_symmetry_codes_match_orix(tmp_path, code):
    info = PhaseInfo(1, "x", laue_group_name(tsl_code=code), (3, 4, 5, 90, 90, 90))
    euler = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])  # orix reads files of 2 points or more
    path = tsl_ang(tmp_path / "two.ang", euler, [1, 1], [1.0, 1.0], [0.9, 0.9], rows=1, cols=2, phases=[info])
    path.write_text(path.read_text().replace(f"Symmetry              {info.laue}", f"Symmetry              {code}"))
    omap = read_orientation_map(path)
    xmap = orix_load(path)
    assert omap.phases[0].laue == xmap.phases[1].point_group.laue.name


def test_orix_written_phases_of_every_laue_group(tmp_path, rng2):
    from orix.quaternion import symmetry

    groups = [symmetry.Ci, symmetry.C2h, symmetry.D2h, symmetry.C4h, symmetry.D4h, symmetry.S6,
              symmetry.D3d, symmetry.C6h, symmetry.D6h, symmetry.Th, symmetry.Oh]
    n = len(groups)
    pl = PhaseList(ids=list(range(n)), names=[f"p{i}" for i in range(n)], point_groups=groups,
                   structures=[Structure(lattice=Lattice(3, 4, 5, 90, 90, 90)) for _ in range(n)])
    xmap = CrystalMap(rotations=Rotation.from_euler(random_euler_rad(rng2, 2 * n)), phase_id=np.arange(2 * n) % n,
                      x=np.arange(2 * n) * 1.0, y=np.zeros(2 * n), phase_list=pl)
    path = tmp_path / "laue.ang"
    orix_io.save(os.fspath(path), xmap)
    omap = read_orientation_map(path)
    assert [p.laue for p in omap.phases] == [g.laue.name for g in groups] == list(LAUE_GROUPS)
    assert_same_as_orix(omap, orix_load(path))


def test_laue_tables_agree_with_orix_and_crystal():
    from ebsdxc.crystal import LAUE_GROUPS as CRYSTAL_LAUE
    from ebsdxc.crystal import laue_group

    assert LAUE_GROUPS == CRYSTAL_LAUE
    from orix.quaternion import symmetry

    for group in symmetry._groups:  # every point group orix knows, by its name
        assert laue_group_name(point_group=group.name) == group.laue.name, group.name
    for number in range(1, 231):
        # orix's point group of the space group (its Laue group is unnamed for "m")
        proper = get_point_group(number, proper=False).laue_proper_subgroup.name
        assert laue_group_name(space_group=number) == laue_group_name(point_group=proper), number
    for code in (1, 2, 20, 21, 22, 3, 32, 4, 42, 6, 62, 23, 43):
        assert laue_group_name(tsl_code=code) == laue_group(f"tsl:{code}")
    for number in range(1, 12):
        assert laue_group_name(ctf_number=number) == laue_group(f"ctf:{number}")
    assert laue_group_name(point_group="Cubic (Oh) [m3m]") == "m-3m"  # as EDAX h5 says it
    for bad in (dict(tsl_code=44), dict(ctf_number=12), dict(space_group=231), dict(point_group="5")):
        with pytest.raises(ValueError):
            laue_group_name(**bad)


def test_ctf_laue_numbers_match_orix(tmp_path, rng2):
    # orix 0.15 turns Laue number 10 into a point group "m3" it then refuses: left out for orix
    numbers = [n for n in range(1, 12) if n != 10]
    phases = [PhaseInfo(i + 1, f"p{i}", LAUE_GROUPS[n - 1], (3, 4, 5, 90, 90, 90)) for i, n in enumerate(numbers)]
    euler, *_ = scan_data(rng2, 1, len(numbers), n_phases=1)
    path = aztec_ctf(tmp_path / "laue.ctf", np.degrees(euler), np.arange(1, len(numbers) + 1), rows=1,
                     cols=len(numbers), phases=phases)
    omap = read_orientation_map(path)
    xmap = orix_load(path)
    assert [p.laue for p in omap.phases] == [LAUE_GROUPS[n - 1] for n in numbers]
    assert [xmap.phases[i + 1].point_group.laue.name for i in range(len(numbers))] == [p.laue for p in omap.phases]
    assert_same_as_orix(omap, xmap, atol=2e-6)
    _edit(path, "\tp0\t1\t", "\tp0\t10\t")
    assert read_orientation_map(path).phases[0].laue == "m-3"


# ----------------------------------------------------------------------------- vendor h5


def write_edax_h5(path, euler, phase, iq, ci, *, rows, cols, phases, kind="square", patterns=False):
    with h5py.File(path, "w") as f:
        f[" Manufacturer"] = np.array([b"EDAX"])
        f[" Version"] = np.array([b"OIM Analysis 8.6.0101 x64 [09-13-22]"])
        data = f.create_group("Scan 1/EBSD/Data")
        for name, values in (("Phi1", euler[:, 0]), ("Phi", euler[:, 1]), ("Phi2", euler[:, 2])):
            data[name] = values.astype(np.float32)
        data["Phase"] = np.asarray(phase, dtype=np.int8)
        data["IQ"], data["CI"] = iq.astype(np.float32), ci.astype(np.float32)
        data["Fit"] = np.full(len(euler), 0.5, np.float32)
        data["SEM Signal"] = 100 + np.arange(len(euler), dtype=np.float32)
        data["X Position"] = np.zeros(len(euler), np.float32)
        data["Y Position"] = np.zeros(len(euler), np.float32)
        if patterns:
            data["Pattern"] = np.zeros((len(euler), 8, 8), np.uint8)
        h = f.create_group("Scan 1/EBSD/Header")
        h["nRows"], h["nColumns"] = np.array([rows], np.int32), np.array([cols], np.int32)
        h["Step X"], h["Step Y"] = np.array([1.5], np.float32), np.array([1.5], np.float32)
        h["Grid Type"] = np.array([b"HexGrid" if kind == "hexagonal" else b"SqrGrid"])
        if patterns:
            h["Pattern Height"], h["Pattern Width"] = np.array([8], np.int32), np.array([8], np.int32)
        for info in phases:
            g = h.create_group(f"Phase/{info.id}")
            g["MaterialName"], g["Formula"] = np.array([info.name.encode()]), np.array([info.formula.encode()])
            g["Symmetry"] = np.array([TSL_CODE[info.laue]], np.int32)
            g["Point Group"] = np.array([b"whatever [m3m]"])
            for k, v in zip(("a", "b", "c", "alpha", "beta", "gamma"), info.lattice):
                g[f"Lattice Constant {k}"] = np.array([v], np.float32)


@pytest.mark.parametrize("kind", ["square", "hexagonal"])
def test_edax_h5_agrees_with_the_same_data_as_ang(tmp_path, rng2, kind):
    rows, cols = 5, 6
    euler, phase, iq, ci, unindexed = scan_data(rng2, rows, cols, kind=kind)
    phases = [NICKEL, TITANIUM]
    h5 = tmp_path / "scan.h5"
    write_edax_h5(h5, euler, phase, iq, ci, rows=rows, cols=cols, phases=phases, kind=kind)
    ang = tsl_ang(tmp_path / "scan.ang", euler.astype(np.float32), phase, iq, ci, rows=rows, cols=cols,
                  phases=phases, kind=kind)
    omap = read_orientation_map(h5)
    assert omap.frame == "tsl" and omap.grid.kind == kind
    assert [(p.id, p.name, p.laue, p.formula) for p in omap.phases] == [
        (1, "Nickel", "m-3m", "Ni"), (2, "Titanium", "6/mmm", "Ti")]
    assert omap.indexed.sum() == omap.grid.n_points - 3
    assert_same_as_orix(omap, orix_load(ang), atol=2e-5)  # 5 decimals of a radian in the .ang
    from_ang = read_orientation_map(ang)
    np.testing.assert_array_equal(omap.phase, from_ang.phase)
    np.testing.assert_allclose(omap.euler_deg, from_ang.euler_deg, atol=1e-3)
    assert {"iq", "ci", "fit", "detector_signal"} <= set(omap.quality)


def test_edax_h5_single_phase_zero_and_source_method(tmp_path, rng2):
    euler, phase, iq, ci, unindexed = scan_data(rng2, 3, 4, n_phases=1)
    path = tmp_path / "scan.h5"
    write_edax_h5(path, euler, np.zeros(12), iq, ci, rows=3, cols=4, phases=[NICKEL], patterns=True)
    omap = read_orientation_map(path)
    assert omap.indexed.sum() == 9 and set(np.unique(omap.phase)) == {-1, 0}
    with open_scan(path) as src:
        from_source = src.orientation_map()
    np.testing.assert_array_equal(from_source.euler_deg, omap.euler_deg)
    np.testing.assert_array_equal(from_source.phase, omap.phase)
    assert ArraySource(np.zeros((2, 8, 8))).orientation_map() is None


@pytest.mark.skipif(KP_DATA is None, reason="kikuchipy's sample files")
def test_kikuchipy_edax_sample():
    path = KP_DATA / "edax_h5ebsd" / "patterns.h5"
    with h5py.File(path, "r") as f:
        stored = np.column_stack([f[f"Scan 1/EBSD/Data/{k}"][()] for k in ("Phi1", "Phi", "Phi2")])
    omap = read_orientation_map(path)
    with open_scan(path) as src:
        np.testing.assert_array_equal(src.orientation_map().euler_deg, omap.euler_deg)
        np.testing.assert_allclose(src.orientations(), omap.euler_deg)
    assert [(p.name, p.laue, p.lattice[0]) for p in omap.phases] == [("Nickel", "m-3m", pytest.approx(3.56))]
    assert omap.indexed.all()  # phase 0 of a single-phase scan, no CI of -1
    np.testing.assert_allclose(omap.euler_deg.reshape(-1, 3), np.degrees(stored.astype(np.float64)))


def write_bruker_h5(path, euler_deg, phase, *, rows, cols, phases, roi=None):
    n = len(euler_deg)
    with h5py.File(path, "w") as f:
        f["Manufacturer"], f["Version"] = np.array([b"Bruker Nano"]), np.array([b"Esprit 2.X"])
        data = f.create_group("Scan 0/EBSD/Data")
        for name, values in (("phi1", euler_deg[:, 0]), ("PHI", euler_deg[:, 1]), ("phi2", euler_deg[:, 2])):
            data[name] = values.astype(np.float32)
        data["Phase"] = np.asarray(phase, np.int32)
        for name in ("MAD", "NIndexedBands", "RadonQuality", "PCX", "PCY", "DD", "Z SAMPLE"):
            data[name] = np.linspace(0.1, 0.9, n).astype(np.float32)
        for name in ("MADPhase", "RadonBandCount", "X BEAM", "Y BEAM"):
            data[name] = np.ones(n, np.int32)
        r, c = (np.divmod(np.arange(n), cols) if roi is None else roi)
        data["X SAMPLE"], data["Y SAMPLE"] = (c * 1.5).astype(np.float32), (r * 1.5).astype(np.float32)
        h = f.create_group("Scan 0/EBSD/Header")
        h["NROWS"], h["NCOLS"], h["NPoints"] = np.int32(rows), np.int32(cols), np.int32(n)
        h["XSTEP"], h["YSTEP"] = 1.5, 1.5
        h["Grid Type"] = np.array([b"isometric"])
        for info in phases:
            g = h.create_group(f"Phases/{info.id}")
            g["Name"], g["Formula"] = np.array([info.name.encode()]), np.array([info.formula.encode()])
            g["IT"], g["LatticeConstants"] = np.int32(info.space_group), np.array(info.lattice, np.float32)
            g["AtomPositions/1"] = np.array([f"{info.formula},0,0,0,1".encode()])
            g["SpaceGroup"] = np.array([b"-"])
        if roi is not None:
            f["Scan 0/EBSD/SEM/IY"] = roi[0].astype(np.int32)
            f["Scan 0/EBSD/SEM/IX"] = roi[1].astype(np.int32)


def test_bruker_h5_matches_orix(tmp_path, rng2):
    rows, cols = 4, 5
    euler = np.degrees(random_euler_rad(rng2, rows * cols))
    phase = rng2.integers(1, 3, rows * cols)
    phase[[1, 7]] = 0
    path = tmp_path / "bruker.h5"
    write_bruker_h5(path, euler, phase, rows=rows, cols=cols, phases=[NICKEL, TITANIUM])
    omap = read_orientation_map(path)
    assert omap.frame == "bruker"
    assert [(p.id, p.laue, p.space_group) for p in omap.phases] == [(1, "m-3m", 225), (2, "6/mmm", 194)]
    assert {"mad", "radon_quality", "n_indexed_bands"} <= set(omap.quality) and "pcx" not in omap.quality
    np.testing.assert_array_equal(omap.pattern_quality(), omap.quality["radon_quality"])
    assert_same_as_orix(omap, orix_load(path), atol=1e-6)


def test_bruker_h5_region_of_interest(tmp_path, rng2):
    # a 2 x 3 region at rows 1-2, columns 2-4 of a 5 x 6 map, stored column by column
    rr, cc = np.meshgrid(np.arange(1, 3), np.arange(2, 5), indexing="ij")
    order = np.argsort(cc.ravel(), kind="stable")
    roi = (rr.ravel()[order], cc.ravel()[order])
    euler = np.degrees(random_euler_rad(rng2, 6))
    path = tmp_path / "roi.h5"
    write_bruker_h5(path, euler, np.ones(6), rows=5, cols=6, phases=[NICKEL], roi=roi)
    omap = read_orientation_map(path)
    assert (omap.grid.rows, omap.grid.cols) == (2, 3)
    for k in range(6):
        np.testing.assert_allclose(omap.euler_deg[roi[0][k] - 1, roi[1][k] - 2], euler[k], atol=1e-4)


def write_h5oina(path, euler_rad, phase, *, rows, cols, phases, nan_points=()):
    n = len(euler_rad)
    with h5py.File(path, "w") as f:
        f["Format Version"], f["Manufacturer"] = b"5.0", b"Oxford Instruments"
        f["Index"] = np.array([b"1"])
        data = f.create_group("1/EBSD/Data")
        euler = euler_rad.astype(np.float32)
        euler[list(nan_points)] = np.nan
        data["Euler"], data["Phase"] = euler, np.asarray(phase, np.uint8)
        data["Band Contrast"] = (100 + np.arange(n) % 150).astype(np.uint8)
        data["Band Slope"] = (90 + np.arange(n) % 100).astype(np.uint8)
        data["Bands"] = np.full(n, 8, np.uint8)
        data["Error"] = np.where(np.asarray(phase) > 0, 1, 2).astype(np.uint8)
        data["Mean Angular Deviation"] = np.radians(np.full(n, 0.5)).astype(np.float32)
        r, c = np.divmod(np.arange(n), cols)
        data["X"], data["Y"] = (c * 1.5).astype(np.float32), (r * 1.5).astype(np.float32)
        h = f.create_group("1/EBSD/Header")
        h["X Cells"], h["Y Cells"] = np.int32(cols), np.int32(rows)
        h["X Step"], h["Y Step"] = np.float32(1.5), np.float32(1.5)
        for info in phases:
            g = h.create_group(f"Phases/{info.id}")
            g["Phase Name"], g["Reference"] = info.name, "ICSD"
            g["Lattice Dimensions"] = np.array([info.lattice[:3]], np.float32)
            g["Lattice Angles"] = np.radians(np.array([info.lattice[3:]], np.float32))
            g["Laue Group"] = np.int32(LAUE_GROUPS.index(info.laue) + 1)
            g["Laue Group"].attrs["Symbol"] = info.laue
            g["Space Group"] = np.int32(info.space_group)


def test_h5oina_agrees_with_the_same_data_as_ctf(tmp_path, rng2):
    rows, cols = 4, 6
    euler = random_euler_rad(rng2, rows * cols).astype(np.float32).astype(np.float64)
    phase = rng2.integers(1, 3, rows * cols)
    phase[[0, 11]] = 0
    h5 = tmp_path / "map.h5oina"
    write_h5oina(h5, euler, phase, rows=rows, cols=cols, phases=[NICKEL, TITANIUM])
    ctf = aztec_ctf(tmp_path / "map.ctf", np.degrees(euler), phase, rows=rows, cols=cols,
                    phases=[NICKEL, TITANIUM])
    omap = read_orientation_map(h5)
    assert omap.frame == "oxford"
    assert [(p.id, p.laue) for p in omap.phases] == [(1, "m-3m"), (2, "6/mmm")]
    np.testing.assert_allclose(omap.phases[1].lattice, TITANIUM.lattice, atol=1e-4)
    assert_same_as_orix(omap, orix_load(ctf), atol=2e-6)
    np.testing.assert_allclose(omap.quality["mad"], 0.5, atol=1e-5)  # degrees, as in .ctf
    np.testing.assert_array_equal(omap.pattern_quality(), read_orientation_map(ctf).quality["bc"])


def test_h5oina_irregular_map_and_dataset_choice(tmp_path, rng2):
    euler = random_euler_rad(rng2, 12)
    path = tmp_path / "map.h5oina"
    write_h5oina(path, euler, np.ones(12), rows=3, cols=4, phases=[NICKEL], nan_points=(5, 6))
    omap = read_orientation_map(path, dataset="1")
    assert omap.indexed.sum() == 10 and not omap.indexed[1, 1:3].any()
    with pytest.raises(InputError, match="no slice '2'"):
        read_orientation_map(path, dataset=2)


def test_source_orientation_map_of_vendor_files(tmp_path, rng2):
    from kikuchipy.data._dummy_files.bruker_h5ebsd import create_dummy_bruker_h5ebsd_file
    from kikuchipy.data._dummy_files.oxford_h5ebsd import create_dummy_oxford_h5ebsd_file

    bruker, oxford = tmp_path / "bruker.h5", tmp_path / "oxford.h5oina"
    create_dummy_bruker_h5ebsd_file(bruker)
    create_dummy_oxford_h5ebsd_file(oxford, version="7.0")
    with open_scan(bruker) as src:
        omap = src.orientation_map()
        np.testing.assert_allclose(omap.euler_deg, src.orientations())
        assert omap.frame == "bruker" and omap.phases[0].laue == "m-3m"
    # kikuchipy's H5OINA dummy has points of phase 1 but no Phases group, which the format
    # requires: nothing to tell the phase's symmetry
    with open_scan(oxford) as src, pytest.raises(InputError, match="phase 1 is not declared"):
        src.orientation_map()


# ----------------------------------------------------------------------------- detection, errors


def test_detection_by_content_not_extension(tmp_path, rng2):
    ang = orix_written_ang(tmp_path / "a.ang", rng2)
    euler, phase, *_ = scan_data(rng2, 2, 3, n_phases=1)
    ctf = aztec_ctf(tmp_path / "c.ctf", np.degrees(euler), phase, rows=2, cols=3, phases=[NICKEL])
    swapped_ang, swapped_ctf = tmp_path / "really_ang.ctf", tmp_path / "really_ctf.txt"
    swapped_ang.write_bytes(ang.read_bytes())
    swapped_ctf.write_bytes(ctf.read_bytes())
    assert read_orientation_map(swapped_ang).frame == "tsl"
    assert read_orientation_map(swapped_ctf).frame == "oxford"
    assert ORIENTATION_FORMATS == ("edax_h5", "bruker_h5", "oxford_h5oina", "ang", "ctf")
    with pytest.raises(InputError, match="not a .ctf file") as exc:
        read_orientation_map(ang, format="ctf")
    assert os.fspath(ang) in str(exc.value)
    with pytest.raises(InputError, match="unknown orientation map format"):
        read_orientation_map(ang, format="xyz")
    with pytest.raises(InputError, match="holds one map"):
        read_orientation_map(ang, dataset="Scan 1")


@pytest.mark.parametrize("what", ["text", "tiff", "kikuchipy_h5", "missing", "empty"])
def test_files_without_orientations(tmp_path, what):
    path = tmp_path / f"{what}.ang"
    if what == "text":
        path.write_text("phi1 Phi phi2\n1 2 3\n")
    elif what == "tiff":
        import tifffile

        tifffile.imwrite(path, np.zeros((8, 8), np.uint8))
    elif what == "kikuchipy_h5":
        if KP_DATA is None:
            pytest.skip("kikuchipy's sample files")
        path = KP_DATA / "kikuchipy_h5ebsd" / "patterns.h5"
    elif what == "empty":
        path.write_text("")
    with pytest.raises(InputError) as exc:
        read_orientation_map(path)
    assert os.fspath(path) in str(exc.value)


def _edit(path, old, new, count=1):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, count))


def _ang(tmp_path, rng, **kwargs):
    euler, phase, iq, ci, _ = scan_data(rng, 4, 5)
    return tsl_ang(tmp_path / "bad.ang", euler, phase, iq, ci, rows=4, cols=5, phases=[NICKEL, TITANIUM],
                   **kwargs)


@pytest.mark.parametrize("damage, message", [
    ("drop_lines", "holds 17 points but its header's grid"),
    ("cut_last_line", "line {last} holds 3 values where the lines before hold 10"),
    ("word", "line {word} does not parse"),
    ("swapped_grid", "the header contradicts the points present"),
    ("symmetry", "unknown EDAX/TSL symmetry code 99"),
    ("phase", "phase 7 is not declared"),
    ("extra_lines", "the header contradicts the data"),
    ("hex_columns", "NCOLS_EVEN"),
    ("lattice", "LatticeConstants"),
    ("no_data", "holds no data lines"),
])
def test_bad_ang_files(tmp_path, rng2, damage, message):
    path = _ang(tmp_path, rng2)
    lines = path.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    if damage == "drop_lines":
        path.write_text("\n".join(lines[:-3]) + "\n")
    elif damage == "cut_last_line":
        path.write_text("\n".join(lines[:-1] + [lines[-1][:30]]) + "\n")
    elif damage == "word":
        lines[first + 3] = lines[first + 3].replace(" ", " abc ", 1)
        path.write_text("\n".join(lines) + "\n")
    elif damage == "swapped_grid":
        _edit(path, "# NCOLS_ODD: 5\n# NCOLS_EVEN: 5\n# NROWS: 4", "# NCOLS_ODD: 4\n# NCOLS_EVEN: 4\n# NROWS: 5")
    elif damage == "symmetry":
        _edit(path, "Symmetry              43", "Symmetry              99")
    elif damage == "phase":
        parts = lines[first + 2].split()
        parts[7] = "7"
        lines[first + 2] = " ".join(parts)
        path.write_text("\n".join(lines) + "\n")
    elif damage == "extra_lines":
        path.write_text("\n".join(lines + lines[-2:]) + "\n")
    elif damage == "hex_columns":
        _edit(path, "GRID: SqrGrid", "GRID: HexGrid")
    elif damage == "lattice":
        _edit(path, "LatticeConstants      3.520 3.520 3.520", "LatticeConstants      3.520 3.520")
    elif damage == "no_data":
        path.write_text("\n".join(lines[:first]) + "\n")
    message = message.format(last=first + 20, word=first + 4)
    with pytest.raises(InputError, match=message) as exc:
        read_orientation_map(path)
    assert str(exc.value).startswith(os.fspath(path))


@pytest.mark.parametrize("damage, message", [
    ("drop_lines", "holds 17 points but its header's grid"),
    ("laue", "unknown Laue group number 12"),
    ("phase", "phase 3 is not declared"),
    ("jobmode", "JobMode 'Interactive'"),
    ("columns", "the column line names no Euler3"),
    ("phases_count", "header says 3 phases but lists"),
])
def test_bad_ctf_files(tmp_path, rng2, damage, message):
    euler, phase, *_ = scan_data(rng2, 4, 5)
    path = aztec_ctf(tmp_path / "bad.ctf", np.degrees(euler), phase, rows=4, cols=5, phases=[NICKEL, TITANIUM])
    lines = path.read_text().splitlines()
    if damage == "drop_lines":
        path.write_text("\n".join(lines[:-3]) + "\n")
    elif damage == "laue":
        _edit(path, "\tNickel\t11\t", "\tNickel\t12\t")
    elif damage == "phase":
        lines[-1] = "3" + lines[-1][1:]
        path.write_text("\n".join(lines) + "\n")
    elif damage == "jobmode":
        _edit(path, "JobMode\tGrid", "JobMode\tInteractive")
    elif damage == "columns":
        _edit(path, "\tEuler3\tMAD\tBC\tBS", "\tEuler4\tMAD\tBC\tBS")
    elif damage == "phases_count":
        _edit(path, "Phases\t2", "Phases\t3")
    with pytest.raises(InputError, match=message) as exc:
        read_orientation_map(path)
    assert str(exc.value).startswith(os.fspath(path))


def test_vendor_h5_errors(tmp_path, rng2):
    euler, phase, iq, ci, _ = scan_data(rng2, 3, 4)
    path = tmp_path / "scan.h5"
    write_edax_h5(path, euler, phase, iq, ci, rows=3, cols=4, phases=[NICKEL, TITANIUM])
    with h5py.File(path, "r+") as f:
        f["Scan 1/EBSD/Header/Phase/2/Symmetry"][...] = 77
    with pytest.raises(InputError, match="unknown EDAX/TSL symmetry code 77"):
        read_orientation_map(path)
    write_edax_h5(path, euler, phase, iq, ci, rows=2, cols=4, phases=[NICKEL, TITANIUM])
    with pytest.raises(InputError, match="holds 12"):
        read_orientation_map(path)
    write_bruker_h5(path, np.degrees(euler), phase * 2, rows=3, cols=4, phases=[NICKEL, TITANIUM])
    with pytest.raises(InputError, match="phase 4 is not declared"):
        read_orientation_map(path)


# ----------------------------------------------------------------------------- the record


def test_frames_follow_kikuchipy(rng2):
    """Oxford and Bruker orientations in the TSL frame: G_tsl = G_vendor * Rz(-90 deg) (kikuchipy)."""
    grid = ScanGrid(2, 3)
    euler = np.degrees(random_euler_rad(rng2, 6)).reshape(2, 3, 3)
    omap = OrientationMap("x", grid, euler, np.zeros((2, 3), np.int16), (NICKEL,), frame="oxford")
    tsl = omap.in_frame("tsl")
    expected = Rotation.from_euler(np.radians(euler.reshape(-1, 3))) * Rotation.from_axes_angles(
        [0, 0, 1], -np.pi / 2)
    got = Rotation.from_euler(np.radians(tsl.euler_deg.reshape(-1, 3)))
    assert (~got * expected).angle.max() < 1e-12
    assert (tsl.euler_deg[..., 0] >= 0).all() and (tsl.euler_deg[..., 0] < 360).all()
    back = tsl.in_frame("bruker")
    assert back.frame == "bruker"
    assert (~Rotation.from_euler(np.radians(back.euler_deg.reshape(-1, 3)))
            * Rotation.from_euler(np.radians(euler.reshape(-1, 3)))).angle.max() < 1e-12
    assert omap.in_frame("oxford") is omap and EULER_FRAMES == ("tsl", "oxford", "bruker")


def test_record_checks_its_fields():
    grid = ScanGrid(2, 2, kind="hexagonal")
    euler = np.zeros((2, 2, 3))
    euler[1, 1] = np.nan
    phase = np.array([[0, 0], [0, -1]])
    omap = OrientationMap("m", grid, euler, phase, (NICKEL,), quality={"iq": np.ones((2, 2))})
    assert omap.phase.dtype == np.int16 and omap.quality["iq"].dtype == np.float32
    assert omap.describe()["phases"] == [{"id": 1, "name": "Nickel", "laue": "m-3m", "points": 3}]
    assert omap.pattern_quality() is omap.quality["iq"]
    bad = [
        dict(euler_deg=np.zeros((2, 3, 3))),
        dict(phase=np.zeros((2, 2))),  # float, and a point at the padding slot
        dict(phase=np.array([[0, 1], [0, -1]])),  # phase 1 of one phase
        dict(phase=np.array([[0, 0], [0, 0]])),  # the padding slot indexed
        dict(euler_deg=np.full((2, 2, 3), np.nan)),  # indexed points without angles
        dict(phase=np.array([[0, -1], [0, -1]])),  # a point not indexed but with angles
        dict(frame="mtex"),
        dict(quality={"iq": np.ones(4)}),
        dict(phases=("Nickel",)),
    ]
    fields = dict(path="m", grid=grid, euler_deg=euler, phase=phase, phases=(NICKEL,))
    for change in bad:
        with pytest.raises(ValueError):
            OrientationMap(**{**fields, **change})
    with pytest.raises(ValueError, match="laue"):
        PhaseInfo(1, "x", "cubic")
    with pytest.raises(ValueError, match="lattice"):
        PhaseInfo(1, "x", "m-3m", (1, 2, 3))
