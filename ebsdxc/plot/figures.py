"""All the figures of a results file, written to a folder (``ebsdxc plot``)."""

from __future__ import annotations

import errno
import os

from .maps import displacement_maps, peak_height_map, rotation_maps, status_map, strain_maps
from .pattern import displacement_quiver, roi_layout
from .results_view import ResultsView

__all__ = ["write_figures", "FORMATS"]

FORMATS = ("png", "pdf", "svg")


def write_figures(results, out_dir, *, formats=("png",), point=None, dpi=150, overwrite=False,
                  max_points=1_000_000) -> list[str]:
    """Draw every figure a results file supports and write each in ``formats``.

    Figures: ``roi_layout``, ``displacement_magnitude``, ``displacement_dx``,
    ``displacement_dy``, ``quiver`` (at ``point``, default the scan's centre),
    ``peak_height``, ``status`` and, when the file holds strain, ``strain`` and ``rotation``.
    Existing files are kept unless ``overwrite``: ``FileExistsError`` names the first one.
    Returns the paths written.
    """
    formats = tuple(formats)
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ValueError(f"figure formats must be among {', '.join(FORMATS)}, got {', '.join(bad) or 'none'}")
    with ResultsView(results) as v:
        if point is None:
            point = (v.rows // 2, v.cols // 2)
        point = v.flat_index(point)
        has_strain = v.has("strain")
    per_map = max(10_000, max_points // 16)  # one small map per ROI
    jobs = [("roi_layout", lambda: roi_layout(results)),
            ("displacement_magnitude", lambda: displacement_maps(results, max_points=per_map)),
            ("displacement_dx", lambda: displacement_maps(results, component="dx", max_points=per_map)),
            ("displacement_dy", lambda: displacement_maps(results, component="dy", max_points=per_map)),
            ("quiver", lambda: displacement_quiver(results, point)),
            ("peak_height", lambda: peak_height_map(results, max_points=max_points)),
            ("status", lambda: status_map(results, max_points=max_points))]
    if has_strain:
        jobs += [("strain", lambda: strain_maps(results, max_points=max_points)),
                 ("rotation", lambda: rotation_maps(results, max_points=max_points))]
    targets = [os.path.join(out_dir, f"{name}.{fmt}") for name, _ in jobs for fmt in formats]
    if not overwrite:
        for t in targets:
            if os.path.exists(t):
                raise FileExistsError(errno.EEXIST, "figure already exists (overwrite=True replaces it)", t)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for name, draw in jobs:
        fig = draw()
        for fmt in formats:
            path = os.path.join(out_dir, f"{name}.{fmt}")
            tmp = f"{path}.part"
            fig.savefig(tmp, format=fmt, dpi=dpi)
            os.replace(tmp, path)  # a killed run leaves no half-written figure under the real name
            written.append(path)
    return written
