"""Figures of a results file (matplotlib): maps over the scan and views over the pattern.

Every function takes the path of a results file and returns a
:class:`matplotlib.figure.Figure`, made without pyplot: nothing is shown or kept open by the
library. In Jupyter, ``display(fig)``; elsewhere, ``fig.savefig("name.png")``. Maps of large
scans are read every n-th point (``max_points``), block of rows by block of rows, so no
dataset is loaded whole. Hexagonal grids are drawn with each point where
``/ebsdxc/positions`` puts it (odd rows half a step to the right).

Maps over the scan (:mod:`.maps`)
    :func:`displacement_maps`, :func:`peak_height_map`, :func:`status_map`,
    :func:`strain_maps`, :func:`rotation_maps`
Over the pattern (:mod:`.pattern`)
    :func:`roi_layout`, :func:`displacement_quiver`, :func:`point_detail`,
    :func:`correlation_map` (the numbers behind :func:`point_detail`)
Polycrystals (:mod:`.polycrystal`)
    :func:`grain_map`, :func:`gnd_density_map`, :func:`grain_strain_statistics`,
    :func:`grain_strain_table` (the numbers behind :func:`grain_strain_statistics`)
DIC fields (:mod:`.dic`)
    :func:`dic_displacement_fields`, :func:`dic_strain_fields`, :func:`dic_vectors`,
    :func:`dic_frame_series`, :func:`dic_fields` (the numbers behind them)
All at once (:mod:`.figures`)
    :func:`write_figures` (``ebsdxc plot RESULTS -o DIR``), :func:`figure_jobs`

Figures are laid out in inches when they are made (:mod:`.panels`), without a layout
engine: a figure is drawn once per file written.
"""

from .dic import dic_displacement_fields, dic_fields, dic_frame_series, dic_strain_fields, dic_vectors
from .figures import FORMATS, figure_jobs, write_figures
from .maps import displacement_maps, peak_height_map, rotation_maps, status_map, strain_maps
from .pattern import correlation_map, displacement_quiver, point_detail, roi_layout
from .polycrystal import gnd_density_map, grain_map, grain_strain_statistics, grain_strain_table
from .results_view import ResultsView

__all__ = ["displacement_maps", "peak_height_map", "status_map", "strain_maps", "rotation_maps",
           "roi_layout", "displacement_quiver", "point_detail", "correlation_map", "grain_map",
           "gnd_density_map", "grain_strain_statistics", "grain_strain_table", "write_figures", "figure_jobs",
           "FORMATS", "ResultsView", "dic_displacement_fields", "dic_strain_fields", "dic_vectors", "dic_frame_series",
           "dic_fields"]
