"""``strain``: add strain and rotation to an existing results file (``ebsdxc strain``).

Reads what the results file records of its run (:func:`ebsdxc.io.results.read_record`),
reopens the scan and the reference where remapping needs them, and hands the fit to the
HR-EBSD strain pass (:func:`ebsdxc.hrebsd.compute_strain`).
"""

from __future__ import annotations

import dataclasses
import os

import h5py
import numpy as np

from .. import io as scan_io
from ..backend import select_backend
from ..errors import InputError
from ..hrebsd import StrainConfig, binned_geometry, compute_strain, grain_geometry, resolve_geometry, scan_metadata
from ..io.results import input_record, read_grains, read_record
from ..progress import NullProgress, Progress
from ..rois import layout_for
from .grain_references import grain_reference_set, reference_flat
from .inputs import read_points, scan_reference, static_background
from .output import on_disk
from .pipeline import Pipeline
from .planning import processed_shape
from .simulated_references import point_geometry, simulated_geometry_maps

__all__ = ["strain"]


def strain(results, *, config: StrainConfig | None = None, scan=None, ref=None, device="auto", overwrite=False,
           progress: Progress | None = None) -> dict:
    """Add strain and rotation to an existing displacement results file.

    Parameters
    ----------
    results : str
        A results file written by :func:`ebsdxc.run.process`.
    config : hrebsd.StrainConfig
        Material, pattern centre, orientation and fit options.
    scan, ref : str, optional
        The scan and reference image, when they are no longer where the results file
        recorded them. The scan is needed for remapping (``remap_threshold_deg > 0``) and
        for pattern centres, tilts or orientation stored in it.
    device : str
    overwrite : bool
        Replace strain results already in the file.

    Returns
    -------
    dict
        Counts of points fitted, remapped and flagged.
    """
    from ..config import ProcessConfig

    cfg = config or StrainConfig()
    progress = progress or NullProgress()
    if cfg.pc_calibrate:
        raise InputError("the pattern centre is calibrated by 'ebsdxc process --pc-calibrate'; 'ebsdxc strain' "
                         "uses the calibration the results file records")
    rec = read_record(os.fspath(results))
    results = rec.path
    if not rec.any_done:
        raise InputError("holds no processed points", results)
    params = rec.parameters
    grains = read_grains(results) if params.get("reference_per_grain") else None
    simulated = isinstance(params.get("reference"), dict) and params["reference"].get("kind") == "simulated"
    if grains is None and isinstance(params.get("reference_index"), list) and "reference_map" in params:
        raise InputError("was processed against several reference points without grains; strain needs one "
                         "reference, or a reference per grain", results)
    scan_format = rec.scan_format if rec.scan_format in scan_io.SCAN_FORMATS else None
    # a simulated reference is re-made at the fitted orientation in the first pass; there is no image to remap
    remap = cfg.remap_threshold_deg > 0 and not simulated
    scan_path = scan or rec.input_path("scan")
    source = None
    if scan_path and os.path.exists(on_disk(scan_path)):
        _check_unchanged(on_disk(scan_path), rec.inputs.get(os.path.basename(on_disk(scan_path))), scan is not None,
                         results)
        # The results' grid: the scan's own when it records one (a contradiction is an error),
        # else what the grid option gave when it was processed; and the reader that read it then.
        source = scan_io.open_scan(scan_path, dataset=params.get("dataset"), grid_shape=(rec.rows, rec.cols),
                                   format=scan_format)
    elif remap:
        raise InputError(f"remapping needs the scan file {scan_path or '(not recorded)'}, which is not there: "
                         "give the scan, or switch remapping off (strain.remap_threshold_deg = 0)", results)
    try:
        ref_index = params.get("reference_index")
        ref_index = tuple(ref_index) if isinstance(ref_index, list) else ref_index
        ref_path = None
        if grains is not None:
            flat = reference_flat(grains["grain_id"], grains["reference_point"])
            ref_index = int(flat[flat >= 0][0])
        elif simulated:
            ref_index = 0  # each point is its own reference point: point_geometry below
        elif ref_index is None:
            ref_path = ref or rec.input_path("reference")
            if ref_path and not os.path.isfile(ref_path):
                if remap:
                    raise InputError("remapping needs the reference pattern, which is not there: give the "
                                     "reference, or switch remapping off (strain.remap_threshold_deg = 0)",
                                     ref_path)
                ref_path = None
        if source is not None:
            shape, grid = source.pattern_shape, source.grid
            meta = scan_metadata(source)
        else:
            shape = rec.pattern_shape
            if len(shape) != 2:
                raise InputError("the pattern size is not recorded and the scan is not there: give the scan",
                                 results)
            grid, meta = scan_io.ScanGrid(rec.rows, rec.cols, step=rec.step, kind=rec.grid_kind), {}
        if (grid.rows, grid.cols) != (rec.rows, rec.cols):
            raise InputError(f"scan grid {grid.rows} x {grid.cols} differs from the results' {rec.rows} x {rec.cols}",
                             source.path)
        pconf = ProcessConfig.from_parameters(params)
        pre = pconf.preprocess
        binned = processed_shape(pre.binning, shape, scan_path or results)
        gcfg, meta = binned_geometry(pre.binning, cfg, meta)
        geom = resolve_geometry(gcfg, shape=binned, grid=grid, scan_meta=meta, scan_path=scan_path or results,
                                ref_index=ref_index, ref_path=ref_path,
                                ref_meta=scan_io.read_reference_metadata(ref_path) if ref_path else None,
                                per_grain=grains is not None)
        if grains is not None:
            geom = _grain_geometry(geom, gcfg, grains, results)
        geom = _stored_calibration(geom, gcfg, results, None if grains is not None or simulated else ref_index,
                                   grid.cols)
        if simulated:
            g_map, pc_map = simulated_geometry_maps(results)
            geom = point_geometry(geom, gcfg, g_map, pc_map=pc_map, path=results)
        backend = select_backend(device)
        with backend.use():
            if not remap:
                return compute_strain(results, cfg, geom, backend=backend, overwrite=overwrite, progress=progress)
            layout = layout_for(pconf.roi, binned, path=source.path)
            if not np.allclose(layout.centres, rec.centres):
                raise InputError("the recorded ROI layout cannot be rebuilt (ROI file changed?): switch remapping "
                                 "off (strain.remap_threshold_deg = 0)", results)
            if grains is not None:
                reference = grain_reference_set(source, pre, grains["grain_id"], grains["reference_point"])[0]
            else:
                reference = np.asarray(scan_reference(source, ref_index, pre) if ref_index is not None
                                       else scan_io.read_reference(ref_path))
            static_bg = static_background(pre.static_background, source, backend)
            pipeline = Pipeline(backend, pconf, layout, reference, static_background=static_bg)
            try:
                return compute_strain(results, cfg, geom, backend=backend, pipeline=pipeline,
                                      read_points=lambda flat, out=None: read_points(source, pre, flat, out),
                                      overwrite=overwrite, progress=progress)
            finally:
                pipeline.close()
    finally:
        if source is not None:
            source.close()


def _stored_calibration(geom, cfg, results, ref_index, cols):
    """``geom`` with the PCs of the calibration the results file records, unless the options say
    where the PCs come from (``strain.pc_map`` other than auto, or ``strain.pc``); a reference
    that is a scan point takes that point's."""
    if cfg.pc_map != "auto" or cfg.pc is not None:
        return geom
    with h5py.File(results, "r") as f:
        g = f["ebsdxc"]
        if "pc_calibration" not in g:
            return geom
        pc_map = g["pc_calibration/pc_map"][()]
    if pc_map.shape != geom.pc.shape:
        return geom
    sources = {**geom.sources, "pattern_centre": "calibrated: the calibration the results file records"}
    pc_ref = geom.pc_ref
    if ref_index is not None and geom.sources.get("pattern_centre_ref") == "scan point":
        flat = int(ref_index) if np.ndim(ref_index) == 0 else int(ref_index[0]) * cols + int(ref_index[1])
        pc_ref = pc_map.reshape(-1, 3)[flat].copy()
        sources["pattern_centre_ref"] = "scan point, calibrated"
    return dataclasses.replace(geom, pc=pc_map, pc_ref=pc_ref, sources=sources)


def _grain_geometry(geom, cfg, grains, results):
    """Per-grain geometry from what the results file records of its grains."""
    from ..crystal import euler_to_matrix

    rows, cols = grains["grain_id"].shape
    ref = grains["reference_point"]
    has = ref[:, 0] >= 0
    orientations = phase = None
    if grains["reference_euler"] is not None:
        orientations = np.full((rows, cols, 3, 3), np.nan)
        orientations[ref[has, 0], ref[has, 1]] = euler_to_matrix(grains["reference_euler"][has])
    if grains["phase"] is not None:
        phase = np.full((rows, cols), -1, dtype=np.int64)
        phase[ref[has, 0], ref[has, 1]] = grains["phase"][has]
    phases = tuple(grains["attrs"].get("phases") or ())
    return grain_geometry(geom, cfg, reference_flat=reference_flat(grains["grain_id"], ref), orientations=orientations,
                          phase=phase, phases=phases, path=results)


def _check_unchanged(path, record, given, results):
    if record is None or given and os.path.basename(path) != record["name"]:
        return
    now = input_record(path)
    if (now["size"], now["mtime"]) != (record["size"], record["mtime"]):
        raise InputError(f"changed since {os.path.basename(results)} was made; remapping would mix "
                         "two versions of the data (process it again, or switch remapping off)", path)
