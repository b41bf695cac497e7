"""References simulated per scan point from a master pattern (``--ref simulated``): absolute strain.

A deformed sample may hold no strain-free point to serve as a reference. Instead each point is
correlated against the pattern its crystal would give unstrained: projected from an EMsoft
master pattern (:func:`ebsdxc.simulate.simulate_patterns`, on the GPU when there is one) at the
point's orientation and pattern centre, and processed like the scan's patterns (the per-pattern
background division and filters, not the detector's static background, which a simulation does
not have). The fit against it is then the absolute elastic strain.

The start orientation comes from an orientation map (indexing is good to about a degree) and
the correlation sees the difference as a lattice rotation; so, as OpenXY does, the reference is
simulated again at the orientation the fit found, ``g R^T`` (the deformed crystal's), until the
rotation left is below ``tolerance_deg`` or ``iterations`` simulations were made. A step is taken
only from a fit that holds (at least ``min_rois`` ROIs, residual below ``max_residual_px``) and
only up to ``max_step_deg``; a re-simulated reference that matches worse (lower median peak
height) than the one before is dropped and the point keeps the better one. Each point's
final reference orientation is kept (``simulated_reference/orientation``); the strain pass fits
against it with the point's own PC.

The PC of each point's reference comes from the scan's PC model (its file, or ``--pc-calibrate``)
unless ``pc_refine`` is set: then, before the first simulation, each point's PC and orientation
are refined as the calibration refines them (:func:`ebsdxc.pc_calibration.refine_pc`, NCC with
simulations) and the references are simulated, and the strain fitted, with the point's own PC
(``simulated_reference/pattern_centre``). A caveat that is physics, not code: a PC change and a
deformation both move the pattern nearly as a homography, so a refinement on a strained pattern
takes part of its strain for a PC (measured: about 0.1% of the width per 1e-3 strain), and the
strain fitted afterwards loses that part. Refine per point where the PC model is poor and the
strain small; keep the model where it holds.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

import numpy as np

from .. import status as st
from ..crystal import rotation_angle
from ..simulate import simulate_patterns
from ..strain import FitOptions, fit_strain, polar_decomposition

__all__ = ["SimulatedReferences", "POINT_DATASETS", "MAX_ITERATIONS", "MAX_PC_CHANGE", "point_geometry",
           "simulated_geometry_maps", "start_orientations"]

#: OpenXY's bound on re-simulations.
MAX_ITERATIONS = 6

#: Per-point datasets of a run with simulated references (as :data:`ebsdxc.refine.POINT_DATASETS`).
POINT_DATASETS = {
    "simulated_reference/orientation": ((3, 3), np.float64, np.nan,
                                        "orientation g (sample -> crystal, v_c = g v_s) of the unstrained crystal "
                                        "each point's reference was simulated for: the last re-estimate"),
    "simulated_reference/simulations": ((), np.int8, -1, "how many references were simulated for the point (-1: none)"),
    "simulated_reference/rotation_left_deg": ((), np.float32, np.nan,
                                              "lattice rotation (degrees) the last correlation still found between the "
                                              "point and its last reference"),
    "simulated_reference/pattern_centre": ((3,), np.float64, np.nan,
                                           "Bruker PC each point's reference was simulated with, and its strain "
                                           "fitted with (the PC model's, or the point's own with pc_refine)"),
}

#: Largest PC change (fraction of the detector) a per-point refinement may make; beyond it the
#: search found another optimum, not the point's PC, and the model's PC is kept.
MAX_PC_CHANGE = 0.05


@dataclass(frozen=True, eq=False)
class SimulatedReferences:
    """How to make each point's reference, picklable (it travels with a Dask job).

    Attributes
    ----------
    master : (2, n, n) float32 ndarray
        Square-Lambert master pattern [north, south].
    orientation : (n_points, 3, 3) float64
        Start orientation of every flat scan point (sample -> crystal).
    pc : (n_points, 3) float64
        Bruker PC of every point (its reference is simulated with it).
    shape : (int, int)
        Pattern shape after preprocessing (binning).
    sample_tilt, detector_tilt : float
    stiffness : (3, 3, 3, 3) float64
        Crystal stiffness, for the fit that re-estimates the orientation.
    centres : (n_roi, 2) float64
        ROI centres of the run.
    iterations : int
        Most simulations per point (1: no re-estimation).
    pc_refine : bool
        Refine each point's PC (and start orientation) by NCC with simulations before its
        first reference is made (the module's caveat applies).
    pc_refine_iterations : int
        Nelder-Mead iterations of that refinement per point.
    tolerance_deg : float
        Re-estimation stops for a point whose remaining rotation is below this.
    min_peak_height : float
    label : dict
        Provenance (the master pattern's description).
    """

    master: np.ndarray
    orientation: np.ndarray
    pc: np.ndarray
    shape: tuple
    sample_tilt: float
    detector_tilt: float
    stiffness: np.ndarray
    centres: np.ndarray
    iterations: int = 3
    tolerance_deg: float = 0.01
    min_peak_height: float = 0.3
    max_step_deg: float = 5.0
    max_residual_px: float = 0.5
    min_rois: int = 6
    pc_refine: bool = False
    pc_refine_iterations: int = 400
    label: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not (isinstance(self.iterations, int) and 1 <= self.iterations <= MAX_ITERATIONS):
            raise ValueError(f"iterations must be a whole number in 1..{MAX_ITERATIONS}, got {self.iterations!r}")
        if not (np.isfinite(self.tolerance_deg) and self.tolerance_deg > 0):
            raise ValueError(f"tolerance_deg must be positive, got {self.tolerance_deg!r}")
        if not isinstance(self.pc_refine, bool):
            raise ValueError(f"pc_refine must be true or false, got {self.pc_refine!r}")
        if not (isinstance(self.pc_refine_iterations, int) and self.pc_refine_iterations >= 1):
            raise ValueError(f"pc_refine_iterations must be a whole number >= 1, got {self.pc_refine_iterations!r}")

    def digest(self) -> str:
        """Identity of what these references make (for a job's key)."""
        h = hashlib.sha1()
        for a in (self.master, self.orientation, self.pc, self.stiffness, self.centres):
            h.update(np.ascontiguousarray(a).tobytes())
        h.update(repr((self.shape, self.sample_tilt, self.detector_tilt, self.iterations, self.tolerance_deg,
                       self.min_peak_height, self.max_step_deg, self.max_residual_px, self.min_rois,
                       self.pc_refine, self.pc_refine_iterations)).encode())
        return h.hexdigest()[:16]

    def to_dict(self) -> dict:
        return {"kind": "simulated", "master_pattern": self.label, "iterations": self.iterations,
                "tolerance_deg": self.tolerance_deg, "pattern_shape": list(self.shape),
                "max_step_deg": self.max_step_deg, "max_residual_px": self.max_residual_px, "min_rois": self.min_rois,
                "pattern_centre": ("each point's own, refined by NCC with simulations "
                                   f"({self.pc_refine_iterations} Nelder-Mead iterations at most)" if self.pc_refine
                                   else "the scan's PC model"),
                "re_estimation": "the reference is simulated again at g R^T (R: the rotation the fit finds) until "
                                 "the rotation left is below tolerance_deg"}

    # -- on the device ------------------------------------------------------------------
    def simulate(self, xp, master, pc, g):
        """(B, H, W) float32 references for PCs (B, 3) and orientations (B, 3, 3) (host arrays)."""
        return simulate_patterns(master, shape=self.shape, pc=xp.asarray(pc), orientations=xp.asarray(g),
                                 sample_tilt=self.sample_tilt, detector_tilt=self.detector_tilt)

    def refine_pc(self, xp, master, patterns, pc, g, prepare):
        """Each point's own PC and orientation (host (B, 3), (B, 3, 3)) from its preprocessed
        pattern; where the search fails, moves the PC by more than :data:`MAX_PC_CHANGE` or
        matches no better than the start, the start values are kept. Also returns the NCC."""
        from ..pc_calibration import refine_pc

        r = refine_pc(patterns, master, pc0=pc, orientations0=g, sample_tilt=self.sample_tilt,
                      detector_tilt=self.detector_tilt, max_iterations=self.pc_refine_iterations, prepare=prepare)
        take = (np.isfinite(r.pc).all(axis=1) & (np.abs(r.pc - pc).max(axis=1) <= MAX_PC_CHANGE)
                & (r.ncc > r.ncc_start))
        return (np.where(take[:, None], r.pc, pc), np.where(take[:, None, None], r.orientation, g),
                np.where(take, r.ncc, r.ncc_start))

    def rotation_left(self, xp, result, pc, g):
        """The rotation R (B, 3, 3, host) the ROI shifts ``result`` show between each point and
        its reference, its angle in degrees (NaN where they do not fit), and whether the fit
        holds well enough to step on (B,) bool."""
        fit = fit_strain(result.displacement, result.peak_height, result.status, centres=self.centres,
                         shape=self.shape, pc=xp.asarray(pc), pc_ref=xp.asarray(pc), stiffness=self.stiffness,
                         orientation=xp.asarray(g), sample_tilt=self.sample_tilt,
                         detector_tilt=self.detector_tilt, options=FitOptions(min_peak_height=self.min_peak_height))
        F = fit.F
        ok = xp.isfinite(F).all(axis=(1, 2))
        _, R = polar_decomposition(xp.where(ok[:, None, None], F, xp.eye(3)), xp)  # a failed fit: no rotation
        R = np.asarray(R.get() if hasattr(R, "get") else R)
        ok = np.asarray(ok.get() if hasattr(ok, "get") else ok)
        angle = np.where(ok, np.degrees(np.asarray(rotation_angle(R))), np.nan)
        res = fit.residual_px
        used = fit.n_used
        res = np.asarray(res.get() if hasattr(res, "get") else res)
        used = np.asarray(used.get() if hasattr(used, "get") else used)
        holds = ok & (res < self.max_residual_px) & (used >= self.min_rois) & (angle <= self.max_step_deg)
        return R, angle, holds

    @staticmethod
    def match_quality(xp, result):
        """Median peak height of each point's ok ROIs (B,), host; -1 where none."""
        h = xp.where(result.status == st.OK, result.peak_height, xp.nan)
        h = np.asarray(h.get() if hasattr(h, "get") else h, dtype=np.float64)
        with np.errstate(all="ignore"):
            q = np.nanmedian(np.where(np.isnan(h).all(axis=1, keepdims=True), -1.0, h), axis=1)
        return q


def flagged(status) -> np.ndarray:
    """Points (B,) without a measurement to re-estimate from: no pattern."""
    s = np.asarray(status.get() if hasattr(status, "get") else status)
    return (s == st.MISSING_PATTERN).all(axis=1)


def point_geometry(geom, cfg, orientation_map, *, pc_map=None, path=None):
    """The strain geometry of a run with simulated references: every point is its own
    reference point (its own PC), with the orientation its last reference was simulated for
    (``orientation_map`` (rows, cols, 3, 3), NaN where none) and, with ``pc_map`` (rows, cols,
    3), the PC it was simulated with where that is known (the geometry's elsewhere)."""
    from ..hrebsd import grain_geometry

    own = False
    if pc_map is not None:
        pcs = np.asarray(pc_map, dtype=np.float64).reshape(geom.pc.shape)
        known = np.isfinite(pcs).all(axis=-1, keepdims=True)
        own = bool(known.any()) and not np.allclose(np.where(known, pcs, geom.pc), geom.pc, rtol=0, atol=1e-12)
        geom = dataclasses.replace(geom, pc=np.where(known, pcs, geom.pc))
    g = np.asarray(orientation_map, dtype=np.float64)
    rows, cols = g.shape[:2]
    has = np.isfinite(g).all(axis=(-2, -1))
    flat = np.where(has, np.arange(rows * cols).reshape(rows, cols), -1)
    out = grain_geometry(geom, cfg, reference_flat=flat, orientations=np.where(has[..., None, None], g, 0.0),
                         phase=None, phases=({"name": geom.material},), path=path)
    sources = {**out.sources, "pattern_centre_ref": "each point's own (its reference is simulated with it)",
               **({"pattern_centre": "each point's own, refined by NCC with simulations (pc_refine)"} if own else {}),
               "orientation": "each point's simulated reference (re-estimated)"}
    return dataclasses.replace(out, sources=sources)


def simulated_geometry_maps(results):
    """The orientation (rows, cols, 3, 3) and PC (rows, cols, 3, or ``None`` in files made before
    it was recorded) each point's reference was simulated with, from a results file."""
    import h5py

    with h5py.File(results, "r") as f:
        g_map = f["ebsdxc/simulated_reference/orientation"][()]
        pc = f.get("ebsdxc/simulated_reference/pattern_centre")
        pc_map = None if pc is None else pc[()]
    return g_map, pc_map


def start_orientations(source, geom=None, orientations=None) -> np.ndarray | None:
    """(n_points, 3, 3) start orientation of every flat point from an orientation map (the file
    ``orientations``, or the one the scan stores; NaN where it indexes no point), else the
    strain geometry's one orientation for all (``None`` without ``geom``)."""
    from ..crystal import euler_to_matrix
    from .grain_references import read_orientations

    omap = read_orientations(source, orientations)
    if omap is None:
        if geom is None:
            return None
        return np.broadcast_to(np.asarray(geom.orientation, dtype=np.float64), (source.grid.size, 3, 3)).copy()
    return euler_to_matrix(np.asarray(omap.euler_deg, dtype=np.float64)).reshape(-1, 3, 3)
