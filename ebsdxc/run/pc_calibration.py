"""Pattern-centre calibration of a scan: refine the PC at a grid of points, fit a PC model.

:func:`calibrate_pattern_centre` picks calibration points (an even grid over the scan, or the
points given), reads their patterns as the correlation pass does (neighbour averaging
included, :func:`ebsdxc.run.inputs.read_points`) and preprocesses them with a
:class:`ebsdxc.preprocess.PatternPreprocessor`, refines PC and orientation per point against
a master pattern (:func:`ebsdxc.pc_calibration.refine_pc`) and fits a PC model to the points
that refined well (:func:`ebsdxc.pc_calibration.fit_pc_model`). The result says which points
were left out of the fit and why.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

import numpy as np

from ..backend import select_backend
from ..crystal import euler_to_matrix
from ..errors import InputError
from ..geometry import check_pc
from ..pc_calibration import PCModel, fit_pc_model, refine_pc
from ..preprocess import PatternPreprocessor, PreprocessConfig
from .grain_references import read_orientations
from .inputs import check_averaging, read_points, static_background

__all__ = ["PCCalibration", "calibrate_pattern_centre", "calibrated_geometry", "calibration_points"]

#: Points whose refined NCC is below this are left out of the model fit by default.
MIN_NCC = 0.2


@dataclass(frozen=True, eq=False)
class PCCalibration:
    """Result of :func:`calibrate_pattern_centre`.

    Attributes
    ----------
    points : (N, 2) int, scan (row, col) of each calibration point
    pc : (N, 3) float64, refined Bruker PCs
    orientation : (N, 3, 3) float64, refined orientations (sample -> crystal)
    ncc, ncc_start : (N,) float64, NCC after and before refinement
    converged : (N,) bool
    used : (N,) bool, the point entered the model fit
    excluded : tuple of str, per point why it was left out ("" when used)
    model : PCModel, the fitted model (``model.pc_map`` is the PC of every scan slot)
    settings : dict, JSON-able: tilts, thresholds, preprocessing, master pattern
    """

    points: np.ndarray
    pc: np.ndarray
    orientation: np.ndarray
    ncc: np.ndarray
    ncc_start: np.ndarray
    converged: np.ndarray
    used: np.ndarray
    excluded: tuple
    model: PCModel
    settings: dict = field(default_factory=dict)

    @property
    def pc_map(self) -> np.ndarray:
        """(rows, cols, 3) Bruker PC of every scan slot, from the model."""
        return self.model.pc_map

    def to_dict(self) -> dict:
        """JSON-able provenance: method, points and their results, model, residuals, settings."""
        return {
            "method": "per-point Nelder-Mead refinement of PC and orientation maximising the NCC with patterns "
                      "projected from the master pattern, then a PC model fitted to the points that refined well",
            "pc_convention": "bruker",
            "points": self.points.tolist(),
            "pc": self.pc.tolist(),
            "ncc": self.ncc.tolist(),
            "ncc_start": self.ncc_start.tolist(),
            "converged": self.converged.tolist(),
            "used": self.used.tolist(),
            "excluded": {f"{r},{c}": why for (r, c), why in zip(self.points.tolist(), self.excluded) if why},
            "model": self.model.model,
            "model_parameters": self.model.parameters,
            **self.model.summary(),
            **self.settings,
        }


def calibration_points(grid, points=(5, 5)) -> np.ndarray:
    """(N, 2) scan (row, col) of the calibration points.

    ``points`` ``(n_rows, n_cols)`` spreads an even grid over the scan (the centres of equal
    bands of rows and columns, so no point sits on the map edge unless the scan is small);
    an ``(N, 2)`` array names the points. Hexagonal padding slots move one column left.
    """
    rows, cols = grid.rows, grid.cols
    a = np.asarray(points)
    if a.shape == (2,) and np.issubdtype(a.dtype, np.integer):
        n_r, n_c = (int(v) for v in a)
        if n_r < 1 or n_c < 1:
            raise ValueError(f"points must be a positive (n_rows, n_cols) grid, got {points!r}")
        r = np.unique(np.round((np.arange(n_r) + 0.5) * rows / n_r - 0.5).astype(np.int64))
        c = np.unique(np.round((np.arange(n_c) + 0.5) * cols / n_c - 0.5).astype(np.int64))
        rc = np.stack(np.meshgrid(r, c, indexing="ij"), axis=-1).reshape(-1, 2)
    else:
        if a.ndim != 2 or a.shape[1] != 2 or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"points must be (n_rows, n_cols) or an (N, 2) int array of (row, col), got {points!r}")
        rc = a.astype(np.int64)
        if np.any(rc < 0) or np.any(rc[:, 0] >= rows) or np.any(rc[:, 1] >= cols):
            raise ValueError(f"points must lie in the {rows} x {cols} scan grid")
    if grid.kind == "hexagonal":
        pad = (rc[:, 0] % 2 == 1) & (rc[:, 1] == cols - 1)
        rc[pad, 1] -= 1
    _, first = np.unique(rc[:, 0] * cols + rc[:, 1], return_index=True)
    return rc[np.sort(first)]


def _start_orientations(source, orientations, rc, path):
    grid = source.grid
    if orientations is None:
        euler = source.metadata.get("euler_angles")
        if euler is not None and np.asarray(euler).shape == (3,):
            return np.broadcast_to(euler_to_matrix(np.asarray(euler, dtype=np.float64)), (len(rc), 3, 3)).copy()
        omap = read_orientations(source)
        if omap is None:
            raise InputError("pattern-centre calibration needs start orientations: give orientations= (an "
                             "orientation map) or a scan that stores them", path)
        orientations = omap.euler_deg
    g = np.asarray(orientations, dtype=np.float64)
    if g.shape == (3,):
        g = np.broadcast_to(euler_to_matrix(g), (grid.rows, grid.cols, 3, 3))
    elif g.shape == (3, 3):
        g = np.broadcast_to(g, (grid.rows, grid.cols, 3, 3))
    elif g.shape == (grid.rows, grid.cols, 3):
        g = euler_to_matrix(g)
    elif g.shape != (grid.rows, grid.cols, 3, 3):
        raise ValueError(f"orientations must be Bunge degrees (3,) or ({grid.rows}, {grid.cols}, 3), or matrices "
                         f"(3, 3) or ({grid.rows}, {grid.cols}, 3, 3), got shape {g.shape}")
    return np.array(g[rc[:, 0], rc[:, 1]])


def calibrate_pattern_centre(source, master, *, points=(5, 5), pc0, orientations=None, preprocess=None,
                             backend=None, sample_tilt: float = 70.0, detector_tilt: float = 0.0,
                             model: str = "plane", step=None, pixel_size=None, binning: float = 1,
                             min_ncc: float = MIN_NCC, **refine_options) -> PCCalibration:
    """Calibrate the pattern centre of a scan against a master pattern.

    Parameters
    ----------
    source : PatternSource or path
        The scan (a path is opened with :func:`ebsdxc.io.open_scan`).
    master : MasterPattern or array_like
        :func:`ebsdxc.io.master_pattern.read_master_pattern`'s result (its ``to_dict`` goes
        into the provenance) or a ``(2, n, n)`` Lambert array.
    points : (int, int) or (N, 2) int array
        An even grid of ``n_rows x n_cols`` calibration points, or the (row, col) of each
        (see :func:`calibration_points`). Points without a pattern are skipped.
    pc0 : array_like
        Start Bruker PC: ``(3,)``, or ``(rows, cols, 3)`` per slot.
    orientations : array_like, optional
        Start orientations: Bunge degrees ``(rows, cols, 3)`` (or ``(3,)`` for all) or
        matrices ``(rows, cols, 3, 3)`` (sample -> crystal). Default: the scan's
        ``euler_angles`` metadata or the orientation map it stores.
    preprocess : PreprocessConfig, optional
        How the patterns are prepared. Default: division by a Gaussian blur of a tenth of
        the pattern width (dynamic background), nothing else. A ``static_background`` of
        ``"mean"`` or ``"file"`` is read from the scan.
    backend : Backend, optional
        Where to simulate and correlate (default: the GPU when there is one).
    sample_tilt, detector_tilt : float
        Degrees.
    model : {"plane", "extrapolation"}
        The PC model (:func:`ebsdxc.pc_calibration.fit_pc_model`).
    step, pixel_size, binning : optional
        ``"extrapolation"``: scan steps ``(step_y, step_x)`` (default the scan's), unbinned
        detector pixel size and detector binning (microns); preprocessing binning is added.
    min_ncc : float
        Points whose refined NCC is lower, or whose search did not converge, are left out
        of the fit.
    **refine_options
        Passed to :func:`ebsdxc.pc_calibration.refine_pc` (``pc_step``, ``angle_step``,
        tolerances, ``max_iterations``, ``refine_orientation``).

    Returns
    -------
    PCCalibration

    Raises
    ------
    InputError
        No start orientations, no calibration point with a pattern, or too few good points
        for the model.
    """
    if isinstance(source, (str, os.PathLike)):
        from .. import io as scan_io

        source = scan_io.open_scan(source)
    path = source.path
    backend = backend or select_backend("auto")
    xp = backend.xp
    grid = source.grid
    H, W = source.pattern_shape
    if preprocess is None:
        preprocess = PreprocessConfig(dynamic_background_sigma=max(H, W) / 10.0)
    check_averaging(preprocess, source)
    if not (np.isfinite(min_ncc) and -1 <= min_ncc < 1):
        raise ValueError(f"min_ncc must be a number in [-1, 1), got {min_ncc!r}")

    rc = calibration_points(grid, points)
    present = grid.in_grid() if source.present is None else source.present & grid.in_grid()
    skipped = [(int(r), int(c)) for r, c in rc if not present[r, c]]
    rc = np.array([p for p in rc if present[p[0], p[1]]], dtype=np.int64).reshape(-1, 2)
    if len(rc) == 0:
        raise InputError("none of the pattern-centre calibration points holds a pattern", path)

    pc0 = np.asarray(pc0, dtype=np.float64)
    if pc0.shape == (3,):
        pc0 = np.broadcast_to(pc0, (grid.rows, grid.cols, 3))
    if pc0.shape != (grid.rows, grid.cols, 3):
        raise ValueError(f"pc0 must be (3,) or ({grid.rows}, {grid.cols}, 3) Bruker PCs, got shape {pc0.shape}")
    start_pc = check_pc(pc0[rc[:, 0], rc[:, 1]], (H, W), what="pc0")
    g0 = _start_orientations(source, orientations, rc, path)

    prep = PatternPreprocessor(preprocess, backend,
                               static_background=static_background(preprocess.static_background, source, backend))
    flat = rc[:, 0] * grid.cols + rc[:, 1]
    patterns = prep(xp.asarray(read_points(source, preprocess, flat)))
    mask = prep.screen_mask((H, W))
    lam = xp.asarray(getattr(master, "lambert", master))
    # the simulations get the same per-pattern processing; the static background is the detector's
    alike = PatternPreprocessor(dataclasses.replace(preprocess, static_background=None, average_neighbours=0,
                                                    binning=1), backend)
    ref = refine_pc(patterns, lam, pc0=start_pc, orientations0=g0, sample_tilt=sample_tilt,
                    detector_tilt=detector_tilt, mask=mask, prepare=None if alike.is_identity else alike.correct,
                    **refine_options)

    excluded = []
    for ncc, ok in zip(ref.ncc, ref.converged):
        if not np.isfinite(ncc) or ncc < min_ncc:
            excluded.append(f"NCC {ncc:.3f} below {min_ncc:g}")
        elif not ok:
            excluded.append("the search did not converge")
        else:
            excluded.append("")
    used = np.array([not why for why in excluded], dtype=bool)
    shape_out = tuple(int(s) for s in patterns.shape[-2:])
    if model not in ("plane", "extrapolation"):
        raise ValueError(f"model must be 'plane' or 'extrapolation', got {model!r}")
    kw = {}
    if model == "extrapolation":
        kw = dict(step=grid.step if step is None else step, pixel_size=pixel_size,
                  binning=float(binning) * preprocess.binning, shape=shape_out, sample_tilt=sample_tilt,
                  detector_tilt=detector_tilt)
        if kw["step"] is None or pixel_size is None:
            raise ValueError("model 'extrapolation' needs the scan step (the scan states none: give step=) and "
                             "pixel_size (the unbinned detector pixel size, microns)")
    try:
        fitted = fit_pc_model(rc, ref.pc, grid_shape=(grid.rows, grid.cols), model=model, use=used, **kw)
    except ValueError as e:
        raise InputError(f"pattern-centre calibration: {int(used.sum())} of {len(rc)} points refined well "
                         f"(NCC >= {min_ncc:g}, converged); the {model} model cannot be fitted to them ({e})",
                         path) from None
    describe = getattr(master, "to_dict", None)
    settings = {
        "sample_tilt": float(sample_tilt), "detector_tilt": float(detector_tilt), "min_ncc": float(min_ncc),
        "pattern_shape": list(shape_out), "skipped_points": [list(p) for p in skipped],
        "preprocess": {k: v for k, v in vars(preprocess).items() if v is not None},
        "refine_options": {k: (v if isinstance(v, (bool, int, float, str)) else repr(v))
                           for k, v in refine_options.items()},
        "master_pattern": describe() if callable(describe) else {"size": int(lam.shape[-1])},
        "scan": os.fspath(path),
    }
    return PCCalibration(points=rc, pc=ref.pc, orientation=ref.orientation, ncc=ref.ncc, ncc_start=ref.ncc_start,
                         converged=ref.converged, used=used, excluded=tuple(excluded), model=fitted,
                         settings=settings)


def calibrated_geometry(geom, cfg, source, *, ref_index=None, orientations=None, backend=None, pixel_size=None,
                        preprocess=None):
    """The strain geometry ``geom`` with its PCs from a calibration, and the calibration.

    ``cfg`` (a :class:`~ebsdxc.hrebsd.StrainConfig`) names the master pattern, the points and
    the model; patterns are prepared by ``preprocess`` (the run's; default: a dynamic
    background division); the start PCs are ``geom``'s and the start orientations ``orientations``
    (per point, e.g. a grain map's) or else the reference orientation. A reference that is a
    scan point takes that point's calibrated PC; a reference from a file keeps its own.
    """
    import dataclasses

    from .. import materials
    from ..io.master_pattern import read_master_pattern

    try:
        mat = materials.material(cfg.material)
    except (TypeError, ValueError):
        mat = None  # several phases (per grain): the master pattern's material is not checked against one
    if mat is not None and (mat.structure is None or mat.a is None):
        mat = None
    master = read_master_pattern(cfg.master_pattern, material=mat)
    cal = calibrate_pattern_centre(source, master, points=cfg.pc_calibration_points, pc0=geom.pc,
                                   orientations=geom.orientation if orientations is None else orientations,
                                   backend=backend, preprocess=preprocess, sample_tilt=geom.sample_tilt,
                                   detector_tilt=geom.detector_tilt,
                                   model=cfg.pc_model, step=source.grid.step, pixel_size=pixel_size,
                                   binning=cfg.binning)
    used = int(cal.used.sum())
    sources = {**geom.sources, "pattern_centre": f"calibrated: {cfg.pc_model} fitted to {used} of {len(cal.used)} "
                                                 f"points refined against {os.path.basename(cfg.master_pattern)}"}
    pc_ref = geom.pc_ref
    if ref_index is not None and geom.sources.get("pattern_centre_ref") == "scan point":
        cols = source.grid.cols
        flat = int(ref_index) if np.ndim(ref_index) == 0 else int(ref_index[0]) * cols + int(ref_index[1])
        pc_ref = cal.pc_map.reshape(-1, 3)[flat].copy()
        sources["pattern_centre_ref"] = "scan point, calibrated"
    return dataclasses.replace(geom, pc=np.array(cal.pc_map), pc_ref=np.asarray(pc_ref, dtype=np.float64),
                               sources=sources), cal
