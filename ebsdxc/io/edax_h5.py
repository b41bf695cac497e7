"""EDAX/TSL OIM Analysis HDF5 files ("OH5", EDAX's h5ebsd).

Layout, as found in the files themselves (OIM Analysis 7 writes the root entries with a
leading space, ``" Manufacturer"``; OIM Analysis 8 without)::

    /Manufacturer                 dataset, b"EDAX"
    /Version                      dataset, e.g. b"OIM Analysis 7.2.1 x64 [01-23-15]"
    /<scan>/EBSD/Data/Pattern     (n, H, W) patterns in acquisition order
    /<scan>/EBSD/Data/Phi1, Phi, Phi2
                                  (n,) Bunge Euler angles in radians
    /<scan>/EBSD/Header/          nRows, nColumns, Step X, Step Y (um), Grid Type
                                  ("SqrGrid" or "HexGrid"), Pattern Height, Pattern Width,
                                  Sample Tilt, Camera Elevation Angle, Camera Azimuthal
                                  Angle (degrees), Working Distance (mm),
                                  Pattern Center Calibration/{x-star, y-star, z-star}
    /<scan>/SEM-PRIAS Images/...  optional, Header/Mag
    /<scan 2>/...                 a file may hold several scans; their names are free text

Detection: an HDF5 file whose root ``Manufacturer`` reads ``EDAX`` and with a top group in
OIM's layout (``EBSD/Data/Pattern``, or an ``EBSD/Header`` with ``nColumns``). The
``Version`` must be an OIM Analysis version this reader knows
(:data:`KNOWN_MAJOR_VERSIONS`); other EDAX files are refused with a message naming the
version (``--format hdf5 --dataset ...`` still reads their pattern dataset as plain HDF5).

Choosing a scan: ``dataset=`` takes the scan group's name (``"Scan 2"``), a number
(``2`` means ``"Scan 2"``) or the full pattern dataset name ``"/Scan 2/EBSD/Data/Pattern"``.
By default the first scan holding patterns is read, as ``kikuchipy.load`` does.

Grid: ``nRows`` x ``nColumns`` of ``Grid Type``. On a hexagonal grid, ``nColumns`` counts
the points of the even rows (0, 2, ...), odd rows hold one point fewer, and the file stores
only the scan points, one after another (see :class:`ebsdxc.io.source.ScanGrid`); the
padding slots read as zeros and are not ``present``. kikuchipy refuses hexagonal files.

The projection centre ``x-star, y-star, z-star`` is in EDAX/TSL's convention (``"tsl"``);
it is left out of the metadata when ``z-star`` is not positive, which is how an
uncalibrated file says it has none (the raw values stay in ``header``). EDAX stores one PC
per scan, so :meth:`EDAXSource.pattern_centres` gives ``None``.

This module also holds the small header helpers the other vendor readers
(:mod:`~ebsdxc.io.bruker_h5`, :mod:`~ebsdxc.io.oxford_h5oina`, :mod:`~ebsdxc.io.emsoft_h5`)
share: :func:`entry`, :func:`text`, :func:`number`, :func:`per_slot`, :func:`first_point`,
:func:`summarise_pcs`, :func:`record_pattern_centre`, ...
"""

from __future__ import annotations

import re
import warnings

import h5py
import numpy as np

from ..errors import InputError
from .hdf5 import (
    HDF5Source,
    check_filters,
    dataset_metadata,
    file_matches,
    open_file,
    read_entry,
    to_jsonable,
    top_groups_holding,
)
from .orientation_map import (
    OrientationMap,
    PhaseInfo,
    build_map,
    laue_group_name,
    phase_indices,
    quality_name,
)
from .source import grid_kind, header_grid

NAME = "edax_h5"
DESCRIPTION = "EDAX/TSL OIM Analysis h5 (/<scan>/EBSD/Data/Pattern, square or hexagonal grid)"

#: OIM Analysis major versions whose h5 layout this reader knows.
KNOWN_MAJOR_VERSIONS = (7, 8, 9)

_PATTERNS = "EBSD/Data/Pattern"
_DATA = "EBSD/Data"
_HEADER = "EBSD/Header"
_EULER = ("Phi1", "Phi", "Phi2")
_VERSION_RE = re.compile(r"^\s*OIM\s+Analysis\s+(\d+)", re.IGNORECASE)


# --------------------------------------------------------------------------- shared helpers


def _match(keys, name):
    want = name.strip().lower()
    for key in keys:
        if key.strip().lower() == want:
            return key
    return None


def _unwrap(value):
    arr = np.asarray(value)
    if arr.dtype.names is not None:
        return None
    if arr.size == 1:
        item = arr.reshape(()).item()
        return item.decode("utf-8", errors="replace") if isinstance(item, bytes) else item
    return arr


def entry(group, name):
    """Dataset or attribute ``name`` of ``group`` as a Python scalar (or array), else ``None``.

    Names match ignoring case and surrounding spaces, since vendors are not consistent
    (EDAX writes ``" Manufacturer"``). Meant for small header entries: the whole dataset
    is read.
    """
    key = _match(group.keys(), name)
    if key is not None:
        obj = group.get(key)
        return _unwrap(read_entry(obj)) if isinstance(obj, h5py.Dataset) else None
    key = _match(group.attrs.keys(), name)
    if key is not None:
        return _unwrap(group.attrs[key])
    return None


def text(group, name) -> str | None:
    """Header entry ``name`` as stripped text, or ``None`` when absent or not text."""
    value = entry(group, name)
    return value.strip().strip("\x00") if isinstance(value, str) else None


def number(group, name) -> float | None:
    """Header entry ``name`` as a float, or ``None`` when absent or not one number."""
    value = entry(group, name)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        return None
    value = float(value)
    return value if np.isfinite(value) else None


def integer(group, name, path) -> int | None:
    """Header entry ``name`` as an int; ``None`` when absent; InputError when not a count."""
    value = number(group, name)
    if value is None:
        raw = entry(group, name)
        if raw is not None:
            raise InputError(f"header entry {name!r} = {raw!r} is not a number", path)
        return None
    if not value.is_integer():
        raise InputError(f"header entry {name!r} = {value:g} is not a whole number", path)
    return int(value)


def per_slot(values, records) -> np.ndarray:
    """Per-record ``values`` (n,) or (n, k) spread over the grid's slots, float64.

    ``records`` is the slot -> record map of a source (``-1`` for slots without a stored
    point); slots without a record, or whose record lies past ``values``, get NaN.
    """
    values = np.asarray(values, dtype=np.float64)
    values = values.reshape(values.shape[0], -1)
    out = np.full((records.size, values.shape[1]), np.nan)
    ok = (records >= 0) & (records < values.shape[0])
    out[ok] = values[records[ok]]
    return out


def first_point(group, names, records) -> np.ndarray | None:
    """The values of per-point datasets ``names`` of ``group`` at the first slot that holds
    a pattern (``records`` as in :func:`per_slot`), float64 (len(names),), or ``None`` when a
    dataset is missing or too short. Reads one element of each."""
    present = records[records >= 0]
    if present.size == 0:
        return None
    rec = int(present[0])
    values = []
    for name in names:
        obj = group.get(name)
        if not isinstance(obj, h5py.Dataset) or obj.ndim != 1 or obj.shape[0] <= rec:
            return None
        values.append(float(obj[rec]))
    out = np.array(values)
    return out if np.isfinite(out).all() else None


def record_pattern_centre(src, convention: str) -> None:
    """Put one PC summarising ``src.pattern_centres()`` into ``src.metadata`` (with its
    convention, and ``pattern_centre_varies`` when the points differ); nothing when it has none."""
    pcs = src.pattern_centres()
    if pcs is None:
        return
    pc, varies = summarise_pcs(pcs)
    if pc is None:
        return
    src.metadata["pattern_centre"] = pc
    src.metadata["pattern_centre_convention"] = convention
    if varies:
        src.metadata["pattern_centre_varies"] = True


def summarise_pcs(pcs) -> tuple[list[float] | None, bool]:
    """One PC for the metadata from per-slot PCs (..., 3) with NaN gaps: the common value,
    or the mean and ``True`` when they vary; ``(None, False)`` when none is finite."""
    flat = np.asarray(pcs, dtype=np.float64).reshape(-1, 3)
    flat = flat[np.isfinite(flat).all(axis=1)]
    if flat.size == 0:
        return None, False
    if np.all(flat == flat[0]):
        return flat[0].tolist(), False
    return flat.mean(axis=0).tolist(), True


def check_pattern_dataset(ds, path, height=None, width=None) -> None:
    """InputError unless ``ds`` is a readable numeric (n, H, W) stack whose (H, W) agree with
    the header's ``height`` x ``width`` (each ``None`` when the header does not say)."""
    where = f"dataset {ds.name!r}"
    if ds.dtype.kind not in "uif" or ds.dtype.names is not None or ds.ndim != 3:
        raise InputError(f"{where} ({ds.dtype}, shape {tuple(ds.shape)}) is not a numeric "
                         "(n, H, W) pattern array", path)
    if ds.shape[0] == 0:
        raise InputError(f"{where} holds no patterns", path)
    if ((height is not None and height != ds.shape[1])
            or (width is not None and width != ds.shape[2])):
        raise InputError(f"header says patterns of {height} x {width} px (height x width) but "
                         f"{where} holds {ds.shape[1]} x {ds.shape[2]} px", path)
    check_filters(ds, path)


def check_stored(n_stored, grid, where, path) -> int | None:
    """Compare the stored patterns with the grid's points: InputError when there are more,
    a warning (and the count to record as ``n_stored``) when fewer, ``None`` when equal."""
    what = (f"{grid.rows} x {grid.cols} scan points" + (f" ({grid.n_points} on its hexagonal "
            "grid)" if grid.kind == "hexagonal" else ""))
    if n_stored > grid.n_points:
        raise InputError(f"header says {what} but {where} holds {n_stored} patterns; read it "
                         "as plain HDF5 with --format hdf5 --dataset ...", path)
    if n_stored < grid.n_points:
        warnings.warn(f"{path}: {where} holds {n_stored} of {grid.n_points} patterns (an "
                      "interrupted scan?); the missing points read as zeros and are flagged, "
                      "not processed", stacklevel=3)
        return n_stored
    return None


def jsonable_scalars(info: dict) -> dict:
    """The entries of ``info`` that are plain numbers or text, JSON-friendly."""
    out = {}
    for key, value in info.items():
        value = to_jsonable(value)
        if isinstance(value, str):
            value = value.strip().strip("\x00")
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            if isinstance(value, float) and not np.isfinite(value):
                continue
            out[key] = value
    return out


def choose_group(names, dataset, path, *, pattern_path, numbered="Scan {}", what="scan"):
    """The group among ``names`` that ``dataset`` (``--dataset``) names: a group name, a
    number (``numbered`` gives the name), or ``<group>/<pattern_path>``; the first by default."""
    if dataset is None:
        return names[0]
    choice = str(dataset).strip().strip("/")
    wanted = [choice]
    if choice.isdigit():
        wanted.append(numbered.format(int(choice)))
    for name in names:
        if name in wanted or choice == f"{name}/{pattern_path}":
            return name
    raise InputError(f"has no {what} {str(dataset)!r}; its {what}s with patterns are "
                     f"{', '.join(repr(n) for n in names)} (choose one with --dataset)", path)


# --------------------------------------------------------------------------- detection


def manufacturer(f) -> str | None:
    """The root ``Manufacturer`` text of open file ``f``, or ``None``."""
    return text(f, "Manufacturer")


def _edax_scan_group(obj) -> bool:
    # OIM's own layout: patterns named "Pattern", or a header counting "nColumns"; other
    # files that merely say EDAX (e.g. kikuchipy's layout) are left to the generic reader
    if not isinstance(obj, h5py.Group):
        return False
    if isinstance(obj.get(_PATTERNS), h5py.Dataset):
        return True
    header = obj.get(_HEADER)
    return isinstance(header, h5py.Group) and _match(header.keys(), "nColumns") is not None


def is_edax(f) -> bool:
    """Whether open file ``f`` is an EDAX h5 file: root Manufacturer EDAX and a top group in
    OIM's layout (``EBSD/Data/Pattern`` or ``EBSD/Header/nColumns``)."""
    man = manufacturer(f)
    if man is None or not man.lower().startswith("edax"):
        return False
    return any(_edax_scan_group(f.get(k)) for k in f)


def detect(path) -> bool:
    """Whether ``path`` is an EDAX/TSL OIM h5 file, judged from its content."""
    return file_matches(path, is_edax)


def scan_names(f) -> list[str]:
    """Top groups holding ``EBSD/Data/Pattern`` and ``EBSD/Header``, in file order."""
    return top_groups_holding(f, _PATTERNS, _HEADER)


def _check_version(f, path) -> str:
    version = text(f, "Version")
    m = _VERSION_RE.match(version or "")
    if m is None or int(m.group(1)) not in KNOWN_MAJOR_VERSIONS:
        known = ", ".join(str(v) for v in KNOWN_MAJOR_VERSIONS)
        raise InputError(f"EDAX file version {version!r} is not one ebsdxc can read (it reads "
                         f"OIM Analysis {known} h5 files); read the pattern dataset as plain "
                         "HDF5 with --format hdf5 --dataset '/<scan>/EBSD/Data/Pattern'", path)
    return version


# --------------------------------------------------------------------------- source


class EDAXSource(HDF5Source):
    """Patterns of one scan of an EDAX OIM h5 file, read lazily (see module notes)."""

    format = NAME

    def __init__(self, path, file, scan, *, grid, metadata=None, n_stored=None):
        super().__init__(path, file, f"/{scan}/{_PATTERNS}", grid=grid, metadata=metadata,
                         n_stored=n_stored)
        self.scan = scan

    def orientations(self) -> np.ndarray | None:
        """Bunge Euler angles per slot, ``(rows, cols, 3)`` degrees (NaN where no point), or
        ``None`` when the file has none. EDAX stores them in radians."""
        data = self.dataset.file[f"/{self.scan}/{_DATA}"]
        arrays = [data.get(k) for k in _EULER]
        if not all(isinstance(a, h5py.Dataset) and a.ndim == 1 for a in arrays):
            return None
        euler = np.degrees(np.stack([read_entry(a) for a in arrays], axis=1).astype(np.float64))
        return per_slot(euler, self._records).reshape(self.grid.rows, self.grid.cols, 3)

    def orientation_map(self):
        """The scan's :class:`~ebsdxc.io.orientation_map.OrientationMap` (Euler angles, phases,
        IQ, CI, fit, ...), or ``None`` when it stores no orientations (see
        :func:`scan_orientation_map`)."""
        return scan_orientation_map(self.dataset.file, self.scan, self.path, self.grid, self._records)


# --------------------------------------------------------------------------- open


def open(path, *, dataset=None, grid_shape=None) -> EDAXSource:  # noqa: A001 - registry interface
    """Open one scan of an EDAX/TSL OIM h5 file.

    Parameters
    ----------
    path : str or os.PathLike
    dataset : str or int, optional
        The scan: its group name (``"Scan 2"``), a number (``2``) or the pattern dataset's
        full name (``"/Scan 2/EBSD/Data/Pattern"``). Default: the first scan.
    grid_shape : (int, int), optional
        Must agree with the header's grid (``--grid``); used only when the header has none.

    Returns
    -------
    EDAXSource

    Raises
    ------
    InputError
        Not an EDAX h5 file, an OIM version this reader does not know, no such scan, a
        header that does not fit the stored patterns, or patterns compressed with an HDF5
        filter that is not available.
    """
    f = open_file(path)
    try:
        if not is_edax(f):
            raise InputError("not an EDAX OIM h5 file (it needs a root 'Manufacturer' = 'EDAX' "
                             "and a group /<scan>/EBSD/Data/Pattern or /<scan>/EBSD/Header "
                             "with nColumns)", path)
        version = _check_version(f, path)
        names = scan_names(f)
        if not names:
            raise InputError("holds no scan with patterns (no /<scan>/EBSD/Data/Pattern with "
                             "/<scan>/EBSD/Header; OIM writes patterns only when asked to)", path)
        scan = choose_group(names, dataset, path, pattern_path=_PATTERNS)
        ds = f[f"/{scan}/{_PATTERNS}"]
        header = f[f"/{scan}/{_HEADER}"]
        check_pattern_dataset(ds, path, integer(header, "Pattern Height", path),
                              integer(header, "Pattern Width", path))
        n = int(ds.shape[0])

        rows, cols = integer(header, "nRows", path), integer(header, "nColumns", path)
        try:
            kind = grid_kind(text(header, "Grid Type") or "")
        except ValueError as e:
            raise InputError(f"header: {e}", path) from None
        sx, sy = number(header, "Step X"), number(header, "Step Y")
        step = (sy, sx) if sx is not None and sy is not None else None
        grid = header_grid(rows, cols, grid_shape, n, path, step=step, kind=kind)
        meta = {"scan": scan, "scans": names, **dataset_metadata(ds), "file_version": version}
        n_stored = check_stored(n, grid, f"dataset {ds.name!r}", path)
        if n_stored is not None:
            meta["n_stored"] = n_stored

        pcal = header.get("Pattern Center Calibration")
        star = ([number(pcal, k) for k in ("x-star", "y-star", "z-star")]
                if isinstance(pcal, h5py.Group) else [None] * 3)
        if all(v is not None for v in star) and star[2] > 0:
            meta["pattern_centre"] = star
            meta["pattern_centre_convention"] = "tsl"
        for key, name in (("sample_tilt", "Sample Tilt"),
                          ("detector_tilt", "Camera Elevation Angle")):
            value = number(header, name)
            if value is not None:
                meta[key] = value
        info = {"working_distance": entry(header, "Working Distance"),
                "camera_azimuthal_angle": entry(header, "Camera Azimuthal Angle"),
                "grid_type": text(header, "Grid Type"),
                "x_star": star[0], "y_star": star[1], "z_star": star[2]}
        prias = f.get(f"/{scan}/SEM-PRIAS Images/Header")
        if isinstance(prias, h5py.Group):
            info["magnification"] = entry(prias, "Mag")
        info = jsonable_scalars(info)
        if info:
            meta["header"] = info

        src = EDAXSource(path, f, scan, grid=grid, metadata=meta, n_stored=n)
        euler = first_point(f[f"/{scan}/{_DATA}"], _EULER, src._records)
        if euler is not None:
            src.metadata["euler_angles"] = np.degrees(euler).tolist()
        return src
    except BaseException:
        f.close()
        raise


# --------------------------------------------------------------------------- orientation maps

# Per-point datasets that are not quality measures; the others are (IQ, CI, Fit, SEM Signal, ...).
_NOT_QUALITY = {"phi1", "phi", "phi2", "phase", "x position", "y position", "pattern"}
_QUALITY_NAMES = {"iq": "iq", "ci": "ci", "fit": "fit", "sem signal": "detector_signal"}


def _phases(header, path) -> list[PhaseInfo]:
    group = header.get("Phase")
    if not isinstance(group, h5py.Group):
        return []
    phases = []
    for key in group:
        block = group[key]
        if not isinstance(block, h5py.Group) or not key.strip().lstrip("-").isdigit():
            continue
        name = text(block, "MaterialName") or ""
        where = f"phase {key.strip()}" + (f" ({name})" if name else "")
        code, point_group = number(block, "Symmetry"), text(block, "Point Group")
        try:
            if code is not None:
                laue = laue_group_name(tsl_code=code)
            elif point_group:
                laue = laue_group_name(point_group=point_group)
            else:
                raise ValueError("it gives no Symmetry")
        except ValueError as e:
            raise InputError(f"{block.name}: {where}: {e}", path) from None
        lattice = [number(block, f"Lattice Constant {k}") for k in ("a", "b", "c", "alpha", "beta", "gamma")]
        if any(v is None for v in lattice):
            raise InputError(f"{block.name}: {where} lacks a 'Lattice Constant' entry", path)
        phases.append(PhaseInfo(id=int(key.strip()), name=name, laue=laue, lattice=tuple(lattice),
                                formula=text(block, "Formula") or ""))
    return sorted(phases, key=lambda p: p.id)


def scan_orientation_map(f, scan, path, grid, records) -> OrientationMap | None:
    """The orientation map of scan group ``scan`` of open EDAX file ``f`` on ``grid`` (slot ->
    record map ``records``), or ``None`` when the scan stores no Euler angles.

    As in an ``.ang`` file: radians, TSL frame, phase 0 of a single-phase scan is its phase,
    CI -1 marks points that are not indexed (see :mod:`ebsdxc.io.ang`).
    """
    data, header = f[f"/{scan}/{_DATA}"], f[f"/{scan}/{_HEADER}"]
    arrays = [data.get(k) for k in _EULER]
    if not all(isinstance(a, h5py.Dataset) and a.ndim == 1 for a in arrays):
        return None
    n = min(a.shape[0] for a in arrays)
    euler = np.degrees(np.stack([a[:n] for a in arrays], axis=1).astype(np.float64))
    phases = _phases(header, path)
    stored = data.get("Phase")
    numbers = stored[:n] if isinstance(stored, h5py.Dataset) and stored.ndim == 1 else np.zeros(n)
    if numbers.shape[0] < n:
        raise InputError(f"{data.name}/Phase holds {numbers.shape[0]} values for {n} points", path)
    index = phase_indices(numbers, phases, path, zero_is_single_phase=True)
    quality = {}
    for key in data:
        obj = data[key]
        name = key.strip().lower()
        if (name in _NOT_QUALITY or not isinstance(obj, h5py.Dataset) or obj.ndim != 1
                or obj.shape[0] < n or obj.dtype.kind not in "iuf"):
            continue
        quality[_QUALITY_NAMES.get(name, quality_name(key))] = obj[:n]
    if "ci" in quality:
        index[np.asarray(quality["ci"]) == -1] = -1
    meta = {"scan": scan}
    pcal = header.get("Pattern Center Calibration")
    star = ([number(pcal, k) for k in ("x-star", "y-star", "z-star")]
            if isinstance(pcal, h5py.Group) else [None] * 3)
    if all(v is not None for v in star) and star[2] > 0:
        meta["pattern_centre"] = star
        meta["pattern_centre_convention"] = "tsl"
    records = np.where(records < n, records, -1)
    return build_map(path, grid, records, euler_deg=euler, phase_index=index, phases=phases,
                     quality=quality, frame="tsl", metadata=meta)


def read_orientation_map(path, *, dataset=None) -> OrientationMap:
    """The orientation map of one scan of an EDAX/TSL OIM h5 file, with or without patterns.

    Parameters
    ----------
    path : str or os.PathLike
    dataset : str or int, optional
        The scan group (``"Scan 2"``, ``2``); the first scan holding Euler angles by default.

    Raises
    ------
    InputError
        Not an EDAX h5 file, an OIM version this reader does not know, no scan with Euler
        angles, a header grid the points do not fit, or an unknown symmetry code or phase.
    """
    with open_file(path) as f:
        if not is_edax(f):
            raise InputError("not an EDAX OIM h5 file (it needs a root 'Manufacturer' = 'EDAX' "
                             "and a group /<scan>/EBSD/Header with nColumns)", path)
        _check_version(f, path)
        names = top_groups_holding(f, f"{_DATA}/{_EULER[0]}", _HEADER)
        if not names:
            raise InputError("holds no scan with orientations (no /<scan>/EBSD/Data/Phi1 with "
                             "/<scan>/EBSD/Header)", path)
        scan = choose_group(names, dataset, path, pattern_path=_DATA)
        header = f[f"/{scan}/{_HEADER}"]
        n = int(f[f"/{scan}/{_DATA}/{_EULER[0]}"].shape[0])
        try:
            kind = grid_kind(text(header, "Grid Type") or "")
        except ValueError as e:
            raise InputError(f"header: {e}", path) from None
        sx, sy = number(header, "Step X"), number(header, "Step Y")
        step = (sy, sx) if sx is not None and sy is not None else None
        grid = header_grid(integer(header, "nRows", path), integer(header, "nColumns", path),
                           None, n, path, step=step, kind=kind)
        if n > grid.n_points:
            raise InputError(f"header says {grid.rows} x {grid.cols} scan points ({grid.n_points} on "
                             f"its grid) but /{scan}/{_DATA}/{_EULER[0]} holds {n}", path)
        return scan_orientation_map(f, scan, path, grid, grid.slot_to_record())
