"""Every scan format through the command line, on real files.

The scans are the samples that ship with kikuchipy (kikuchipy h5ebsd, EDAX h5, .up1/.up2,
Oxford .ebsp, EMsoft h5), the Bruker h5 and Oxford h5oina files its dummy-file generators
write, and an image stack of TIFFs cut from its Ni sample. Each is copied into a temporary
folder first: nothing is written beside kikuchipy's installed files.

``ebsdxc process FILE --ref-index 0`` must run to the end with the grid the reader reports,
flag ``MISSING_PATTERN`` exactly where the reader has no pattern, and match the reference
point to itself; ``ebsdxc info FILE`` must name the format and the grid. Then the options
that choose how a scan is read (``--format``, ``--grid``, ``--static-background file``)
and the CLI's handling of warnings and of a closed stdout.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest

from ebsdxc import status as st
from ebsdxc.io import open_scan

kp = pytest.importorskip("kikuchipy")

KP_DATA = Path(importlib.util.find_spec("kikuchipy").origin).parent / "data"

# sample key -> file in kikuchipy's data folder (None: written by the fixture)
SHIPPED = {
    "kikuchipy_h5ebsd": "kikuchipy_h5ebsd/patterns.h5",
    "edax_h5": "edax_h5ebsd/patterns.h5",
    "edax_up1": "edax_binary/edax_binary.up1",
    "edax_up2": "edax_binary/edax_binary.up2",
    "oxford_ebsp": "oxford_binary/patterns.ebsp",
    "emsoft_sim": "emsoft_ebsd/simulated_ebsd.h5",
    "emsoft_ni": "emsoft_ebsd/EBSD_TEST_Ni.h5",
}

# case -> (sample key, reader NAME, extra options). The default ROI layout (5 x 5 ROIs)
# fits every pattern size here (10 x 10 px EMsoft patterns included): no case needs options
# beyond --grid where the file records no grid.
CASES = {
    "kikuchipy_h5ebsd": ("kikuchipy_h5ebsd", "h5ebsd", []),
    "edax_h5": ("edax_h5", "edax_h5", []),
    "edax_up1": ("edax_up1", "edax_binary", []),
    "edax_up2": ("edax_up2", "edax_binary", []),  # hexagonal grid: one padding slot
    "oxford_ebsp": ("oxford_ebsp", "oxford_binary", []),
    "emsoft_sim": ("emsoft_sim", "emsoft_h5", []),
    "emsoft_ni": ("emsoft_ni", "emsoft_h5", []),
    "bruker_h5": ("bruker", "bruker_h5", []),
    "bruker_h5_roi": ("bruker_roi", "bruker_h5", []),
    "oxford_h5oina": ("oxford7", "oxford_h5oina", []),
    "oxford_h5oina_v6": ("oxford6", "oxford_h5oina", []),
    "image_stack": ("stack", "image_stack", []),
    "image_stack_glob": ("stack_glob", "image_stack", ["--grid", "2x3"]),
    "image_stack_interrupted": ("stack", "image_stack", ["--grid", "3x3"]),  # 6 files, 9 points
}

N_STACK = 6


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ebsdxc", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=300, check=False)


def error_line(res, *names, warnings_allowed=False):
    """Exit 2 and one ``ebsdxc: error:`` line on stderr naming ``names``; other stderr lines
    only where ``warnings_allowed``, and then only ``ebsdxc: warning:`` lines."""
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.splitlines()
    if warnings_allowed:
        assert all(x.startswith("ebsdxc: warning:") for x in lines[:-1]), res.stderr
    else:
        assert len(lines) == 1, f"expected one error line, got:\n{res.stderr}"
    line = lines[-1]
    assert line.startswith("ebsdxc: error:"), line
    for n in names:
        assert str(n) in line, f"{n!r} not named in: {line}"
    assert res.stdout == ""
    return line


def no_traceback(res):
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr, res.stderr


def _copy(src, dst: Path) -> Path:
    shutil.copy(src, dst)
    os.chmod(dst, 0o644)  # the installed samples may be read-only
    return dst


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """sample key -> path of a copy (or a freshly written file) in a temporary folder."""
    from kikuchipy.data._dummy_files.bruker_h5ebsd import (
        create_dummy_bruker_h5ebsd_file,
        create_dummy_bruker_h5ebsd_roi_file,
    )
    from kikuchipy.data._dummy_files.oxford_h5ebsd import (
        create_dummy_oxford_h5ebsd_file,
    )

    d = tmp_path_factory.mktemp("samples")
    out = {}
    for key, rel in SHIPPED.items():
        sub = d / key  # kikuchipy's samples share file names
        sub.mkdir()
        out[key] = str(_copy(KP_DATA / rel, sub / Path(rel).name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        create_dummy_bruker_h5ebsd_file(d / "bruker.h5")
        create_dummy_bruker_h5ebsd_roi_file(d / "bruker_roi.h5")
        create_dummy_oxford_h5ebsd_file(d / "oxford7.h5oina", version="7.0")
        create_dummy_oxford_h5ebsd_file(d / "oxford6.h5oina", version="6.0")
    out.update(bruker=str(d / "bruker.h5"), bruker_roi=str(d / "bruker_roi.h5"),
               oxford7=str(d / "oxford7.h5oina"), oxford6=str(d / "oxford6.h5oina"))

    import tifffile

    with h5py.File(out["kikuchipy_h5ebsd"], "r") as f:
        pats = f["Scan 1/EBSD/Data/patterns"][:N_STACK]
    stack = d / "stack"
    stack.mkdir()
    for i, p in enumerate(pats):
        tifffile.imwrite(stack / f"frame_{i + 1}.tif", p)  # frame_10 would sort after frame_9
    (stack / "notes.txt").write_text("not an image: ignored\n")
    out["stack"] = str(stack)
    out["stack_glob"] = str(stack / "frame_*.tif")
    return out


def read_results(path):
    with h5py.File(path, "r") as f:
        g = f["ebsdxc"]
        data = {k: g[k][...] for k in ("displacement", "peak_height", "status", "done")}
        attrs = {k: g.attrs[k] for k in g.attrs}
    return data, attrs


def grid_option(opts):
    return opts[opts.index("--grid") + 1] if "--grid" in opts else None


def expected_missing(path, grid_shape=None):
    """(rows, cols) bool: where the runner must flag MISSING_PATTERN (the reader's ``present``
    is False, or the stored pattern is all zeros), with the reader's grid."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with open_scan(path, grid_shape=grid_shape) as src:
            present = np.ones((src.grid.rows, src.grid.cols), bool) if src.present is None else src.present
            pats = src.read(0, src.grid.size)
            zero = ~pats.reshape(src.grid.size, -1).any(axis=1).reshape(present.shape)
            return src.grid, present, ~present | zero


@pytest.mark.parametrize("case", list(CASES))
def test_process_every_format(case, samples, tmp_path):
    key, name, opts = CASES[case]
    path = samples[key]
    grid, present, missing = expected_missing(path, grid_option(opts))
    out = tmp_path / "out.h5"
    res = run_cli("process", path, "--ref-index", "0", "-o", out, "--device", "cpu", "-q", *opts)
    assert res.returncode == 0, res.stderr
    no_traceback(res)
    assert all(x.startswith("ebsdxc: warning:") for x in res.stderr.splitlines()), res.stderr
    assert str(out) in res.stdout
    data, attrs = read_results(out)
    assert data["done"].shape == (grid.rows, grid.cols)
    assert data["status"].shape[:2] == (grid.rows, grid.cols)
    assert str(attrs["grid_kind"]) == grid.kind
    assert str(attrs["scan_format"]) == name
    assert data["done"].all() and bool(attrs["complete"])
    flagged = data["status"] == st.MISSING_PATTERN
    np.testing.assert_array_equal(flagged.all(axis=-1), missing)  # all ROIs of a missing point
    np.testing.assert_array_equal(flagged.any(axis=-1), missing)  # and none elsewhere
    if case == "emsoft_sim":
        # kikuchipy's simulated_ebsd.h5 holds only zeros: every point is flagged, none matched.
        assert missing.all() and (~present).sum() == 0
        return
    if case == "edax_up2":
        assert grid.kind == "hexagonal" and not present[1, -1]
    if case == "image_stack_interrupted":
        assert (~present).sum() == 9 - N_STACK
    assert not missing[0, 0]
    np.testing.assert_array_less(np.abs(data["displacement"][0, 0]), 0.05)
    assert (data["peak_height"][0, 0] > 0.99).all(), data["peak_height"][0, 0]


@pytest.mark.parametrize("case", list(CASES))
def test_info_every_format(case, samples):
    key, name, opts = CASES[case]
    path = samples[key]
    grid_opts = ["--grid", grid_option(opts)] if grid_option(opts) else []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with open_scan(path, grid_shape=grid_option(opts)) as src:
            d = src.describe()
            has_bg = src.static_background() is not None
    res = run_cli("info", path, *grid_opts)
    assert res.returncode == 0, res.stderr
    no_traceback(res)
    out = res.stdout
    assert f"format: {name}\n" in out
    assert f"rows: {d['grid']['rows']}\n" in out and f"cols: {d['grid']['cols']}\n" in out
    assert f"kind: {d['grid']['kind']}\n" in out and f"points: {d['grid']['points']}\n" in out
    assert f"pattern_shape: {list(d['pattern_shape'])}\n" in out and f"dtype: {d['dtype']}\n" in out
    assert f"static_background: {has_bg}\n" in out
    if "missing_points" in d:
        assert f"missing_points: {d['missing_points']}\n" in out
    js = json.loads(run_cli("info", "--json", path, *grid_opts).stdout)
    assert js["format"] == name and js["grid"]["rows"] == d["grid"]["rows"]


def test_vendor_backgrounds_are_reported(samples):
    """The files whose vendor stores a static background say so in ``info``."""
    for key, has in (("oxford7", True), ("bruker", True), ("kikuchipy_h5ebsd", True),
                     ("edax_up2", False), ("stack", False)):
        res = run_cli("info", samples[key])
        assert res.returncode == 0, res.stderr
        assert f"static_background: {has}\n" in res.stdout, (key, res.stdout)


# ----------------------------------------------------------------------------- --format


def test_format_forces_the_generic_hdf5_reader(samples, tmp_path):
    path = samples["edax_h5"]
    out = tmp_path / "out.h5"
    res = run_cli("process", path, "--format", "hdf5", "--dataset", "Scan 1/EBSD/Data/Pattern",
                  "--grid", "3x3", "--ref-index", "0", "-o", out, "--device", "cpu", "-q")
    assert res.returncode == 0, res.stderr
    data, attrs = read_results(out)
    assert str(attrs["scan_format"]) == "hdf5" and data["done"].shape == (3, 3)
    np.testing.assert_array_less(np.abs(data["displacement"][0, 0]), 0.05)
    # the same patterns through the EDAX reader give the same shifts
    ref = tmp_path / "edax.h5"
    assert run_cli("process", path, "--ref-index", "0", "-o", ref, "--device", "cpu", "-q").returncode == 0
    np.testing.assert_allclose(data["displacement"], read_results(ref)[0]["displacement"], atol=1e-6)
    # without --grid the plain HDF5 reader knows no grid: one row
    res = run_cli("info", path, "--format", "hdf5", "--dataset", "Scan 1/EBSD/Data/Pattern")
    assert res.returncode == 0, res.stderr
    assert "format: hdf5\n" in res.stdout and "rows: 1\n" in res.stdout and "cols: 9\n" in res.stdout


def test_format_nonsense_is_one_error_line(samples, tmp_path):
    out = tmp_path / "out.h5"
    for cmd in (["process", samples["edax_h5"], "--ref-index", "0", "-o", out], ["info", samples["edax_h5"]]):
        line = error_line(run_cli(*cmd, "--format", "nonsense"), "--format", "nonsense")
        assert "edax_h5" in line  # the choices are listed
    assert not out.exists()


def test_format_of_the_wrong_reader_is_one_error_line(samples, tmp_path):
    out = tmp_path / "out.h5"
    path = samples["edax_h5"]
    error_line(run_cli("process", path, "--format", "bruker_h5", "--ref-index", "0", "-o", out), path)
    error_line(run_cli("info", path, "--format", "oxford_binary"), path)
    error_line(run_cli("process", path, "--format", "image_stack", "--ref-index", "0", "-o", out), path)
    assert not out.exists()


# ----------------------------------------------------------------------------- --grid


def test_grid_on_a_file_without_one(samples, tmp_path):
    path = samples["edax_up1"]
    with open_scan(path) as src:
        version = src.metadata["header"]["version"]
        assert (src.grid.rows, src.grid.cols) == (1, 9)
    if version != 1:  # a .up1 of version 3 records its grid: use EMsoft's, which never does
        path = samples["emsoft_sim"]
    out = tmp_path / "out.h5"
    res = run_cli("process", path, "--grid", "3x3", "--ref-index", "1,1", "-o", out, "--device", "cpu", "-q")
    assert res.returncode == 0, res.stderr
    data, attrs = read_results(out)
    assert data["done"].shape == (3, 3) and bool(attrs["complete"])
    assert json.loads(attrs["parameters"])["reference_index"] == [1, 1]
    np.testing.assert_array_less(np.abs(data["displacement"][1, 1]), 0.05)
    res = run_cli("info", path, "--grid", "3x3")
    assert res.returncode == 0 and "rows: 3\n" in res.stdout and "cols: 3\n" in res.stdout
    # the grid must hold every stored pattern
    line = error_line(run_cli("process", path, "--grid", "2x4", "--ref-index", "0", "-o", out,
                              "--overwrite"), path)
    assert "2x4" in line


def test_grid_on_emsoft(samples):
    res = run_cli("info", samples["emsoft_sim"], "--grid", "2x5")
    assert res.returncode == 0, res.stderr
    assert "format: emsoft_h5\n" in res.stdout and "rows: 2\n" in res.stdout and "cols: 5\n" in res.stdout


@pytest.mark.parametrize("key", ["edax_h5", "kikuchipy_h5ebsd", "oxford_ebsp", "oxford7", "bruker"])
def test_grid_contradicting_the_file_is_one_error_line(samples, tmp_path, key):
    path = samples[key]
    out = tmp_path / "out.h5"
    line = error_line(run_cli("process", path, "--grid", "3x4", "--ref-index", "0", "-o", out), path)
    assert "3x4" in line and "contradicts" in line
    assert not out.exists()
    error_line(run_cli("info", path, "--grid", "3x4"), path)
    # the file's own grid given again is fine
    res = run_cli("info", path, "--grid", "3x3")
    assert res.returncode == 0, res.stderr


def test_grid_that_is_not_a_grid_is_one_error_line(samples, tmp_path):
    for bad in ("3y4", "0x3", "3"):
        error_line(run_cli("process", samples["stack"], "--grid", bad, "--ref-index", "0",
                           "-o", tmp_path / "o.h5"), "--grid")


# ----------------------------------------------------------------------------- --static-background file


def test_static_background_file_from_the_vendor(samples, tmp_path):
    path = samples["oxford7"]
    with open_scan(path) as src:
        assert src.static_background() is not None  # the dummy h5oina stores one
    out = tmp_path / "out.h5"
    res = run_cli("process", path, "--static-background", "file", "--ref-index", "0", "-o", out,
                  "--device", "cpu", "-q")
    assert res.returncode == 0, res.stderr
    data, attrs = read_results(out)
    assert json.loads(attrs["parameters"])["preprocess"]["static_background"] == "file"
    assert data["done"].all() and bool(attrs["complete"])
    np.testing.assert_array_less(np.abs(data["displacement"][0, 0]), 0.05)
    assert (data["peak_height"][0, 0] > 0.99).all()


def test_static_background_file_without_one(samples, tmp_path):
    path = samples["edax_up2"]
    out = tmp_path / "out.h5"
    res = run_cli("process", path, "--static-background", "file", "--ref-index", "0", "-o", out,
                  "--device", "cpu")
    # kikuchipy's .up2 holds one pattern more than its grid: the reader warns on every open
    line = error_line(res, path, "static background", warnings_allowed=True)
    assert "edax_binary" in line
    assert not out.exists()


# ----------------------------------------------------------------------------- output and warnings


def test_info_into_a_closed_pipe_ends_quietly(samples):
    path = samples["kikuchipy_h5ebsd"]
    res = subprocess.run(["bash", "-c", 'set +o pipefail; "$0" -m ebsdxc info "$1" | head -1',
                          sys.executable, path], capture_output=True, text=True, timeout=120,
                         check=False)
    assert res.returncode == 0
    assert res.stdout == f"path: {path}\n"
    no_traceback(res)
    assert "BrokenPipe" not in res.stderr and res.stderr == "", res.stderr
    # deterministic: the reader is gone before the first write
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([sys.executable, "-m", "ebsdxc", "info", path], stdout=w,
                              stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    finally:
        os.close(w)
    assert proc.returncode in (0, 141), proc.stderr
    assert proc.stderr == "", proc.stderr


@pytest.fixture
def interrupted(samples, tmp_path):
    """A copy of kikuchipy's h5ebsd sample whose first scan kept 4 of its 9 patterns."""
    p = _copy(samples["kikuchipy_h5ebsd"], tmp_path / "interrupted.h5")
    name = "Scan 1/EBSD/Data/patterns"
    with h5py.File(p, "r+") as f:
        data = f[name][:4]
        del f[name]
        f.create_dataset(name, data=data)
    return p


def test_warning_is_one_line(interrupted, tmp_path):
    out = tmp_path / "out.h5"
    res = run_cli("process", interrupted, "--ref-index", "0", "-o", out, "--device", "cpu", "-q")
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("ebsdxc: warning: ") and str(interrupted) in lines[0]
    assert "holds 4 of 9 patterns" in lines[0]
    assert "UserWarning" not in res.stderr and "warnings.warn" not in res.stderr
    data, attrs = read_results(out)
    missing = np.zeros((3, 3), bool)
    missing.flat[4:] = True
    np.testing.assert_array_equal((data["status"] == st.MISSING_PATTERN).all(axis=-1), missing)
    np.testing.assert_array_equal((data["status"] == st.MISSING_PATTERN).any(axis=-1), missing)
    assert data["done"].all() and bool(attrs["complete"])
    res = run_cli("info", interrupted)
    assert res.returncode == 0 and "missing_points: 5\n" in res.stdout
    assert res.stderr.startswith("ebsdxc: warning: ") and res.stderr.count("\n") == 1, res.stderr


def test_main_restores_the_warning_machinery(interrupted, tmp_path, capsys):
    from ebsdxc import cli

    show, filters = warnings.showwarning, list(warnings.filters)
    rc = cli.main(["process", str(interrupted), "--ref-index", "0", "-o", str(tmp_path / "o.h5"),
                   "--device", "cpu", "-q"])
    assert rc == 0
    assert warnings.showwarning is show and warnings.filters == filters
    err = capsys.readouterr().err
    assert "ebsdxc: warning: " in err and "holds 4 of 9 patterns" in err


def test_strain_scan_option_takes_a_folder(samples, tmp_path):
    """``ebsdxc strain --scan`` finds a moved image stack given as a folder."""
    stack = tmp_path / "frames"
    shutil.copytree(samples["stack"], stack)
    out = tmp_path / "out.h5"
    res = run_cli("process", stack, "--grid", "2x3", "--ref-index", "0", "-o", out, "--device", "cpu", "-q")
    assert res.returncode == 0, res.stderr
    moved = tmp_path / "moved"
    stack.rename(moved)
    opts = ["--material", "Ni", "--pc", "0.5,0.3,0.5", "--pixel-size", "50", "--binning", "8",
            "--orientation", "10,20,30", "--device", "cpu", "-q"]
    error_line(run_cli("strain", out, *opts), "frames")  # remapping needs the scan: not there
    res = run_cli("strain", out, *opts, "--scan", moved)
    assert res.returncode == 0, res.stderr
    assert "strain at 6/6 points" in res.stdout


def test_strain_finds_a_glob_scan_again(tmp_path, sample_dir):
    """The strain pass re-reads a scan given as a glob of images (remapping needs the patterns)."""
    import h5py
    import tifffile

    frames = tmp_path / "frames"
    frames.mkdir()
    with h5py.File(f"{sample_dir}/scan.h5", "r") as f:
        pats = f["patterns"][...].reshape(-1, 160, 160)[:6]
    for i, p in enumerate(pats):
        tifffile.imwrite(frames / f"p{i}.tif", p)
    out = tmp_path / "r.h5"
    glob = str(frames / "*.tif")
    r = run_cli("process", glob, "--ref-index", "0", "--grid", "2x3", "-o", str(out), "--device", "cpu")
    assert r.returncode == 0, r.stderr
    r = run_cli("strain", str(out), "--material", "Ni", "--pc", "0.5,0.5,0.6", "--orientation", "0,0,0",
                "--scan", glob, "--remap-threshold", "0.0001")
    assert r.returncode == 0, r.stderr
    with h5py.File(out, "r") as f:
        assert f["ebsdxc"].attrs["scan_format"] == "image_stack"
        assert f["ebsdxc/fit_status"].shape == (2, 3)
        assert f["ebsdxc/remapped"][...].sum() >= 5  # every point but the reference itself, re-read
