"""The ``ebsdxc`` command line, run as a real console script on real files.

Every bad input must give exit status 2, exactly one line on stderr starting
``ebsdxc: error:`` that names the offending file, and must leave no output file behind
(or an existing one untouched). Success paths check the exit status, stdout and the
results file.
"""

from __future__ import annotations

import json
import os
import shutil

import h5py
import numpy as np
import pytest
import tifffile
from clitools import assert_one_error, run_cli  # noqa: F401
from scipy.ndimage import gaussian_filter

from ebsdxc import cli
from ebsdxc import status as st
from ebsdxc.progress import Progress

SMALL = ["--roi-grid", "3x3", "--roi-size", "32", "--device", "cpu"]


def fingerprint(path):
    s = os.stat(path)
    with open(path, "rb") as f:
        return f.read(), s.st_mtime_ns, s.st_size


def results_files(folder):
    return sorted(p for p in os.listdir(folder) if p.endswith(".ebsdxc.h5"))


@pytest.fixture
def scan(sample_dir, tmp_path):
    """A copy of the sample scan in tmp_path (so default outputs land there); same size and
    modification time as the original, so results made from either can be resumed."""
    p = tmp_path / "scan.h5"
    shutil.copy2(os.path.join(sample_dir, "scan.h5"), p)
    return p


@pytest.fixture
def ref(sample_dir):
    return os.path.join(sample_dir, "ref.tif")


@pytest.fixture(scope="module")
def made_result(tmp_path_factory, request):
    """A complete results file of the sample scan with the SMALL layout (made once)."""
    sample_dir = request.getfixturevalue("sample_dir")
    d = tmp_path_factory.mktemp("made")
    out = d / "made.ebsdxc.h5"
    rc = cli.main(["process", os.path.join(sample_dir, "scan.h5"), "--ref",
                   os.path.join(sample_dir, "ref.tif"), "-o", str(out), "-q", *SMALL])
    assert rc == 0
    return out


@pytest.fixture
def existing(made_result, tmp_path):
    p = tmp_path / "out.h5"
    shutil.copyfile(made_result, p)
    return p


def read_group(path):
    with h5py.File(path, "r") as f:
        g = f["ebsdxc"]
        data = {k: g[k][...] for k in ("displacement", "peak_height", "status", "done",
                                        "roi/centers", "roi/size")}
        attrs = {k: g.attrs[k] for k in g.attrs}
    return data, attrs


# ----------------------------------------------------------------------------- bad inputs


def test_missing_scan(tmp_path, ref):
    missing = tmp_path / "nope.h5"
    out = tmp_path / "out.h5"
    res = run_cli("process", missing, "--ref", ref, "-o", out, *SMALL)
    assert_one_error(res, missing)
    assert not out.exists()
    assert results_files(tmp_path) == []


def test_scan_that_is_not_hdf5(tmp_path, ref):
    bad = tmp_path / "scan.h5"
    bad.write_text("this is not an HDF5 file\n")
    out = tmp_path / "out.h5"
    res = run_cli("process", bad, "--ref", ref, "-o", out, *SMALL)
    assert_one_error(res, bad)
    assert not out.exists()
    res = run_cli("process", bad, "--ref", ref, *SMALL)  # default output
    assert_one_error(res, bad)
    assert results_files(tmp_path) == []


def test_hdf5_without_pattern_dataset(tmp_path, ref):
    bad = tmp_path / "nopatterns.h5"
    with h5py.File(bad, "w") as f:
        f["image"] = np.zeros((160, 160), np.uint16)  # 2-D: not a stack of patterns
        f["x"] = np.arange(10)
    out = tmp_path / "out.h5"
    line = assert_one_error(run_cli("process", bad, "--ref", ref, "-o", out, *SMALL), bad)
    assert "no pattern dataset" in line
    assert not out.exists()


def test_two_candidate_datasets_then_dataset_picks_one(tmp_path, sample_dir, ref):
    with h5py.File(os.path.join(sample_dir, "scan.h5"), "r") as f:
        pats = f["patterns"][:1, :3]  # (1, 3, 160, 160)
    two = tmp_path / "two.h5"
    with h5py.File(two, "w") as f:
        f["first/patterns"] = pats
        f["second/patterns"] = pats[:, ::-1]
    out = tmp_path / "out.h5"
    line = assert_one_error(run_cli("process", two, "--ref", ref, "-o", out, *SMALL), two)
    assert "/first/patterns" in line and "/second/patterns" in line
    assert "--dataset" in line
    assert not out.exists()

    res = run_cli("process", two, "--ref", ref, "-o", out, "--dataset", "/second/patterns", "-q",
                  *SMALL)
    assert res.returncode == 0, res.stderr
    data, attrs = read_group(out)
    assert bool(attrs["complete"])
    assert json.loads(attrs["parameters"])["dataset"] == "/second/patterns"
    assert data["done"].shape == (1, 3)


def test_reference_of_other_shape(tmp_path, scan):
    small_ref = tmp_path / "small_ref.tif"
    tifffile.imwrite(small_ref, np.full((100, 120), 7, np.uint16) + np.arange(120, dtype=np.uint16))
    out = tmp_path / "out.h5"
    line = assert_one_error(run_cli("process", scan, "--ref", small_ref, "-o", out, *SMALL),
                            small_ref)
    assert "120x100" in line and "160x160" in line
    assert not out.exists()
    assert results_files(tmp_path) == []


def test_roi_larger_than_pattern(tmp_path, scan, ref):
    """The patterns (160x160) are the offending file's content: the scan must be named."""
    out = tmp_path / "out.h5"
    res = run_cli("process", scan, "--ref", ref, "-o", out, "--roi-grid", "3x3", "--roi-size", "200",
                  "--device", "cpu")
    assert_one_error(res, scan)
    assert not out.exists()


def test_roi_centres_near_the_edge(tmp_path, scan, ref):
    centres = tmp_path / "centres.txt"
    centres.write_text("# x y\n79.5 79.5\n40 40\n3 80\n")  # a 32 px ROI at x=3 leaves the pattern
    out = tmp_path / "out.h5"
    res = run_cli("process", scan, "--ref", ref, "-o", out, "--roi-centres", centres,
                  "--roi-size", "32", "--device", "cpu")
    line = assert_one_error(res)
    # The message names a file: the centres file (where the bad point is) or the scan
    # (whose pattern the ROI leaves).
    assert str(centres) in line or str(scan) in line, line
    assert "outside" in line
    assert not out.exists()


def test_output_exists_is_refused_and_untouched(tmp_path, scan, ref, existing):
    before = fingerprint(existing)
    res = run_cli("process", scan, "--ref", ref, "-o", existing, *SMALL)
    line = assert_one_error(res, existing)
    assert "--overwrite" in line and "--resume" in line
    assert fingerprint(existing) == before


def test_overwrite_replaces(tmp_path, scan, ref, existing):
    before = fingerprint(existing)
    res = run_cli("process", scan, "--ref", ref, "-o", existing, "--overwrite", "-q",
                  "--roi-grid", "2x2", "--roi-size", "32", "--device", "cpu")
    assert res.returncode == 0, res.stderr
    assert fingerprint(existing) != before
    data, attrs = read_group(existing)
    assert data["status"].shape == (10, 10, 4)  # the new layout, not the old 3x3
    assert bool(attrs["complete"])


def test_overwrite_refuses_a_file_that_is_not_a_results_file(tmp_path, scan, ref):
    precious = tmp_path / "precious.h5"
    with h5py.File(precious, "w") as f:
        f["data"] = np.arange(5)
    before = fingerprint(precious)
    res = run_cli("process", scan, "--ref", ref, "-o", precious, "--overwrite", *SMALL)
    assert_one_error(res, precious)
    assert fingerprint(precious) == before


def test_resume_on_complete_file_is_harmless(tmp_path, scan, ref, existing):
    data0, attrs0 = read_group(existing)
    res = run_cli("process", scan, "--ref", ref, "-o", existing, "--resume", "-q", *SMALL)
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) == 1
    data1, attrs1 = read_group(existing)
    for k in data0:
        assert data0[k].tobytes() == data1[k].tobytes(), k
    assert bool(attrs1["complete"])
    for k in ("created", "parameters", "inputs", "schema", "command_line"):
        assert attrs0[k] == attrs1[k], k


def test_resume_with_other_parameters(tmp_path, scan, ref, existing):
    before = fingerprint(existing)
    res = run_cli("process", scan, "--ref", ref, "-o", existing, "--resume",
                  "--roi-grid", "2x2", "--roi-size", "32", "--device", "cpu")
    line = assert_one_error(res, existing)
    assert "roi" in line
    after = fingerprint(existing)
    assert after[0] == before[0], "a refused --resume changed the file's bytes"
    assert after[1:] == before[1:], "a refused --resume touched the file (modification time)"


def test_resume_without_output(tmp_path, scan, ref):
    out = tmp_path / "out.h5"
    assert_one_error(run_cli("process", scan, "--ref", ref, "-o", out, "--resume", *SMALL), out)
    assert not out.exists()


@pytest.mark.parametrize("flag", [[], ["--overwrite"]])
def test_output_equal_to_scan(tmp_path, scan, ref, flag):
    before = fingerprint(scan)
    res = run_cli("process", scan, "--ref", ref, "-o", scan, *flag, *SMALL)
    assert_one_error(res, scan)
    assert fingerprint(scan) == before
    # the same file spelled relatively
    res = run_cli("process", "scan.h5", "--ref", ref, "-o", "./scan.h5", *flag, *SMALL, cwd=tmp_path)
    assert_one_error(res, "scan.h5")
    assert fingerprint(scan) == before
    assert results_files(tmp_path) == []


def test_unknown_recipe_name(tmp_path, scan, ref):
    out = tmp_path / "out.h5"
    line = assert_one_error(run_cli("process", scan, "--ref", ref, "-o", out, "--pipeline",
                                    "no-such-recipe", "--device", "cpu"), "no-such-recipe")
    assert "paper-86roi-96" in line  # lists the shipped ones
    assert not out.exists()


def test_recipe_with_unknown_key(tmp_path, scan, ref):
    recipe = tmp_path / "mine.toml"
    recipe.write_text("[roi]\ngrid = [3, 3]\nsise = 32\n")
    out = tmp_path / "out.h5"
    line = assert_one_error(run_cli("process", scan, "--ref", ref, "-o", out, "--pipeline", recipe,
                                    "--device", "cpu"), recipe)
    assert "sise" in line
    assert not out.exists()


def test_ref_and_ref_index_both(tmp_path, scan, ref):
    out = tmp_path / "out.h5"
    res = run_cli("process", scan, "--ref", ref, "--ref-index", "0", "-o", out, *SMALL)
    assert_one_error(res, "--ref")
    assert not out.exists()


def test_ref_and_ref_index_neither(tmp_path, scan):
    out = tmp_path / "out.h5"
    line = assert_one_error(run_cli("process", scan, "-o", out, *SMALL))
    assert "--ref" in line and "--ref-index" in line
    assert not out.exists()
    assert results_files(tmp_path) == []


# ----------------------------------------------------------------------------- success paths


def test_process_sample_data(tmp_path, sample_dir):
    out = tmp_path / "OUT.h5"
    res = run_cli("process", "sample_data/scan.h5", "--ref", "sample_data/ref.tif", "-o", out,
                  "--device", "cpu", cwd=os.path.dirname(sample_dir))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1, res.stdout
    assert str(out) in lines[0] and "100/100 points" in lines[0] and "25 ROIs" in lines[0]
    data, attrs = read_group(out)
    assert bool(attrs["complete"]) and data["done"].all()
    assert (data["status"] == st.OK).all()
    assert attrs["command_line"].startswith("ebsdxc process sample_data/scan.h5")


def test_default_output_beside_scan(tmp_path, scan, ref):
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    res = run_cli("process", scan, "--ref", ref, "-q", *SMALL, cwd=elsewhere)
    assert res.returncode == 0, res.stderr
    expected = tmp_path / "scan.ebsdxc.h5"
    assert expected.exists()
    assert str(expected) in res.stdout
    assert os.listdir(elsewhere) == []


def test_ref_index(tmp_path, scan):
    out = tmp_path / "out.h5"
    res = run_cli("process", scan, "--ref-index", "0,0", "-o", out, "-q", *SMALL)
    assert res.returncode == 0, res.stderr
    data, attrs = read_group(out)
    assert json.loads(attrs["parameters"])["reference_index"] == [0, 0]
    assert (data["status"] == st.OK).all()
    # the reference point against itself: zero shift
    np.testing.assert_allclose(data["displacement"][0, 0], 0, atol=1e-3)
    assert np.all(data["peak_height"][0, 0] > 0.999)


def test_info_scan(scan):
    res = run_cli("info", scan)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "format: hdf5" in out
    assert "rows: 10" in out and "cols: 10" in out
    assert "pattern_shape: [160, 160]" in out


def test_info_results(made_result):
    res = run_cli("info", made_result)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "format: ebsdxc results" in out
    assert "grid: [10, 10]" in out
    assert "complete: True" in out
    assert "points_done: 100" in out


def test_info_json(scan, made_result):
    d = json.loads(run_cli("info", "--json", scan).stdout)
    assert d["format"] == "hdf5" and d["grid"]["rows"] == 10 and d["grid"]["cols"] == 10
    d = json.loads(run_cli("info", "--json", made_result).stdout)
    assert d["format"] == "ebsdxc results"
    assert d["grid"] == [10, 10] and d["complete"] is True and d["n_roi"] == 9


def _strict_json(text):
    def bad(c):
        raise ValueError(f"{c} is not JSON")
    return json.loads(text, parse_constant=bad)


def test_info_json_of_run_interrupted_before_first_batch_is_strict_json(tmp_path, scan, ref):
    """A run stopped before any batch was written: ``info --json`` must still be valid JSON
    (RFC 8259 has no NaN), and say incomplete."""
    from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
    from ebsdxc.run import process

    class StopAtStart(Progress):
        def start(self, total, *, done=0, desc=""):
            raise KeyboardInterrupt

    out = tmp_path / "stopped.h5"
    cfg = ProcessConfig(roi=RoiConfig(grid=(3, 3), size=32))
    with pytest.raises(KeyboardInterrupt):
        process(str(scan), ref=ref, output=str(out), config=cfg, run=RunConfig(device="cpu"), progress=StopAtStart())
    res = run_cli("info", "--json", out)
    assert res.returncode == 0, res.stderr
    d = _strict_json(res.stdout)
    assert d["complete"] is False and d["points_done"] == 0
    res = run_cli("info", out)
    assert "complete: False" in res.stdout


def test_recipes_lists_paper_layout():
    res = run_cli("recipes")
    assert res.returncode == 0, res.stderr
    names = [line.split()[0] for line in res.stdout.splitlines() if line.strip()]
    assert "paper-86roi-96" in names
    assert {"hrebsd", "dic"} <= set(names)


def test_paper_pipeline_on_256_scan(tmp_path):
    rng = np.random.default_rng(7)
    base = gaussian_filter(rng.random((300, 300)), 3.0)
    base = (base - base.min()) / np.ptp(base)
    shifts = [(0, 0), (1, 2), (-2, 1)]  # (dy, dx): content moves right/down by dx/dy
    pats = np.stack([np.roll(base, s, axis=(0, 1))[20:276, 20:276] for s in shifts])
    pats = (pats * 4000 + 500).astype(np.uint16)[None]  # (1, 3, 256, 256)
    scan = tmp_path / "synthetic.h5"
    with h5py.File(scan, "w") as f:
        f["patterns"] = pats
    ref = tmp_path / "ref.tif"
    tifffile.imwrite(ref, pats[0, 0])
    res = run_cli("process", scan, "--ref", ref, "--pipeline", "paper-86roi-96", "--device", "cpu",
                  "-q")
    assert res.returncode == 0, res.stderr
    out = tmp_path / "synthetic.ebsdxc.h5"
    data, attrs = read_group(out)
    assert data["roi/centers"].shape == (86, 2)
    assert data["roi/size"].tolist() == [96, 96]
    assert data["displacement"].shape == (1, 3, 86, 2)
    assert (data["status"] == st.OK).all()
    params = json.loads(attrs["parameters"])
    assert params["roi"]["size"] == 96 and params["roi"]["drop_corners"] is True
    for k, (dy, dx) in enumerate(shifts):
        np.testing.assert_allclose(data["displacement"][0, k, :, 0], dx, atol=0.05)
        np.testing.assert_allclose(data["displacement"][0, k, :, 1], dy, atol=0.05)


# ----------------------------------------------------------------------------- in-process main


def test_main_records_its_own_argv(tmp_path, scan, ref):
    """``main(argv)`` called from Python (notebooks, tests) must store *that* command line,
    not the host program's ``sys.argv``."""
    out = tmp_path / "inproc.h5"
    argv = ["process", str(scan), "--ref", ref, "-o", str(out), "-q", *SMALL]
    assert cli.main(argv) == 0
    _, attrs = read_group(out)
    cl = attrs["command_line"]
    assert cl.startswith("ebsdxc process"), cl
    assert str(out) in cl and "--roi-grid 3x3" in cl, cl


def test_main_keyboard_interrupt_returns_130_then_resume(tmp_path, scan, ref, monkeypatch, capsys):
    import ebsdxc.progress as progress_mod

    class Interrupting(Progress):
        def update(self, n):
            raise KeyboardInterrupt

    out = tmp_path / "int.h5"
    monkeypatch.setattr(progress_mod, "NullProgress", Interrupting)
    argv = ["process", str(scan), "--ref", ref, "-o", str(out), "-q", "--batch", "7", *SMALL]
    assert cli.main(argv) == 130
    err = capsys.readouterr().err
    assert "--resume" in err
    data, attrs = read_group(out)
    assert not bool(attrs["complete"])
    assert 0 < data["done"].sum() < 100

    monkeypatch.undo()
    assert cli.main(argv + ["--resume"]) == 0
    data, attrs = read_group(out)
    assert bool(attrs["complete"]) and data["done"].all()
    assert (data["status"] == st.OK).all()


def test_direct_engine_on_the_cpu_is_one_clear_error(tmp_path, scan, ref):
    out = tmp_path / "direct.h5"
    res = run_cli("process", scan, "--ref", ref, "-o", out, "--device", "cpu", "--engine", "direct", *SMALL)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "direct engine" in res.stderr and "GPU" in res.stderr
    assert not out.exists()


@pytest.mark.parametrize("flags,named", [(["--precision", "bf16"], "--precision 'bf16' needs the 'tensor' engine"),
                                         (["--peak-precision", "fp64"], "--peak-precision 'fp64'"),
                                         (["--engine", "tensor", "--max-shift", "8", "--subpixel", "quadratic"],
                                          "tensor engine")])
def test_tensor_options_on_the_cpu_are_one_clear_error(tmp_path, scan, ref, flags, named):
    out = tmp_path / "t.h5"
    res = run_cli("process", scan, "--ref", ref, "-o", out, "--device", "cpu", *flags, *SMALL)
    assert_one_error(res, named)
    assert not out.exists()


def test_process_kikuchipy_h5ebsd_end_to_end(tmp_path):
    """A real (measured) Ni scan in kikuchipy's h5ebsd format, through the CLI: the grid comes
    from its header and the reference point matches itself exactly."""
    import importlib.util

    spec = importlib.util.find_spec("kikuchipy")
    if spec is None:
        pytest.skip("kikuchipy is not installed")
    src = os.path.join(os.path.dirname(spec.origin), "data", "kikuchipy_h5ebsd", "patterns.h5")
    out = tmp_path / "ni.h5"
    res = run_cli("process", src, "--ref-index", "1,1", "-o", out, "--roi-grid", "3x3", "--roi-size", "24",
                  "--max-shift", "6", "--device", "cpu", "-q")
    assert res.returncode == 0, res.stderr
    import h5py

    with h5py.File(out, "r") as f:
        g = f["ebsdxc"]
        assert g["displacement"].shape == (3, 3, 9, 2) and g.attrs["complete"]
        np.testing.assert_allclose(g["displacement"][1, 1], 0.0, atol=1e-4)  # float32 spectra
        np.testing.assert_allclose(g["peak_height"][1, 1], 1.0, atol=1e-5)
        assert (g["status"][...] == 0).mean() > 0.8


@pytest.mark.parametrize("opts,check", [
    (["--dynamic-background", "10"], ("preprocess", "dynamic_background_sigma", 10.0)),
    (["--bandpass", "1", "25"], ("preprocess", "bandpass", [1.0, 25.0])),
    (["--static-background", "mean"], ("preprocess", "static_background", "mean")),
    (["--roi-ring", "6", "--roi-size", "32"], ("roi", "layout", "ring")),
    (["--pipeline", "hrebsd", "--roi-size", "48"], ("correlation", "max_shift", 24)),
    (["--pipeline", "fast-cpu", "--roi-grid", "3x3", "--roi-size", "64", "--max-shift", "12"],
     ("correlation", "circular", True)),
    (["--max-shift", "5", "--subpixel", "upsampled"], ("correlation", "subpixel", "upsampled")),
], ids=["dynamic", "bandpass", "static-mean", "ring", "hrebsd", "fast-cpu", "window-upsampled"])
def test_processing_options_end_to_end(tmp_path, scan, ref, sample_truth, opts, check):
    """Each option reaches the results file's parameters, and the shifts stay close to the truth."""
    from ebsdxc import simulate as sim

    out = tmp_path / "o.h5"
    res = run_cli("process", scan, "--ref", ref, "-o", out, "--device", "cpu", "-q", *opts)
    assert res.returncode == 0, res.stderr
    data, attrs = read_group(out)
    params = json.loads(attrs["parameters"])
    table, key, value = check
    assert (params[table] if key is None else params[table][key]) == value
    truth = sim.displacement_truth(data["roi/centers"], shape=sample_truth["shape"], pc_ref=sample_truth["pc_ref"],
                                   pc=sample_truth["pc"], F=sample_truth["F"])
    ok = data["status"] == 0
    assert ok.mean() > 0.9
    if value == "mean":
        # This simulated scan is one grain: its mean pattern is nearly each pattern, so
        # subtracting it removes the bands themselves (real multi-grain scans average them
        # out). Only that it ran and was recorded is checked here.
        return
    err = (data["displacement"] - truth)[ok]
    assert np.sqrt(np.mean(err ** 2)) < 0.03, np.sqrt(np.mean(err ** 2))


def test_engine_option_that_does_not_fit_is_one_clear_error(tmp_path, scan, ref):
    res = run_cli("process", scan, "--ref", ref, "-o", tmp_path / "o.h5", "--device", "cpu",
                  "--pipeline", "fast-cpu", "--roi-grid", "3x3", "--roi-size", "48")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "max_shift" in res.stderr and not (tmp_path / "o.h5").exists()


def test_static_background_from_a_file(tmp_path, scan, ref, sample_truth):
    import tifffile

    from ebsdxc import simulate as sim

    H, W = sample_truth["shape"]
    yy, xx = np.mgrid[0:H, 0:W]
    bg = (50 + 20 * np.exp(-((xx - W / 2) ** 2 + (yy - H / 2) ** 2) / (2 * 60.0 ** 2))).astype(np.float32)
    bg_path = tmp_path / "bg.tif"
    tifffile.imwrite(bg_path, bg)
    out = tmp_path / "o.h5"
    res = run_cli("process", scan, "--ref", ref, "-o", out, "--device", "cpu", "-q",
                  "--static-background", bg_path)
    assert res.returncode == 0, res.stderr
    data, attrs = read_group(out)
    assert json.loads(attrs["parameters"])["preprocess"]["static_background"] == str(bg_path)
    truth = sim.displacement_truth(data["roi/centers"], shape=(H, W), pc_ref=sample_truth["pc_ref"],
                                   pc=sample_truth["pc"], F=sample_truth["F"])
    assert np.sqrt(np.nanmean((data["displacement"] - truth) ** 2)) < 0.03
    # a background of the wrong size is one clear error naming it
    tifffile.imwrite(tmp_path / "small.tif", bg[:50, :50])
    res = run_cli("process", scan, "--ref", ref, "-o", tmp_path / "o2.h5", "--device", "cpu",
                  "--static-background", tmp_path / "small.tif")
    assert res.returncode == 2 and "small.tif" in res.stderr and res.stderr.count("\n") == 1
