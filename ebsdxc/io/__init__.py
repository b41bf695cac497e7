"""Reading scans and reference patterns.

One module per file format, registered by name in :mod:`ebsdxc.io.registry` (a new format is
a reader module plus one ``registry.register`` call). Each reader module provides

``NAME``, ``DESCRIPTION``
    Its registered name and one line for ``ebsdxc info`` / help texts.
``detect(path) -> bool``
    Whether the file is of this format, judged from the file's own content (HDF5
    signature, TIFF magic, groups and entries inside), never from the extension alone.
``open(path, *, dataset=None) -> PatternSource``
    A lazy source of the scan's patterns.

:func:`open_scan` asks the readers in the order of :data:`SCAN_FORMATS` (the registry's order,
most specific first: the generic ``hdf5`` reader would accept any HDF5 file, so it comes last)
and uses the first that recognises the file. Reader modules are imported only when needed, so
importing :mod:`ebsdxc.io` stays cheap.

Orientation maps (per-point Euler angles, phases and quality measures, see
:mod:`ebsdxc.io.orientation_map`) are read by :func:`read_orientation_map` from ``.ang``,
``.ctf`` and the vendor h5 files, detected by content in the order of
:data:`ORIENTATION_FORMATS`, and written by :func:`write_ang` and :func:`write_ctf`.

Every problem with a user's file is raised as :class:`ebsdxc.errors.InputError`, whose
message starts with the file's path.
"""

from __future__ import annotations

import os
import re

import numpy as np

from ..errors import InputError
from . import registry
from .ang import write_ang
from .ctf import write_ctf
from .orientation_map import OrientationMap, PhaseInfo
from .source import READ_ERRORS, ArraySource, PatternSource, ScanGrid, damaged

__all__ = [
    "ORIENTATION_FORMATS",
    "SCAN_FORMATS",
    "ArraySource",
    "OrientationMap",
    "PatternSource",
    "PhaseInfo",
    "ScanGrid",
    "describe_formats",
    "formats_help",
    "get_reader",
    "open_scan",
    "read_orientation_map",
    "read_reference",
    "read_reference_metadata",
    "reference_from_scan",
    "write_ang",
    "write_ctf",
]

#: Orientation-map formats :func:`read_orientation_map` reads, in the order it tries them
#: (the HDF5 ones by their content first, then the text formats by their header).
ORIENTATION_FORMATS = ("edax_h5", "bruker_h5", "oxford_h5oina", "ang", "ctf")

#: Names of the scan formats, in the order :func:`open_scan` tries them (a tuple, read from
#: :mod:`ebsdxc.io.registry` on every access, so it lists readers registered later too).
SCAN_FORMATS: tuple[str, ...]


def __getattr__(name):
    if name == "SCAN_FORMATS":
        return registry.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_reader(name: str):
    """The reader module registered as ``name`` (one of :data:`SCAN_FORMATS`)."""
    entry = registry.find(name)
    if entry is None:
        raise InputError(f"unknown scan format {name!r}; choose one of {', '.join(registry.names())}")
    return entry.load()


def describe_formats() -> dict[str, str]:
    """``{name: one-line description}`` of every scan format, in detection order.

    Imports every reader module; for help texts that must stay cheap use :func:`formats_help`.
    """
    return registry.describe_formats()


def formats_help() -> str:
    """What ebsdxc reads, as one phrase for help texts (``"kikuchipy h5ebsd, ..., or any
    HDF5 file with one pattern dataset"``); imports no reader module."""
    return registry.reads_list("or")


def _check_file(path) -> str:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError("no such file", path)
    if os.path.isdir(path):
        raise InputError("is a directory, not a file", path)
    if not os.access(path, os.R_OK):
        raise InputError("cannot be read (permission denied)", path)
    if os.path.getsize(path) == 0:
        raise InputError("is empty", path)
    return path


def _what_is_it(path) -> str:
    """A few words on what an unreadable file looks like, for error messages."""
    from .hdf5 import is_hdf5_file
    from .image import is_tiff_file

    if is_tiff_file(path):
        return "it is a TIFF file that no reader accepts"
    if is_hdf5_file(path):
        return "it is an HDF5 file"
    return "its content matches none of the formats"


def _is_stack(path) -> bool:
    if isinstance(path, (list, tuple)):
        return True
    text = os.fspath(path)
    return os.path.isdir(text) or (not os.path.exists(text) and any(ch in text for ch in "*?["))


def _opening(reader_open, path, **kwargs):
    """``reader_open(path, **kwargs)``, with what a damaged file raises as one InputError.

    A reader checks what it knows can go wrong; a file damaged where nobody looks (an HDF5
    object header, a heap, a TIFF tag) fails inside h5py, tifffile or struct with their own
    exception types (h5py a TypeError for a datatype it cannot map), and a header number
    that is garbage makes a reader's arithmetic fail with a ValueError. All of those are the
    file's fault, said in one line naming it.
    """
    try:
        return reader_open(path, **kwargs)
    except InputError:
        raise
    except (*READ_ERRORS, ValueError, TypeError) as exc:
        raise damaged(path if isinstance(path, (str, os.PathLike)) else str(path), exc) from exc


def open_scan(path, *, dataset: str | int | None = None, format: str | None = None,  # noqa: A002
              grid_shape=None) -> PatternSource:
    """Open a scan for lazy reading, choosing the reader from the file's content.

    Parameters
    ----------
    path : str or os.PathLike or list of them
        The scan file; or, for an image stack, a folder of TIFF/PNG files, a glob pattern
        (``"frames/*.tif"``) or a list of image files.
    dataset : str or int, optional
        Which patterns to read when the file holds several: the dataset name for plain
        HDF5 (``"/entry/patterns"``), the scan for h5ebsd (``"Scan 2"`` or ``2``).
    format : str, optional
        Force a reader (one of :data:`SCAN_FORMATS`) instead of detecting it.
    grid_shape : (int, int) or str, optional
        (rows, cols) of the scan (``--grid``) for files that do not say (EMsoft, EDAX
        .up1/.up2 version 1, image stacks). Contradicting a file's own grid is an error.

    Returns
    -------
    PatternSource
        Close it (or use it as a context manager) to release the file.

    Raises
    ------
    InputError
        Missing file, a directory, a format ebsdxc cannot read, no or several pattern
        datasets, or a ``dataset`` that does not fit. The message names the file.
    """
    if (format is None and _is_stack(path)) or str(format).strip().lower() == "image_stack":
        return _opening(get_reader("image_stack").open, path, dataset=dataset, grid_shape=grid_shape)
    path = _check_file(path)
    if format is not None:
        if registry.find(format) is None:
            raise InputError(f"unknown scan format {format!r}; choose one of "
                             f"{', '.join(registry.names())}", path)
        return _opening(get_reader(format).open, path, dataset=dataset, grid_shape=grid_shape)
    for entry in registry.entries():
        reader = entry.load()
        if reader.detect(path):
            return _opening(reader.open, path, dataset=dataset, grid_shape=grid_shape)
    raise InputError(
        f"not a scan format ebsdxc can read ({_what_is_it(path)}); it reads "
        f"{registry.reads_list('and')}; force a reader with --format", path)


def read_orientation_map(path, *, dataset: str | int | None = None,
                         format: str | None = None) -> OrientationMap:  # noqa: A002
    """Read the per-point orientations, phases and quality measures a file stores.

    Parameters
    ----------
    path : str or os.PathLike
        An EDAX/TSL ``.ang``, an Oxford ``.ctf``, or an EDAX OIM, Bruker Esprit or Oxford
        H5OINA h5 file (with or without patterns; ``--orientations FILE``). The format is
        judged from the file's content, not its extension.
    dataset : str or int, optional
        The scan (EDAX, Bruker: ``"Scan 1"`` or ``1``) or slice (H5OINA: ``"1"``) of an h5
        file holding several; the first by default. Text files hold one map.
    format : str, optional
        Force a reader, one of :data:`ORIENTATION_FORMATS`.

    Returns
    -------
    OrientationMap
        Euler angles as the file stores them (as orix reads them), in the vendor's sample
        frame (:attr:`OrientationMap.frame`).

    Raises
    ------
    InputError
        Missing file, a format that holds no orientations, or a file whose content does not
        fit its format (see the reader modules).
    """
    from . import ang, bruker_h5, ctf, edax_h5, oxford_h5oina

    path = _check_file(path)
    readers = {
        "edax_h5": (edax_h5.detect, edax_h5.read_orientation_map),
        "bruker_h5": (bruker_h5.detect, bruker_h5.read_orientation_map),
        "oxford_h5oina": (oxford_h5oina.detect, oxford_h5oina.read_orientation_map),
        "ang": (ang.detect, ang.read_ang),
        "ctf": (ctf.detect, ctf.read_ctf),
    }
    if format is not None:
        key = str(format).strip().lower()
        if key not in readers:
            raise InputError(f"unknown orientation map format {format!r}; choose one of "
                             f"{', '.join(ORIENTATION_FORMATS)}", path)
        chosen = key
    else:
        chosen = next((name for name in ORIENTATION_FORMATS if readers[name][0](path)), None)
    if chosen is None:
        raise InputError("holds no orientation map ebsdxc can read (it reads EDAX/TSL .ang, Oxford "
                         ".ctf and EDAX, Bruker and Oxford H5OINA h5 files)", path)
    if chosen in ("ang", "ctf"):
        if dataset is not None:
            raise InputError(f"dataset {dataset!r} chooses a scan of an h5 file; a .{chosen} file "
                             "holds one map", path)
        return _opening(readers[chosen][1], path)
    omap = _opening(readers[chosen][1], path, dataset=dataset)
    if omap is None:  # detected by its layout, yet the map's datasets cannot be found: damaged
        raise InputError(f"looks like a {chosen} file but holds no orientation map ebsdxc can "
                         "read (damaged, or written without one)", path)
    return omap


def read_reference(path) -> np.ndarray:
    """Read a reference pattern from a single-image TIFF.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    numpy.ndarray
        ``(H, W)`` in the file's dtype (uint8, uint16, float32, float64, ...).

    Raises
    ------
    InputError
        Missing file, not a TIFF, several pages, or a colour image.
    """
    from .hdf5 import is_hdf5_file
    from .image import is_tiff_file, read_tiff

    path = _check_file(path)
    if not is_tiff_file(path):
        hint = ("; to use a point of the scan as reference, use --ref-index"
                if is_hdf5_file(path) else "")
        raise InputError("not a file format ebsdxc can read (reference patterns must be "
                         f"single-image TIFF files){hint}", path)
    return _opening(read_tiff, path)


def read_reference_metadata(path) -> dict:
    """What a reference TIFF says about itself (its JSON description, e.g. ``pattern_centre``)."""
    from .image import read_tiff_description

    return read_tiff_description(path)


def _parse_index(index):
    if isinstance(index, str):
        parts = [p for p in re.split(r"[\s,()\[\]]+", index) if p]
        if not parts or len(parts) > 2 or not all(re.fullmatch(r"[+-]?\d+", p) for p in parts):
            return None
        nums = [int(p) for p in parts]
        return nums[0] if len(nums) == 1 else tuple(nums)
    if isinstance(index, (bool, np.bool_)):
        return None
    if isinstance(index, (int, np.integer)):
        return int(index)
    if isinstance(index, (tuple, list, np.ndarray)) and len(index) == 2 and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
            for v in index):
        return int(index[0]), int(index[1])
    return None


def flat_index(source: PatternSource, index) -> int:
    """The flat scan index ``row * cols + col`` that ``index`` (``--ref-index``) names.

    Parameters
    ----------
    source : PatternSource
    index : int or (int, int) or str
        Flat scan index, or ``(row, col)``; the strings ``"12"`` and ``"3,4"`` are accepted too.

    Raises
    ------
    InputError
        The index is not an integer or a pair of integers, lies outside the scan, or names a
        point that holds no pattern (a hexagonal grid's padding slot, a point never stored).
    """
    parsed = _parse_index(index)
    grid = source.grid
    extent = (f"the scan has {grid.rows} x {grid.cols} = {grid.size} points: flat index "
              f"0..{grid.size - 1} or (row 0..{grid.rows - 1}, col 0..{grid.cols - 1})")
    if parsed is None:
        raise InputError(f"reference index {index!r} is not an integer or a (row, col) "
                         f"pair; {extent}", source.path)
    if isinstance(parsed, tuple):
        row, col = parsed
        if not (0 <= row < grid.rows and 0 <= col < grid.cols):
            raise InputError(f"reference index (row {row}, col {col}) is outside the scan; "
                             f"{extent}", source.path)
        flat = row * grid.cols + col
    else:
        flat = parsed
        if not 0 <= flat < grid.size:
            raise InputError(f"reference index {flat} is outside the scan; {extent}",
                             source.path)
    if source.present is not None and not source.present.reshape(-1)[flat]:
        raise InputError(f"reference index {index!r} names a point without a pattern (not in the "
                         "grid or never stored); choose another point", source.path)
    return flat


def reference_from_scan(source: PatternSource, index) -> np.ndarray:
    """One pattern of a scan, to use as reference (``--ref-index``; see :func:`flat_index`).

    Returns
    -------
    numpy.ndarray
        ``(H, W)``, a new array in the scan's dtype.
    """
    flat = flat_index(source, index)
    return source.read(flat, flat + 1)[0]


def describe_file(path, *, dataset=None, grid_shape=None) -> dict:
    """What ``ebsdxc info`` prints: the format and geometry of a scan, or a results summary."""
    from .results import is_results_file, read_summary

    if not _is_stack(path):
        path = _check_file(path)
        if is_results_file(path):
            return {"path": os.path.abspath(path), "format": "ebsdxc results", **read_summary(path)}
    with open_scan(path, dataset=dataset, grid_shape=grid_shape) as src:
        return src.describe()
