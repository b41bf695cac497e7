"""Figures of a DIC results file: displacement and strain fields over the reference image.

Each field is drawn as a semi-transparent colour map over the reference image (in grey), a
cell per subset centred on its point (``/ebsdxc/dic/points``), so the fields sit where they
were measured; points without a measurement (status other than ok) are left clear and
counted in the panel's title. Coordinates are px of the reference (x = column, y = row, down).
Strain uses symmetric colour limits about zero (a diverging map), in units of 1e-3.
"""

from __future__ import annotations

import os

import h5py
import numpy as np
from matplotlib import colors

from .. import status as st
from .panels import FONT, few_ticks, figure_title, fit_panel, panel_grid
from .scanmap import colour_bar

__all__ = ["is_dic_results", "dic_fields", "dic_displacement_fields", "dic_strain_fields", "dic_vectors",
           "dic_frame_series"]

BOX = (4.6, 4.0)  # inches a panel may take


def is_dic_results(path) -> bool:
    """Whether a results file holds DIC fields (``/ebsdxc/dic``)."""
    with h5py.File(os.fspath(path), "r") as f:
        return "ebsdxc/dic/points" in f


def dic_fields(results, *, frame=-1) -> dict:
    """The numbers behind the figures of one frame: ``points`` (ny, nx, 2), ``displacement``
    (ny, nx, 2), ``status`` (ny, nx), ``strain`` (ny, nx, 2, 2) (NaN until the strain pass
    ran), ``frame`` (its index), ``n_frames``, ``step`` (px), ``reference`` (the reference
    image, or None where its file is not there)."""
    path = os.fspath(results)
    with h5py.File(path, "r") as f:
        g = f["ebsdxc/dic"]
        n = g["displacement"].shape[0]
        k = int(frame) % n if -n <= int(frame) < n else None
        if k is None:
            raise ValueError(f"frame must be in -{n}..{n - 1} (the file holds {n} frames), got {frame!r}")
        out = {"points": g["points"][()], "displacement": g["displacement"][k].astype(np.float64),
               "status": g["status"][k], "strain": g["strain"][k].astype(np.float64)
               if bool(g.attrs.get("strain_complete", False)) else np.full(g["strain"].shape[1:], np.nan),
               "frame": k, "n_frames": n}
    pts = out["points"]
    out["step"] = float(pts[0, 1, 0] - pts[0, 0, 0]) if pts.shape[1] > 1 else float(
        pts[1, 0, 1] - pts[0, 0, 1]) if pts.shape[0] > 1 else 1.0
    out["displacement"][out["status"] != st.OK] = np.nan
    out["reference"] = _reference(path)
    return out


def _reference(path):
    from ..io import read_reference
    from .results_view import ResultsView

    try:
        with ResultsView(path) as v:
            ref = v.input_path("reference")
        return None if ref is None else np.asarray(read_reference(ref), dtype=np.float32)
    except Exception:  # noqa: BLE001 - the fields are drawn without it
        return None


def _extent(points, step):
    """imshow extent (left, right, bottom, top) of one cell per point, rows downwards."""
    x0, y0 = points[0, 0]
    x1, y1 = points[-1, -1]
    h = step / 2.0
    return (x0 - h, x1 + h, y1 + h, y0 - h)


def _panel(d):
    ref = d["reference"]
    if ref is not None:
        h, w = ref.shape
        return fit_panel((-0.5, w - 0.5, h - 0.5, -0.5), BOX)
    return fit_panel(_extent(d["points"], d["step"]), BOX)


def _field(ax, d, values, *, cmap, norm, title, bar, label, alpha=0.65):
    ref = d["reference"]
    if ref is not None:
        h, w = ref.shape
        lo, hi = np.percentile(ref, [1, 99])
        ax.imshow(ref, cmap="gray", vmin=lo, vmax=hi, extent=(-0.5, w - 0.5, h - 0.5, -0.5), interpolation="nearest",
                  aspect="auto")
    im = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, norm=norm, extent=_extent(d["points"], d["step"]),
                   interpolation="nearest", alpha=alpha if ref is not None else 1.0, aspect="auto")
    if ref is not None:
        ax.set_xlim(-0.5, ref.shape[1] - 0.5)
        ax.set_ylim(ref.shape[0] - 0.5, -0.5)
    few_ticks(ax.xaxis)
    few_ticks(ax.yaxis)
    ax.tick_params(labelsize=FONT)
    ax.set_xlabel("x (px)", fontsize=FONT)
    ax.set_ylabel("y (px)", fontsize=FONT)
    bad = int(np.sum(~np.isfinite(values)))
    ax.set_title(title + (f" ({bad} not measured)" if bad else ""), fontsize=FONT, pad=3)
    colour_bar(im, bar, label)
    return im


def _symmetric(values):
    v = np.nanmax(np.abs(values)) if np.isfinite(values).any() else 1.0
    return colors.Normalize(-max(v, 1e-12), max(v, 1e-12))


def _subtitle(d):
    ny, nx = d["points"].shape[:2]
    return f"frame {d['frame'] + 1} of {d['n_frames']}, {ny} x {nx} subsets every {d['step']:g} px"


def dic_displacement_fields(results, *, frame=-1):
    """u and v (px) of one frame over the reference image."""
    d = dic_fields(results, frame=frame)
    fig, axes, bars = panel_grid(2, 2, _panel(d), colorbar="each")
    for ax, bar, k, name in zip(axes, bars, (0, 1), ("u", "v")):
        vals = d["displacement"][..., k]
        _field(ax, d, vals, cmap="viridis", norm=colors.Normalize(*_limits(vals)), title=f"{name} (px)", bar=bar,
               label=f"{name} (px)")
    figure_title(fig, "DIC displacement", _subtitle(d))
    return fig


def _limits(values):
    if not np.isfinite(values).any():
        return -1.0, 1.0
    lo, hi = np.nanmin(values), np.nanmax(values)
    return (lo - 1e-6, hi + 1e-6) if hi - lo < 1e-9 else (lo, hi)


def dic_strain_fields(results, *, frame=-1, components=("Exx", "Eyy", "Exy")):
    """Green-Lagrange strain components of one frame over the reference image (1e-3)."""
    d = dic_fields(results, frame=frame)
    index = {"Exx": (0, 0), "Eyy": (1, 1), "Exy": (0, 1), "Eyx": (1, 0)}
    for c in components:
        if c not in index:
            raise ValueError(f"components must be among {', '.join(index)}, got {c!r}")
    fig, axes, bars = panel_grid(len(components), 3, _panel(d), colorbar="each")
    for ax, bar, c in zip(axes, bars, components):
        vals = d["strain"][..., index[c][0], index[c][1]] * 1e3
        _field(ax, d, vals, cmap="RdBu_r", norm=_symmetric(vals), title=c, bar=bar, label=f"{c} (1e-3)")
    figure_title(fig, "DIC Green-Lagrange strain", _subtitle(d))
    return fig


def dic_vectors(results, *, frame=-1, max_arrows=32, scale=None):
    """Displacement vectors over the reference image, every n-th point so at most
    ``max_arrows`` per side; ``scale``: arrow length per px of displacement (default: the
    longest arrow a grid step long)."""
    d = dic_fields(results, frame=frame)
    fig, axes, _ = panel_grid(1, 1, _panel(d))
    ax = axes[0]
    pts, u = d["points"], d["displacement"]
    ny, nx = pts.shape[:2]
    s = max(1, int(np.ceil(max(ny, nx) / max_arrows)))
    p, v = pts[::s, ::s].reshape(-1, 2), u[::s, ::s].reshape(-1, 2)
    ok = np.isfinite(v).all(axis=1)
    ref = d["reference"]
    if ref is not None:
        lo, hi = np.percentile(ref, [1, 99])
        ax.imshow(ref, cmap="gray", vmin=lo, vmax=hi, extent=(-0.5, ref.shape[1] - 0.5, ref.shape[0] - 0.5, -0.5),
                  aspect="auto")
    longest = np.abs(v[ok]).max() if ok.any() else 1.0
    k = scale if scale is not None else d["step"] * s / max(longest, 1e-12)
    q = ax.quiver(p[ok, 0], p[ok, 1], v[ok, 0] * k, v[ok, 1] * k, angles="xy", scale_units="xy", scale=1,
                  color="tab:orange", width=0.004)
    if ref is None:
        ax.set_xlim(*_extent(pts, d["step"])[:2])
        ax.set_ylim(*_extent(pts, d["step"])[2:])
    few_ticks(ax.xaxis)
    few_ticks(ax.yaxis)
    ax.set_xlabel("x (px)", fontsize=FONT)
    ax.set_ylabel("y (px)", fontsize=FONT)
    ax.set_title(f"arrows x{k:.3g} (longest {longest:.3g} px)", fontsize=FONT, pad=3)
    figure_title(fig, "DIC displacement vectors", _subtitle(d))
    q.set_label(f"arrows x{k:.6g}")
    return fig


def dic_frame_series(results):
    """Mean displacement and mean strain of the measured points, frame by frame."""
    path = os.fspath(results)
    with h5py.File(path, "r") as f:
        g = f["ebsdxc/dic"]
        n = g["displacement"].shape[0]
        mean_u = np.full((n, 2), np.nan)
        mean_e = np.full((n, 3), np.nan)
        has_strain = bool(g.attrs.get("strain_complete", False))
        for k in range(n):
            ok = g["status"][k] == st.OK
            if ok.any():
                mean_u[k] = g["displacement"][k][ok].mean(axis=0)
                if has_strain:
                    e = g["strain"][k][ok]
                    mean_e[k] = np.nanmean(e[:, 0, 0]), np.nanmean(e[:, 1, 1]), np.nanmean(e[:, 0, 1])
    fig, axes, _ = panel_grid(2, 2, (3.6, 2.6), titles=True)
    t = np.arange(1, n + 1)
    for k, name in enumerate(("u", "v")):
        axes[0].plot(t, mean_u[:, k], marker="o", label=name)
    axes[0].set_ylabel("mean displacement (px)", fontsize=FONT)
    for k, name in enumerate(("Exx", "Eyy", "Exy")):
        axes[1].plot(t, mean_e[:, k] * 1e3, marker="o", label=name)
    axes[1].set_ylabel("mean strain (1e-3)", fontsize=FONT)
    for ax in axes:
        ax.set_xlabel("frame", fontsize=FONT)
        ax.legend(fontsize=FONT - 2)
        ax.tick_params(labelsize=FONT)
    figure_title(fig, "DIC frame by frame", f"{n} frames")
    return fig
