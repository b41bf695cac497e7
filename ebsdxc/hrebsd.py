"""The strain pass: displacement results -> F, strain and rotation in the results file.

Composes :mod:`ebsdxc.geometry` (pattern centres), :mod:`ebsdxc.materials` (stiffness),
:mod:`ebsdxc.strain` (the fit and remapping) and the results file; used by ``ebsdxc
process`` when a material is given and by ``ebsdxc strain`` on an existing file.

Where the geometry comes from (first that applies):

pattern centre of the scan points (``pc_map``)
    ``file``: per-point PCs stored in the scan file; ``plane``: a plane fitted over them;
    ``extrapolate``: from ``pc`` at the reference point (or the map centre) with the scan
    step and the detector pixel size (kikuchipy's ``extrapolate_pc``); ``constant``: ``pc``
    everywhere. ``auto``: ``file`` when the scan has per-point PCs, else ``constant``.
pattern centre of the reference
    ``pc_ref``; for ``--ref-index`` the scan point's PC; a ``pattern_centre`` in the
    reference TIFF's JSON description; else ``pc``.
tilts, orientation
    Options, else the scan file's attributes (``sample_tilt``, ``detector_tilt``,
    ``euler_angles`` = Bunge degrees), else tilts 70 and 0 degrees; the orientation has no
    default.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass

import numpy as np

from . import geometry
from .backend import is_out_of_memory, pinned_empty
from .crystal import euler_to_matrix
from .errors import InputError
from .materials import parse_material, stiffness_tensor
from .pc_calibration import PC_MODELS as _PC_MODELS
from .progress import NullProgress, Progress
from .status import NOT_PROCESSED
from .strain import (
    FIT_DESCRIPTIONS,
    FIT_OK,
    FitOptions,
    fit_strain,
    polar_decomposition,
    remap_pattern,
)

__all__ = ["FIT_POINTS", "PC_MAPS", "PC_MODELS", "SIMULATED_PC", "REMAP_BATCH", "GrainGeometry", "StrainConfig",
           "StrainGeometry", "binned_geometry", "compute_strain", "grain_geometry", "resolve_geometry"]

PC_MAPS = ("auto", "constant", "file", "plane", "extrapolate")
PC_MODELS = _PC_MODELS
SIMULATED_PC = ("model", "refine")
REMAP_BATCH = 256  # scan points re-correlated together against their remapped references
# ... and at most this many of their pixels: remapping holds the float64 source coordinates of
# every pixel (0.27 GB at 2^24 pixels) and each point's own prepared reference
REMAP_PIXELS = 1 << 24
FIT_POINTS = 16384  # points per fit call: large enough to fill a GPU, small enough for any memory


def _real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and bool(np.isfinite(v))


@dataclass(frozen=True)
class StrainConfig:
    """Options of the strain pass (a recipe's ``[strain]`` table).

    Strain is computed when ``material`` is set. Angles in degrees; ``pc`` and ``pc_ref`` in
    ``pc_convention``; ``pixel_size`` is the unbinned detector pixel in micrometres. Errors
    name the options by their recipe path (``strain.pc_map``).

    GND density: with ``gnd`` the Nye tensor is computed from the rotation gradients where the
    scan step is known (the file's, else ``step`` in micrometres), and the lower-bound GND
    density where the material has slip systems (FCC, BCC presets; ``slip_systems``: a
    slip-system file, e.g. for HCP).

    Pattern-centre calibration: with ``pc_calibrate`` the PCs are refined at an even grid of
    ``pc_calibration_points`` (rows, cols) scan points against patterns projected from
    ``master_pattern`` (an EMsoft master-pattern file), and ``pc_model`` ("plane" or
    "extrapolation") fitted to them gives every point's PC.

    Simulated references (``--ref simulated``): ``simulated_pc`` "model" simulates each point's
    reference with the PC the model gives it; "refine" refines each point's PC and orientation
    by NCC with simulations first (:mod:`ebsdxc.run.simulated_references` says what that costs
    in strain).
    """

    material: str | None = None
    pc: tuple[float, float, float] | None = None
    pc_ref: tuple[float, float, float] | None = None
    pc_convention: str = "bruker"
    pc_map: str = "auto"
    pixel_size: float | None = None
    binning: int = 1
    orientation: tuple[float, float, float] | None = None
    sample_tilt: float | None = None
    detector_tilt: float | None = None
    remap_threshold_deg: float = 1.0
    min_peak_height: float = 0.3
    outlier_sigma: float = 4.0
    residual_floor_px: float = 0.25
    min_rois: int = 4
    step: float | None = None
    gnd: bool = True
    slip_systems: str | None = None
    master_pattern: str | None = None
    pc_calibrate: bool = False
    pc_calibration_points: tuple[int, int] = (5, 5)
    pc_model: str = "plane"
    simulated_pc: str = "model"

    def __post_init__(self):
        m = self.material
        if m is not None and not (isinstance(m, (str, os.PathLike)) and os.fspath(m)):
            raise ValueError(f"strain.material must be a material name (e.g. Ni), cubic:C11,C12,C44 or a file, "
                             f"got {m!r}")
        for name in ("pc", "pc_ref", "orientation"):
            v = getattr(self, name)
            if v is not None:
                try:
                    v = tuple(float(x) for x in v)
                except (TypeError, ValueError):
                    v = ()
                if len(v) != 3 or not all(np.isfinite(v)):
                    raise ValueError(f"strain.{name} must be three finite numbers, got {getattr(self, name)!r}")
                object.__setattr__(self, name, v)
        if self.pc_map not in PC_MAPS:
            raise ValueError(f"strain.pc_map must be one of {', '.join(PC_MAPS)}, got {self.pc_map!r}")
        try:
            geometry.canonical_convention(self.pc_convention)
        except (TypeError, ValueError) as e:
            raise ValueError(f"strain.pc_convention: {e}") from None
        if self.pixel_size is not None and not (_real(self.pixel_size) and self.pixel_size > 0):
            raise ValueError(f"strain.pixel_size must be a number > 0 (micrometres), got {self.pixel_size!r}")
        if not (isinstance(self.binning, (int, np.integer)) and not isinstance(self.binning, bool)
                and self.binning >= 1):
            raise ValueError(f"strain.binning (of the detector) must be a whole number >= 1, got {self.binning!r}")
        for name in ("sample_tilt", "detector_tilt"):
            v = getattr(self, name)
            if v is not None and not _real(v):
                raise ValueError(f"strain.{name} must be a number (degrees), got {v!r}")
        if not (_real(self.remap_threshold_deg) and self.remap_threshold_deg >= 0):
            raise ValueError(f"strain.remap_threshold_deg must be >= 0 (0: never remap), "
                             f"got {self.remap_threshold_deg!r}")
        for name in ("min_peak_height", "outlier_sigma", "residual_floor_px", "min_rois"):
            if not _real(getattr(self, name)):
                raise ValueError(f"strain.{name} must be a number, got {getattr(self, name)!r}")
        if self.step is not None and not (_real(self.step) and self.step > 0):
            raise ValueError(f"strain.step must be a number > 0 (micrometres between scan points), got {self.step!r}")
        if not isinstance(self.gnd, bool):
            raise ValueError(f"strain.gnd must be true or false, got {self.gnd!r}")
        if self.slip_systems is not None and not (isinstance(self.slip_systems, (str, os.PathLike))
                                                  and os.fspath(self.slip_systems)):
            raise ValueError(f"strain.slip_systems must be a slip-system file, got {self.slip_systems!r}")
        if self.master_pattern is not None and not (isinstance(self.master_pattern, (str, os.PathLike))
                                                    and os.fspath(self.master_pattern)):
            raise ValueError(f"strain.master_pattern must be an EMsoft master-pattern file, "
                             f"got {self.master_pattern!r}")
        if not isinstance(self.pc_calibrate, bool):
            raise ValueError(f"strain.pc_calibrate must be true or false, got {self.pc_calibrate!r}")
        pts = self.pc_calibration_points
        if not (isinstance(pts, (list, tuple)) and len(pts) == 2
                and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1 for v in pts)):
            raise ValueError(f"strain.pc_calibration_points must be two whole numbers >= 1 (rows, cols of the "
                             f"calibration grid), got {pts!r}")
        object.__setattr__(self, "pc_calibration_points", tuple(int(v) for v in pts))
        if self.pc_model not in PC_MODELS:
            raise ValueError(f"strain.pc_model must be one of {', '.join(PC_MODELS)}, got {self.pc_model!r}")
        if self.simulated_pc not in SIMULATED_PC:
            raise ValueError(f"strain.simulated_pc must be one of {', '.join(SIMULATED_PC)}, "
                             f"got {self.simulated_pc!r}")
        if self.pc_calibrate and self.master_pattern is None:
            raise ValueError("strain.pc_calibrate needs strain.master_pattern (an EMsoft master-pattern file)")
        try:
            self.fit_options()  # validates the rejection options; its messages start with the field name
        except ValueError as e:
            raise ValueError(f"strain.{e}") from None

    @property
    def enabled(self) -> bool:
        return self.material is not None

    def fit_options(self) -> FitOptions:
        return FitOptions(min_peak_height=self.min_peak_height, outlier_sigma=self.outlier_sigma,
                          residual_floor_px=self.residual_floor_px, min_rois=self.min_rois)


@dataclass
class StrainGeometry:
    """Everything the fit needs besides the shifts (Bruker PCs, degrees, g sample->crystal)."""

    shape: tuple[int, int]
    pc: np.ndarray  # (rows, cols, 3)
    pc_ref: np.ndarray  # (3,)
    sample_tilt: float
    detector_tilt: float
    orientation: np.ndarray  # (3, 3)
    material: str
    stiffness: np.ndarray  # (6, 6) GPa, crystal frame
    sources: dict  # where each value came from, for the results file
    grains: GrainGeometry | None = None  # a reference per grain: per-point reference PC, orientation, phase

    def to_dict(self) -> dict:
        if self.grains is not None:
            return {"detector_shape": list(self.shape), "pattern_centre_ref": "each grain's reference point",
                    "pattern_centre_convention": "bruker", "sample_tilt": self.sample_tilt,
                    "detector_tilt": self.detector_tilt, "orientation_matrix": "each grain's reference point",
                    "orientation_convention": "g takes sample to crystal coordinates (v_c = g v_s), Bunge",
                    **self.grains.to_dict(), "sources": self.sources}
        return {"detector_shape": list(self.shape), "pattern_centre_ref": self.pc_ref.tolist(),
                "pattern_centre_convention": "bruker", "sample_tilt": self.sample_tilt,
                "detector_tilt": self.detector_tilt, "orientation_matrix": self.orientation.tolist(),
                "orientation_convention": "g takes sample to crystal coordinates (v_c = g v_s), Bunge",
                "material": self.material, "stiffness_voigt_gpa": self.stiffness.tolist(),
                "sources": self.sources}


@dataclass
class GrainGeometry:
    """Per-point reference geometry of a reference-per-grain run.

    ``reference_flat`` (rows, cols): flat scan index of each point's reference point, -1 where
    the point has none; ``orientation`` (rows, cols, 3, 3): orientation (sample -> crystal) of
    each point's reference point; ``phase`` (rows, cols): each point's phase, an index into
    ``materials`` and ``stiffness`` (the phases of the orientation map; ``None`` for a phase no
    referenced point has).
    """

    reference_flat: np.ndarray
    orientation: np.ndarray
    phase: np.ndarray
    materials: tuple
    stiffness: tuple

    def to_dict(self) -> dict:
        return {"material": {str(i): m for i, m in enumerate(self.materials) if m},
                "stiffness_voigt_gpa": {str(i): c.tolist() for i, c in enumerate(self.stiffness) if c is not None},
                "material_meaning": "per phase of the orientation map (its index)"}


def _phase_materials(spec: str, phases, path) -> list:
    """Material spec of each phase: ``spec`` for the only phase, or ``NAME=SPEC,...`` per phase
    (``NAME=SPEC;...`` when a spec holds commas)."""
    names = [p["name"] for p in phases]
    text = os.fspath(spec)
    if "=" not in text:
        return [text] * len(names)
    out = [None] * len(names)
    # ";" separates the phases when a material itself holds commas (cubic:C11,C12,C44)
    for item in text.split(";" if ";" in text else ","):
        name, _, value = item.partition("=")
        name, value = name.strip(), value.strip()
        hits = [i for i, n in enumerate(names) if n.lower() == name.lower()]
        if not hits or not value:
            raise InputError(f"strain.material names phase {name!r}, which the orientation map does not have "
                             f"(its phases: {', '.join(names) or 'none'})", path)
        for i in hits:
            out[i] = value
    return out


def grain_geometry(geom: StrainGeometry, cfg: StrainConfig, *, reference_flat, orientations, phase, phases,
                   path=None) -> StrainGeometry:
    """``geom`` with each point's reference PC, orientation and stiffness taken from its grain's
    reference point (a reference per grain).

    Parameters
    ----------
    reference_flat : (rows, cols) int
        Flat index of each point's reference point, -1 where none.
    orientations : (rows, cols, 3, 3) or None
        Orientation map (sample -> crystal). Without one, every grain needs the same
        ``strain.orientation``: only a single grain is accepted.
    phase : (rows, cols) int or None
        Phase of each point (index into ``phases``), -1 = not indexed.
    phases : sequence of dict
        ``name`` (and ``laue``) of each phase.
    """
    rows, cols = reference_flat.shape
    ref = np.asarray(reference_flat, dtype=np.int64)
    has = ref >= 0
    used = np.unique(ref[has])
    if orientations is None:
        if used.size > 1:
            raise InputError("strain per grain needs each grain's orientation: give the orientation map "
                             "(--orientations FILE.ang|.ctf)", path)
        g = np.broadcast_to(geom.orientation, (rows, cols, 3, 3)).copy()
        ph = np.where(has, 0, -1)
        phases = phases or ({"name": geom.material},)
    else:
        flat_g = np.asarray(orientations, dtype=np.float64).reshape(-1, 3, 3)
        g = np.full((rows, cols, 3, 3), np.nan)
        g[has] = flat_g[ref[has]]
        phase = np.zeros((rows, cols), np.int64) if phase is None else np.asarray(phase)
        ph = np.where(has, phase.reshape(-1)[np.clip(ref, 0, None)].reshape(rows, cols), -1)
    specs = _phase_materials(cfg.material, phases, path)
    present = sorted({int(p) for p in np.unique(ph[has]) if p >= 0})
    materials, stiffness = [None] * len(specs), [None] * len(specs)
    if len(present) > 1 and "=" not in os.fspath(cfg.material):
        names = ", ".join(f"{phases[i]['name']}=..." for i in present)
        raise InputError(f"the grains hold {len(present)} phases; give a material for each: strain.material "
                         f"{names} (a name, cubic:C11,C12,C44 or a stiffness file)", path)
    for i in present:
        if specs[i] is None:
            raise InputError(f"phase {phases[i]['name']!r} has no stiffness: name its material in strain.material "
                             f"({phases[i]['name']}=...)", path)
        try:
            materials[i], stiffness[i] = parse_material(specs[i])
        except ValueError as e:
            raise InputError(f"phase {phases[i]['name']!r}: {e}", path) from None
    flat_pc = geom.pc.reshape(-1, 3)
    pc_ref = np.where(has[..., None], flat_pc[np.clip(ref, 0, None)].reshape(rows, cols, 3), geom.pc)
    grains = GrainGeometry(ref, g, ph.astype(np.int64), tuple(materials), tuple(stiffness))
    sources = {**geom.sources, "pattern_centre_ref": "each grain's reference point",
               "orientation": "orientation map at each grain's reference point" if orientations is not None
               else geom.sources.get("orientation")}
    first = present[0] if present else 0
    return dataclasses.replace(geom, pc_ref=pc_ref, orientation=g, sources=sources, grains=grains,
                               material=materials[first] or geom.material,
                               stiffness=stiffness[first] if stiffness[first] is not None else geom.stiffness)


def _stored_pc(value, convention, shape, pixel_size, binning=None):
    """A PC as a file stores it (its convention named by free text such as "Bruker (PCx, ...)";
    Bruker when unnamed or unknown), in Bruker convention."""
    try:
        conv = geometry.canonical_convention(str(convention or "bruker").split()[0])
    except ValueError:
        conv = "bruker"
    return geometry.convert_pc(np.asarray(value, dtype=np.float64), from_convention=conv,
                               to_convention="bruker", shape=shape, pixel_size=pixel_size,
                               binning=float(binning or 1))


def _scan_pcs(meta: dict, rows: int, cols: int, shape, path):
    """Per-point PCs (rows, cols, 3) stored in the scan, in Bruker convention, or None."""
    pc = meta.get("pattern_centres")
    if pc is None:
        pc = meta.get("pattern_centre")
    if pc is None:
        return None
    a = np.asarray(pc, dtype=np.float64)
    if a.shape == (3,):
        a = np.broadcast_to(a, (rows, cols, 3))
    elif a.shape == (rows * cols, 3):
        a = a.reshape(rows, cols, 3)
    elif a.shape != (rows, cols, 3):
        raise InputError(f"pattern centres of shape {a.shape} do not fit the {rows} x {cols} scan", path)
    present = meta.get("present")
    bad = ~np.isfinite(a).all(axis=-1)
    if bad.any() and present is not None and not (bad & np.asarray(present, dtype=bool)).any():
        # Vendors store NaN PCs where they stored no pattern; those points are never fitted,
        # so any finite value does (the others' mean keeps a PC plane fit unbiased).
        a = np.array(a)
        a[bad] = a[~bad].mean(axis=0) if (~bad).any() else np.nan
    return _stored_pc(a, meta.get("pattern_centre_convention"), shape, meta.get("detector_pixel_size"),
                      meta.get("binning"))


def resolve_geometry(cfg: StrainConfig, *, shape, grid, scan_meta: dict, scan_path: str,
                     ref_index=None, ref_meta: dict | None = None, ref_path: str | None = None,
                     per_grain: bool = False) -> StrainGeometry:
    """The fit's geometry from options, the scan's metadata and the reference's, or an InputError.

    ``scan_meta`` may hold ``pattern_centres`` (rows, cols, 3) or ``pattern_centre``,
    ``pattern_centre_convention``, ``sample_tilt``, ``detector_tilt``, ``euler_angles``,
    ``detector_pixel_size`` (as the scan readers put them in ``metadata``). ``per_grain``:
    orientation and material are left to :func:`grain_geometry`.
    """
    if not cfg.enabled:
        raise InputError("strain needs the material (strain.material, e.g. Ni)")
    if per_grain:  # grain_geometry gives each phase its material
        material, voigt = os.fspath(cfg.material), np.eye(6)
    else:
        try:
            material, voigt = parse_material(cfg.material)
        except ValueError as e:
            raise InputError(str(e)) from None
    rows, cols = grid.rows, grid.cols
    sources = {}
    header = scan_meta.get("header") or {}

    def pick(name, default):
        for where, value in (("option", getattr(cfg, name)), ("scan file", scan_meta.get(name)),
                             ("scan file", header.get(name))):
            if value is not None:
                sources[name] = where
                return float(value)
        sources[name] = "default"
        return default

    sample_tilt, detector_tilt = pick("sample_tilt", 70.0), pick("detector_tilt", 0.0)
    pixel_size = cfg.pixel_size or scan_meta.get("detector_pixel_size") or header.get("detector_pixel_size")

    def from_option(pc):
        try:
            return geometry.convert_pc(np.asarray(pc, dtype=np.float64), from_convention=cfg.pc_convention,
                                       to_convention="bruker", shape=shape, pixel_size=pixel_size,
                                       binning=cfg.binning)
        except ValueError as e:
            raise InputError(f"strain.pc: {e}") from None

    pc_opt = None if cfg.pc is None else from_option(cfg.pc)
    file_pcs = _scan_pcs(scan_meta, rows, cols, shape, scan_path)
    mode = cfg.pc_map
    if mode == "auto":
        mode = "file" if file_pcs is not None and cfg.pc is None else "constant"
    ref_flat = None
    if ref_index is not None:
        ref_flat = ref_index if np.ndim(ref_index) == 0 else ref_index[0] * cols + ref_index[1]
    if mode in ("file", "plane"):
        if file_pcs is None:
            raise InputError(f"strain.pc_map {mode}: the scan file stores no pattern centres", scan_path)
        pcs = np.array(file_pcs)
        if mode == "plane":
            try:
                pcs = geometry.fit_pc_plane(pcs)[0]
            except ValueError as e:
                raise InputError(f"cannot fit a PC plane ({e})", scan_path) from None
    elif mode == "extrapolate":
        if pc_opt is None:
            raise InputError("strain.pc_map extrapolate needs strain.pc (the PC at the reference point or map centre)")
        if grid.step is None or pixel_size is None:
            raise InputError("strain.pc_map extrapolate needs the scan step (from the file) and the detector "
                             "pixel size (strain.pixel_size)", scan_path)
        point = None if ref_flat is None else divmod(int(ref_flat), cols)
        pcs = geometry.extrapolate_pc(pc_opt, grid_shape=(rows, cols), step=grid.step, pixel_size=pixel_size,
                                      binning=cfg.binning, sample_tilt=sample_tilt, detector_tilt=detector_tilt,
                                      point=point, shape=shape)
    else:
        if pc_opt is None:
            if file_pcs is not None:
                pc_opt = np.asarray(file_pcs).reshape(-1, 3).mean(axis=0)
            else:
                raise InputError("strain needs the pattern centre: the scan file stores none; give strain.pc "
                                 "PCX,PCY,PCZ (and strain.pc_convention)", scan_path)
        pcs = np.broadcast_to(pc_opt, (rows, cols, 3)).copy()
    sources["pattern_centre"] = mode

    if cfg.pc_ref is not None:
        pc_ref, sources["pattern_centre_ref"] = from_option(cfg.pc_ref), "option"
    elif ref_flat is not None:
        pc_ref, sources["pattern_centre_ref"] = pcs.reshape(-1, 3)[int(ref_flat)], "scan point"
    elif ref_meta and ref_meta.get("pattern_centre") is not None:
        pc_ref = _stored_pc(ref_meta["pattern_centre"], ref_meta.get("pattern_centre_convention"), shape,
                            pixel_size)
        sources["pattern_centre_ref"] = "reference file"
    elif pc_opt is not None:
        pc_ref, sources["pattern_centre_ref"] = pc_opt, "option strain.pc"
    else:
        raise InputError("strain needs the reference's pattern centre: give strain.pc_ref PCX,PCY,PCZ", ref_path)
    for what, value, where in (("reference pattern centre", pc_ref, ref_path or scan_path),
                               ("pattern centre", pcs, scan_path)):
        try:
            geometry.check_pc(value, shape, what=what)
        except ValueError as e:
            raise InputError(str(e), where if sources.get("pattern_centre") != "constant" else None) from None

    if cfg.orientation is not None:
        g, sources["orientation"] = euler_to_matrix(cfg.orientation), "option"
    elif scan_meta.get("euler_angles") is not None:
        e = np.asarray(scan_meta["euler_angles"], dtype=np.float64)
        if e.shape != (3,):
            e = e.reshape(-1, 3)[0 if ref_flat is None else int(ref_flat)]
        g, sources["orientation"] = euler_to_matrix(e), "scan file"
    elif per_grain:
        g, sources["orientation"] = np.eye(3), "none"  # grain_geometry supplies it per grain
    else:
        raise InputError("strain needs the crystal orientation of the reference: the scan file stores "
                         "none; give strain.orientation PHI1,PHI,PHI2 (Bunge, degrees)", scan_path)
    return StrainGeometry(tuple(shape), pcs, np.asarray(pc_ref, dtype=np.float64), sample_tilt, detector_tilt,
                          g, material, voigt, sources)


def compute_strain(results_path, cfg: StrainConfig, geom: StrainGeometry, *, backend=None, pipeline=None,
                   read_points=None, overwrite=False, progress: Progress | None = None) -> dict:
    """Fit every processed point of a results file and write the strain datasets into it.

    Parameters
    ----------
    results_path : str
    cfg : StrainConfig
    geom : StrainGeometry
    backend : Backend, optional
        Where the fit runs (default: CPU).
    pipeline : ebsdxc.run.Pipeline, optional
        With ``read_points``: remap and re-correlate points whose first-pass rotation exceeds
        ``cfg.remap_threshold_deg`` (through ``pipeline.match_pairs``). Without them remapping
        is off.
    read_points : callable, optional
        ``read_points(flat)`` -> (k, H, W) patterns of flat scan points, as the pipeline takes
        them. One that takes ``out=`` too is given, after its first call, a host array of the
        shape and dtype that call returned (on the GPU a pinned buffer) to read into and
        return; that saves a copy on the GPU.
    overwrite : bool
        Replace strain datasets already in the file.

    Returns
    -------
    dict
        Counts: points fitted, remapped, flagged.
    """
    import h5py

    from .io.results import GROUP, StrainWriter

    progress = progress or NullProgress()
    xp = backend.xp if backend is not None else np
    asnumpy = backend.asnumpy if backend is not None else np.asarray
    remap = pipeline is not None and read_points is not None and cfg.remap_threshold_deg > 0
    with h5py.File(results_path, "r") as f:
        g = f[GROUP]
        # Whole-pattern refinement measured a homography, which holds any rotation: a remapped
        # re-correlation would only replace it with subregion matches.
        if "icgn" in g:
            remap = False
        centres = g["roi/centers"][...]
        rows, cols, n = g["status"].shape
        grid_kind = str(g.attrs.get("grid_kind", "square"))
        file_step = tuple(g.attrs["step"]) if "step" in g.attrs else None
        grain_id = g["grain_id"][...] if "grain_id" in g else None
    if geom.pc.shape[:2] != (rows, cols):
        raise InputError(f"pattern centres {geom.pc.shape[:2]} do not match the results grid {(rows, cols)}",
                         results_path)
    params = {**dataclasses.asdict(cfg), **geom.to_dict(), "remapping": remap}
    grains = geom.grains
    if grains is None:
        stiffness = [xp.asarray(stiffness_tensor(geom.stiffness))]
    else:
        stiffness = [None if c is None else xp.asarray(stiffness_tensor(c)) for c in grains.stiffness]
    opts = cfg.fit_options()
    tilts = {"sample_tilt": geom.sample_tilt, "detector_tilt": geom.detector_tilt}
    counts = {"points": rows * cols, "fitted": 0, "remapped": 0, "too_few_rois": 0, "not_processed": 0}
    thr = np.deg2rad(cfg.remap_threshold_deg)
    remap_batch = max(1, min(REMAP_BATCH, REMAP_PIXELS // (geom.shape[0] * geom.shape[1])))
    progress.start(rows * cols, desc="strain")
    try:
        with StrainWriter(results_path, parameters=params, n_roi=n, fit_codes=FIT_DESCRIPTIONS,
                          overwrite=overwrite) as w, h5py.File(results_path, "r") as f:
            g = f[GROUP]
            step = max(1, FIT_POINTS // cols)  # whole rows, about FIT_POINTS points per fit call
            for r0 in range(0, rows, step):
                r1 = min(rows, r0 + step)
                m = (r1 - r0) * cols
                disp, height, status = (g[k][r0:r1].reshape(m, *g[k].shape[2:])
                                        for k in ("displacement", "peak_height", "status"))
                pcs = geom.pc[r0:r1].reshape(m, 3)
                if grains is None:
                    pc_ref, orient = geom.pc_ref, geom.orientation
                    groups = [(np.arange(m), 0)]
                else:
                    pc_ref, orient = geom.pc_ref[r0:r1].reshape(m, 3), grains.orientation[r0:r1].reshape(m, 3, 3)
                    ph = grains.phase[r0:r1].reshape(m)
                    groups = [(np.flatnonzero(ph == p), int(p)) for p in np.unique(ph) if p >= 0]
                    # points without a reference keep the empty fit: not processed
                out = _empty_fit(m, n)
                for sel, phase in groups:
                    if sel.size == 0:
                        continue
                    C = stiffness[phase]
                    pr = pc_ref if np.ndim(pc_ref) == 1 else pc_ref[sel]
                    go = orient if np.ndim(orient) == 2 else np.nan_to_num(orient[sel])
                    common = dict(centres=centres, shape=geom.shape, pc_ref=xp.asarray(pr), stiffness=C,
                                  orientation=xp.asarray(go), options=opts, **tilts)
                    fit = fit_strain(xp.asarray(disp[sel]), xp.asarray(height[sel]), xp.asarray(status[sel]),
                                     pc=xp.asarray(pcs[sel]), **common)
                    for k in (*_FIT_FIELDS, "used"):
                        out[k][sel] = asnumpy(getattr(fit, k))
                    if not remap:
                        continue
                    angle = np.linalg.norm(out["rotation"][sel][:, [2, 0, 1], [1, 2, 0]], axis=-1)
                    todo = sel[(out["status"][sel] == FIT_OK) & (angle > thr)]
                    if todo.size:
                        ref_flat = None if grains is None else grains.reference_flat.reshape(-1)[r0 * cols + todo]
                        _remap(out, todo, pipeline, read_points, r0 * cols, remap_batch, ref_flat, pcs[todo],
                               pc_ref if np.ndim(pc_ref) == 1 else pc_ref[todo],
                               orient if np.ndim(orient) == 2 else orient[todo], geom, xp, asnumpy,
                               dict(centres=centres, shape=geom.shape, stiffness=C, options=opts, **tilts))
                st = out["status"]
                counts["fitted"] += int((st == FIT_OK).sum())
                counts["remapped"] += int(out["remapped"].sum())
                counts["too_few_rois"] += int((st == 1).sum())
                counts["not_processed"] += int((st == 2).sum())
                w.write(slice(r0, r1), cols, deformation_gradient=out["F"], strain=out["strain"],
                        rotation=out["rotation"], strain_crystal=out["strain_crystal"],
                        rotation_crystal=out["rotation_crystal"], fit_residual=out["residual_px"],
                        angular_error=out["angular_error"], rois_used=out["n_used"], roi_used=out["used"],
                        fit_status=st, remapped=out["remapped"], pattern_centre=pcs)
                progress.update(m)
            w.finish()
    finally:
        progress.close()
    if cfg.gnd:
        counts.update(_gnd_pass(results_path, cfg, geom, grain_id=grain_id, grid_kind=grid_kind,
                                step=file_step, overwrite=True))
    return counts


_FIT_FIELDS = {"F": ((3, 3), np.nan), "strain": ((3, 3), np.nan), "rotation": ((3, 3), np.nan),
               "strain_crystal": ((3, 3), np.nan), "rotation_crystal": ((3, 3), np.nan), "residual_px": ((), np.nan),
               "angular_error": ((), np.nan), "n_used": ((), 0), "status": ((), 2)}


def _empty_fit(m, n) -> dict:
    out = {k: np.full((m, *tail), fill, dtype=np.int16 if k == "n_used" else np.uint8 if k == "status" else
                      np.float64) for k, (tail, fill) in _FIT_FIELDS.items()}
    out["used"] = np.zeros((m, n), bool)
    out["remapped"] = np.zeros(m, bool)
    return out


def _remap(out, todo, pipeline, read_points, offset, batch, ref_flat, pc, pc_ref, orientation, geom, xp, asnumpy,
           common):
    """Points ``todo`` (of the fit chunk ``out`` describes, flat scan index ``offset + todo``)
    remapped and matched in batches of ``batch``, then fitted again in one call; where the
    second fit holds, its results replace the first in ``out``.

    One fit for the whole chunk, not one per batch: a fit is a few dozen small launches and a
    device-to-host sync per outlier round whatever its size, and fitted per batch it took
    about as long as remapping and matching the batch (H100, 256 points of 256x256: 14 of
    37 ms; BENCHMARKS.md, twenty-seventh session).
    """
    R1 = polar_decomposition(np.asarray(out["F"][todo], dtype=np.float64), np)[1]
    n = out["used"].shape[1]
    # what match_pairs returns, for every point of todo; a point no batch reached stays unprocessed
    found = {"displacement": xp.full((len(todo), n, 2), np.nan, dtype=xp.float32),
             "peak_height": xp.zeros((len(todo), n), dtype=xp.float32),
             "status": xp.full((len(todo), n), NOT_PROCESSED, dtype=xp.uint8)}
    tilts = {k: common[k] for k in ("sample_tilt", "detector_tilt")}
    starts = range(0, len(todo), batch)
    batches = [todo[k0:k0 + batch] for k0 in starts]
    for k0, idx, patterns in zip(starts, batches, _read_ahead(read_points, [offset + b for b in batches], xp)):
        def part(p, k0=k0, patterns=patterns):
            q = slice(k0 + p.start, k0 + p.stop)
            res = _remapped_match(pipeline, patterns[p], R1[q], None if ref_flat is None else ref_flat[q],
                                  pc_ref if np.ndim(pc_ref) == 1 else pc_ref[q], geom, xp, tilts)
            for k, a in found.items():
                a[q] = getattr(res, k)
        _in_halves_when_out_of_memory(part, len(idx), pipeline)
    second = fit_strain(found["displacement"], found["peak_height"], found["status"], pc=xp.asarray(pc),
                        pc_ref=xp.asarray(pc_ref), orientation=xp.asarray(orientation), reference_F=xp.asarray(R1),
                        **common)
    ok = asnumpy(second.status) == FIT_OK
    for k in (*_FIT_FIELDS, "used"):
        out[k][todo[ok]] = asnumpy(getattr(second, k))[ok]
    out["remapped"][todo[ok]] = True


def _in_halves_when_out_of_memory(work, n, pipeline):
    """``work(slice(0, n))``; where the device (or host) runs out of memory, the pipeline's
    cached memory is given back and each half is done in turn, down to one point (then the
    error stands). A remapping batch holds float64 coordinates of every pixel and each
    point's own prepared reference: a device that fitted the correlation pass may not hold it.
    One warning line per halving."""
    parts = [slice(0, n)]
    while parts:
        part = parts.pop(0)
        try:
            work(part)
            continue
        except Exception as e:
            if not is_out_of_memory(e) or part.stop - part.start <= 1:
                raise
            reason = " ".join(str(e).split()) or type(e).__name__
        # out of the handler: the failed part's arrays, held by the traceback, are gone
        pipeline.release_memory()
        mid = (part.start + part.stop) // 2
        parts[:0] = [slice(part.start, mid), slice(mid, part.stop)]
        warnings.warn(f"remapping: out of memory with {part.stop - part.start} points at a time ({reason}); "
                      f"continuing with {mid - part.start} (the results do not depend on it)", UserWarning,
                      stacklevel=2)


def _read_ahead(read_points, batches, xp=np):
    """``read_points(b)`` for each of ``batches`` in turn, the next one read in a thread while
    the caller works on this one (the remapping pass would otherwise wait for the file, then
    leave it idle).

    With CuPy as ``xp`` each batch comes on the device, read into pinned host memory and
    copied from there (:class:`_PinnedPair`).
    """
    from concurrent.futures import ThreadPoolExecutor

    staging = None if xp is np else _PinnedPair(xp, _takes_out(read_points))

    def read(k):
        return read_points(batches[k]) if staging is None else staging.read(k % 2, read_points, batches[k])

    with ThreadPoolExecutor(1, thread_name_prefix="ebsdxc-remap-read") as pool:
        ahead = pool.submit(read, 0) if batches else None
        for k in range(len(batches)):
            patterns = ahead.result()
            if staging is not None:
                patterns = staging.upload(k % 2, patterns)
            if k + 1 < len(batches):
                ahead = pool.submit(read, k + 1)
            yield patterns


def _takes_out(read_points) -> bool:
    """Whether ``read_points`` takes an ``out=`` keyword (readers from before it was asked for,
    and third parties' own, may not)."""
    import inspect

    try:
        params = inspect.signature(read_points).parameters.values()
    except (TypeError, ValueError):  # some builtins and extension callables have no signature
        return False
    return any((p.name == "out" and p.kind is not p.POSITIONAL_ONLY) or p.kind is p.VAR_KEYWORD for p in params)


class _PinnedPair:
    """Two pinned host buffers that batches pass through on their way to the device: the
    reading thread reads into one while the other's copy is queued. (Where the system refuses
    pinned memory they are ordinary memory: :func:`~ebsdxc.backend.pinned_empty`.)

    A copy from pageable memory held the caller's thread and waited for the device to finish
    what was queued before it (H100, 256 patterns of 256x256 uint16, 33.6 MB: 4.9-7.8 ms; from
    pinned memory 0.6 ms; BENCHMARKS.md, twenty-seventh session). Reading into the buffer,
    not copying a read batch there, keeps the reading thread to the read itself.

    The copy runs on the caller's stream, and the device array comes from the caller's
    thread and stream, so CuPy's pool hands out a freed block only in that stream's order
    (an array allocated on another stream could get a block that kernels of the caller's
    stream still read). A buffer is read into only after the event recorded behind its last
    copy: the copy may wait in the stream behind earlier work.
    """

    def __init__(self, cp, takes_out=True):
        self._cp = cp
        self._takes_out = takes_out
        self._device = cp.cuda.Device()
        self._host = [None, None]
        self._copied = [None, None]  # the event behind each buffer's last copy
        self._kind = None  # (dtype, (H, W)) of what read_points gives, from the first batch

    def read(self, slot, read_points, flat):
        """(reading thread) The patterns of ``flat`` in buffer ``slot``, once its last copy is
        done: read into it, or (the first batch, whose dtype is not known yet, a reader that
        takes no ``out``, or one that returns its own array) copied there."""
        with self._device:
            if self._copied[slot] is not None:
                self._copied[slot].synchronize()
            patterns = None
            if self._kind is None or not self._takes_out:
                patterns = np.asarray(read_points(flat))
                self._kind = (patterns.dtype, patterns.shape[1:])
            dtype, frame = self._kind
            shape = (len(flat), *frame)
            nbytes = int(np.prod(shape)) * dtype.itemsize
            if self._host[slot] is None or self._host[slot].nbytes < nbytes:
                self._host[slot] = None  # the old buffer goes back before a larger one is pinned
                self._host[slot] = pinned_empty((max(nbytes, 1),), np.uint8)
        view = self._host[slot][:nbytes].view(dtype).reshape(shape)
        if patterns is None:
            patterns = read_points(flat, out=view)
        if patterns is not view:
            np.copyto(view, patterns)
        return view

    def upload(self, slot, view):
        """(caller's thread) Buffer ``slot``'s ``view`` on the device, copied on the current stream."""
        cp = self._cp
        stream = cp.cuda.get_current_stream()
        out = cp.empty(view.shape, dtype=view.dtype)
        out.set(view, stream=stream)
        self._copied[slot] = stream.record()
        return out


def _remapped_match(pipeline, patterns, R1, ref_flat, pc_ref, geom, xp, tilts):
    """Scan points ``patterns`` (as the pipeline takes them) matched with their reference
    rotated by ``R1`` (b, 3, 3), each point's first-pass rotation.

    ``ref_flat`` (b,) the flat scan index of each point's reference point (a reference per
    grain: the pipeline's reference of that grain is rotated), or None for a one-reference run.
    """
    how = {**tilts, "workers": pipeline.backend.workers}  # threads: the CPU's remapping only
    if ref_flat is None:
        refs = remap_pattern(pipeline.reference_image, xp.asarray(R1), pc=geom.pc_ref, **how)
    else:
        refs = xp.empty((len(patterns), *pipeline.reference_images.shape[1:]), dtype=pipeline.reference_images.dtype)
        k_of = pipeline.reference_set.index
        for rf in np.unique(ref_flat):
            sel = np.flatnonzero(ref_flat == rf)
            k = int(k_of[int(rf)]) if k_of is not None else 0
            refs[xp.asarray(sel)] = xp.asarray(remap_pattern(pipeline.reference_images[k], xp.asarray(R1[sel]),
                                                             pc=np.asarray(pc_ref)[sel[0]], **how),
                                               dtype=refs.dtype)
    return pipeline.match_pairs(refs, patterns)


def _gnd_pass(results_path, cfg, geom, *, grain_id, grid_kind, step, overwrite) -> dict:
    """Nye tensor and lower-bound GND density from the rotations just written.

    Needs the scan step (the results file's, else ``strain.step``); the density also needs
    the material's slip systems. What could not be computed is recorded, not invented.
    """
    import h5py

    from . import gnd
    from .io.results import GROUP, write_gnd
    from .materials import material as material_record

    if step is None and cfg.step is None:
        write_gnd(results_path, None, None, attrs={"skipped": "the scan step is not known: give strain.step"})
        return {"gnd": "skipped: no scan step"}
    step_m = tuple(float(v) * 1e-6 for v in (step if step is not None else (cfg.step, cfg.step)))
    with h5py.File(results_path, "r") as f:
        g = f[GROUP]
        rotation = g["rotation"][...]
        valid = g["fit_status"][...] == FIT_OK
    nye = gnd.nye_tensor(rotation, step=step_m, grid_kind=grid_kind, grain_id=grain_id, valid=valid)
    rows, cols = valid.shape
    if geom.grains is None:
        orientation = np.broadcast_to(geom.orientation, (rows, cols, 3, 3))
        phase, specs = np.where(valid, 0, -1), [(cfg.material, geom.material)]
    else:
        orientation, phase = geom.grains.orientation, geom.grains.phase
        specs = list(zip([cfg.material] * len(geom.grains.materials), geom.grains.materials))
    total = np.full((rows, cols), np.nan)
    notes = {}
    for p, (_, name) in enumerate(specs):
        sel = (phase == p) & np.isfinite(nye[..., 2, 2])
        if name is None or not sel.any():
            continue
        try:
            types = gnd.dislocation_types(material_record(name), slip_file=cfg.slip_systems)
        except ValueError as e:
            notes[str(name)] = f"no GND density: {e}"
            continue
        total[sel] = np.asarray(gnd.gnd_density(nye[sel], orientation[sel], dislocations=types).total)
        notes[str(name)] = f"{len(types)} dislocation types"
    write_gnd(results_path, nye, total, attrs={"step_m": list(step_m), "materials": notes,
                                               "method": "Nye tensor from rotation gradients (elastic strain "
                                                         "gradients neglected); L1 lower bound over slip systems"})
    return {"gnd_points": int(np.isfinite(total).sum())}


def binned_geometry(binning: int, cfg: StrainConfig, meta: dict):
    """The strain options and scan metadata as patterns binned ``binning`` x ``binning`` see
    them: each pattern pixel is ``binning`` detector pixels more (EMsoft PCs and pixel sizes
    depend on it)."""
    if binning == 1:
        return cfg, meta
    meta = {**meta, "binning": (meta.get("binning") or 1) * binning}
    return dataclasses.replace(cfg, binning=cfg.binning * binning), meta


def scan_metadata(source) -> dict:
    """The scan's metadata with per-point PCs where the reader offers them."""
    meta = dict(source.metadata)
    if source.present is not None:
        meta["present"] = source.present
    getter = getattr(source, "pattern_centres", None)
    if callable(getter):
        pcs = getter()
        if pcs is not None:
            meta["pattern_centres"] = np.asarray(pcs)
    meta.setdefault("path", os.path.abspath(source.path))
    return meta
