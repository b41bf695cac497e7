"""A reference per grain, end to end: a simulated polycrystal processed as a user would, its
grains, per-grain strain and rotation, Nye tensor and GND density against the truth; and the
bad inputs of issue 15, each one clear line with nothing half-written that looks complete."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest
from clitools import assert_one_error, run_cli

from ebsdxc import simulate
from ebsdxc.config import GrainsConfig, ProcessConfig, RunConfig
from ebsdxc.errors import InputError
from ebsdxc.hrebsd import StrainConfig
from ebsdxc.io.results import read_summary
from ebsdxc.run import process
from ebsdxc.status import NO_REFERENCE

ROWS, COLS = 18, 18


@pytest.fixture(scope="module")
def poly(tmp_path_factory):
    folder = tmp_path_factory.mktemp("poly")
    try:
        master = simulate.load_nickel_master_pattern()
    except ValueError as exc:  # kikuchipy (its data file) not installed
        pytest.skip(str(exc))
    sim = simulate.simulate_polycrystal(ROWS, COLS, n_grains=4, shape=(256, 256), counts=1500, strain=1e-3,
                                        curvature=2e3, step=0.5, seed=3, master=master)
    sim.save(folder)
    return sim, str(folder)


def _config(**grains):
    return ProcessConfig(strain=StrainConfig(material="Ni", remap_threshold_deg=1.0),
                         grains=GrainsConfig(per_grain=True, **grains))


@pytest.fixture(scope="module")
def result(poly):
    sim, folder = poly
    out = os.path.join(folder, "out.h5")
    process(os.path.join(folder, "scan.h5"), orientations=os.path.join(folder, "scan.ang"), output=out,
            config=_config(), run=RunConfig(device="cpu"))
    with h5py.File(out, "r") as f:
        g = f["ebsdxc"]
        data = {k: g[k][...] for k in ("grain_id", "strain", "rotation", "fit_status", "nye_tensor", "gnd_density",
                                       "status")}
        data["reference_point"] = g["grains/reference_point"][...]
        data["attrs"] = dict(g.attrs)
    return out, data


def _agreement(found, truth):
    """Fraction of points whose found grain maps to their true grain (majority mapping)."""
    ok = 0
    for gid in np.unique(found[found >= 0]):
        t = truth[found == gid]
        ok += np.bincount(t[t >= 0]).max() if (t >= 0).any() else 0
    return ok / (truth >= 0).sum()


def test_grains_match_the_truth_and_each_has_its_reference(poly, result):
    sim, _ = poly
    out, d = result
    gid, refs = d["grain_id"], d["reference_point"]
    assert gid.dtype == np.int32 and gid.shape == (ROWS, COLS)
    assert refs.shape == (gid.max() + 1, 2)
    assert _agreement(gid, sim.grain_id) >= 0.98
    for k, (r, c) in enumerate(refs):
        assert gid[r, c] == k  # each reference lies in its own grain
    # and a grain's points are correlated with their own grain's reference
    assert (d["status"][gid >= 0] != NO_REFERENCE).all()
    assert d["attrs"]["complete"]


def test_strain_and_rotation_relative_to_each_grain_reference(poly, result):
    sim, _ = poly
    _, d = result
    truth = sim.truth_relative(d["reference_point"])
    ok = d["fit_status"] == 0
    assert ok.mean() > 0.95
    for name, got, want in (("strain", d["strain"], truth.strain), ("rotation", d["rotation"], truth.rotation)):
        err = got[ok] - want[ok]
        rms = np.sqrt(np.mean(err**2))
        assert rms <= 1.5e-4, f"{name} RMS error {rms:.2e}"


def test_nye_tensor_and_gnd_density(poly, result):
    sim, _ = poly
    _, d = result
    nye = d["nye_tensor"]
    measured = [(0, 1), (0, 2), (1, 0), (1, 2), (2, 2)]
    assert np.isnan(nye[..., 0, 0]).all() and np.isnan(nye[..., 2, 1]).all()
    got = np.sqrt(sum(nye[..., i, j] ** 2 for i, j in measured))
    want = np.sqrt(sum(sim.nye[..., i, j] ** 2 for i, j in measured))
    ok = np.isfinite(got) & (want > 0)
    assert ok.mean() > 0.8
    ratio = np.median(got[ok]) / np.median(want[ok])
    assert abs(ratio - 1) <= 0.25, ratio
    rho = d["gnd_density"][ok]
    assert np.isfinite(rho).all() and (rho > 0).all()
    # lower bound: at least |alpha| / b for the shortest Burgers vector (Ni b = 0.249 nm)
    assert np.median(rho) >= 0.5 * np.median(got[ok]) / 2.49e-10


def test_unindexed_scan_is_segmented_from_its_patterns(poly, tmp_path):
    sim, folder = poly
    out = tmp_path / "sim.h5"
    process(os.path.join(folder, "scan.h5"), output=str(out), config=ProcessConfig(grains=GrainsConfig(per_grain=True)),
            run=RunConfig(device="cpu"))
    with h5py.File(out, "r") as f:
        g = f["ebsdxc"]
        gid, ref = g["grain_id"][...], g["grains/reference_point"][...]
        assert json.loads(g["grains"].attrs["method"]) == "similarity"
        assert "reference_euler" not in g["grains"]
    assert _agreement(gid, sim.grain_id) >= 0.98
    assert all(gid[r, c] == k for k, (r, c) in enumerate(ref) if r >= 0)
    # strain needs each grain's orientation, which patterns alone do not give
    with pytest.raises(InputError, match="needs each grain's orientation"):
        process(os.path.join(folder, "scan.h5"), output=str(tmp_path / "s.h5"),
                config=_config(), run=RunConfig(device="cpu"))
    assert not (tmp_path / "s.h5").exists()


def test_hexagonal_grid(tmp_path):
    sim = simulate.simulate_polycrystal(14, 14, n_grains=3, shape=(128, 128), grid_kind="hexagonal", seed=2)
    scan, ang, _ = sim.save(tmp_path)
    out = process(scan, orientations=ang, output=str(tmp_path / "o.h5"), config=_config(), run=RunConfig(device="cpu"))
    with h5py.File(out, "r") as f:
        g = f["ebsdxc"]
        gid, nye, st = g["grain_id"][...], g["nye_tensor"][...], g["status"][...]
        assert g.attrs["complete"] and g.attrs["gnd_complete"]
    pad = ~sim.grid.in_grid()
    assert (gid[pad] == -1).all() and (st[pad] == 5).all()  # padding slots: no grain, no pattern
    assert _agreement(gid, sim.grain_id) >= 0.98
    measured = [(0, 1), (0, 2), (1, 0), (1, 2), (2, 2)]
    got = np.sqrt(sum(nye[..., i, j] ** 2 for i, j in measured))
    want = np.sqrt(sum(sim.nye[..., i, j] ** 2 for i, j in measured))
    ok = np.isfinite(got) & (want > 0)
    assert abs(np.median(got[ok]) / np.median(want[ok]) - 1) <= 0.25


def test_strain_pass_again_on_the_results_file_gives_the_same(result, tmp_path):
    import shutil

    from ebsdxc.run import strain

    out, d = result
    copy = tmp_path / "again.h5"
    shutil.copy(out, copy)
    counts = strain(str(copy), config=StrainConfig(material="Ni", remap_threshold_deg=1.0), device="cpu",
                    overwrite=True)
    assert counts["fitted"] == int((d["fit_status"] == 0).sum())
    with h5py.File(copy, "r") as f:
        g = f["ebsdxc"]
        np.testing.assert_allclose(g["strain"][...], d["strain"], atol=1e-12, equal_nan=True)
        np.testing.assert_allclose(g["nye_tensor"][...], d["nye_tensor"], atol=1e-6, equal_nan=True)


def test_grain_remapping_in_small_batches_gives_the_same_strain(result, tmp_path, monkeypatch):
    """Remapping batches of 5 points, which mix grains and split them, give what whole chunks
    give: each point is matched with its own grain's rotated reference."""
    import shutil

    from ebsdxc import hrebsd
    from ebsdxc.run import strain

    out, d = result
    got = {}
    for batch in (hrebsd.REMAP_BATCH, 5):
        copy = tmp_path / f"batch{batch}.h5"
        shutil.copy(out, copy)
        monkeypatch.setattr(hrebsd, "REMAP_BATCH", batch)
        # a threshold below the grains' own curvature: most points of every grain are remapped
        counts = strain(str(copy), config=StrainConfig(material="Ni", remap_threshold_deg=0.05), device="cpu",
                        overwrite=True)
        with h5py.File(copy, "r") as f:
            got[batch] = {k: f["ebsdxc"][k][...] for k in ("fit_status", "strain", "rotation", "remapped")}
    whole, fives = got.values()
    assert counts["remapped"] > 3 * 5
    assert len(np.unique(d["grain_id"][whole["remapped"]])) > 1
    for k in whole:
        np.testing.assert_array_equal(fives[k], whole[k], err_msg=k)


def test_export_is_read_back_with_the_orientations_we_wrote(poly, result, tmp_path):
    from ebsdxc.crystal import euler_to_matrix, misorientation_angle
    from ebsdxc.io import read_orientation_map

    sim, _ = poly
    out, d = result
    ang = tmp_path / "hrebsd.ang"
    res = run_cli(*["export", out, "-o", str(ang)])
    assert res.returncode == 0, res.stderr
    omap = read_orientation_map(str(ang))
    ok = d["fit_status"] == 0
    g = euler_to_matrix(omap.euler_deg[ok])
    # HR-EBSD orientations are the true ones to the measured rotation's precision
    assert np.degrees(np.median(misorientation_angle(g, sim.orientation[ok]))) < 0.05
    assert_one_error(run_cli(*["export", out, "-o", str(ang)]), "already exists")


def test_cli_matches_the_contract(poly, tmp_path):
    _, folder = poly
    out = tmp_path / "cli.h5"
    res = run_cli(*["process", os.path.join(folder, "scan.h5"), "--ref-per-grain", "--orientations",
                               os.path.join(folder, "scan.ang"), "--grain-tolerance", "3", "--min-grain-size", "4",
                               "--ref-rule", "centre", "-o", str(out), "-q", "--device", "cpu"])
    assert res.returncode == 0, res.stderr
    with h5py.File(out, "r") as f:
        params = json.loads(f["ebsdxc"].attrs["parameters"])
        assert params["grains"]["tolerance_deg"] == 3.0 and params["grains"]["rule"] == "centre"
        assert "grain_id" in f["ebsdxc"] and "grains/reference_point" in f["ebsdxc"]


# --------------------------------------------------------------------------- bad input


def test_orientation_file_of_another_grid(poly, tmp_path):
    from ebsdxc.io import read_orientation_map, write_ang

    sim, folder = poly
    omap = read_orientation_map(os.path.join(folder, "scan.ang"))
    small = type(omap)(path="x", grid=type(omap.grid)(ROWS - 2, COLS, step=omap.grid.step),
                       euler_deg=omap.euler_deg[:-2], phase=omap.phase[:-2], phases=omap.phases)
    bad = write_ang(tmp_path / "small.ang", small)
    out = tmp_path / "o.h5"
    res = run_cli(*["process", os.path.join(folder, "scan.h5"), "--ref-per-grain", "--orientations",
                    str(bad), "-o", str(out), "-q"])
    assert_one_error(res, "small.ang", f"{ROWS - 2} x {COLS}", f"{ROWS} x {COLS}")
    assert not out.exists()


def test_unknown_phase_and_phase_without_stiffness(poly, tmp_path):
    _, folder = poly
    out = tmp_path / "o.h5"
    res = run_cli(*["process", os.path.join(folder, "scan.h5"), "--ref-per-grain", "--orientations",
                    os.path.join(folder, "scan.ang"), "--material", "Iron=Fe", "-o", str(out), "-q"])
    assert_one_error(res, "'Iron'", "Ni")
    assert not out.exists()
    res = run_cli(*["process", os.path.join(folder, "scan.h5"), "--ref-per-grain", "--orientations",
                    os.path.join(folder, "scan.ang"), "--material", "cubic:1,2", "-o", str(out), "-q"])
    assert_one_error(res, "cubic:C11,C12,C44")
    assert not out.exists()


def test_grain_without_a_usable_reference_is_flagged_not_mixed(poly, tmp_path):
    sim, folder = poly
    # a reference file naming a point of grain 0 only: the other grains have none
    gid = sim.grain_id
    r, c = np.argwhere(gid == gid[0, 0])[0]
    refs = tmp_path / "refs.csv"
    refs.write_text(f"{r},{c}\n")
    out = tmp_path / "o.h5"
    process(os.path.join(folder, "scan.h5"), orientations=os.path.join(folder, "scan.ang"), grain_refs=str(refs),
            output=str(out), config=ProcessConfig(grains=GrainsConfig(per_grain=True)), run=RunConfig(device="cpu"))
    with h5py.File(out, "r") as f:
        g = f["ebsdxc"]
        found = g["grain_id"][...]
        st = g["status"][...]
        ref = g["grains/reference_point"][...]
        disp = g["displacement"][...]
        assert g.attrs["complete"]
    own = found == found[r, c]
    assert (ref[found[r, c]] == [r, c]).all()
    others = (found >= 0) & ~own
    assert others.any() and (ref[np.unique(found[others])] == -1).all()
    assert (st[others] == NO_REFERENCE).all() and np.isnan(disp[others]).all()
    assert (st[own] != NO_REFERENCE).all()
    s = read_summary(str(out))
    assert s["points_without_reference"] == int(others.sum())


def test_no_grain_with_a_reference_is_one_line(poly, tmp_path):
    _, folder = poly
    out = tmp_path / "o.h5"
    with pytest.raises(InputError, match="no grain has a usable reference point"):
        process(os.path.join(folder, "scan.h5"), orientations=os.path.join(folder, "scan.ang"), output=str(out),
                config=ProcessConfig(grains=GrainsConfig(per_grain=True, min_size=10_000)),
                run=RunConfig(device="cpu"))
    assert not out.exists()


def test_a_reference_per_grain_excludes_a_reference(poly, tmp_path):
    _, folder = poly
    res = run_cli(*["process", os.path.join(folder, "scan.h5"), "--ref-per-grain", "--ref-index", "0",
                    "-o", str(tmp_path / "o.h5")])
    assert res.returncode == 2 and "not allowed with argument" in res.stderr
    with pytest.raises(InputError, match="orientations is used with a reference per grain"):
        process(os.path.join(folder, "scan.h5"), ref_index=0, orientations=os.path.join(folder, "scan.ang"),
                output=str(tmp_path / "o.h5"), run=RunConfig(device="cpu"))


# --------------------------------------------------------------------------- real patterns


def _kikuchipy_file(*parts):
    import importlib.util

    spec = importlib.util.find_spec("kikuchipy")
    if spec is None:
        pytest.skip("kikuchipy (its shipped Ni patterns) is not installed")
    path = os.path.join(os.path.dirname(spec.origin), "data", *parts)
    if not os.path.exists(path):
        pytest.skip(f"kikuchipy does not ship {path}")
    return path


@pytest.mark.parametrize("parts, how", [(("edax_h5ebsd", "patterns.h5"), "misorientation"),
                                        (("kikuchipy_h5ebsd", "patterns.h5"), "similarity")])
def test_real_nickel_scan_is_one_grain_and_equals_the_one_reference_run(tmp_path, parts, how):
    """kikuchipy's 3x3 Ni patterns (EDAX h5 with its indexing; kikuchipy h5 without any): one
    grain either way, and correlating against the grain's reference is exactly the run against
    that point as the one reference."""
    scan = _kikuchipy_file(*parts)
    grains_out, one_out = tmp_path / "grains.h5", tmp_path / "one.h5"
    cfg = ProcessConfig(grains=GrainsConfig(per_grain=True, min_size=2))
    process(scan, output=str(grains_out), config=cfg, run=RunConfig(device="cpu"))
    with h5py.File(grains_out, "r") as f:
        g = f["ebsdxc"]
        gid, ref = g["grain_id"][...], g["grains/reference_point"][...]
        method = json.loads(g["grains"].attrs["method"])
        disp = g["displacement"][...]
    assert method == how
    assert (gid == 0).all() and ref.shape == (1, 2)
    process(scan, ref_index=tuple(int(v) for v in ref[0]), output=str(one_out), run=RunConfig(device="cpu"))
    with h5py.File(one_out, "r") as f:
        np.testing.assert_array_equal(f["ebsdxc/displacement"][...], disp)


@pytest.mark.gpu
def test_gpu_run_per_grain_matches_the_cpu_run(poly, result, tmp_path):
    pytest.importorskip("cupy")
    _, folder = poly
    cpu_out, d = result
    out = process(os.path.join(folder, "scan.h5"), orientations=os.path.join(folder, "scan.ang"),
                  output=str(tmp_path / "gpu.h5"), config=_config(), run=RunConfig(device="cuda"))
    with h5py.File(out, "r") as f, h5py.File(cpu_out, "r") as c:
        g, h = f["ebsdxc"], c["ebsdxc"]
        np.testing.assert_array_equal(g["grain_id"][...], d["grain_id"])
        np.testing.assert_array_equal(g["grains/reference_point"][...], d["reference_point"])
        np.testing.assert_allclose(g["displacement"][...], h["displacement"][...], atol=2e-3, equal_nan=True)
        ok = (g["fit_status"][...] == 0) & (d["fit_status"] == 0)
        np.testing.assert_allclose(g["strain"][...][ok], d["strain"][ok], atol=2e-5)
        np.testing.assert_allclose(g["gnd_density"][...][ok], d["gnd_density"][ok], rtol=0.05)


def test_resume_continues_a_per_grain_run_and_refuses_other_grains(poly, tmp_path):
    import shutil

    _, folder = poly
    scan, ang = os.path.join(folder, "scan.h5"), os.path.join(folder, "scan.ang")
    out = tmp_path / "r.h5"
    cfg = ProcessConfig(grains=GrainsConfig(per_grain=True))
    process(scan, orientations=ang, output=str(out), config=cfg, run=RunConfig(device="cpu"))
    with h5py.File(out, "r+") as f:  # as if killed half way
        g = f["ebsdxc"]
        full = g["displacement"][...]
        done = g["done"][...]
        done[ROWS // 2:] = False
        g["done"][...] = done
        g.attrs["complete"] = False
    process(scan, orientations=ang, output=str(out), config=cfg, run=RunConfig(device="cpu"), resume=True)
    with h5py.File(out, "r") as f:
        assert f["ebsdxc"].attrs["complete"]
        np.testing.assert_array_equal(f["ebsdxc/displacement"][...], full)
    other = tmp_path / "other.h5"
    shutil.copy(out, other)
    with pytest.raises(InputError, match="parameters"):
        process(scan, orientations=ang, output=str(other), resume=True, run=RunConfig(device="cpu"),
                config=ProcessConfig(grains=GrainsConfig(per_grain=True, tolerance_deg=2.0)))


def test_grain_settings_are_named_by_their_flags(poly, tmp_path):
    _, folder = poly
    res = run_cli("process", os.path.join(folder, "scan.h5"), "--ref-per-grain", "--grain-tolerance", "90",
                  "-o", str(tmp_path / "o.h5"))
    assert_one_error(res, "--grain-tolerance", "90")
    res = run_cli("process", os.path.join(folder, "scan.h5"), "--ref-index", "0", "--orientations",
                  os.path.join(folder, "scan.ang"), "-o", str(tmp_path / "o.h5"))
    assert_one_error(res, "--orientations", "--ref-per-grain")
    assert not (tmp_path / "o.h5").exists()


def test_two_phases_need_a_material_each(poly, tmp_path):
    from ebsdxc.io import PhaseInfo, read_orientation_map, write_ang

    sim, folder = poly
    omap = read_orientation_map(os.path.join(folder, "scan.ang"))
    second = sim.grain_id == sim.grain_id[-1, -1]  # one grain becomes a phase of its own
    phase = np.where(second, 1, omap.phase).astype(np.int16)
    two = type(omap)(path="two", grid=omap.grid, euler_deg=omap.euler_deg, phase=phase,
                     phases=(omap.phases[0], PhaseInfo(id=2, name="Nickel2", laue="m-3m",
                                                        lattice=omap.phases[0].lattice)))
    ang = write_ang(tmp_path / "two.ang", two)
    scan = os.path.join(folder, "scan.h5")
    res = run_cli("process", scan, "--ref-per-grain", "--orientations", ang, "--material", "Ni", "-o",
                  str(tmp_path / "o.h5"), "--device", "cpu")
    assert_one_error(res, "2 phases", "Nickel2=")
    assert not (tmp_path / "o.h5").exists()
    out = process(scan, orientations=ang, output=str(tmp_path / "o.h5"), run=RunConfig(device="cpu"),
                  config=ProcessConfig(strain=StrainConfig(material=f"{omap.phases[0].name}=Ni;"
                                                                    "Nickel2=cubic:246.5,147.3,124.7"),
                                       grains=GrainsConfig(per_grain=True)))
    with h5py.File(out, "r") as f:
        g = f["ebsdxc"]
        gid, gphase = g["grain_id"][...], g["grains/phase"][...]
        sp = json.loads(g.attrs["strain_parameters"])
        ok = g["fit_status"][...] == 0
        assert ok[second].all() and ok.mean() > 0.95
    assert set(gphase[np.unique(gid[second])]) == {1}
    assert sp["material"] == {"0": "Ni", "1": "cubic:246.5,147.3,124.7"}
