"""ebsdxc.plot and `ebsdxc plot`: every figure drawn, not blank, labelled axes, colour bars with
units; hexagonal grids drawn where /ebsdxc/positions puts the points; large scans read strided."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import h5py
import numpy as np
import pytest
import tifffile

pytest.importorskip("matplotlib")

import ebsdxc  # noqa: E402
from ebsdxc import plot  # noqa: E402
from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig  # noqa: E402
from ebsdxc.io import ScanGrid  # noqa: E402
from ebsdxc.io.results import ResultsWriter  # noqa: E402


@pytest.fixture(scope="module")
def results(tmp_path_factory, sample_dir):
    """The sample scan processed with strain (Ni), as the quick start does."""
    out = tmp_path_factory.mktemp("plot") / "sample.ebsdxc.h5"
    cfg = ebsdxc.load_config("hrebsd")[0].replace(strain=ebsdxc.StrainConfig(material="Ni"))
    return ebsdxc.process(f"{sample_dir}/scan.h5", ref=f"{sample_dir}/ref.tif", config=cfg,
                          run=RunConfig(device="cpu"), output=out)


def pixels(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].astype(float)


def check_figure(fig, *, colorbar_units=()):
    """Drawn, not blank, every map/pattern axes labelled, colour bars labelled with units."""
    img = pixels(fig)
    assert img.std() > 10, "figure is blank"
    axes = [ax for ax in fig.axes if ax.get_visible()]
    bars = [ax for ax in axes if ax.get_label() == "<colorbar>"]
    plots = [ax for ax in axes if ax.get_label() != "<colorbar>"]
    assert plots and bars, "a figure of maps needs axes and colour bars"
    for ax in plots:
        # labelled, or below/beside a panel of the same coordinates that is (shared labels)
        box = ax.get_position()
        assert ax.get_xlabel() or any(o.get_xlabel() and o.get_xlim() == ax.get_xlim()
                                      and abs(o.get_position().x0 - box.x0) < 1e-6 for o in plots), \
            f"x axis of {ax.get_title()!r} unlabelled"
        assert ax.get_ylabel() or any(o.get_ylabel() and o.get_ylim() == ax.get_ylim()
                                      and abs(o.get_position().y0 - box.y0) < 1e-6 for o in plots), \
            f"y axis of {ax.get_title()!r} unlabelled"
        # something is drawn inside every axes: its pixels vary
        x0, y0, x1, y1 = ax.get_window_extent().extents.astype(int)
        h = img.shape[0]
        inside = img[h - y1:h - y0, x0:x1]
        assert inside.size and inside.std() > 1, f"empty axes: {ax.get_title()!r}"
    labels = " ".join(b.get_ylabel() for b in bars)
    for unit in colorbar_units:
        assert unit in labels, f"no colour bar in {unit}: {labels!r}"
    return plots, bars


def test_displacement_maps(results):
    with h5py.File(results, "r") as f:
        d = f["ebsdxc/displacement"][...].astype(np.float64)
    for component, unit in (("magnitude", "|d| (px)"), ("dx", "dx (px)"), ("dy", "dy (px)")):
        plots, bars = check_figure(plot.displacement_maps(results, component=component), colorbar_units=[unit])
        # small multiples in one axes: one map per ROI of the hrebsd layout, one colour scale
        assert len(plots) == 1 and len(plots[0].images) == 25 and len(bars) == 1
        assert [t.get_text() for t in plots[0].texts] == [f"ROI {k}" for k in range(25)]
        assert len({id(im.norm) for im in plots[0].images}) == 1
        want = {"magnitude": np.hypot(d[..., 0], d[..., 1]), "dx": d[..., 0], "dy": d[..., 1]}[component]
        for k in (0, 13, 24):
            np.testing.assert_allclose(np.asarray(plots[0].images[k].get_array()), want[:, :, k], rtol=1e-6)
        if component != "magnitude":
            norm = plots[0].images[0].norm
            assert norm.vmin == -norm.vmax and plots[0].images[0].get_cmap().name == "RdBu_r"
    plots, _ = check_figure(plot.displacement_maps(results, rois=[0, 7]))
    assert [t.get_text() for t in plots[0].texts] == ["ROI 0", "ROI 7"]
    # the first map sits at the scan's coordinates, the next one a whole map plus a gap to the right
    (l0, r0, b0, t0), (l1, r1, b1, t1) = (im.get_extent() for im in plots[0].images)
    assert (l0, t0) == (-12.5, -12.5) and (b1, t1) == (b0, t0) and l1 > r0 and r1 - l1 == r0 - l0
    with pytest.raises(ValueError, match="ROIs must be in 0..24"):
        plot.displacement_maps(results, rois=[25])
    with pytest.raises(ValueError, match="component"):
        plot.displacement_maps(results, component="dz")


def test_maps_hold_the_stored_values(results):
    fig = plot.displacement_maps(results, component="dx", rois=[3])
    shown = fig.axes[0].images[0].get_array()
    with h5py.File(results, "r") as f:
        np.testing.assert_allclose(np.asarray(shown), f["ebsdxc/displacement"][:, :, 3, 0], rtol=1e-6)
        heights = f["ebsdxc/peak_height"][...]
        strain = f["ebsdxc/strain"][...]
    fig = plot.peak_height_map(results)
    np.testing.assert_allclose(np.asarray(fig.axes[0].images[0].get_array()), heights.mean(axis=2), rtol=1e-5)
    fig = plot.strain_maps(results)
    np.testing.assert_allclose(np.asarray(fig.axes[0].images[0].get_array()), strain[:, :, 0, 0] * 1e3, rtol=1e-5)


def test_peak_height_and_status_maps(results):
    check_figure(plot.peak_height_map(results), colorbar_units=["normalised cross-correlation"])
    check_figure(plot.peak_height_map(results, roi=4), colorbar_units=["normalised cross-correlation"])
    check_figure(plot.status_map(results), colorbar_units=["fraction", "status"])
    plots, bars = check_figure(plot.status_map(results, roi=2), colorbar_units=["status"])
    assert "0 ok" in [t.get_text() for t in bars[0].get_yticklabels()]


def test_strain_and_rotation_maps_diverge_around_zero(results):
    for fn, unit, n in ((plot.strain_maps, "(10⁻³)", 6), (plot.rotation_maps, "(mrad)", 3)):
        for frame in ("sample", "crystal"):
            plots, bars = check_figure(fn(results, frame=frame), colorbar_units=[unit])
            assert len(plots) == n == len(bars)
            for ax in plots:
                im = ax.images[0]
                assert im.norm.vmin == -im.norm.vmax and im.norm.vmax > 0 and im.get_cmap().name == "RdBu_r"
    with pytest.raises(ValueError, match="frame"):
        plot.strain_maps(results, frame="lab")


def test_roi_layout_and_quiver(results, sample_dir):
    plots, _ = check_figure(plot.roi_layout(results), colorbar_units=["intensity"])
    assert len(plots[0].patches) == 25
    fig = plot.displacement_quiver(results, (4, 6), scale=50)
    check_figure(fig, colorbar_units=["|d| (px)"])
    q = [c for c in fig.axes[0].collections if type(c).__name__ == "Quiver"][0]
    with h5py.File(results, "r") as f:
        d = f["ebsdxc/displacement"][4, 6]
        centres = f["ebsdxc/roi/centers"][...]
    np.testing.assert_allclose(q.U, d[:, 0] * 50, rtol=1e-5)
    np.testing.assert_allclose(q.V, d[:, 1] * 50, rtol=1e-5)
    np.testing.assert_allclose(q.X, centres[:, 0])
    # a reference given as an array is drawn as it is
    ref = tifffile.imread(f"{sample_dir}/ref.tif")
    fig = plot.roi_layout(results, reference=ref)
    np.testing.assert_array_equal(np.asarray(fig.axes[0].images[0].get_array()), ref.astype(np.float32))
    with pytest.raises(ValueError, match="outside"):
        plot.displacement_quiver(results, 100)


def test_point_detail_recorrelates_as_the_run_did(tmp_path, sample_dir):
    """A pattern shifted by (+5, -3) px: the re-correlated map peaks at that lag, the fitted
    peak and peak height are the stored ones."""
    ref = tifffile.imread(f"{sample_dir}/ref.tif")
    with h5py.File(tmp_path / "shift.h5", "w") as f:
        f["patterns"] = np.stack([ref, np.roll(ref, (-3, 5), axis=(0, 1))])
    out = ebsdxc.process(str(tmp_path / "shift.h5"), ref=f"{sample_dir}/ref.tif", output=tmp_path / "r.h5",
                         config=ProcessConfig(roi=RoiConfig(grid=(3, 3), size=48)), run=RunConfig(device="cpu"))
    c = plot.correlation_map(out, 1, 4)
    peak = np.unravel_index(int(np.argmax(c["map"])), c["map"].shape)
    assert (peak[0] - c["centre"][0], peak[1] - c["centre"][1]) == (-3, 5)
    np.testing.assert_allclose(c["displacement"], [5, -3], atol=0.05)
    assert c["map"].max() == pytest.approx(c["peak_height"], abs=1e-4)
    fig = plot.point_detail(out, 1, roi=4)
    plots, _ = check_figure(fig, colorbar_units=["normalised cross-correlation"])
    assert len(plots) == 4
    # inputs moved away: one clear error, then found again when given
    os.rename(tmp_path / "shift.h5", tmp_path / "moved.h5")
    with pytest.raises(ebsdxc.InputError, match="scan file .* not there"):
        plot.point_detail(out, 0, roi=1)
    plot.point_detail(out, 0, roi=1, scan=str(tmp_path / "moved.h5"))


def _hex_results(path, rows=5, cols=6, n_roi=2):
    grid = ScanGrid(rows, cols, step=(np.sqrt(3) / 2, 1.0), kind="hexagonal")
    w = ResultsWriter.create(path, grid=grid, centres=np.array([[20.0, 20.0], [60.0, 20.0]]), roi_size=(16, 16),
                             parameters={"scan": None}, inputs=[])
    value = np.arange(rows * cols, dtype=np.float32)
    disp = np.stack([value, -value], axis=-1)[:, None, :].repeat(n_roi, axis=1)
    w.write(0, disp, np.ones((rows * cols, n_roi), np.float32), np.zeros((rows * cols, n_roi), np.uint8))
    w.finish()
    w.close()
    return grid


def test_hexagonal_grid_points_drawn_at_their_positions(tmp_path):
    grid = _hex_results(tmp_path / "hex.h5")
    fig = plot.displacement_maps(tmp_path / "hex.h5", component="dx", rois=[0])
    ax = fig.axes[0]
    im = ax.images[0]
    img = np.asarray(im.get_array(), dtype=float)
    left, right, bottom, top = im.get_extent()
    pos = grid.positions()
    for r in range(grid.rows):
        for c in range(grid.cols):
            x, y = pos[r, c]
            if np.isnan(x):
                continue  # a hexagonal row's padding slot: no point
            j = int((x - left) / (right - left) * img.shape[1])
            i = int((y - top) / (bottom - top) * img.shape[0])
            assert img[i, j] == r * grid.cols + c, (r, c)
    assert np.isnan(img).any()  # padding slots stay empty


def test_large_scan_maps_are_read_strided(tmp_path):
    """A 400 x 500 scan with 86 ROIs (137 MB of displacement): maps hold at most max_points."""
    rows, cols, n = 400, 500, 86
    w = ResultsWriter.create(tmp_path / "big.h5", grid=ScanGrid(rows, cols, step=(1.0, 1.0)),
                             centres=np.stack([np.arange(n) * 2 + 20.0, np.full(n, 20.0)], axis=1), roi_size=(16, 16),
                             parameters={"scan": None}, inputs=[])
    for r in range(0, rows, 100):  # every 100th row has data
        k = slice(r * cols, (r + 1) * cols)
        d = np.full((cols, n, 2), r, np.float32)
        w.write(k.start, d, np.ones((cols, n), np.float32), np.zeros((cols, n), np.uint8))
    w.close()
    tracemalloc.start()
    try:
        fig = plot.displacement_maps(tmp_path / "big.h5", rois=range(n), max_points=2_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    shown = np.asarray(fig.axes[0].images[0].get_array())
    assert shown.size <= 2_000 and shown.shape == (rows // 10, cols // 10)
    assert shown[10, 0] == pytest.approx(100 * np.sqrt(2)) and np.isnan(shown[1, 0])  # row 100 has data, 10 none
    assert peak < 60e6, f"{peak / 1e6:.0f} MB held for a 137 MB dataset"
    assert "every 10th row and column" in fig.get_suptitle()


def test_library_never_uses_pyplot(results):
    code = ("import sys, ebsdxc.plot as p; p.displacement_maps(sys.argv[1]); p.status_map(sys.argv[1]);"
            "p.roi_layout(sys.argv[1]); assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'")
    r = subprocess.run([sys.executable, "-c", code, str(results)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def test_cli_plot_writes_every_figure(results, tmp_path):
    out = tmp_path / "figs"
    r = subprocess.run([sys.executable, "-m", "ebsdxc", "plot", str(results), "-o", str(out), "--format", "png,pdf",
                        "--point", "2,3", "--dpi", "40"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    names = {"roi_layout", "displacement_magnitude", "displacement_dx", "displacement_dy", "quiver", "peak_height",
             "status", "strain", "rotation"}
    with h5py.File(results, "r") as f:
        names |= {"gnd_density"} if "gnd_density" in f["ebsdxc"] else set()  # the strain pass adds it
    assert {p.name for p in out.iterdir()} == {f"{n}.{e}" for n in names for e in ("png", "pdf")}
    for n in names:
        with open(out / f"{n}.png", "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    before = (out / "status.png").stat().st_mtime_ns
    r = subprocess.run([sys.executable, "-m", "ebsdxc", "plot", str(results), "-o", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "already exists; pass --overwrite" in r.stderr and r.stderr.count("\n") == 1
    assert (out / "status.png").stat().st_mtime_ns == before


@pytest.mark.parametrize("args,words", [(["nothing.h5"], "no such file"),
                                        (["SAMPLE_SCAN"], "not an ebsdxc results file"),
                                        (["RESULTS", "--format", "gif"], "figure formats must be among"),
                                        (["RESULTS", "--point", "99,0"], "outside the 10 x 10 grid"),
                                        (["RESULTS", "--point", "a,b"], "argument --point: expected N or ROW,COL")])
def test_cli_plot_bad_input_is_one_line(results, sample_dir, tmp_path, args, words):
    args = [{"SAMPLE_SCAN": f"{sample_dir}/scan.h5", "RESULTS": str(results)}.get(a, a) for a in args]
    r = subprocess.run([sys.executable, "-m", "ebsdxc", "plot", *args, "-o", str(tmp_path / "f")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "f").exists() or not any((tmp_path / "f").iterdir())


def test_readme_figures_are_committed():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "README.md"), encoding="utf-8") as fh:
        text = fh.read()
    import re

    linked = set(re.findall(r"\((docs/figures/[\w.]+\.png)\)", text))
    assert len(linked) >= 10
    for rel in linked:
        with open(os.path.join(root, rel), "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n", rel


def test_each_figure_is_laid_out_once_and_drawn_once_per_file(results, tmp_path, monkeypatch):
    """No layout engine, no tight bounding box: writing a file is one draw (what makes
    `ebsdxc plot` fast; constrained layout drew twice and measured every tick label)."""
    from matplotlib.figure import Figure

    draws = []
    draw = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: (draws.append(self), draw(self, renderer))[1])
    written = plot.write_figures(results, tmp_path, formats=("png", "svg"), workers=1, dpi=40)
    assert len(written) == 2 * len(plot.figure_jobs(results)) == len(draws)
    assert all(fig.get_layout_engine() is None for fig in draws)
