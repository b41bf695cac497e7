"""kikuchipy's h5ebsd files (what ``kikuchipy.signals.EBSD.save("x.h5")`` writes).

Layout, as found in the files themselves::

    /manufacturer                 dataset, b"kikuchipy"
    /version                      dataset
    /Scan 1/EBSD/Data/patterns    (n_rows * n_columns, H, W)
    /Scan 1/EBSD/Header/          n_rows, n_columns, step_x, step_y, pattern_height,
                                  pattern_width, pcx, pcy, pcz, static_background, ...
    /Scan 2/...                   a file may hold several scans

Detection: an HDF5 file whose root ``manufacturer`` (dataset, or attribute) reads
``kikuchipy`` and with at least one top group ``Scan N`` holding ``EBSD/Data/patterns``
and ``EBSD/Header``. Other vendors' h5ebsd files (EDAX, Bruker, Oxford) are not claimed;
the generic HDF5 reader may still open them with ``--dataset``.

Choosing a scan: ``dataset=`` (the CLI's ``--dataset``) takes ``"Scan 2"``, ``"2"``, ``2``
or the full pattern dataset name ``"/Scan 2/EBSD/Data/patterns"``. By default the scan
with the lowest number is read, as ``kikuchipy.load`` does; the metadata lists every scan
in the file (``scans``) so a user can see there were others.

The grid comes from the header (``n_rows`` x ``n_columns``, ``step_y``/``step_x``,
``grid_type``). When the file holds fewer patterns than the header's grid (an interrupted
scan), the missing points read as zeros and the metadata says ``n_stored``; this is what
kikuchipy does too. The projection centre ``pcx, pcy, pcz`` (kikuchipy's Bruker
convention) goes into ``metadata["pattern_centre"]``; per-point values are available from
:meth:`H5EBSDSource.pattern_centres`.
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
)
from .source import ScanGrid, choose_grid, grid_kind

NAME = "h5ebsd"
DESCRIPTION = "kikuchipy h5ebsd (/Scan N/EBSD/Data/patterns + /Scan N/EBSD/Header)"

_SCAN_RE = re.compile(r"^Scan\s+(\d+)$")
_PATTERNS = "EBSD/Data/patterns"
_HEADER = "EBSD/Header"
# Scalar header entries copied into the metadata when present.
_HEADER_SCALARS = ("sample_tilt", "azimuth_angle", "elevation_angle", "binning",
                   "detector_pixel_size", "detector", "exposure_time", "gain")
_SEM_SCALARS = ("beam_energy", "working_distance", "magnification", "microscope")


def _read_small(obj):
    """A small dataset's value (or an attribute value) as a Python scalar or array."""
    value = read_entry(obj) if isinstance(obj, h5py.Dataset) else obj
    arr = np.asarray(value)
    if arr.size == 1:
        item = arr.reshape(()).item()
        return item.decode("utf-8", errors="replace") if isinstance(item, bytes) else item
    return arr


def _get(group, key):
    """Header value ``key`` of ``group`` (a scalar, an array) or ``None``."""
    obj = group.get(key)
    if isinstance(obj, h5py.Dataset):
        return _read_small(obj)
    if key in group.attrs:
        return _read_small(group.attrs[key])
    return None


def manufacturer(f) -> str | None:
    """The file's root ``manufacturer`` entry (dataset or attribute), lower case."""
    for key in list(f.keys()) + list(f.attrs.keys()):
        if key.lower() == "manufacturer":
            value = _get(f, key)
            return str(value).strip().lower() if value is not None else None
    return None


def scan_names(f) -> list[str]:
    """Top groups ``Scan N`` holding patterns and a header, by increasing ``N``."""
    found = []
    for key in f:
        m = _SCAN_RE.match(key)
        if not m:
            continue
        group = f.get(key)
        if (isinstance(group, h5py.Group) and isinstance(group.get(_PATTERNS), h5py.Dataset)
                and isinstance(group.get(_HEADER), h5py.Group)):
            found.append((int(m.group(1)), key))
    return [name for _, name in sorted(found)]


def is_h5ebsd(f) -> bool:
    """Whether open file ``f`` is a kikuchipy h5ebsd file."""
    return manufacturer(f) == "kikuchipy" and bool(scan_names(f))


def detect(path) -> bool:
    """Whether ``path`` is a kikuchipy h5ebsd file, judged from its content."""
    return file_matches(path, is_h5ebsd)


def _choose_scan(f, dataset, path) -> str:
    names = scan_names(f)
    if dataset is None:
        return names[0]
    text = str(dataset).strip().strip("/")
    if text.isdigit():
        text = f"Scan {int(text)}"
    first = text.split("/", 1)[0]
    rest = text[len(first):].strip("/")
    if first in names and rest in ("", _PATTERNS):
        return first
    raise InputError(f"has no scan {str(dataset)!r}; its scans are {', '.join(names)} "
                     "(choose one with --dataset, e.g. --dataset 'Scan 1')", path)


class H5EBSDSource(HDF5Source):
    """Patterns of one scan of a kikuchipy h5ebsd file, read lazily (see module notes)."""

    format = NAME

    def __init__(self, path, file, scan, *, grid, metadata=None, n_stored=None):
        super().__init__(path, file, f"/{scan}/{_PATTERNS}", grid=grid, metadata=metadata,
                         n_stored=n_stored)
        self.scan = scan

    def _header(self):
        return self.dataset.file[f"/{self.scan}/{_HEADER}"]

    def pattern_centres(self) -> np.ndarray | None:
        """Projection centre per point, ``(rows, cols, 3)`` [PCx, PCy, PCz], or ``None``.

        kikuchipy stores it in the Bruker convention (fractions of the detector).
        """
        return _pattern_centres(self._header(), self.grid)

    def static_background(self) -> np.ndarray | None:
        """The header's static background pattern ``(H, W)``, or ``None``."""
        obj = self._header().get("static_background")
        if not isinstance(obj, h5py.Dataset):
            return None
        if tuple(obj.shape) != self.pattern_shape:  # stored, yet not one: never dropped in silence
            raise InputError(f"the header's static_background is {tuple(obj.shape)}, not a "
                             f"{self.pattern_shape[0]} x {self.pattern_shape[1]} px pattern", self.path)
        return read_entry(obj)


def parse_grid_shape_or_row(grid_shape, n_stored, path) -> tuple[int, int]:
    """(rows, cols) from ``--grid`` when the header has no grid, else one row."""
    g = choose_grid(None, grid_shape, n_stored, path)
    return g.rows, g.cols


def _pattern_centres(header, grid) -> np.ndarray | None:
    parts = [_get(header, k) for k in ("pcx", "pcy", "pcz")]
    if any(p is None for p in parts):
        return None
    arrays = [np.asarray(p, dtype=np.float64).ravel() for p in parts]
    out = np.empty((grid.rows, grid.cols, 3))
    for i, a in enumerate(arrays):
        if a.size == 1:
            out[..., i] = a[0]
        elif a.size == grid.size:
            out[..., i] = a.reshape(grid.rows, grid.cols)
        else:
            return None
    return out


def open(path, *, dataset=None, grid_shape=None) -> H5EBSDSource:  # noqa: A001 - registry interface
    """Open one scan of a kikuchipy h5ebsd file.

    Parameters
    ----------
    path : str or os.PathLike
    dataset : str or int, optional
        The scan: ``"Scan 2"``, ``"2"``, ``2`` or ``"/Scan 2/EBSD/Data/patterns"``.
        Default: the scan with the lowest number.
    grid_shape : (int, int), optional
        Must agree with the header's grid when it has one (``--grid``).

    Returns
    -------
    H5EBSDSource

    Raises
    ------
    InputError
        Not a kikuchipy h5ebsd file, no such scan, or a header that does not fit the
        stored patterns.
    """
    f = open_file(path)
    try:
        if not is_h5ebsd(f):
            raise InputError("not a kikuchipy h5ebsd file (it needs a root 'manufacturer' "
                             "= 'kikuchipy' and groups /Scan N/EBSD/Data/patterns and "
                             "/Scan N/EBSD/Header)", path)
        scan = _choose_scan(f, dataset, path)
        ds = f[f"/{scan}/{_PATTERNS}"]
        header = f[f"/{scan}/{_HEADER}"]
        where = f"dataset {ds.name!r}"
        if ds.dtype.kind not in "uif" or ds.ndim not in (3, 4):
            raise InputError(f"{where} ({ds.dtype}, shape {tuple(ds.shape)}) is not a numeric "
                             "(n, H, W) or (rows, cols, H, W) pattern array", path)

        check_filters(ds, path)
        h, w = _get(header, "pattern_height"), _get(header, "pattern_width")
        if (h is not None and int(h) != ds.shape[-2]) or (w is not None and int(w) != ds.shape[-1]):
            raise InputError(f"header says patterns of {h} x {w} px but {where} holds "
                             f"{ds.shape[-2]} x {ds.shape[-1]} px", path)

        n_stored = int(np.prod(ds.shape[:-2]))
        rows, cols = _get(header, "n_rows"), _get(header, "n_columns")
        said = rows is not None and cols is not None
        if ds.ndim == 4:
            rows, cols, said = int(ds.shape[0]), int(ds.shape[1]), True
        elif not said:
            rows, cols = parse_grid_shape_or_row(grid_shape, n_stored, path)
        else:
            rows, cols = int(rows), int(cols)
        kind = _get(header, "grid_type")
        try:
            kind = grid_kind(kind) if isinstance(kind, str) else "square"
        except ValueError as e:
            raise InputError(f"header: {e}", path) from None
        if ds.ndim == 4 and kind != "square":
            raise InputError(f"header says a {kind} grid but {where} is 4-D (a square grid)", path)
        sx, sy = _get(header, "step_x"), _get(header, "step_y")
        step = None
        if isinstance(sx, (int, float)) and isinstance(sy, (int, float)):
            step = (float(sy), float(sx))
        if rows < 1 or cols < 1:
            raise InputError(f"header says {rows} x {cols} scan points", path)
        grid = ScanGrid(rows, cols, step=step, kind=kind)
        if said:
            grid = choose_grid(grid, grid_shape, n_stored, path)
        if grid.n_points < n_stored:
            raise InputError(f"header says {rows} x {cols} scan points ({grid.n_points} on its "
                             f"{kind} grid) but {where} holds {n_stored} patterns; read it as "
                             "plain HDF5 with --format hdf5", path)

        meta = {"scan": scan, "scans": scan_names(f), **dataset_metadata(ds)}
        if n_stored < grid.n_points:
            warnings.warn(f"{path}: {scan} holds {n_stored} of {grid.n_points} patterns "
                          "(an interrupted scan?); the missing points are flagged, not processed",
                          stacklevel=2)
            meta["n_stored"] = n_stored

        pcs = _pattern_centres(header, grid)
        if pcs is not None:
            flat = pcs.reshape(-1, 3)
            if np.all(flat == flat[0]):
                meta["pattern_centre"] = flat[0].tolist()
            else:
                meta["pattern_centre"] = flat.mean(axis=0).tolist()
                meta["pattern_centre_varies"] = True
            meta["pattern_centre_convention"] = "bruker"
        legacy = {k: _get(header, k) for k in ("xpc", "ypc", "zpc")}
        if all(isinstance(v, (int, float)) for v in legacy.values()):
            meta["legacy_pattern_centre"] = legacy
        if isinstance(header.get("static_background"), h5py.Dataset):
            meta["static_background"] = f"/{scan}/{_HEADER}/static_background"
        info = {k: _get(header, k) for k in _HEADER_SCALARS}
        sem = f.get(f"/{scan}/SEM/Header")
        if isinstance(sem, h5py.Group):
            info.update({k: _get(sem, k) for k in _SEM_SCALARS})
        info = {k: to_jsonable(v) for k, v in info.items()
                if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
        if info:
            meta["header"] = info
        version = _get(f, "version")
        meta["file_version"] = str(version) if version is not None else None

        return H5EBSDSource(path, f, scan, grid=grid, metadata=meta, n_stored=n_stored)
    except BaseException:
        f.close()
        raise
