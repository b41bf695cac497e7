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
All at once (:mod:`.figures`)
    :func:`write_figures` (``ebsdxc plot RESULTS -o DIR``)
"""

from .figures import FORMATS, write_figures
from .maps import displacement_maps, peak_height_map, rotation_maps, status_map, strain_maps
from .pattern import correlation_map, displacement_quiver, point_detail, roi_layout
from .results_view import ResultsView

__all__ = ["displacement_maps", "peak_height_map", "status_map", "strain_maps", "rotation_maps",
           "roi_layout", "displacement_quiver", "point_detail", "correlation_map", "write_figures",
           "FORMATS", "ResultsView"]
