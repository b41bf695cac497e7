"""Bruker Esprit HDF5 files (Bruker's h5ebsd).

Layout, as found in the files themselves::

    /Manufacturer                   dataset, b"Bruker Nano"
    /Version                        dataset, e.g. b"Esprit 2.X"
    /<scan>/EBSD/Data/RawPatterns   (n, H, W) patterns
    /<scan>/EBSD/Data/PCX, PCY, DD  (n,) projection centre per point (Bruker convention)
    /<scan>/EBSD/Data/phi1, PHI, phi2
                                    (n,) Bunge Euler angles in degrees
    /<scan>/EBSD/Header/            NROWS, NCOLS, NPoints, XSTEP, YSTEP (um), Grid Type
                                    ("isometric"), PatternHeight, PatternWidth, SampleTilt,
                                    CameraTilt (degrees), KV, WD, Magnification,
                                    DetectorFullHeightMicrons, UnClippedPatternHeight,
                                    StaticBackground (H, W), ...
    /<scan>/EBSD/SEM/IX, IY         optional (n,): map column and row of each stored
                                    pattern, when only a region of interest was scanned
    /<scan>/SEM/...                 the SEM image and its size ("SEM IX" is a width here)

Detection: an HDF5 file whose root ``Manufacturer`` starts with ``Bruker`` and with a top
group in Esprit's layout (``EBSD/Data/RawPatterns``, or ``EBSD/Header/NCOLS``). The
``Version`` must start with ``Esprit``; other versions are refused with a message naming
them.

Choosing a scan: ``dataset=`` takes the scan group's name (``"Scan 0"``), a number (``0``
means ``"Scan 0"``) or ``"/Scan 0/EBSD/Data/RawPatterns"``; the first scan by default.

Grid and region of interest: without ``EBSD/SEM/IX``/``IY`` the patterns fill the
``NROWS`` x ``NCOLS`` map row by row (fewer patterns: an interrupted scan, flagged). With
them, the file holds only a region of interest, in any order: the grid is the smallest
rectangle holding every stored point (what ``kikuchipy.load`` returns for a rectangular
region), each pattern goes to the slot its IY, IX name, and slots of that rectangle no
pattern was stored for (a non-rectangular region, which kikuchipy refuses) are not
``present`` and read as zeros. The rectangle's place in the full map is
``metadata["region_of_interest"]``. Reading stays lazy: one HDF5 read per run of
consecutive stored patterns.

Per-point projection centres (:meth:`BrukerSource.pattern_centres`) follow the same
mapping; kikuchipy does not reorder them for a region of interest. The detector pixel size
is ``DetectorFullHeightMicrons / UnClippedPatternHeight``, as kikuchipy computes it.
"""

from __future__ import annotations

import warnings

import h5py
import numpy as np

from ..errors import InputError
from .edax_h5 import (
    check_pattern_dataset,
    check_stored,
    choose_group,
    entry,
    first_point,
    integer,
    jsonable_scalars,
    number,
    per_slot,
    record_pattern_centre,
    text,
)
from .hdf5 import HDF5Source, dataset_metadata, file_matches, open_file, read_entry, top_groups_holding
from .orientation_map import (
    OrientationMap,
    PhaseInfo,
    build_map,
    laue_group_name,
    phase_indices,
    quality_name,
)
from .source import ScanGrid, choose_grid, header_grid

NAME = "bruker_h5"
DESCRIPTION = "Bruker Esprit h5 (/<scan>/EBSD/Data/RawPatterns, regions of interest too)"

_PATTERNS = "EBSD/Data/RawPatterns"
_DATA = "EBSD/Data"
_HEADER = "EBSD/Header"
_PC = ("PCX", "PCY", "DD")
_EULER = ("phi1", "PHI", "phi2")
_SQUARE = ("isometric", "square", "sqrgrid")


def _bruker_scan_group(obj) -> bool:
    # Esprit's own layout: patterns named "RawPatterns", or a header counting "NCOLS"; other
    # files that merely say Bruker are left to the generic reader
    if not isinstance(obj, h5py.Group):
        return False
    if isinstance(obj.get(_PATTERNS), h5py.Dataset):
        return True
    header = obj.get(_HEADER)
    return isinstance(header, h5py.Group) and "NCOLS" in header


def is_bruker(f) -> bool:
    """Whether open file ``f`` is a Bruker h5 file: root Manufacturer Bruker and a top group
    in Esprit's layout (``EBSD/Data/RawPatterns`` or ``EBSD/Header/NCOLS``)."""
    man = text(f, "Manufacturer")
    if man is None or not man.lower().startswith("bruker"):
        return False
    return any(_bruker_scan_group(f.get(k)) for k in f)


def detect(path) -> bool:
    """Whether ``path`` is a Bruker Esprit h5 file, judged from its content."""
    return file_matches(path, is_bruker)


def scan_names(f) -> list[str]:
    """Top groups holding ``EBSD/Data/RawPatterns`` and ``EBSD/Header``, in file order."""
    return top_groups_holding(f, _PATTERNS, _HEADER)


def _coordinates(scan_group, n, path):
    """(IY, IX) int64 arrays of the stored patterns from ``EBSD/SEM``, or ``None``."""
    sem = scan_group.get("EBSD/SEM")
    if not isinstance(sem, h5py.Group):
        return None
    found = []
    for names in (("IY", "SEM IY"), ("IX", "SEM IX")):
        obj = next((sem[k] for k in names if isinstance(sem.get(k), h5py.Dataset)), None)
        found.append(obj)
    if any(obj is None for obj in found):
        return None
    iy, ix = (np.asarray(read_entry(obj)).reshape(-1) for obj in found)
    for name, arr in (("IY", iy), ("IX", ix)):
        if arr.size != n:
            raise InputError(f"{sem.name}/{name} gives the map position of {arr.size} points but "
                             f"{scan_group.name}/{_PATTERNS} holds {n} patterns", path)
        if arr.dtype.kind not in "iuf" or not np.all(arr == np.round(arr)):
            raise InputError(f"{sem.name}/{name} does not hold whole map positions", path)
    return iy.astype(np.int64), ix.astype(np.int64)


class BrukerSource(HDF5Source):
    """Patterns of one scan of a Bruker Esprit h5 file, read lazily (see module notes)."""

    format = NAME

    def __init__(self, path, file, scan, *, grid, metadata=None, n_stored=None, records=None):
        super().__init__(path, file, f"/{scan}/{_PATTERNS}", grid=grid, metadata=metadata,
                         n_stored=n_stored)
        self.scan = scan
        if records is not None:
            # a region of interest: slots map to records by the stored map positions, so
            # the shared run-wise reading of PatternSource still applies
            self._records = np.asarray(records, dtype=np.int64)
            self.set_present(self._records >= 0)

    def _per_point(self, names) -> np.ndarray | None:
        data = self.dataset.file[f"/{self.scan}/{_DATA}"]
        arrays = [data.get(k) for k in names]
        if not all(isinstance(a, h5py.Dataset) and a.ndim == 1 for a in arrays):
            return None
        values = np.stack([read_entry(a).astype(np.float64) for a in arrays], axis=1)
        return per_slot(values, self._records).reshape(self.grid.rows, self.grid.cols, 3)

    def pattern_centres(self) -> np.ndarray | None:
        """PCX, PCY, DD per slot, ``(rows, cols, 3)`` in Bruker's convention (NaN where no
        pattern is stored), or ``None`` when the file has no per-point PCs."""
        return self._per_point(_PC)

    def orientations(self) -> np.ndarray | None:
        """phi1, PHI, phi2 per slot, ``(rows, cols, 3)`` Bunge degrees (NaN where no pattern
        is stored), or ``None``."""
        return self._per_point(_EULER)

    def orientation_map(self):
        """The scan's :class:`~ebsdxc.io.orientation_map.OrientationMap` (Euler angles, phases,
        MAD, radon quality, ...) on the source's grid, or ``None`` when it stores no
        orientations (see :func:`scan_orientation_map`)."""
        return scan_orientation_map(self.dataset.file[self.scan], self.path, self.grid, self._records)

    def static_background(self) -> np.ndarray | None:
        """The header's ``StaticBackground`` ``(H, W)``, or ``None``."""
        obj = self.dataset.file[f"/{self.scan}/{_HEADER}"].get("StaticBackground")
        if not isinstance(obj, h5py.Dataset) or tuple(obj.shape) != self.pattern_shape:
            return None
        return read_entry(obj)


def _check_version(f, path) -> str:
    version = text(f, "Version")
    if version is None or not version.lower().startswith("esprit"):
        raise InputError(f"Bruker file version {version!r} is not one ebsdxc can read (it "
                         "reads Esprit h5 files, Version 'Esprit ...'); read the pattern "
                         "dataset as plain HDF5 with --format hdf5 --dataset "
                         "'/<scan>/EBSD/Data/RawPatterns'", path)
    return version


def _region_grid(iy, ix, rows, cols, step, path):
    """Grid, slot -> record map and placement of a region of interest given by IY, IX."""
    r0, c0 = int(iy.min()), int(ix.min())
    nr, nc = int(iy.max()) - r0 + 1, int(ix.max()) - c0 + 1
    if (r0 < 0 or c0 < 0 or (rows is not None and r0 + nr > rows)
            or (cols is not None and c0 + nc > cols)):
        raise InputError(f"EBSD/SEM/IY, IX place points at rows {r0}..{r0 + nr - 1}, columns "
                         f"{c0}..{c0 + nc - 1}, outside the header's {rows} x {cols} map", path)
    slots = (iy - r0) * nc + (ix - c0)
    records = np.full(nr * nc, -1, dtype=np.int64)
    records[slots] = np.arange(slots.size)
    if np.unique(slots).size != slots.size:
        raise InputError("EBSD/SEM/IY, IX give several patterns the same map position", path)
    grid = ScanGrid(nr, nc, step=step)
    region = {"row": r0, "col": c0, "rows": nr, "cols": nc, "map_rows": rows, "map_cols": cols}
    return grid, records, region


def open(path, *, dataset=None, grid_shape=None) -> BrukerSource:  # noqa: A001 - registry interface
    """Open one scan of a Bruker Esprit h5 file.

    Parameters
    ----------
    path : str or os.PathLike
    dataset : str or int, optional
        The scan: its group name (``"Scan 0"``), a number (``0``) or the pattern dataset's
        full name. Default: the first scan.
    grid_shape : (int, int), optional
        Must agree with the grid the file gives (``--grid``).

    Returns
    -------
    BrukerSource

    Raises
    ------
    InputError
        Not a Bruker h5 file, an unknown version, no such scan, a header or region of
        interest that does not fit the stored patterns, a grid type other than square, or
        patterns compressed with an HDF5 filter that is not available.
    """
    f = open_file(path)
    try:
        if not is_bruker(f):
            raise InputError("not a Bruker Esprit h5 file (it needs a root 'Manufacturer' = "
                             "'Bruker Nano' and a group /<scan>/EBSD/Data/RawPatterns or "
                             "/<scan>/EBSD/Header with NCOLS)", path)
        version = _check_version(f, path)
        names = scan_names(f)
        if not names:
            raise InputError("holds no scan with patterns (no /<scan>/EBSD/Data/RawPatterns "
                             "with /<scan>/EBSD/Header)", path)
        scan = choose_group(names, dataset, path, pattern_path=_PATTERNS)
        group = f[scan]
        ds = f[f"/{scan}/{_PATTERNS}"]
        header = f[f"/{scan}/{_HEADER}"]
        check_pattern_dataset(ds, path, integer(header, "PatternHeight", path),
                              integer(header, "PatternWidth", path))
        n = int(ds.shape[0])
        grid_type = text(header, "Grid Type")
        if grid_type is not None and grid_type.lower() not in _SQUARE:
            raise InputError(f"header says a {grid_type!r} grid; ebsdxc reads Bruker files of "
                             "square ('isometric') grids only", path)
        rows, cols = integer(header, "NROWS", path), integer(header, "NCOLS", path)
        sx, sy = number(header, "XSTEP"), number(header, "YSTEP")
        step = (sy, sx) if sx is not None and sy is not None else None
        meta = {"scan": scan, "scans": names, **dataset_metadata(ds), "file_version": version}

        records = None
        coords = _coordinates(group, n, path)
        if coords is not None:
            grid, records, region = _region_grid(*coords, rows, cols, step, path)
            grid = choose_grid(grid, grid_shape, n, path)
            meta["region_of_interest"] = region
            missing = grid.size - n
            if missing:
                warnings.warn(f"{path}: {missing} of the {grid.size} points of the scanned "
                              f"{grid.rows} x {grid.cols} region hold no pattern (a "
                              "non-rectangular region or an interrupted scan); they read as "
                              "zeros and are flagged, not processed", stacklevel=2)
                meta["n_stored"] = n
        else:
            grid = header_grid(rows, cols, grid_shape, n, path, step=step)
            n_stored = check_stored(n, grid, f"dataset {ds.name!r}", path)
            if n_stored is not None:
                meta["n_stored"] = n_stored

        for key, name in (("sample_tilt", "SampleTilt"), ("detector_tilt", "CameraTilt")):
            value = number(header, name)
            if value is not None:
                meta[key] = value
        full_height, unclipped = number(header, "DetectorFullHeightMicrons"), number(
            header, "UnClippedPatternHeight")
        if full_height and unclipped:
            meta["detector_pixel_size"] = full_height / unclipped
        if isinstance(header.get("StaticBackground"), h5py.Dataset):
            meta["static_background"] = f"/{scan}/{_HEADER}/StaticBackground"
        info = {"beam_energy": entry(header, "KV"), "working_distance": entry(header, "WD"),
                "magnification": entry(header, "Magnification"),
                "top_clip": entry(header, "TopClip"),
                "detector_full_height_microns": full_height,
                "detector_full_width_microns": number(header, "DetectorFullWidthMicrons"),
                "unclipped_pattern_height": unclipped,
                "original_file": text(header, "OriginalFile"), "grid_type": grid_type}
        info = jsonable_scalars(info)
        if info:
            meta["header"] = info

        src = BrukerSource(path, f, scan, grid=grid, metadata=meta, n_stored=n, records=records)
        record_pattern_centre(src, "bruker")
        euler = first_point(f[f"/{scan}/{_DATA}"], _EULER, src._records)
        if euler is not None:
            src.metadata["euler_angles"] = euler.tolist()
        return src
    except BaseException:
        f.close()
        raise


# --------------------------------------------------------------------------- orientation maps

# Per-point datasets that are neither orientations nor quality measures (positions, PCs).
_NOT_QUALITY = {"phi1", "PHI", "phi2", "Phase", "PCX", "PCY", "DD", "X BEAM", "Y BEAM",
                "X SAMPLE", "Y SAMPLE", "Z SAMPLE"}
_QUALITY_NAMES = {"MAD": "mad", "MADPhase": "mad_phase", "NIndexedBands": "n_indexed_bands",
                  "RadonBandCount": "radon_band_count", "RadonQuality": "radon_quality"}


def _phases(header, path) -> list[PhaseInfo]:
    group = header.get("Phases")
    if not isinstance(group, h5py.Group):
        return []
    phases = []
    for key in group:
        block = group[key]
        if not isinstance(block, h5py.Group) or not key.strip().isdigit():
            continue
        name = text(block, "Name") or ""
        where = f"{block.name}: phase {key.strip()}" + (f" ({name})" if name else "")
        it = number(block, "IT")
        if it is None:
            raise InputError(f"{where} gives no space group number (IT)", path)
        try:
            laue = laue_group_name(space_group=it)
        except ValueError as e:
            raise InputError(f"{where}: {e}", path) from None
        lattice = entry(block, "LatticeConstants")
        lattice = np.asarray(lattice if lattice is not None else [], dtype=np.float64).reshape(-1)
        if lattice.size != 6:
            raise InputError(f"{where}: LatticeConstants must be 6 numbers", path)
        phases.append(PhaseInfo(id=int(key.strip()), name=name, laue=laue, lattice=tuple(lattice),
                                formula=text(block, "Formula") or "", space_group=int(it)))
    return sorted(phases, key=lambda p: p.id)


def scan_orientation_map(group, path, grid, records) -> OrientationMap | None:
    """The orientation map of Esprit scan group ``group`` on ``grid`` (slot -> record map
    ``records``), or ``None`` when it stores no Euler angles.

    Bunge angles in degrees as stored, in Bruker's sample frame (``frame = "bruker"``, as
    orix reads them); phase 0 is not indexed.
    """
    data = group.get(_DATA)
    header = group.get(_HEADER)
    arrays = [data.get(k) for k in _EULER] if isinstance(data, h5py.Group) else [None]
    if not all(isinstance(a, h5py.Dataset) and a.ndim == 1 for a in arrays):
        return None
    n = min(a.shape[0] for a in arrays)
    euler = np.stack([a[:n] for a in arrays], axis=1).astype(np.float64)
    phases = _phases(header, path)
    stored = data.get("Phase")
    if not isinstance(stored, h5py.Dataset) or stored.ndim != 1 or stored.shape[0] < n:
        raise InputError(f"{data.name}/Phase is missing or shorter than the {n} points", path)
    index = phase_indices(stored[:n], phases, path)
    quality = {}
    for key in data:
        obj = data[key]
        if (key in _NOT_QUALITY or not isinstance(obj, h5py.Dataset) or obj.ndim != 1
                or obj.shape[0] < n or obj.dtype.kind not in "iuf"):
            continue
        quality[_QUALITY_NAMES.get(key, quality_name(key))] = obj[:n]
    records = np.where(records < n, records, -1)
    return build_map(path, grid, records, euler_deg=euler, phase_index=index, phases=phases,
                     quality=quality, frame="bruker", metadata={"scan": group.name.strip("/")})


def read_orientation_map(path, *, dataset=None) -> OrientationMap:
    """The orientation map of one scan of a Bruker Esprit h5 file, with or without patterns.

    The grid and a region of interest (``EBSD/SEM/IY``, ``IX``) are those :func:`open` gives.

    Parameters
    ----------
    path : str or os.PathLike
    dataset : str or int, optional
        The scan group (``"Scan 0"``, ``0``); the first scan holding Euler angles by default.

    Raises
    ------
    InputError
        Not a Bruker h5 file, an unknown version, no scan with Euler angles, a grid the points
        do not fit, or a phase without a space group.
    """
    with open_file(path) as f:
        if not is_bruker(f):
            raise InputError("not a Bruker Esprit h5 file (it needs a root 'Manufacturer' = "
                             "'Bruker Nano' and a group /<scan>/EBSD/Header with NCOLS)", path)
        _check_version(f, path)
        names = top_groups_holding(f, f"{_DATA}/{_EULER[0]}", _HEADER)
        if not names:
            raise InputError("holds no scan with orientations (no /<scan>/EBSD/Data/phi1 with "
                             "/<scan>/EBSD/Header)", path)
        scan = choose_group(names, dataset, path, pattern_path=_DATA)
        group, header = f[scan], f[f"/{scan}/{_HEADER}"]
        n = int(f[f"/{scan}/{_DATA}/{_EULER[0]}"].shape[0])
        grid_type = text(header, "Grid Type")
        if grid_type is not None and grid_type.lower() not in _SQUARE:
            raise InputError(f"header says a {grid_type!r} grid; ebsdxc reads Bruker files of "
                             "square ('isometric') grids only", path)
        rows, cols = integer(header, "NROWS", path), integer(header, "NCOLS", path)
        sx, sy = number(header, "XSTEP"), number(header, "YSTEP")
        step = (sy, sx) if sx is not None and sy is not None else None
        coords = _coordinates(group, n, path)
        if coords is not None:
            grid, records, _ = _region_grid(*coords, rows, cols, step, path)
        else:
            grid = header_grid(rows, cols, None, n, path, step=step)
            if n > grid.n_points:
                raise InputError(f"header says {grid.rows} x {grid.cols} scan points but "
                                 f"/{scan}/{_DATA}/{_EULER[0]} holds {n}", path)
            records = grid.slot_to_record()
        return scan_orientation_map(group, path, grid, records)
