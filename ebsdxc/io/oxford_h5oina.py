"""Oxford Instruments H5OINA files (AZtec's HDF5 export), processed and unprocessed patterns.

Layout, as found in the files themselves and in Oxford's specification
(https://github.com/oinanoanalysis/h5oina, H5OINAFile.md)::

    /Format Version                 dataset, e.g. b"7.0" (H5OINA's version, not AZtec's)
    /Manufacturer                   dataset, b"Oxford Instruments" (optional)
    /Index                          dataset, the names of the slices, e.g. b"1"
    /<slice>/EBSD/Data/Processed Patterns     (n, H, W) uint8, background corrected
    /<slice>/EBSD/Data/Unprocessed Patterns   (n, H, W) int16, raw (from version 5.0)
    /<slice>/EBSD/Data/Pattern Center X, Pattern Center Y, Detector Distance
                                    (n,) projection centre per point, Oxford convention
    /<slice>/EBSD/Data/Euler        (n, 3) Bunge Euler angles in radians
    /<slice>/EBSD/Header/           X Cells, Y Cells, X Step, Y Step (um), Pattern Width,
                                    Pattern Height, Tilt Angle (radians), Detector
                                    Orientation Euler (radians), Beam Voltage (kV),
                                    Working Distance (mm), Magnification, Camera Mode
                                    ("Camera Binning Mode" before 7.0), Processed Static
                                    Background, Unprocessed Static Background, ...

Detection: an HDF5 file with a root ``Format Version`` and either a root ``Manufacturer``
starting with ``Oxford`` or a root ``Index`` naming a slice group that holds an ``EBSD``
group. Format versions :data:`KNOWN_MAJOR_VERSIONS` are read (patterns appeared in 5.0);
others are refused with a message naming the version.

Choosing the patterns: ``dataset=`` takes a slice (``"1"`` or ``1``), ``"processed"`` or
``"unprocessed"`` (patterns of the first slice), both together (``"1/unprocessed"``), or a
full dataset name (``"/1/EBSD/Data/Unprocessed Patterns"``). By default the first slice's
processed patterns are read, as ``kikuchipy.load`` does, or its unprocessed ones when the
file has only those. ``metadata["patterns"]`` says which were read and
:meth:`OxfordSource.static_background` gives the matching static background.

The grid is ``Y Cells`` x ``X Cells``, square, filled row by row (a line scan has one row).
Per-point PCs are in Oxford's convention (``"oxford"``: fractions of the pattern width,
origin at the bottom left). The sample tilt is ``Tilt Angle``; the detector tilt is the
second angle of ``Detector Orientation Euler`` less 90 degrees, and the binning is derived
from the camera mode's pattern height, both as kikuchipy does. Irregular maps store NaN
data outside the acquisition area; those points keep their (stored) patterns.
"""

from __future__ import annotations

import re

import h5py
import numpy as np

from ..errors import InputError
from .edax_h5 import (
    check_pattern_dataset,
    check_stored,
    entry,
    integer,
    jsonable_scalars,
    number,
    per_slot,
    record_pattern_centre,
    text,
)
from .hdf5 import HDF5Source, dataset_metadata, file_matches, open_file, read_entry
from .orientation_map import (
    OrientationMap,
    PhaseInfo,
    build_map,
    laue_group_name,
    phase_indices,
    quality_name,
)
from .source import header_grid

NAME = "oxford_h5oina"
DESCRIPTION = "Oxford Instruments H5OINA (/<slice>/EBSD/Data/Processed or Unprocessed Patterns)"

#: H5OINA format major versions this reader knows (the specification lists 1.0 to 8.0).
KNOWN_MAJOR_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8)

_DATA = "EBSD/Data"
_HEADER = "EBSD/Header"
_KINDS = {"processed": "Processed Patterns", "unprocessed": "Unprocessed Patterns"}
_BACKGROUNDS = {"processed": "Processed Static Background",
                "unprocessed": "Unprocessed Static Background"}
_PC = ("Pattern Center X", "Pattern Center Y", "Detector Distance")
_CAMERA_MODE_RE = re.compile(r"\((\d+)\s*x\s*(\d+)\s*px\)")


def _slice_candidates(f) -> list[str]:
    """Slice group names: those the root Index lists, else numeric top groups, in order."""
    listed = entry(f, "Index")
    if listed is not None:
        names = [str(v.decode() if isinstance(v, bytes) else v).strip()
                 for v in np.atleast_1d(listed)]
    else:
        names = sorted((k for k in f if k.strip().isdigit()), key=lambda k: int(k))
    return [n for n in names if isinstance(f.get(n), h5py.Group)]


def is_h5oina(f) -> bool:
    """Whether open file ``f`` is an H5OINA file (see module notes)."""
    if entry(f, "Format Version") is None:
        return False
    man = text(f, "Manufacturer")
    if man is not None and man.lower().startswith("oxford"):
        return True
    return any(isinstance(f[n].get("EBSD"), h5py.Group) for n in _slice_candidates(f))


def detect(path) -> bool:
    """Whether ``path`` is an Oxford Instruments H5OINA file, judged from its content."""
    return file_matches(path, is_h5oina)


def slices_with_patterns(f) -> list[str]:
    """Slices holding processed or unprocessed patterns and an EBSD header."""
    out = []
    for name in _slice_candidates(f):
        data, header = f[name].get(_DATA), f[name].get(_HEADER)
        if (isinstance(data, h5py.Group) and isinstance(header, h5py.Group)
                and any(isinstance(data.get(v), h5py.Dataset) for v in _KINDS.values())):
            out.append(name)
    return out


def _check_version(f, path) -> str:
    version = entry(f, "Format Version")
    version = str(version).strip() if version is not None else None
    m = re.match(r"^(\d+)(\.\d+)*$", version or "")
    if m is None or int(m.group(1)) not in KNOWN_MAJOR_VERSIONS:
        raise InputError(f"H5OINA format version {version!r} is not one ebsdxc can read (it "
                         f"reads versions {KNOWN_MAJOR_VERSIONS[0]}.0 to "
                         f"{KNOWN_MAJOR_VERSIONS[-1]}.x); read the pattern dataset as plain "
                         "HDF5 with --format hdf5 --dataset '/1/EBSD/Data/Processed Patterns'",
                         path)
    return version


def _parse_choice(dataset, slices, path) -> tuple[str | None, str | None]:
    """(slice or None, "processed"/"unprocessed" or None) from ``dataset=``."""
    if dataset is None:
        return None, None
    choice = str(dataset).strip().strip("/")
    parts = [p.strip() for p in choice.split("/") if p.strip()]
    kinds = {k: k for k in _KINDS} | {v.lower(): k for k, v in _KINDS.items()}
    sl, kind = None, None
    if len(parts) == 1 and parts[0].lower() in kinds:
        kind = kinds[parts[0].lower()]
    elif len(parts) == 1:
        sl = parts[0]
    elif len(parts) == 2 and parts[1].lower() in kinds:
        sl, kind = parts[0], kinds[parts[1].lower()]
    elif len(parts) == 4 and "/".join(parts[1:3]) == _DATA and parts[3].lower() in kinds:
        sl, kind = parts[0], kinds[parts[3].lower()]
    else:
        raise InputError(f"--dataset {str(dataset)!r} names no patterns of this H5OINA file; "
                         "give a slice ('1'), 'processed' or 'unprocessed', '1/unprocessed' "
                         f"or '/1/{_DATA}/Unprocessed Patterns' (slices with patterns: "
                         f"{', '.join(slices)})", path)
    if sl is not None and sl not in slices:
        raise InputError(f"has no slice {sl!r} with patterns; its slices with patterns are "
                         f"{', '.join(repr(s) for s in slices)} (choose one with --dataset)", path)
    return sl, kind


def camera_binning(mode: str | None) -> int | None:
    """Binning from an AZtec camera mode such as ``"Speed 2 (156x128 px)"``, or ``None``.

    Oxford's rule for Symmetry detectors (1244 x 1024 px unbinned, see
    https://github.com/oinanoanalysis/h5oina/issues/5), as kikuchipy applies it: 1024 over
    the mode's pattern height, except the 88 px high Speed 3 mode (binned 8, cropped).
    """
    found = _CAMERA_MODE_RE.findall(mode or "")
    if len(found) != 1:
        return None
    height = int(found[0][1])
    if height <= 0:
        return None
    return 8 if height == 88 else round(1024 / height)


class OxfordSource(HDF5Source):
    """Processed or unprocessed patterns of one H5OINA slice, read lazily (see module notes)."""

    format = NAME

    def __init__(self, path, file, slice_name, kind, *, grid, metadata=None, n_stored=None):
        super().__init__(path, file, f"/{slice_name}/{_DATA}/{_KINDS[kind]}", grid=grid,
                         metadata=metadata, n_stored=n_stored)
        self.slice = slice_name
        self.kind = kind

    def _group(self, which):
        return self.dataset.file[f"/{self.slice}/{which}"]

    def pattern_centres(self) -> np.ndarray | None:
        """Pattern Center X, Y and Detector Distance per slot, ``(rows, cols, 3)`` in Oxford's
        convention (NaN where no pattern is stored), or ``None``."""
        data = self._group(_DATA)
        arrays = [data.get(k) for k in _PC]
        if not all(isinstance(a, h5py.Dataset) and a.ndim == 1 for a in arrays):
            return None
        values = np.stack([read_entry(a).astype(np.float64) for a in arrays], axis=1)
        return per_slot(values, self._records).reshape(self.grid.rows, self.grid.cols, 3)

    def orientations(self) -> np.ndarray | None:
        """``Euler`` per slot, ``(rows, cols, 3)`` Bunge degrees (stored in radians), NaN
        where no pattern is stored, or ``None``."""
        obj = self._group(_DATA).get("Euler")
        if not isinstance(obj, h5py.Dataset) or obj.ndim != 2 or obj.shape[1] != 3:
            return None
        euler = np.degrees(read_entry(obj).astype(np.float64))
        return per_slot(euler, self._records).reshape(self.grid.rows, self.grid.cols, 3)

    def orientation_map(self):
        """The slice's :class:`~ebsdxc.io.orientation_map.OrientationMap` (Euler angles, phases,
        band contrast, MAD, ...), or ``None`` when it stores no orientations (see
        :func:`slice_orientation_map`)."""
        return slice_orientation_map(self.dataset.file[self.slice], self.path, self.grid, self._records)

    def static_background(self) -> np.ndarray | None:
        """The static background stored for the patterns read (processed or unprocessed),
        ``(H, W)``, or ``None``."""
        obj = self._group(_HEADER).get(_BACKGROUNDS[self.kind])
        if not isinstance(obj, h5py.Dataset) or tuple(obj.shape) != self.pattern_shape:
            return None
        return read_entry(obj)


def open(path, *, dataset=None, grid_shape=None) -> OxfordSource:  # noqa: A001 - registry interface
    """Open the processed or unprocessed patterns of one slice of an H5OINA file.

    Parameters
    ----------
    path : str or os.PathLike
    dataset : str or int, optional
        ``"1"``/``1`` (a slice), ``"processed"``/``"unprocessed"``, ``"1/unprocessed"`` or
        ``"/1/EBSD/Data/Unprocessed Patterns"``. Default: the first slice's processed
        patterns (its unprocessed ones when it has no processed patterns).
    grid_shape : (int, int), optional
        Must agree with the header's grid (``--grid``).

    Returns
    -------
    OxfordSource

    Raises
    ------
    InputError
        Not an H5OINA file, an unknown format version, no patterns or not the ones asked
        for, a header that does not fit the stored patterns, or patterns compressed with an
        HDF5 filter that is not available.
    """
    f = open_file(path)
    try:
        if not is_h5oina(f):
            raise InputError("not an Oxford Instruments H5OINA file (it needs a root 'Format "
                             "Version' and a slice group /1/EBSD)", path)
        version = _check_version(f, path)
        slices = slices_with_patterns(f)
        if not slices:
            raise InputError(f"H5OINA version {version} file holds no EBSD patterns (no "
                             f"/<slice>/{_DATA}/Processed Patterns or Unprocessed Patterns; "
                             "AZtec exports them only when asked to)", path)
        sl, kind = _parse_choice(dataset, slices, path)
        sl = sl or slices[0]
        data = f[f"/{sl}/{_DATA}"]
        header = f[f"/{sl}/{_HEADER}"]
        stored = [k for k, v in _KINDS.items() if isinstance(data.get(v), h5py.Dataset)]
        if kind is None:
            kind = stored[0]
        elif kind not in stored:
            raise InputError(f"slice {sl!r} holds no {kind} patterns (no {data.name}/"
                             f"{_KINDS[kind]}); it holds {' and '.join(stored)} patterns", path)
        ds = data[_KINDS[kind]]
        check_pattern_dataset(ds, path, integer(header, "Pattern Height", path),
                              integer(header, "Pattern Width", path))
        n = int(ds.shape[0])

        rows, cols = integer(header, "Y Cells", path), integer(header, "X Cells", path)
        sx, sy = number(header, "X Step"), number(header, "Y Step")
        step = (sy, sx) if sx is not None and sy is not None else None
        grid = header_grid(rows, cols, grid_shape, n, path, step=step)
        meta = {"slice": sl, "slices": slices, "patterns": kind, **dataset_metadata(ds),
                "file_version": version}
        n_stored = check_stored(n, grid, f"dataset {ds.name!r}", path)
        if n_stored is not None:
            meta["n_stored"] = n_stored

        tilt = number(header, "Tilt Angle")
        if tilt is not None:
            meta["sample_tilt"] = float(np.degrees(tilt))
        orient = entry(header, "Detector Orientation Euler")
        orient = None if orient is None else np.asarray(orient, dtype=np.float64).reshape(-1)
        if orient is not None and orient.size == 3 and np.isfinite(orient[1]):
            meta["detector_tilt"] = float(np.degrees(orient[1]) - 90.0)
        mode = text(header, "Camera Mode") or text(header, "Camera Binning Mode")
        binning = camera_binning(mode)
        if binning is not None:
            meta["binning"] = binning
        if isinstance(header.get(_BACKGROUNDS[kind]), h5py.Dataset):
            meta["static_background"] = f"/{sl}/{_HEADER}/{_BACKGROUNDS[kind]}"
        info = {"beam_energy": entry(header, "Beam Voltage"),
                "working_distance": entry(header, "Working Distance"),
                "magnification": entry(header, "Magnification"), "camera_mode": mode,
                "exposure_time": entry(header, "Camera Exposure Time"),
                "gain": entry(header, "Camera Gain"),
                "detector_insertion_distance": entry(header, "Detector Insertion Distance"),
                "software_version": text(f, "Software Version")}
        info = jsonable_scalars(info)
        if info:
            meta["header"] = info

        src = OxfordSource(path, f, sl, kind, grid=grid, metadata=meta, n_stored=n)
        record_pattern_centre(src, "oxford")
        present = src._records[src._records >= 0]
        euler = data.get("Euler")
        if (present.size and isinstance(euler, h5py.Dataset) and euler.ndim == 2
                and euler.shape[1] == 3 and euler.shape[0] > present[0]):
            first = np.degrees(euler[int(present[0])].astype(np.float64))
            if np.isfinite(first).all():
                src.metadata["euler_angles"] = first.tolist()
        return src
    except BaseException:
        f.close()
        raise


# --------------------------------------------------------------------------- orientation maps

# Per-point datasets that are neither orientations nor quality measures (positions, PCs).
_NOT_QUALITY = {"Euler", "Phase", "X", "Y", "Beam Position X", "Beam Position Y", *_PC}
_QUALITY_NAMES = {"Band Contrast": "bc", "Band Slope": "bs", "Mean Angular Deviation": "mad"}


def _phases(header, path) -> list[PhaseInfo]:
    group = header.get("Phases")
    if not isinstance(group, h5py.Group):
        return []
    phases = []
    for key in group:
        block = group[key]
        if not isinstance(block, h5py.Group) or not key.strip().isdigit():
            continue
        name = text(block, "Phase Name") or ""
        where = f"{block.name}: phase {key.strip()}" + (f" ({name})" if name else "")
        laue_ds, space_group = block.get("Laue Group"), number(block, "Space Group")
        symbol = laue_ds.attrs.get("Symbol") if isinstance(laue_ds, h5py.Dataset) else None
        if isinstance(symbol, bytes):
            symbol = symbol.decode("utf-8", errors="replace")
        try:
            # the symbol names the group; the index is in .ctf's numbering (1 -1 .. 11 m-3m)
            if symbol is not None and str(np.asarray(symbol).reshape(-1)[0]).strip():
                laue = laue_group_name(point_group=str(np.asarray(symbol).reshape(-1)[0]))
            elif space_group:
                laue = laue_group_name(space_group=space_group)
            elif number(block, "Laue Group") is not None:
                laue = laue_group_name(ctf_number=number(block, "Laue Group"))
            else:
                raise ValueError("it gives no Laue Group")
        except ValueError as e:
            raise InputError(f"{where}: {e}", path) from None
        sides, angles = (entry(block, k) for k in ("Lattice Dimensions", "Lattice Angles"))
        if sides is None or angles is None or np.size(sides) != 3 or np.size(angles) != 3:
            raise InputError(f"{where} lacks 3 Lattice Dimensions and 3 Lattice Angles", path)
        lattice = (*np.asarray(sides, dtype=np.float64).reshape(-1),
                   *np.degrees(np.asarray(angles, dtype=np.float64).reshape(-1)))
        phases.append(PhaseInfo(id=int(key.strip()), name=name, laue=laue, lattice=lattice,
                                space_group=int(space_group or 0)))
    return sorted(phases, key=lambda p: p.id)


def slice_orientation_map(group, path, grid, records) -> OrientationMap | None:
    """The orientation map of H5OINA slice group ``group`` on ``grid`` (slot -> record map
    ``records``), or ``None`` when it stores no ``Euler`` angles.

    Bunge angles stored in radians, returned in degrees in Oxford's sample frame
    (``frame = "oxford"``); phase 0 and NaN angles (outside an irregular map's area) are not
    indexed; the mean angular deviation ``mad`` is turned into degrees, as ``.ctf`` has it.
    """
    data, header = group.get(_DATA), group.get(_HEADER)
    stored = data.get("Euler") if isinstance(data, h5py.Group) else None
    if not isinstance(stored, h5py.Dataset) or stored.ndim != 2 or stored.shape[1] != 3:
        return None
    n = int(stored.shape[0])
    euler = np.degrees(read_entry(stored).astype(np.float64))
    phases = _phases(header, path)
    numbers = data.get("Phase")
    if not isinstance(numbers, h5py.Dataset) or numbers.shape[0] < n:
        raise InputError(f"{data.name}/Phase is missing or shorter than the {n} points", path)
    values = numbers[:n].astype(np.float64).reshape(-1)
    index = phase_indices(np.nan_to_num(values, nan=0.0), phases, path)
    quality = {}
    for key in data:
        obj = data[key]
        if (key in _NOT_QUALITY or key.startswith("LAM ") or not isinstance(obj, h5py.Dataset)
                or obj.ndim != 1 or obj.shape[0] < n or obj.dtype.kind not in "iuf"):
            continue
        values = obj[:n].astype(np.float64)
        name = _QUALITY_NAMES.get(key, quality_name(key))
        quality[name] = np.degrees(values) if name == "mad" else values
    records = np.where(records < n, records, -1)
    return build_map(path, grid, records, euler_deg=euler, phase_index=index, phases=phases,
                     quality=quality, frame="oxford", metadata={"slice": group.name.strip("/")})


def read_orientation_map(path, *, dataset=None) -> OrientationMap:
    """The orientation map of one slice of an H5OINA file, with or without patterns.

    Parameters
    ----------
    path : str or os.PathLike
    dataset : str or int, optional
        The slice (``"1"``, ``1``); the first slice holding Euler angles by default.

    Raises
    ------
    InputError
        Not an H5OINA file, an unknown format version, no slice with Euler angles, a grid the
        points do not fit, or an unknown Laue group or phase.
    """
    with open_file(path) as f:
        if not is_h5oina(f):
            raise InputError("not an Oxford Instruments H5OINA file (it needs a root 'Format "
                             "Version' and a slice group /1/EBSD)", path)
        _check_version(f, path)
        slices = [s for s in _slice_candidates(f)
                  if isinstance(f[s].get(f"{_DATA}/Euler"), h5py.Dataset)
                  and isinstance(f[s].get(_HEADER), h5py.Group)]
        if not slices:
            raise InputError("holds no EBSD orientations (no /<slice>/EBSD/Data/Euler with "
                             "/<slice>/EBSD/Header)", path)
        sl = slices[0] if dataset is None else str(dataset).strip().strip("/")
        if sl not in slices:
            raise InputError(f"has no slice {str(dataset)!r} with orientations; its slices with "
                             f"orientations are {', '.join(repr(s) for s in slices)}", path)
        header = f[f"/{sl}/{_HEADER}"]
        n = int(f[f"/{sl}/{_DATA}/Euler"].shape[0])
        sx, sy = number(header, "X Step"), number(header, "Y Step")
        step = (sy, sx) if sx is not None and sy is not None else None
        grid = header_grid(integer(header, "Y Cells", path), integer(header, "X Cells", path),
                           None, n, path, step=step)
        if n > grid.n_points:
            raise InputError(f"header says {grid.rows} x {grid.cols} cells but /{sl}/{_DATA}/Euler "
                             f"holds {n} points", path)
        return slice_orientation_map(f[sl], path, grid, grid.slot_to_record())
