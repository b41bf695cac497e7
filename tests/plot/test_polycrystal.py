"""Polycrystal figures (grain map, GND density, per-grain strain statistics) against the
results files they are drawn from: displayed values are the stored ones, reference markers
sit at the stored points, colour limits come from the data, statistics equal NumPy's."""

from __future__ import annotations

import os
import sys

import h5py
import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib import colors  # noqa: E402

from ebsdxc import plot  # noqa: E402


def _touching(positions, step):
    """Pairs of scan points (flat indices) nearest each other, from their positions alone."""
    p = positions.reshape(-1, 2)
    ok = np.flatnonzero(np.isfinite(p[:, 0]))
    d = np.linalg.norm(p[ok, None] - p[None, ok], axis=-1)
    i, j = np.nonzero(np.triu(np.abs(d - step) < 1e-6 * step, k=1))
    return ok[i], ok[j]


def _displayed_rgba(im):
    return im.cmap(im.norm(np.asarray(im.get_array(), dtype=float)))


@pytest.mark.parametrize("kind", ["square", "hexagonal"])
def test_grain_map_shows_the_stored_grains_and_their_references(tmp_path, build, kind):
    step = (0.5, 0.5) if kind == "square" else (0.5 * np.sqrt(3) / 2, 0.5)
    truth = build.polycrystal(tmp_path / "r.h5", kind=kind, step=step, strain=False, gnd=False)
    gid, refs, grid = truth["grain_id"], truth["reference_point"], truth["grid"]
    fig = plot.grain_map(tmp_path / "r.h5")
    ax = fig.axes[0]
    im = ax.images[0]
    shown = np.asarray(im.get_array(), dtype=float)
    rgba = _displayed_rgba(im)
    if kind == "square":
        np.testing.assert_array_equal(shown, gid)
        flat_rgba = rgba.reshape(-1, 4)
    else:  # bricks: the value at each point's position is its grain's, padding slots are empty
        left, right, bottom, top = im.get_extent()
        pos = grid.positions()
        flat_rgba = np.zeros((grid.rows * grid.cols, 4))
        for r in range(grid.rows):
            for c in range(grid.cols):
                x, y = pos[r, c]
                if np.isnan(x):
                    assert np.isnan(shown[r, -1 if r % 2 else 0])
                    continue
                i = int((y - top) / (bottom - top) * shown.shape[0])
                j = int((x - left) / (right - left) * shown.shape[1])
                assert shown[i, j] == gid[r, c], (r, c)
                flat_rgba[r * grid.cols + c] = rgba[i, j]
    flat = np.where(grid.in_grid(), gid, -2).ravel()  # -2: a padding slot, no scan point
    # no grain: grey; one colour per grain; grains that touch differ
    np.testing.assert_allclose(flat_rgba[flat == -1], np.tile(colors.to_rgba("#bbbbbb"), ((flat == -1).sum(), 1)))
    for g in range(refs.shape[0]):
        assert len(np.unique(flat_rgba[flat == g], axis=0)) == 1, g
    i, j = _touching(grid.positions(), step[1])
    meet = (flat[i] != flat[j]) & (flat[i] >= 0) & (flat[j] >= 0)
    assert meet.sum() > 10
    assert not np.all(flat_rgba[i[meet]] == flat_rgba[j[meet]], axis=1).any(), "touching grains share a colour"
    # a star at every stored reference point (where /ebsdxc/positions puts it)
    with h5py.File(tmp_path / "r.h5", "r") as f:
        positions = f["ebsdxc/positions"][...]
    stars = [ln for ln in ax.lines if ln.get_gid() == "reference-points"][0]
    has = refs[:, 0] >= 0
    np.testing.assert_allclose(np.c_[stars.get_xdata(), stars.get_ydata()], positions[refs[has, 0], refs[has, 1]])
    assert stars.get_marker() == "*"
    # grain 4 has no reference: a cross at its centroid, not a star
    crosses = [ln for ln in ax.lines if ln.get_gid() == "grains-without-reference"][0]
    np.testing.assert_allclose(np.c_[crosses.get_xdata(), crosses.get_ydata()],
                               [np.nanmean(positions[gid == 4], axis=0)])
    assert crosses.get_marker() == "X"
    assert sorted(int(t.get_text()) for t in ax.texts) == list(range(6))
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[0] == "reference point" and labels[1].startswith("no reference") and labels[2] == "no grain"
    assert fig.get_suptitle().startswith("6 grains, 5 with a reference point")
    assert ax.get_xlabel() == "x (µm)" and ax.get_ylabel() == "y (µm)"
    _, img = build.rendered(fig)
    assert img.std() > 10


def test_grain_map_of_a_large_scan_is_read_strided(tmp_path, build):
    truth = build.polycrystal(tmp_path / "r.h5", rows=30, cols=40, n_grains=8, without_reference=(), strain=False,
                              gnd=False)
    fig = plot.grain_map(tmp_path / "r.h5", max_points=300)
    ax = fig.axes[0]
    np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), truth["grain_id"][::2, ::2])
    stars = [ln for ln in ax.lines if ln.get_gid() == "reference-points"][0]
    refs = truth["reference_point"]
    np.testing.assert_allclose(np.c_[stars.get_xdata(), stars.get_ydata()], refs[:, ::-1] * 0.5)  # full resolution
    assert "every 2nd row and column" in fig.get_suptitle()
    assert not ax.texts or len(ax.texts) == 8


def test_gnd_density_map_is_logarithmic_with_limits_from_the_data(tmp_path, build):
    truth = build.polycrystal(tmp_path / "r.h5", strain=False)
    rho = truth["gnd_density"]
    fig = plot.gnd_density_map(tmp_path / "r.h5")
    ax, bar = fig.axes[0], fig.axes[1]
    im = ax.images[0]
    np.testing.assert_array_equal(np.asarray(im.get_array()), rho)  # NaN where NaN
    positive = rho[np.isfinite(rho) & (rho > 0)]
    assert isinstance(im.norm, colors.LogNorm)
    assert (im.norm.vmin, im.norm.vmax) == (positive.min(), positive.max())
    assert bar.get_ylabel() == "GND density (1/m²)"
    n_nan = int(np.isnan(rho).sum())
    assert f"{n_nan} points without a value" in fig.get_suptitle() and "1 at zero" in fig.get_suptitle()
    # drawn: NaN points show the (white) background, the others their colour on the log scale
    renderer, img = build.rendered(fig, dpi=100)
    h = img.shape[0]
    for r, c in [(r, c) for r, c in np.argwhere(np.isnan(rho))[:3]] + [tuple(np.argwhere(rho == positive.max())[0])]:
        x, y = ax.transData.transform((c * 0.5, r * 0.5))
        pixel = img[int(h - y), int(x)] / 255
        want = (1, 1, 1) if np.isnan(rho[r, c]) else im.cmap(im.norm(rho[r, c]))[:3]
        np.testing.assert_allclose(pixel, want, atol=2 / 255)


def test_grain_strain_statistics_equal_numpy_per_grain(tmp_path, build):
    truth = build.polycrystal(tmp_path / "r.h5", gnd=False)
    gid, e, w = truth["grain_id"], truth["strain"].astype(np.float64), truth["rotation"].astype(np.float64)
    parts = [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)]
    values = [e[..., i, j] * 1e3 for i, j in parts]
    values.append(np.sqrt(w[..., 2, 1] ** 2 + w[..., 0, 2] ** 2 + w[..., 1, 0] ** 2) * 1e3)
    fig = plot.grain_strain_statistics(tmp_path / "r.h5")
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 8
    counts = [b.get_height() for b in axes[0].patches]
    assert counts == [int((gid == g).sum()) for g in range(6)]
    table = plot.grain_strain_table(tmp_path / "r.h5")
    for q, ax in enumerate(axes[1:]):
        per_grain = [values[q][gid == g] for g in range(6)]
        per_grain = [x[np.isfinite(x)] for x in per_grain]
        mean = np.array([x.mean() for x in per_grain])
        std = np.array([x.std() for x in per_grain])
        err = ax.containers[0]
        data, _, (bars,) = err.lines
        np.testing.assert_allclose(data.get_xdata(), np.arange(6))
        np.testing.assert_allclose(data.get_ydata(), mean, rtol=1e-10)
        segments = np.array(bars.get_segments())  # (grain, [low, high], [x, y])
        np.testing.assert_allclose(segments[:, 0, 1], mean - std, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(segments[:, 1, 1], mean + std, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(table["p5"][:, q], [np.percentile(x, 5) for x in per_grain])
        np.testing.assert_allclose(table["p95"][:, q], [np.percentile(x, 95) for x in per_grain])
        assert list(table["count"][:, q]) == [x.size for x in per_grain]
        assert ax.get_xlabel() == "grain id" and ax.get_ylabel() == table["quantities"][q]
    assert table["quantities"][0] == "ε_xx (10⁻³)" and table["quantities"][6] == "|ω| (mrad)"
    with pytest.raises(ValueError, match="frame"):
        plot.grain_strain_table(tmp_path / "r.h5", frame="lab")


def test_write_figures_adds_polycrystal_figures_only_with_their_datasets(tmp_path, build):
    base = ["roi_layout", "displacement_magnitude", "displacement_dx", "displacement_dy", "quiver", "peak_height",
            "status"]

    def names(path, **kw):
        out = tmp_path / f"figs-{path.stem}"
        written = plot.write_figures(path, out, dpi=30, **kw)  # small files: what is drawn is tested elsewhere
        assert sorted(written) == sorted(str(p) for p in out.iterdir())
        for p in written:
            with open(p, "rb") as fh:
                assert fh.read(8) == b"\x89PNG\r\n\x1a\n", p
        return [os.path.basename(p)[:-4] for p in written]

    build.polycrystal(tmp_path / "grains.h5", strain=False, gnd=False)
    assert names(tmp_path / "grains.h5", workers=1) == base + ["grain_map"]
    build.polycrystal(tmp_path / "all.h5")
    # drawn by two processes, returned in the order of figure_jobs
    every = base + ["strain", "rotation", "grain_map", "gnd_density", "grain_strain_statistics"]
    assert [name for name, *_ in plot.figure_jobs(tmp_path / "all.h5")] == every
    assert names(tmp_path / "all.h5", workers=2) == every
    with pytest.raises(ValueError, match="workers"):
        plot.write_figures(tmp_path / "all.h5", tmp_path / "three", workers=0)


def test_a_figure_failing_in_a_worker_fails_write_figures(tmp_path, build):
    build.polycrystal(tmp_path / "r.h5", strain=False)
    with h5py.File(tmp_path / "r.h5", "r+") as f:  # a GND map of the wrong shape cannot be drawn
        del f["ebsdxc/gnd_density"]
        f["ebsdxc/gnd_density"] = np.ones(5)
    with pytest.raises(Exception):  # noqa: B017 - whatever h5py/NumPy raise, it must reach the caller
        plot.write_figures(tmp_path / "r.h5", tmp_path / "f", workers=2)
    assert not [p for p in (tmp_path / "f").iterdir() if p.name.endswith(".part")]


def test_figures_of_a_reference_per_grain_run(tmp_path, sample_dir):
    """The polycrystal sample processed with a reference per grain: the figures show what the
    run stored."""
    import ebsdxc
    from ebsdxc.config import GrainsConfig

    cfg = ebsdxc.load_config("hrebsd")[0].replace(strain=ebsdxc.StrainConfig(material="Ni"),
                                                  grains=GrainsConfig(per_grain=True))
    out = ebsdxc.process(f"{sample_dir}/polycrystal/scan.h5", config=cfg, run=ebsdxc.RunConfig(device="cpu"),
                         orientations=f"{sample_dir}/polycrystal/scan.ang", output=tmp_path / "r.h5")
    written = plot.write_figures(out, tmp_path / "figs", dpi=40)
    assert {"grain_map", "gnd_density", "grain_strain_statistics"} <= {os.path.basename(p)[:-4] for p in written}
    with h5py.File(out, "r") as f:
        g = f["ebsdxc"]
        gid, refs, pos = g["grain_id"][...], g["grains/reference_point"][...], g["positions"][...]
        exx, rho = g["strain"][:, :, 0, 0].astype(np.float64) * 1e3, g["gnd_density"][...]
    fig = plot.grain_map(out)
    np.testing.assert_array_equal(np.asarray(fig.axes[0].images[0].get_array()), gid)
    stars = [ln for ln in fig.axes[0].lines if ln.get_gid() == "reference-points"][0]
    has = refs[:, 0] >= 0
    np.testing.assert_allclose(np.c_[stars.get_xdata(), stars.get_ydata()], pos[refs[has, 0], refs[has, 1]])
    im = plot.gnd_density_map(out).axes[0].images[0]
    np.testing.assert_array_equal(np.asarray(im.get_array()), rho)
    finite = rho[np.isfinite(rho) & (rho > 0)]
    assert (im.norm.vmin, im.norm.vmax) == (finite.min(), finite.max())
    data = plot.grain_strain_statistics(out).axes[1].containers[0].lines[0]  # ε_xx, after the points
    want = [np.nanmean(np.where(np.isfinite(exx), exx, np.nan)[gid == k]) for k in range(len(refs))]
    np.testing.assert_allclose(data.get_ydata(), want, rtol=1e-10)


def test_write_figures_draws_in_this_process_when_other_threads_run(tmp_path, build, monkeypatch):
    """Forking a process that runs threads (a Jupyter kernel) can leave a lock held in the
    child: then every figure is drawn here, not in forked processes."""
    import threading

    from matplotlib.figure import Figure

    build.polycrystal(tmp_path / "r.h5", strain=False, gnd=False)
    drawn_here = []
    draw = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: (drawn_here.append(1), draw(self, renderer))[1])
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        written = plot.write_figures(tmp_path / "r.h5", tmp_path / "f", dpi=20)
    finally:
        stop.set()
        other.join()
    assert len(drawn_here) == len(written) == 8
    if sys.platform.startswith("linux") and len(os.sched_getaffinity(0)) > 1 and threading.active_count() == 1:
        drawn_here.clear()  # without another thread, forked processes draw them
        plot.write_figures(tmp_path / "r.h5", tmp_path / "g", dpi=20)
        assert drawn_here == []


def test_a_map_without_grains_or_gnd_values_still_draws(tmp_path, build):
    build.polycrystal(tmp_path / "r.h5")
    with h5py.File(tmp_path / "r.h5", "r+") as f:
        g = f["ebsdxc"]
        g["grain_id"][...] = -1
        del g["grains/reference_point"]
        g["grains"].create_dataset("reference_point", data=np.zeros((0, 2), np.int64))
        g["gnd_density"][...] = np.nan
    fig = plot.grain_map(tmp_path / "r.h5")
    assert fig.get_suptitle().startswith("0 grains, 0 with a reference point")
    assert (np.asarray(fig.axes[0].images[0].get_array()) == -1).all()
    assert plot.grain_strain_table(tmp_path / "r.h5")["mean"].shape == (0, 7)
    gnd = plot.gnd_density_map(tmp_path / "r.h5")
    assert "168 points without a value" in gnd.get_suptitle()
    for fig in (plot.grain_strain_statistics(tmp_path / "r.h5"), gnd):
        build.rendered(fig, dpi=30)
