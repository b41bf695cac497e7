"""Per-ROI status codes (the ``status`` dataset of the results file).

Anything but ``OK`` has NaN displacement; a failed match is never reported as a
zero shift.
"""

OK = 0
PEAK_ON_BORDER = 1  # the best match is on the edge of the searched shifts: the true one may lie beyond
CONSTANT_TILE = 2  # no contrast in the scan or reference subregion: nothing to match
NOT_FINITE = 3  # NaN or Inf in the subregion
NOT_PROCESSED = 4  # the scan point has not been processed (yet)
MISSING_PATTERN = 5  # no pattern: a hexagonal grid's padding slot, a point never stored, or all zeros
OUTSIDE_MASK = 6  # the subregion reaches outside the detector mask (e.g. off the phosphor screen)
NO_REFERENCE = 7  # a reference per grain: the point lies in no grain, or its grain has no usable reference
# No subpixel maximum within a pixel of the integer peak: the correlation peak is flat along some
# direction (e.g. a band crossing a small subregion) or a slope, so its position is not measured.
SUBPIXEL_FAILED = 8
# Whole-pattern refinement (--refine icgn) did not converge, or converged to a poor match: the
# point's shifts are not reported (its IC-GN record says why).
REFINE_FAILED = 9

DESCRIPTIONS = {
    OK: "ok",
    PEAK_ON_BORDER: "peak on the border of the searched shifts",
    CONSTANT_TILE: "constant subregion (no contrast) in the scan or reference pattern",
    NOT_FINITE: "NaN or Inf in the subregion",
    NOT_PROCESSED: "scan point not processed",
    MISSING_PATTERN: "no pattern at this scan point (not in the grid, not stored, or all zeros)",
    OUTSIDE_MASK: "subregion reaches outside the detector mask",
    NO_REFERENCE: "no reference: the point lies in no grain, or its grain has no usable reference point",
    SUBPIXEL_FAILED: "subpixel fit failed: no correlation maximum within 1 px of the integer peak "
                     "(a flat or sloping peak)",
    REFINE_FAILED: "whole-pattern refinement (IC-GN) failed at this point: not converged, or a whole-pattern "
                   "correlation below refine.min_zncc (see icgn/status)",
}
