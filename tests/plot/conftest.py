"""Results files with known content for the figure tests, written by ebsdxc's own writers
(the layout a run writes): a polycrystal's grains, strain, rotation and GND density, and ROI
layouts that overlap."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")


def rendered(fig, dpi=100):
    """Draw ``fig`` with Agg at ``dpi``: (renderer, (H, W, 3) float pixels)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    fig.set_dpi(dpi)
    canvas.draw()
    return canvas.get_renderer(), np.asarray(canvas.buffer_rgba())[..., :3].astype(float)


def layout_results(path, centres, size, pattern_shape, *, grid=(2, 3)):
    """A results file that records an ROI layout on patterns of ``pattern_shape`` (no data)."""
    from ebsdxc.io import ScanGrid
    from ebsdxc.io.results import ResultsWriter

    w = ResultsWriter.create(path, grid=ScanGrid(*grid), centres=np.asarray(centres, dtype=np.float64),
                             roi_size=size, parameters={"scan": None}, inputs=[])
    w.set_attr("pattern_shape", np.asarray(pattern_shape, dtype=np.int64))
    w.close()
    return path


def polycrystal_results(path, *, rows=12, cols=14, kind="square", step=(0.5, 0.5), n_grains=6, without_reference=(4,),
                        strain=True, gnd=True, seed=7):
    """A results file of a reference-per-grain run with known content.

    Voronoi grains (ids 0..n_grains-1, a few points -1), each grain's reference the point
    nearest its seed ((-1, -1) for ``without_reference``); per grain a different mean strain
    and rotation plus noise (some points NaN); GND density spread over three decades (some
    NaN, one zero). Returns the stored arrays.
    """
    from ebsdxc.io import ScanGrid
    from ebsdxc.io.results import ResultsWriter, StrainWriter, write_gnd

    rng = np.random.default_rng(seed)
    grid = ScanGrid(rows, cols, step=step, kind=kind)
    pos = grid.positions()
    inside = grid.in_grid()
    w = ResultsWriter.create(path, grid=grid, centres=np.array([[20.0, 20.0], [60.0, 20.0]]), roi_size=(16, 16),
                             parameters={"scan": None}, inputs=[])
    n_pts = rows * cols
    w.write(0, np.zeros((n_pts, 2, 2), np.float32), np.ones((n_pts, 2), np.float32), np.zeros((n_pts, 2), np.uint8))
    seeds = np.stack([rng.uniform(0, (cols - 1) * step[1], n_grains), rng.uniform(0, (rows - 1) * step[0], n_grains)],
                     axis=1)
    dist = np.linalg.norm(np.nan_to_num(pos, nan=1e9)[:, :, None, :] - seeds[None, None], axis=-1)
    gid = np.argmin(dist, axis=-1).astype(np.int32)
    gid[rng.random((rows, cols)) < 0.05] = -1
    gid[~inside] = -1
    present = np.unique(gid[gid >= 0])
    assert len(present) == n_grains, "every grain needs points: change the seed"
    refs = np.full((n_grains, 2), -1, dtype=np.int64)
    for g in range(n_grains):
        if g in without_reference:
            continue
        d = np.where(gid == g, dist[:, :, g], np.inf)
        refs[g] = np.unravel_index(int(np.argmin(d)), d.shape)
    w.write_grains(gid, refs)
    w.finish()
    w.close()
    out = {"grain_id": gid, "reference_point": refs, "grid": grid}
    if strain:
        mean_e = rng.normal(0, 1e-3, (n_grains, 3, 3))
        e = mean_e[np.maximum(gid, 0)] + rng.normal(0, 2e-4, (rows, cols, 3, 3))
        e = 0.5 * (e + np.swapaxes(e, -1, -2))
        mean_w = rng.normal(0, 3e-3, (n_grains, 3))
        wv = mean_w[np.maximum(gid, 0)] + rng.normal(0, 5e-4, (rows, cols, 3))
        rot = np.zeros((rows, cols, 3, 3))
        rot[..., 2, 1], rot[..., 0, 2], rot[..., 1, 0] = wv[..., 0], wv[..., 1], wv[..., 2]
        rot = rot - np.swapaxes(rot, -1, -2)
        bad = rng.random((rows, cols)) < 0.06
        e[bad], rot[bad] = np.nan, np.nan
        sw = StrainWriter(path, parameters={}, n_roi=2, fit_codes={0: "ok"})
        sw.write(slice(0, rows), cols, strain=e.reshape(-1, 3, 3).astype(np.float32),
                 strain_crystal=e.reshape(-1, 3, 3).astype(np.float32),
                 rotation=rot.reshape(-1, 3, 3).astype(np.float32),
                 rotation_crystal=rot.reshape(-1, 3, 3).astype(np.float32))
        sw.finish()
        sw.close()
        out["strain"], out["rotation"] = e.astype(np.float32), rot.astype(np.float32)
    if gnd:
        rho = 10 ** rng.uniform(12, 15, (rows, cols))
        rho[rng.random((rows, cols)) < 0.08] = np.nan
        rho[~inside] = np.nan
        rho[0, 1] = 0.0
        nye = np.full((rows, cols, 3, 3), np.nan)
        write_gnd(path, nye, rho, attrs={})
        out["gnd_density"] = rho
    return out


@pytest.fixture
def build():
    """The builders above: ``build.polycrystal(path, ...)``, ``build.layout(path, ...)``,
    ``build.rendered(fig)``."""
    import types

    return types.SimpleNamespace(polycrystal=polycrystal_results, layout=layout_results, rendered=rendered)
