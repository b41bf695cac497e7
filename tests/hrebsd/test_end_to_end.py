"""HR-EBSD end to end: simulated strained patterns -> ebsdxc process/strain -> strain and rotation maps.

Accuracy targets (issue 4): RMS error of every deviatoric strain component and every rotation
component <= 1e-4 with Poisson noise, <= 2e-5 without; with a 3-degree rotation <= 2e-4 with
remapping. Truth: the F each pattern was simulated with (:mod:`ebsdxc.simulate`).
"""

from __future__ import annotations

import json
import os
import shutil

import h5py
import numpy as np
import pytest
from clitools import assert_one_error, run_cli

from ebsdxc import cli, materials
from ebsdxc import simulate as sim
from ebsdxc import strain as sn
from ebsdxc.config import RunConfig, load_config
from ebsdxc.crystal import rotation_from_vector
from ebsdxc.hrebsd import StrainConfig
from ebsdxc.io.results import read_results, read_strain
from ebsdxc.run import process, strain

pytest.importorskip("kikuchipy")  # the master pattern ships with kikuchipy

EULER = (160.0, 40.0, 20.0)
G = sim.bunge_to_matrix(*EULER)
C_NI = materials.stiffness_tensor(materials.parse_material("Ni")[1])
IU = np.triu_indices(3)


def _dev(a):
    return a - np.trace(a, axis1=-2, axis2=-1)[..., None, None] * np.eye(3) / 3


def errors(path, F, *, traction_free=True):
    """RMS over points per component: deviatoric strain (6), rotation (3), full strain (6)."""
    s = read_strain(path)
    assert s["strain_complete"]
    ok = s["fit_status"] == sn.FIT_OK
    V, R = sn.polar_decomposition(F)
    e, w = V - np.eye(3), sn.rotation_log(R)
    dev = np.sqrt(((_dev(s["strain"].astype(float)) - _dev(e))[ok] ** 2).mean(0))[IU]
    rot = np.sqrt(((s["rotation"].astype(float) - w)[ok] ** 2).mean(0))[[0, 0, 1], [1, 2, 2]]
    full = np.sqrt(((s["strain"].astype(float) - e)[ok] ** 2).mean(0))[IU]
    return dev, rot, full, s


def simulated(tmp_path, rows, cols, size, *, noise, rotation_deg=0.0, seed=4):
    F = sim.smooth_deformation_field(rows, cols, strain=1e-3, rotation=1e-3, seed=seed)
    if rotation_deg:
        F = F @ rotation_from_vector(np.deg2rad(rotation_deg) * np.array([0.48, 0.6, -0.64]))
    F = sn.traction_free(F, C_NI, G)
    sc = sim.simulate_scan(rows, cols, shape=(size, size), counts=1000 if noise else None, F=F,
                           euler_deg=EULER, seed=seed)
    scan, ref = sc.save(tmp_path, euler_deg=EULER)
    return sc, scan, ref


CPU = RunConfig(device="cpu")


def hrebsd_config(**strain_kw):
    return load_config("hrebsd")[0].replace(strain=StrainConfig(material="Ni", **strain_kw))


# ------------------------------------------------------------------------------ accuracy


@pytest.mark.parametrize("noise,size,bound", [(True, 256, 1e-4), (False, 512, 2e-5)])
def test_strain_accuracy_on_simulated_patterns(tmp_path, noise, size, bound):
    sc, scan, ref = simulated(tmp_path, 4, 4, size, noise=noise)
    out = process(scan, ref=ref, config=hrebsd_config(), run=CPU, output=tmp_path / "r.h5")
    dev, rot, full, s = errors(out, sc.F)
    assert (s["fit_status"] == 0).all() and (s["rois_used"] == 25).all()
    assert dev.max() <= bound, dev
    assert rot.max() <= bound, rot
    assert full.max() <= 1.5 * bound  # the simulated F is traction-free: the 9th component is right too
    assert np.abs(s["strain"]).max() > 5e-4  # there was strain to find


def test_remapping_recovers_a_3_degree_rotation(tmp_path):
    sc, scan, ref = simulated(tmp_path, 3, 3, 256, noise=True, rotation_deg=3.0)
    out = process(scan, ref=ref, config=hrebsd_config(), run=CPU, output=tmp_path / "r.h5")
    dev, rot, full, s = errors(out, sc.F)
    assert s["remapped"].all()
    assert dev.max() <= 2e-4 and full.max() <= 2e-4, (dev, full)
    assert s["strain_parameters"]["remapping"] is True
    # without remapping the same shifts give an error ten times larger
    strain(out, config=StrainConfig(material="Ni", remap_threshold_deg=0), overwrite=True, device="cpu")
    dev0, _, _, s0 = errors(out, sc.F)
    assert not s0["remapped"].any()
    assert dev0.max() > 5 * dev.max() and dev0.max() > 5e-4



def real_turned(tmp_path, deg=3.0):
    """kikuchipy's real Ni pattern 4 (60x60, cubic-upsampled to 240x240) as the reference, and a
    3x3 scan of it turned by ``deg`` degrees about nine random axes (``remap_pattern``): truth F
    = each point's rotation, strain zero."""
    from real_patterns import ni_patterns
    from scipy import ndimage

    P = ndimage.zoom(ni_patterns()[4].astype(np.float64), 4, order=3).astype(np.float32)
    pc = np.array([0.5, 0.45, 0.6])
    axes = np.random.default_rng(2).normal(size=(3, 3, 3))
    R = np.stack([[rotation_from_vector(np.deg2rad(deg) * a / np.linalg.norm(a)) for a in row] for row in axes])
    turned = sn.remap_pattern(P, R.reshape(-1, 3, 3), pc=pc).reshape(3, 3, *P.shape).astype(np.float32)
    sc = sim.SimulatedScan(turned, P, R, np.broadcast_to(pc, (3, 3, 3)).copy(), pc)
    return (R, *sc.save(tmp_path, euler_deg=EULER))


# ROIs kept 24 px from the edge: a turned pattern's edge holds the nearest values remap_pattern
# takes where its source left the detector, which no reference holds
REAL_TURNED = {"roi": {"margin": 24, "size": 48}}


def rms_errors(s, R):
    """RMS over points and components of the strain (truth zero) and the rotation (truth log R)."""
    return (np.sqrt((s["strain"].astype(float) ** 2).mean()),
            np.sqrt(((s["rotation"].astype(float) - sn.rotation_log(R)) ** 2).mean()))


def test_remapping_on_a_real_pattern(tmp_path):
    """A real pattern's bands and noise, turned by 3 degrees: remapping finds each point's
    rotation to 1.7e-5 RMS (CPU, this data), 20x closer than the linear fit without it."""
    R, scan, ref = real_turned(tmp_path)
    config = load_config("hrebsd", REAL_TURNED)[0].replace(strain=StrainConfig(material="Ni"))
    out = process(scan, ref=ref, config=config, run=CPU, output=tmp_path / "r.h5")
    s = read_strain(out)
    assert s["remapped"].all() and (s["fit_status"] == sn.FIT_OK).all()
    e, w = rms_errors(s, R)
    assert e < 4e-5 and w < 4e-5, (e, w)
    strain(out, config=StrainConfig(material="Ni", remap_threshold_deg=0), overwrite=True, device="cpu")
    e0, w0 = rms_errors(read_strain(out), R)
    assert e0 > 10 * e and w0 > 5 * w, (e0, w0)


def test_remapping_batches_do_not_change_the_result(tmp_path, monkeypatch):
    """Points remapped and matched two at a time, then fitted together, give what one batch of
    all nine gives: each point's results land on that point."""
    from ebsdxc import hrebsd

    sc, scan, ref = simulated(tmp_path, 3, 3, 256, noise=True, rotation_deg=3.0)
    whole = read_strain(process(scan, ref=ref, config=hrebsd_config(), run=CPU, output=tmp_path / "whole.h5"))
    monkeypatch.setattr(hrebsd, "REMAP_BATCH", 2)
    got = read_strain(process(scan, ref=ref, config=hrebsd_config(), run=CPU, output=tmp_path / "twos.h5"))
    assert whole["remapped"].all() and got["remapped"].all()
    for k in ("strain", "rotation", "deformation_gradient", "fit_residual", "roi_used", "fit_status"):
        np.testing.assert_array_equal(got[k], whole[k], err_msg=k)
    # the points differ from one another, so a result written to the wrong point would show
    assert np.ptp(whole["rotation"][..., 0, 1]) > 1e-4


def test_sample_data_cli(tmp_path, sample_dir):
    out = tmp_path / "s.h5"
    res = run_cli("process", os.path.join(sample_dir, "scan.h5"), "--ref", os.path.join(sample_dir, "ref.tif"),
                  "-o", out, "--material", "Ni", "-q", "--device", "cpu")
    assert res.returncode == 0, res.stderr
    assert "strain at 100/100 points" in res.stdout
    with h5py.File(sample_dir + "/truth.h5", "r") as f:
        F = f["F"][...]
    dev, rot, _, s = errors(out, F)  # the sample's F is not traction-free: deviatoric part only
    assert dev.max() <= 1e-4 and rot.max() <= 1e-4, (dev, rot)
    p = s["strain_parameters"]
    assert p["sources"] == {"sample_tilt": "scan file", "detector_tilt": "scan file", "pattern_centre": "file",
                            "pattern_centre_ref": "reference file", "orientation": "scan file"}
    np.testing.assert_allclose(p["orientation_matrix"], G, atol=1e-12)
    with h5py.File(out, "r") as f:
        g = f["ebsdxc"]
        for name in ("strain", "strain_crystal", "rotation", "rotation_crystal", "deformation_gradient"):
            assert g[name].shape == (10, 10, 3, 3) and "frame" in g[name].attrs
        assert g["pattern_centre"].attrs["convention"] == "bruker"
        np.testing.assert_allclose(g["pattern_centre"][...], f["ebsdxc"]["pattern_centre"][...])
        assert g.attrs["strain_complete"] and json.loads(g["fit_status"].attrs["codes"])["0"] == "ok"
        assert g["fit_residual"].attrs["units"] == "px"
    info = json.loads(run_cli("info", out, "--json").stdout)
    assert info["strain"] == {"complete": True, "material": "Ni", "points_fitted": 100, "points_remapped": 0,
                              "points_flagged": 0}


# ------------------------------------------------------------------------------ ebsdxc strain


@pytest.fixture
def results_without_strain(tmp_path, sample_dir):
    scan = tmp_path / "scan.h5"
    ref = tmp_path / "ref.tif"
    shutil.copy(os.path.join(sample_dir, "scan.h5"), scan)
    shutil.copy(os.path.join(sample_dir, "ref.tif"), ref)
    out = tmp_path / "r.h5"
    assert cli.main(["process", str(scan), "--ref", str(ref), "-o", str(out), "-q", "--device", "cpu"]) == 0
    return scan, ref, out


def test_strain_command_adds_and_refuses_to_overwrite(results_without_strain, capsys):
    scan, ref, out = results_without_strain
    assert cli.main(["strain", str(out), "--material", "Ni", "-q", "--device", "cpu"]) == 0
    first = read_strain(out)["strain"]
    assert "strain at 100/100 points" in capsys.readouterr().out
    res = run_cli("strain", out, "--material", "Al", "-q")
    assert_one_error(res, str(out), "already holds strain results", "--overwrite")
    assert np.array_equal(read_strain(out)["strain"], first, equal_nan=True)  # untouched
    assert cli.main(["strain", str(out), "--material", "Al", "--overwrite", "-q", "--device", "cpu"]) == 0
    s = read_strain(out)
    assert s["strain_parameters"]["material"] == "Al"
    # deviatoric strain barely depends on the stiffness; the volumetric part does
    assert np.nanmax(np.abs(_dev(s["strain"]) - _dev(first))) < 1e-6
    assert np.nanmax(np.abs(np.trace(s["strain"], axis1=2, axis2=3) - np.trace(first, axis1=2, axis2=3))) > 1e-6


def test_strain_command_when_the_scan_moved(results_without_strain):
    scan, ref, out = results_without_strain
    moved = scan.parent / "elsewhere.h5"
    scan.rename(moved)
    res = run_cli("strain", out, "--material", "Ni", "-q")
    assert_one_error(res, str(out), "remapping needs the scan file", "--no-remap")
    assert "strain" not in h5py.File(out, "r")["ebsdxc"]
    # without the scan, the PCs, tilts and orientation must come from options
    res = run_cli("strain", out, "--material", "Ni", "--no-remap", "-q")
    assert_one_error(res, "strain needs the pattern centre", "--pc")
    res = run_cli("strain", out, "--material", "Ni", "--no-remap", "--pc", "0.5,0.45,0.6", "-q")
    assert_one_error(res, "crystal orientation", "--orientation")
    res = run_cli("strain", out, "--material", "Ni", "--no-remap", "--pc", "0.5,0.45,0.6",
                  "--orientation", "160,40,20", "-q")
    assert res.returncode == 0, res.stderr
    assert read_strain(out)["strain_parameters"]["sources"]["pattern_centre"] == "constant"
    res = run_cli("strain", out, "--material", "Ni", "--scan", moved, "--overwrite", "-q")
    assert res.returncode == 0, res.stderr
    assert read_strain(out)["strain_parameters"]["sources"]["pattern_centre"] == "file"


def test_pc_conventions_give_the_same_strain(results_without_strain):
    from ebsdxc.geometry import convert_pc

    _, _, out = results_without_strain
    base = ["--no-remap", "--pc-map", "constant", "--orientation", "160,40,20", "--device", "cpu", "-q"]
    assert cli.main(["strain", str(out), "--material", "Ni", "--pc", "0.5,0.45,0.6", *base]) == 0
    want = read_strain(out)["strain"]
    for conv in ("tsl", "oxford", "emsoft"):
        pc = convert_pc([0.5, 0.45, 0.6], from_convention="bruker", to_convention=conv, shape=(160, 160),
                        pixel_size=160.0)
        args = ["strain", str(out), "--material", "Ni", "--pc", ",".join(map(repr, pc.tolist())),
                "--pc-convention", conv, "--pixel-size", "160", "--overwrite", *base]
        assert cli.main(args) == 0
        np.testing.assert_allclose(read_strain(out)["strain"], want, atol=1e-7)


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("args,words", [
    (["--material", "Ni", "--pc", "1.2,0.45,0.6", "--pc-map", "constant"], ["PCx = 1.2", "outside"]),
    (["--material", "Ni", "--pc-ref", "0.5,0.45,-0.6"], ["PCz", "reference pattern centre"]),
    (["--material", "unobtainium"], ["unknown material 'unobtainium'", "Ni"]),
    (["--pc", "0.5,0.45,0.6"], ["--material"]),
    (["--material", "cubic:100,200,50"], ["positive definite"]),
])
def test_bad_strain_input_one_line_no_output(tmp_path, sample_dir, args, words):
    out = tmp_path / "r.h5"
    res = run_cli("process", os.path.join(sample_dir, "scan.h5"), "--ref", os.path.join(sample_dir, "ref.tif"),
                  "-o", out, "-q", "--device", "cpu", *args)
    assert_one_error(res, *words)
    assert not out.exists()  # checked before the correlation pass: nothing half-written


def test_scan_without_orientation_or_pc(tmp_path):
    sc = sim.simulate_scan(1, 2, shape=(96, 96), counts=None, seed=1)
    scan, ref = sc.save(tmp_path)  # no euler_angles
    res = run_cli("process", scan, "--ref", ref, "--material", "Ni", "-q", "--device", "cpu")
    assert_one_error(res, str(scan), "orientation", "--orientation")
    with h5py.File(scan, "r+") as f:
        del f["patterns"].attrs["pattern_centre"]
    os.remove(ref)
    sc.save(tmp_path, scan_name="unused.h5")  # a reference again, with its PC
    res = run_cli("process", scan, "--ref", ref, "--material", "Ni", "--orientation", "1,2,3", "-q")
    assert_one_error(res, str(scan), "pattern centre", "--pc")


def test_not_a_results_file(tmp_path, sample_dir):
    res = run_cli("strain", os.path.join(sample_dir, "scan.h5"), "--material", "Ni")
    assert_one_error(res, "scan.h5", "not an ebsdxc results file")
    broken = tmp_path / "b.h5"
    with h5py.File(broken, "w") as f:
        g = f.create_group("ebsdxc")
        g.attrs["schema"] = 1
        g.create_dataset("done", data=np.ones((2, 2), bool))
    res = run_cli("strain", broken, "--material", "Ni")
    assert_one_error(res, str(broken), "lacks the metadata")


def test_points_with_too_few_rois_are_flagged(tmp_path):
    sc, scan, ref = simulated(tmp_path, 2, 3, 128, noise=False)
    with h5py.File(scan, "r+") as f:
        p = f["patterns"]
        p[0, 1] = 0.0  # an all-zero pattern: no measurement at all
        p[0, 2, :, :64] = 0.0  # a pattern half blank: every ROI on the left constant
        blank = np.array(p[1, 2])
        blank[:, :100] = blank.mean()  # most of the pattern flat: only the right column of ROIs left
        p[1, 2] = blank
    cfg = load_config("hrebsd")[0].replace(strain=StrainConfig(material="Ni", min_rois=6, min_peak_height=0.5))
    out = process(scan, ref=ref, config=cfg, run=CPU, output=tmp_path / "r.h5")
    s = read_strain(out)
    assert s["fit_status"][0, 1] == sn.FIT_NOT_PROCESSED and s["fit_status"][1, 2] == sn.FIT_TOO_FEW_ROIS
    assert np.isnan(s["strain"][0, 1]).all() and s["rois_used"][0, 1] == 0
    r = read_results(out)
    assert (r["status"][0, 1] == 5).all()  # MISSING_PATTERN, not a constant subregion
    assert (r["status"][0, 2] == 2).sum() >= 6  # the blank half: CONSTANT_TILE
    usable = (r["status"][1, 2] == 0) & (r["peak_height"][1, 2] >= 0.5)
    assert 0 < usable.sum() < 6 and s["rois_used"][1, 2] == 0 and not s["roi_used"][1, 2].any()
    assert (s["fit_status"][[0, 1, 1], [0, 0, 1]] == sn.FIT_OK).all()


def test_recipe_strain_table(tmp_path, sample_dir):
    recipe = tmp_path / "r.toml"
    recipe.write_text('[roi]\ngrid = [4, 4]\n[strain]\nmaterial = "Ni"\nremap_threshold_deg = 0.5\nmin_rois = 6\n')
    cfg = load_config(recipe)[0]
    assert cfg.strain == StrainConfig(material="Ni", remap_threshold_deg=0.5, min_rois=6)
    recipe.write_text('[strain]\nmaterial = "Ni"\npc_map = "sideways"\n')
    with pytest.raises(Exception, match="pc_map"):
        load_config(recipe)
    out = tmp_path / "o.h5"
    recipe.write_text('[strain]\nmaterial = "Cu"\n')
    assert cli.main(["process", os.path.join(sample_dir, "scan.h5"), "--ref", os.path.join(sample_dir, "ref.tif"),
                     "--pipeline", str(recipe), "-o", str(out), "-q", "--device", "cpu"]) == 0
    assert read_strain(out)["strain_parameters"]["material"] == "Cu"


# ------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
def test_gpu_pipeline_strain_equals_cpu(tmp_path, sample_dir):
    outs = {}
    for dev in ("cpu", "cuda"):
        outs[dev] = tmp_path / f"{dev}.h5"
        assert cli.main(["process", os.path.join(sample_dir, "scan.h5"), "--ref", os.path.join(sample_dir, "ref.tif"),
                         "-o", str(outs[dev]), "-q", "--device", dev, "--material", "Ni",
                         "--engine", "fft"]) == 0
    a, b = read_strain(outs["cpu"]), read_strain(outs["cuda"])
    np.testing.assert_allclose(b["strain"], a["strain"], atol=2e-6)
    np.testing.assert_allclose(b["rotation"], a["rotation"], atol=2e-6)


@pytest.mark.gpu
def test_gpu_remapping(tmp_path):
    sc, scan, ref = simulated(tmp_path, 3, 3, 256, noise=True, rotation_deg=3.0)
    out = process(scan, ref=ref, config=hrebsd_config(), run=RunConfig(device="cuda"), output=tmp_path / "r.h5")
    dev, _, full, s = errors(out, sc.F)
    assert s["remapped"].all() and dev.max() <= 2e-4 and full.max() <= 2e-4



@pytest.mark.gpu
def test_gpu_remapping_on_a_real_pattern(tmp_path):
    """The real turned pattern on the GPU: the CPU's strain and rotation, and the same accuracy.
    The GPU's fused engine refines from its float32 map (3.7e-4 px RMS from the CPU's float64,
    tests/run/test_gpu_run.py): about 3e-6 in strain at this detector distance (144 px)."""
    R, scan, ref = real_turned(tmp_path)
    config = load_config("hrebsd", REAL_TURNED)[0].replace(strain=StrainConfig(material="Ni"))
    a = read_strain(process(scan, ref=ref, config=config, run=CPU, output=tmp_path / "cpu.h5"))
    b = read_strain(process(scan, ref=ref, config=config, run=RunConfig(device="cuda"), output=tmp_path / "gpu.h5"))
    assert b["remapped"].all()
    np.testing.assert_array_equal(b["fit_status"], a["fit_status"])
    for k in ("strain", "rotation"):
        d = b[k].astype(float) - a[k]
        rms, worst = np.sqrt((d ** 2).mean()), np.abs(d).max()
        assert rms < 6e-6 and worst < 4e-5, (k, rms, worst)
    e, w = rms_errors(b, R)
    assert e < 4e-5 and w < 4e-5, (e, w)


@pytest.mark.gpu
def test_gpu_remapping_out_of_memory_halves_its_batch(tmp_path, monkeypatch):
    """The device's next allocation in the remapping pass fails (CuPy's OutOfMemoryError, from
    its allocator hook): the 9 points go again as 4 and 5, with one warning line, to the results
    of the run without the fault."""
    import warnings

    import cupy as cp

    from ebsdxc.run.pipeline import Pipeline

    sc, scan, ref = simulated(tmp_path, 3, 3, 256, noise=True, rotation_deg=3.0)
    whole = read_strain(process(scan, ref=ref, config=hrebsd_config(), run=RunConfig(device="cuda"),
                                output=tmp_path / "whole.h5"))
    pool = cp.get_default_memory_pool()
    state = {"armed": False, "raised": 0}

    def malloc(size):
        if state["armed"]:
            state["armed"] = False
            state["raised"] += 1
            raise cp.cuda.memory.OutOfMemoryError(size, pool.total_bytes())
        return pool.malloc(size)

    match_pairs = Pipeline.match_pairs

    def armed_once(self, references, patterns):
        state["armed"] = state["raised"] == 0
        return match_pairs(self, references, patterns)

    monkeypatch.setattr(Pipeline, "match_pairs", armed_once)
    cp.cuda.set_allocator(malloc)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = read_strain(process(scan, ref=ref, config=hrebsd_config(), run=RunConfig(device="cuda"),
                                      output=tmp_path / "tight.h5"))
    finally:
        cp.cuda.set_allocator(pool.malloc)
    lines = [str(w.message) for w in caught if "remapping: out of memory" in str(w.message)]
    assert state["raised"] == 1 and len(lines) == 1, lines
    assert "with 9 points at a time" in lines[0] and "continuing with 4" in lines[0] and "\n" not in lines[0]
    assert got["remapped"].all()
    np.testing.assert_array_equal(got["fit_status"], whole["fit_status"])
    for k in ("strain", "rotation"):
        np.testing.assert_allclose(got[k], whole[k], rtol=0, atol=1e-9)


def test_fit_chunks_do_not_change_results(results_without_strain, monkeypatch):
    from ebsdxc import hrebsd

    _, _, out = results_without_strain
    assert cli.main(["strain", str(out), "--material", "Ni", "-q", "--device", "cpu"]) == 0
    whole = read_strain(out)
    monkeypatch.setattr(hrebsd, "FIT_POINTS", 25)  # 10 columns: chunks of 2 rows, 5 chunks
    assert cli.main(["strain", str(out), "--material", "Ni", "-q", "--device", "cpu", "--overwrite"]) == 0
    parts = read_strain(out)
    for k in ("strain", "rotation", "fit_residual", "roi_used", "pattern_centre", "fit_status"):
        np.testing.assert_array_equal(parts[k], whole[k], err_msg=k)


@pytest.mark.parametrize("pc_map", ["plane", "extrapolate"])
def test_pc_plane_and_extrapolation_reproduce_the_sample_pcs(results_without_strain, sample_truth, pc_map):
    # The sample's PCs move with the beam exactly as kikuchipy extrapolates them from the map
    # centre (step 25 um, detector pixel 160 um, tilt 70): a fitted plane and the extrapolation
    # from the reference PC must both give them back.
    _, _, out = results_without_strain
    args = ["strain", str(out), "--material", "Ni", "--pc-map", pc_map, "--no-remap", "-q", "--device", "cpu"]
    if pc_map == "extrapolate":
        args += ["--pc", ",".join(map(str, sample_truth["pc_ref"]))]
    assert cli.main(args) == 0
    s = read_strain(out)
    np.testing.assert_allclose(s["pattern_centre"], sample_truth["pc"], atol=1e-12)
    assert s["strain_parameters"]["sources"]["pattern_centre"] == pc_map
    res = run_cli("strain", out, "--material", "Ni", "--pc-map", "extrapolate", "--overwrite", "-q")
    assert_one_error(res, "--pc-map extrapolate needs --pc")
