"""The HR-EBSD orientations of a results file as an orientation map (``ebsdxc export``).

Each fitted point's crystal orientation is its reference's orientation turned by the lattice
rotation HR-EBSD measured against that reference: with ``F = R U`` (sample frame) and the
reference orientation ``g_ref`` (sample -> crystal), the point's is ``g = g_ref R^T``, the
``g_def`` of :func:`ebsdxc.strain.fit_strain`. They go out through the ``.ang`` / ``.ctf``
writers, so MTEX, orix and the vendors' software read them; points that were not fitted
are written as not indexed.
"""

from __future__ import annotations

import json
import os

import numpy as np

from . import io as scan_io
from .crystal import laue_group, matrix_to_euler
from .errors import InputError
from .io.orientation_map import OrientationMap, PhaseInfo
from .io.results import GROUP, require_results
from .strain import FIT_OK, polar_decomposition

__all__ = ["EXPORT_FORMATS", "export_orientations", "hrebsd_orientation_map"]

EXPORT_FORMATS = ("ang", "ctf")


def hrebsd_orientation_map(results) -> OrientationMap:
    """The per-point HR-EBSD orientations of a results file with strain.

    Quality columns: ``iq`` the median correlation peak height of the point's ROIs, ``ci`` 1 for
    a fitted point (-1 otherwise), ``fit`` the mean angular error of the fit in degrees; for
    ``.ctf`` also ``bands`` (ROIs used) and ``mad`` (the same angular error).
    """
    import h5py

    path = require_results(results)
    with h5py.File(path, "r") as f:
        g = f[GROUP]
        if "deformation_gradient" not in g:
            raise InputError("holds no strain results: run 'ebsdxc strain' on it (with --material) first", path)
        if g.attrs.get("strain_stale", False):
            raise InputError("its strain is stale (the displacements changed since): run 'ebsdxc strain "
                             "--overwrite' on it", path)
        if not g.attrs.get("strain_complete", False):
            raise InputError("its strain pass did not finish: run 'ebsdxc strain --overwrite' on it", path)
        F = g["deformation_gradient"][...]
        fit_ok = g["fit_status"][...] == FIT_OK
        heights = g["peak_height"][...]
        ang_err = g["angular_error"][...]
        n_used = g["rois_used"][...]
        sp = json.loads(g.attrs["strain_parameters"])
        rows, cols = fit_ok.shape
        step = tuple(float(v) for v in g.attrs["step"]) if "step" in g.attrs else None
        kind = str(g.attrs.get("grid_kind", "square"))
        if "grain_id" in g:
            gid = g["grain_id"][...]
            grp = g["grains"]
            if "reference_euler" not in grp:
                raise InputError("its grains have no recorded orientations (grains from patterns only): "
                                 "nothing to export", path)
            ref_euler = grp["reference_euler"][...]
            grain_phase = grp["phase"][...] if "phase" in grp else np.zeros(len(ref_euler), np.int16)
            phases = json.loads(grp.attrs["phases"]) if "phases" in grp.attrs else []
            ok = gid >= 0
            g_ref = np.full((rows, cols, 3, 3), np.nan)
            from .crystal import euler_to_matrix

            g_ref[ok] = euler_to_matrix(ref_euler[gid[ok]])
            phase = np.where(ok, grain_phase[np.clip(gid, 0, None)], -1)
        else:
            orient = sp.get("orientation_matrix")
            if not isinstance(orient, list):
                raise InputError("records no reference orientation: nothing to export", path)
            g_ref = np.broadcast_to(np.asarray(orient, dtype=np.float64), (rows, cols, 3, 3))
            phase = np.zeros((rows, cols), np.int16)
            phases = [{"name": str(sp.get("material") or "phase"), "laue": "m-3m"}]
    ok = fit_ok & (phase >= 0) & np.isfinite(g_ref).all(axis=(-2, -1)) & np.isfinite(F).all(axis=(-2, -1))
    R = np.full_like(F, np.nan)
    if ok.any():
        R[ok] = polar_decomposition(F[ok])[1]
    orient = np.einsum("...ij,...kj->...ik", g_ref, R)  # g_ref R^T
    euler = np.full((rows, cols, 3), np.nan)
    if ok.any():
        euler[ok] = matrix_to_euler(orient[ok])
    with np.errstate(all="ignore"):
        quality = {"iq": np.where(ok, np.nanmedian(np.where(np.isfinite(heights), heights, np.nan), axis=-1)
                                  if heights.size else 0.0, 0.0),
                   "ci": np.where(ok, 1.0, -1.0), "fit": np.where(ok, np.degrees(ang_err), 180.0),
                   "bands": np.where(ok, n_used, 0), "mad": np.where(ok, np.degrees(ang_err), 0.0)}
    infos = tuple(PhaseInfo(id=i + 1, name=str(p.get("name") or f"phase{i + 1}"),
                            laue=laue_group(p.get("laue") or "m-3m")) for i, p in enumerate(phases))
    grid = scan_io.ScanGrid(rows, cols, step=step, kind=kind)
    phase = np.where(ok & grid.in_grid(), phase, -1).astype(np.int16)
    euler[phase < 0] = np.nan
    return OrientationMap(path=path, grid=grid, euler_deg=euler, phase=phase, phases=infos,
                          quality={k: np.asarray(v, dtype=np.float32) for k, v in quality.items()}, frame="tsl")


def export_orientations(results, out, *, format=None, overwrite=False) -> str:  # noqa: A002
    """Write the HR-EBSD orientations of ``results`` to ``out`` (``.ang`` or ``.ctf``).

    ``format`` defaults to ``out``'s extension. Nothing is overwritten without ``overwrite``.
    """
    fmt = format or os.path.splitext(os.fspath(out))[1].lstrip(".").lower()
    if fmt not in EXPORT_FORMATS:
        raise InputError(f"cannot tell the export format: give a file ending in {' or '.join(EXPORT_FORMATS)}",
                         os.fspath(out))
    omap = hrebsd_orientation_map(results)
    writer = scan_io.write_ang if fmt == "ang" else scan_io.write_ctf
    return writer(out, omap, overwrite=overwrite)
