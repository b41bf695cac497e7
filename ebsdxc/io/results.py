"""The results file, schema v1 (HDF5; readable with plain h5py).

Group ``/ebsdxc`` holds ``displacement`` (rows, cols, n_roi, 2) [dx, dy] px,
``peak_height`` (rows, cols, n_roi), ``status`` (rows, cols, n_roi) uint8, ``done``
(rows, cols) bool and ``roi/centers``, ``roi/size``; attributes record the schema,
package version, command line, parameters (JSON), inputs (name, size, modification
time), creation time and ``complete``. Datasets are chunked along scan rows and
written batch by batch; ``complete`` turns true only after the last batch, and
unprocessed points keep NaN displacement and status ``NOT_PROCESSED``.
"""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass

import h5py
import numpy as np

from .. import __version__
from .. import status as st
from ..errors import InputError

SCHEMA = 1
GROUP = "ebsdxc"

__all__ = ["ResultsHandle", "ResultsWriter", "RunRecord", "require_results", "read_record", "read_results",
           "is_results_file", "input_record", "read_grains", "write_gnd", "SCHEMA"]


def input_record(path) -> dict:
    """Name, absolute path, size and modification time of an input file."""
    s = os.stat(path)
    return {"name": os.path.basename(path), "path": os.path.abspath(path), "size": s.st_size,
            "mtime": datetime.datetime.fromtimestamp(s.st_mtime, datetime.timezone.utc).isoformat()}


def is_results_file(path) -> bool:
    try:
        with h5py.File(path, "r") as f:
            return GROUP in f and "schema" in f[GROUP].attrs
    except OSError:
        return False


class ResultsHandle:
    """Holds an open h5py file ``self._f``; closes it on ``close`` or leaving a ``with`` block."""

    def close(self) -> None:
        if self._f.id.valid:
            self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ResultsWriter(ResultsHandle):
    """Creates (or reopens for ``--resume``) a results file and writes batches into it."""

    def __init__(self, f: h5py.File, path: str):
        self._f = f
        self.path = path
        g = f[GROUP]
        self._g = g
        self.rows, self.cols = g["done"].shape

    # -- opening -----------------------------------------------------------------------
    @classmethod
    def create(cls, path, *, grid, centres, roi_size, parameters: dict, inputs: list,
               command_line: str = "", overwrite=False) -> ResultsWriter:
        path = os.fspath(path)
        if os.path.exists(path):
            if not overwrite:
                raise InputError("output already exists; pass overwrite=True to replace it "
                                 "or resume=True to continue it", path)
            if not is_results_file(path):
                raise InputError("output exists and is not an ebsdxc results file; "
                                 "refusing to replace it", path)
            os.remove(path)
        rows, cols = grid.rows, grid.cols
        n = len(centres)
        try:
            f = h5py.File(path, "w-")
        except OSError as e:
            raise InputError(f"cannot create the output file ({e})", path) from None
        g = f.create_group(GROUP)
        a = g.attrs
        a["schema"] = SCHEMA
        a["version"] = __version__
        a["command_line"] = command_line
        a["parameters"] = json.dumps(parameters, sort_keys=True)
        a["inputs"] = json.dumps(inputs)
        a["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
        a["complete"] = False
        a["grid_kind"] = grid.kind
        if grid.step is not None:
            a["step"] = np.asarray(grid.step, dtype=np.float64)
        # Where each point sits on the sample, so maps of hexagonal scans are drawn true to
        # the grid without knowing its rules (NaN: a padding slot, not a scan point).
        pos = g.create_dataset("positions", data=grid.positions(), chunks=(1, cols, 2))
        pos.attrs["components"] = "x, y"
        pos.attrs["units"] = "um" if grid.step is not None else "scan steps"
        g.create_dataset("displacement", (rows, cols, n, 2), np.float32, chunks=(1, cols, n, 2),
                         fillvalue=np.nan)
        g["displacement"].attrs["units"] = "px"
        g["displacement"].attrs["components"] = "dx, dy: position in the scan pattern minus position in the reference"
        g.create_dataset("peak_height", (rows, cols, n), np.float32, chunks=(1, cols, n), fillvalue=np.nan)
        g["peak_height"].attrs["meaning"] = "normalised cross-correlation at the peak, in [-1, 1]"
        g.create_dataset("status", (rows, cols, n), np.uint8, chunks=(1, cols, n),
                         fillvalue=st.NOT_PROCESSED)
        g["status"].attrs["codes"] = json.dumps({str(k): v for k, v in st.DESCRIPTIONS.items()})
        g.create_dataset("done", (rows, cols), bool, chunks=(1, cols), fillvalue=False)
        r = g.create_group("roi")
        r.create_dataset("centers", data=np.asarray(centres, dtype=np.float64))
        r["centers"].attrs["components"] = "x, y (px, origin at the centre of pixel (0, 0))"
        r.create_dataset("size", data=np.asarray(roi_size, dtype=np.int64))
        r["size"].attrs["components"] = "w, h (px)"
        f.flush()
        return cls(f, path)

    @classmethod
    def resume(cls, path, *, grid, parameters: dict, inputs: list) -> ResultsWriter:
        path = os.fspath(path)
        if not os.path.exists(path):
            raise InputError("resume=True given but there is no output to continue", path)
        if not is_results_file(path):
            raise InputError("resume=True given but the output is not an ebsdxc results file", path)
        # Checks on a read-only handle: a refused resume leaves the file untouched, mtime included.
        with h5py.File(path, "r") as f:
            g = f[GROUP]
            if int(g.attrs["schema"]) != SCHEMA:
                raise InputError(f"results schema {g.attrs['schema']} cannot be resumed by schema {SCHEMA}",
                                 path)
            if g["done"].shape != (grid.rows, grid.cols):
                raise InputError(f"results grid {g['done'].shape} differs from the scan grid "
                                 f"{(grid.rows, grid.cols)}", path)
            old = json.loads(g.attrs["parameters"])
            if old != json.loads(json.dumps(parameters, sort_keys=True)):
                diff = sorted(k for k in set(old) | set(parameters) if old.get(k) != parameters.get(k))
                raise InputError("was made with other parameters (" + ", ".join(diff) +
                                 "); resume with the same options or pass overwrite=True", path)
            old_inputs = {i["name"]: (i["size"], i["mtime"]) for i in json.loads(g.attrs["inputs"])}
            for i in inputs:
                if i["name"] in old_inputs and old_inputs[i["name"]] != (i["size"], i["mtime"]):
                    raise InputError(f"input {i['name']} changed since the run started; "
                                     "pass overwrite=True to start again", path)
        f = h5py.File(path, "r+")
        g = f[GROUP]
        g.attrs["complete"] = False
        return cls(f, path)

    # -- writing -----------------------------------------------------------------------
    @property
    def done(self) -> np.ndarray:
        return self._g["done"][...]

    def write(self, start: int, displacement, peak_height, status) -> None:
        """Write results of flat scan points ``start : start + len(displacement)``."""
        stop = start + len(displacement)
        g, cols = self._g, self.cols
        i = start
        while i < stop:
            r, c0 = divmod(i, cols)
            c1 = min(cols, c0 + (stop - i))
            sl = slice(i - start, i - start + (c1 - c0))
            g["displacement"][r, c0:c1] = displacement[sl]
            g["peak_height"][r, c0:c1] = peak_height[sl]
            g["status"][r, c0:c1] = status[sl]
            g["done"][r, c0:c1] = True  # after the data: a crash never marks unwritten points done
            i += c1 - c0
        self._f.flush()

    def mark_missing(self, missing) -> None:
        """Flag (rows, cols) bool ``missing`` points ``MISSING_PATTERN`` and done, without data."""
        self.mark_status(missing, st.MISSING_PATTERN)

    def mark_status(self, points, code: int) -> None:
        """Flag (rows, cols) bool ``points`` with status ``code`` in every ROI, and done, without data
        (points there is nothing to correlate for: no pattern, no reference)."""
        missing = np.asarray(points, dtype=bool)
        g = self._g
        for r in np.flatnonzero(missing.any(axis=1)):
            cols = missing[r]
            status = g["status"][r]
            status[cols] = code
            g["status"][r] = status
            done = g["done"][r]
            done[cols] = True
            g["done"][r] = done
        self._f.flush()

    def write_references(self, index, labels) -> None:
        """Record which reference each point used: ``point_reference`` (rows, cols) int32 and
        the references' labels (JSON) in its ``references`` attribute. Only for runs of
        several references; a one-reference run records its reference in the parameters."""
        d = self._g.create_dataset("point_reference", data=np.asarray(index, dtype=np.int32),
                                   chunks=(1, self.cols))
        d.attrs["references"] = json.dumps(list(labels))
        d.attrs["meaning"] = "index of the reference (in the 'references' attribute) each point is correlated with"
        self._f.flush()

    def write_grains(self, grain_id, reference_point, *, reference_euler=None, phase=None, kam=None,
                     attrs: dict | None = None) -> None:
        """Record the grains of a reference-per-grain run.

        ``grain_id`` (rows, cols) int32, ids 0..n_grains-1, -1 = no grain;
        ``grains/reference_point`` (n_grains, 2) [row, col], (-1, -1) for a grain without a
        usable reference; optionally ``grains/reference_euler`` (n_grains, 3) Bunge degrees,
        ``grains/phase`` (n_grains,) and ``grains/kam`` (rows, cols) degrees. ``attrs`` (JSON-able
        values) describe how the grains were found.
        """
        g = self._g
        gid = np.asarray(grain_id, dtype=np.int32)
        d = g.create_dataset("grain_id", data=gid, chunks=(1, self.cols))
        d.attrs["meaning"] = "grain of each point, 0..n_grains-1; -1: no grain (not indexed, too small, no pattern)"
        grp = g.create_group("grains")
        d = grp.create_dataset("reference_point", data=np.asarray(reference_point, dtype=np.int64).reshape(-1, 2))
        d.attrs["components"] = "row, col of each grain's reference point, indexed by grain id; -1, -1: none"
        if reference_euler is not None:
            d = grp.create_dataset("reference_euler", data=np.asarray(reference_euler, dtype=np.float64))
            d.attrs["components"] = "phi1, Phi, phi2 (Bunge, degrees) of each grain's reference point"
        if phase is not None:
            grp.create_dataset("phase", data=np.asarray(phase, dtype=np.int16))
        if kam is not None:
            d = grp.create_dataset("kam", data=np.asarray(kam, dtype=np.float32), chunks=(1, self.cols))
            d.attrs["units"] = "degrees"
            d.attrs["meaning"] = "kernel average misorientation (first neighbours in the same grain)"
        for k, v in (attrs or {}).items():
            grp.attrs[k] = json.dumps(v)
        self._f.flush()

    def set_attr(self, name, value):
        self._g.attrs[name] = value

    def finish(self) -> None:
        self._g.attrs["complete"] = bool(self._g["done"][...].all())
        self._g.attrs["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
        self._f.flush()



@dataclass(frozen=True)
class RunRecord:
    """What a results file records of the run that made it (for re-fitting, re-correlating).

    ``parameters`` and ``inputs`` are the decoded JSON attributes (``inputs`` keyed by file
    name); ``pattern_shape`` is ``()`` when not recorded; ``scan_format`` is ``None`` when
    not recorded.
    """

    path: str
    parameters: dict
    inputs: dict
    rows: int
    cols: int
    centres: np.ndarray
    roi_size: tuple
    step: tuple | None
    grid_kind: str
    scan_format: str | None
    pattern_shape: tuple
    any_done: bool

    def input_path(self, key: str) -> str | None:
        """Recorded path of the input the parameter ``key`` names (``"scan"``, ``"reference"``)."""
        return (self.inputs.get(self.parameters.get(key)) or {}).get("path")


def read_record(path) -> RunRecord:
    """The :class:`RunRecord` of a results file; InputError naming it when it lacks one."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError("no such file", path)
    if not is_results_file(path):
        raise InputError("not an ebsdxc results file (run 'ebsdxc process' first)", path)
    with h5py.File(path, "r") as f:
        g = f[GROUP]
        a = g.attrs
        try:
            params = json.loads(a["parameters"])
            inputs = {i["name"]: i for i in json.loads(a["inputs"])}
            rows, cols = g["done"].shape
            centres = g["roi/centers"][...]
            roi_size = tuple(int(v) for v in g["roi/size"][...])
        except (KeyError, ValueError, TypeError) as e:
            raise InputError(f"lacks the metadata the strain fit needs ({e})", path) from None
        fmt = str(a.get("scan_format", "")) or None
        return RunRecord(path=path, parameters=params, inputs=inputs, rows=int(rows), cols=int(cols),
                         centres=centres, roi_size=roi_size,
                         step=tuple(float(v) for v in a["step"]) if "step" in a else None,
                         grid_kind=str(a.get("grid_kind", "square")), scan_format=fmt,
                         pattern_shape=tuple(int(v) for v in a.get("pattern_shape", ())),
                         any_done=bool(g["done"][...].any()))


def require_results(path) -> str:
    """``path`` as a string; InputError naming it unless it is an ebsdxc results file."""
    path = os.fspath(path)
    if not is_results_file(path):
        raise InputError("not an ebsdxc results file", path)
    return path


def read_results(path) -> dict:
    """Everything in a results file as NumPy arrays plus an ``attrs`` dict (small scans)."""
    path = require_results(path)
    with h5py.File(path, "r") as f:
        g = f[GROUP]
        out = {k: g[k][...] for k in ("displacement", "peak_height", "status", "done")}
        out["roi_centers"] = g["roi/centers"][...]
        out["roi_size"] = g["roi/size"][...]
        if "positions" in g:
            out["positions"] = g["positions"][...]
        attrs = dict(g.attrs)
        for k in ("parameters", "inputs"):
            attrs[k] = json.loads(attrs[k])
        attrs["complete"] = bool(attrs["complete"])
        out["attrs"] = attrs
    return out


def read_summary(path) -> dict:
    """Counts and medians for a one-line report and ``ebsdxc info`` (reads row by row)."""
    path = require_results(path)
    with h5py.File(path, "r") as f:
        g = f[GROUP]
        rows, cols, n = g["status"].shape
        ok = 0
        counts = np.zeros(256, dtype=np.int64)
        heights = []
        for r in range(rows):
            s = g["status"][r]
            counts += np.bincount(s.ravel(), minlength=256)
            h = g["peak_height"][r]
            heights.append(np.nanmedian(h) if np.isfinite(h).any() else np.nan)
        done = int(g["done"][...].sum())
        strain = None
        if "fit_status" in g:
            fs = g["fit_status"][...]
            sp = json.loads(g.attrs.get("strain_parameters", "{}"))
            strain = {"complete": bool(g.attrs.get("strain_complete", False)), "material": sp.get("material"),
                      "points_fitted": int((fs == 0).sum()), "points_remapped": int(g["remapped"][...].sum()),
                      "points_flagged": int(((fs != 0) & (fs != 2)).sum())}
        ok = int(counts[st.OK])
        a = g.attrs
        return {
            "schema": int(a["schema"]),
            "version": str(a["version"]),
            "complete": bool(a["complete"]),
            "points": rows * cols,
            "points_done": done,
            "grid": [rows, cols],
            "grid_kind": str(a.get("grid_kind", "square")),
            "points_missing": int(counts[st.MISSING_PATTERN]) // max(n, 1),
            "points_without_reference": int(counts[st.NO_REFERENCE]) // max(n, 1),
            "n_roi": n,
            "roi_size": g["roi/size"][...].tolist(),
            # Points without a pattern or a reference are not measurements: they do not count against it.
            "ok_fraction": ok / max(done * n - int(counts[st.MISSING_PATTERN]) - int(counts[st.NO_REFERENCE]), 1),
            "status_counts": {st.DESCRIPTIONS.get(k, str(k)): int(c) for k, c in enumerate(counts) if c},
            "median_peak_height": float(np.nanmedian(heights)) if np.isfinite(heights).any() else float("nan"),
            "created": str(a["created"]),
            "command_line": str(a["command_line"]),
            "device": str(a.get("device", "")),
            "parameters": json.loads(a["parameters"]),
            **({"strain": strain} if strain else {}),
            **({"grains": {"count": int(g["grains/reference_point"].shape[0]),
                           "with_reference": int((g["grains/reference_point"][:, 0] >= 0).sum())}}
               if "grains" in g else {}),
            **({"gnd_points": int(np.isfinite(g["gnd_density"][...]).sum())} if "gnd_density" in g else {}),
        }


# --------------------------------------------------------------------------- strain (HR-EBSD)

#: Datasets the strain pass adds to ``/ebsdxc`` (name -> (trailing shape, dtype, fill, attrs)).
STRAIN_DATASETS = {
    "deformation_gradient": ((3, 3), np.float32, np.nan, {
        "frame": "sample", "meaning": "F: a lattice vector r of the reference becomes F r"}),
    "strain": ((3, 3), np.float32, np.nan, {
        "frame": "sample", "meaning": "elastic strain V - I of F = V R (symmetric; small strain to first order)"}),
    "strain_crystal": ((3, 3), np.float32, np.nan, {
        "frame": "crystal", "meaning": "strain in the deformed crystal's frame g R^T"}),
    "rotation": ((3, 3), np.float32, np.nan, {
        "frame": "sample", "units": "rad",
        "meaning": "antisymmetric lattice rotation w = log(R), R = expm(w) ~ I + w; w_10 = rotation about z"}),
    "rotation_crystal": ((3, 3), np.float32, np.nan, {
        "frame": "crystal", "units": "rad", "meaning": "g w g^T, g the reference orientation"}),
    "fit_residual": ((), np.float32, np.nan, {
        "units": "px", "meaning": "RMS distance between measured and fitted ROI positions (used ROIs)"}),
    "angular_error": ((), np.float32, np.nan, {
        "units": "rad", "meaning": "mean angle between measured and fitted ROI directions (used ROIs)"}),
    "rois_used": ((), np.int16, 0, {"meaning": "ROIs used in the fit after rejection"}),
    "fit_status": ((), np.uint8, 2, {}),
    "remapped": ((), bool, False, {
        "meaning": "fitted against the reference rotated by the first-pass rotation (Britton & Wilkinson 2012)"}),
    "pattern_centre": ((3,), np.float64, np.nan, {
        "convention": "bruker", "meaning": "PCx, PCy (fractions of width, height from the top-left corner), "
                                           "PCz (distance / height), as kikuchipy's EBSDDetector"}),
}


class StrainWriter(ResultsHandle):
    """Adds the strain datasets to a finished results file, row chunk by row chunk.

    ``strain_complete`` stays false until :meth:`finish`, so a crash mid-pass never leaves
    a result that looks complete. Existing strain datasets are replaced only with
    ``overwrite``.
    """

    def __init__(self, path, *, parameters: dict, n_roi: int, fit_codes: dict, overwrite=False):
        self.path = require_results(path)
        try:
            self._f = h5py.File(self.path, "r+")
        except OSError as e:
            raise InputError(f"cannot open the results file for writing ({e})", path) from None
        g = self._g = self._f[GROUP]
        rows, cols = g["done"].shape
        present = [k for k in STRAIN_DATASETS if k in g] + [k for k in ("roi_used",) if k in g]
        if present:
            if not overwrite:
                self._f.close()
                raise InputError("already holds strain results; pass overwrite=True to replace them", path)
            for k in present:
                del g[k]
        for name, (tail, dtype, fill, attrs) in STRAIN_DATASETS.items():
            ds = g.create_dataset(name, (rows, cols, *tail), dtype, chunks=(1, cols, *tail), fillvalue=fill)
            for k, v in attrs.items():
                ds.attrs[k] = v
        g["fit_status"].attrs["codes"] = json.dumps({str(k): v for k, v in fit_codes.items()})
        g.create_dataset("roi_used", (rows, cols, n_roi), bool, chunks=(1, cols, n_roi), fillvalue=False)
        g["roi_used"].attrs["meaning"] = "ROI kept by the rejection rule"
        g.attrs["strain_parameters"] = json.dumps(parameters, sort_keys=True)
        g.attrs["strain_complete"] = False
        self.rows, self.cols = rows, cols
        self._f.flush()

    def write(self, rows: slice, cols: int, **arrays) -> None:
        """Write whole scan rows ``rows`` (arrays of shape (n_rows * cols, ...), row-major)."""
        n = rows.stop - rows.start
        for name, a in arrays.items():
            self._g[name][rows] = np.asarray(a).reshape(n, cols, *np.shape(a)[1:])
        self._f.flush()

    def finish(self) -> None:
        self._g.attrs["strain_complete"] = True
        self._f.flush()



def read_grains(path) -> dict | None:
    """The grains a reference-per-grain results file records, or None: ``grain_id``,
    ``reference_point``, ``reference_euler`` and ``phase`` (None where not recorded) and the
    ``grains`` group's attributes (JSON-decoded)."""
    path = require_results(path)
    with h5py.File(path, "r") as f:
        g = f[GROUP]
        if "grain_id" not in g or "grains" not in g:
            return None
        grp = g["grains"]
        out = {"grain_id": g["grain_id"][...], "reference_point": grp["reference_point"][...]}
        for k in ("reference_euler", "phase"):
            out[k] = grp[k][...] if k in grp else None
        out["attrs"] = {k: json.loads(v) for k, v in grp.attrs.items()}
    return out


def write_gnd(path, nye, density, *, attrs: dict) -> None:
    """Write ``nye_tensor`` (rows, cols, 3, 3) 1/m and ``gnd_density`` (rows, cols) 1/m^2 into a
    results file (replacing earlier ones); ``None`` writes neither and records in ``gnd``'s
    attributes why (``attrs["skipped"]``). ``gnd_complete`` turns true only after both."""
    path = require_results(path)
    with h5py.File(path, "r+") as f:
        g = f[GROUP]
        g.attrs["gnd_complete"] = False
        for k in ("nye_tensor", "gnd_density"):
            if k in g:
                del g[k]
        if nye is not None:
            rows, cols = np.shape(density)
            d = g.create_dataset("nye_tensor", data=np.asarray(nye, dtype=np.float64), chunks=(1, cols, 3, 3))
            d.attrs["units"] = "1/m"
            d.attrs["frame"] = "sample (kikuchipy / EDAX TSL); map x = column * step, y = row * step"
            d.attrs["meaning"] = ("alpha = kappa^T - tr(kappa) I, kappa_ij = d theta_i / d x_j; NaN in the "
                                  "components a 2-D map cannot measure (alpha_11, alpha_22, alpha_31, alpha_32)")
            d = g.create_dataset("gnd_density", data=np.asarray(density, dtype=np.float64), chunks=(1, cols))
            d.attrs["units"] = "1/m^2"
            d.attrs["meaning"] = "total GND density, lower bound (L1 minimisation over the slip systems)"
        g.attrs["gnd_parameters"] = json.dumps(attrs, sort_keys=True)
        g.attrs["gnd_complete"] = nye is not None


def read_strain(path) -> dict:
    """The strain datasets of a results file (NumPy arrays) plus ``strain_parameters``."""
    path = require_results(path)
    with h5py.File(path, "r") as f:
        g = f[GROUP]
        if "strain" not in g:
            raise InputError("holds no strain results (run 'ebsdxc strain' on it)", path)
        out = {k: g[k][...] for k in (*STRAIN_DATASETS, "roi_used")}
        out["strain_parameters"] = json.loads(g.attrs["strain_parameters"])
        out["strain_complete"] = bool(g.attrs["strain_complete"])
    return out
