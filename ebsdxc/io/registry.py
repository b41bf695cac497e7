"""The scan readers ebsdxc knows, in the order :func:`ebsdxc.io.open_scan` tries them.

This is the one list of formats: :data:`ebsdxc.io.SCAN_FORMATS`, :func:`ebsdxc.io.get_reader`,
the detection loop of :func:`ebsdxc.io.open_scan` and the format lists of help and error texts
all derive from it. A new format is one reader module plus one :func:`register` call (below
for the formats shipped with ebsdxc; anywhere for a format of your own)::

    from ebsdxc.io import registry

    registry.register("my_h5", "mypackage.my_h5", reads="My Vendor h5", before="hdf5")

A reader module provides ``NAME`` (its registered name), ``DESCRIPTION`` (one line),
``detect(path) -> bool`` (judged from the file's content) and
``open(path, *, dataset=None, grid_shape=None) -> PatternSource``.

The order is explicit: every entry is placed ``before`` a named entry, or last. A reader that
accepts any file of a container format (the generic ``hdf5`` reader accepts any HDF5 file)
must come after the specific readers of that container, so those register ``before="hdf5"``.
Reader modules are imported only when used, so importing the registry stays cheap.

The registry is per process: where scans are read in other processes (Dask workers), the
code that registers a reader of your own must run there too (e.g. on import of a module the
workers import).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

__all__ = [
    "ReaderEntry",
    "describe_formats",
    "entries",
    "find",
    "names",
    "reads_list",
    "register",
    "unregister",
]


@dataclass(frozen=True)
class ReaderEntry:
    """One registered scan reader.

    Attributes
    ----------
    name : str
        The registered name (lower case; the module's ``NAME``).
    module : str
        The reader module's import path.
    reads : str
        A few words for prose lists of what ebsdxc reads (``"Bruker h5"``); kept here so that
        help texts need not import the reader.
    """

    name: str
    module: str
    reads: str

    def load(self):
        """The reader module (imported on first use)."""
        return importlib.import_module(self.module)


_entries: list[ReaderEntry] = []


def _key(name) -> str:
    return str(name).strip().lower()


def register(name: str, module: str, *, reads: str, before: str | None = None) -> ReaderEntry:
    """Register a scan reader.

    Parameters
    ----------
    name : str
        The format's name (what ``format=`` of :func:`ebsdxc.io.open_scan` takes); must equal
        the module's ``NAME``.
    module : str
        Import path of the reader module; it is imported only when the reader is used.
    reads : str
        A few words for the prose list of formats in help and error texts.
    before : str, optional
        Name of a registered reader this one is tried before; by default it is tried last.
        Readers of files that a generic reader would also accept must come before it
        (``before="hdf5"`` for any HDF5-based format).

    Returns
    -------
    ReaderEntry

    Raises
    ------
    ValueError
        ``name`` is empty or already registered, or ``before`` names no registered reader.
    """
    key = _key(name)
    if not key:
        raise ValueError("name must not be empty")
    if find(key) is not None:
        raise ValueError(f"a scan reader named {key!r} is already registered")
    entry = ReaderEntry(key, str(module), str(reads))
    if before is None:
        _entries.append(entry)
    else:
        target = find(before)
        if target is None:
            raise ValueError(f"before={before!r} names no registered scan reader; "
                             f"registered: {', '.join(names())}")
        _entries.insert(_entries.index(target), entry)
    return entry


def unregister(name: str) -> ReaderEntry:
    """Remove a registered reader and return its entry.

    Raises
    ------
    ValueError
        No reader of that name is registered.
    """
    entry = find(name)
    if entry is None:
        raise ValueError(f"no scan reader named {name!r} is registered")
    _entries.remove(entry)
    return entry


def find(name) -> ReaderEntry | None:
    """The entry registered as ``name`` (case and surrounding spaces ignored), or None."""
    key = _key(name)
    return next((e for e in _entries if e.name == key), None)


def entries() -> tuple[ReaderEntry, ...]:
    """All registered readers, in detection order."""
    return tuple(_entries)


def names() -> tuple[str, ...]:
    """Names of the registered readers, in detection order."""
    return tuple(e.name for e in _entries)


def reads_list(conjunction: str = "and") -> str:
    """What ebsdxc reads, as prose: ``"A, B, ..., and Z"`` from the entries' ``reads``."""
    words = [e.reads for e in _entries]
    if len(words) < 3:
        return f" {conjunction} ".join(words)
    return f"{', '.join(words[:-1])}, {conjunction} {words[-1]}"


def describe_formats() -> dict[str, str]:
    """``{name: DESCRIPTION}`` of every registered reader, in detection order.

    Imports the reader modules (and with them h5py), so call it for help or listings, not on
    every import.
    """
    return {e.name: e.load().DESCRIPTION for e in _entries}


# The formats shipped with ebsdxc. The generic HDF5 reader accepts any HDF5 file with one
# pattern dataset, so every HDF5-based format is tried before it.
register("hdf5", "ebsdxc.io.hdf5", reads="any HDF5 file with one pattern dataset")
register("h5ebsd", "ebsdxc.io.h5ebsd", reads="kikuchipy h5ebsd", before="hdf5")
register("edax_h5", "ebsdxc.io.edax_h5", reads="EDAX/TSL h5", before="hdf5")
register("bruker_h5", "ebsdxc.io.bruker_h5", reads="Bruker h5", before="hdf5")
register("oxford_h5oina", "ebsdxc.io.oxford_h5oina", reads="Oxford h5oina", before="hdf5")
register("emsoft_h5", "ebsdxc.io.emsoft_h5", reads="EMsoft h5", before="hdf5")
# Binary formats and image stacks are not HDF5: their place relative to ``hdf5`` does not
# change what is detected; they keep the order ebsdxc has always tried them in.
register("edax_binary", "ebsdxc.io.edax_binary", reads="EDAX/TSL .up1/.up2", before="hdf5")
register("oxford_binary", "ebsdxc.io.oxford_binary", reads="Oxford .ebsp", before="hdf5")
register("image_stack", "ebsdxc.io.image_stack",
         reads="image stacks (a folder, glob or list of TIFF/PNG images, one per scan point)",
         before="hdf5")
register("tiff_stack", "ebsdxc.io.tiff_stack",
         reads="TIFF files (the pages of one multi-page or single-image TIFF, one per scan point)",
         before="hdf5")
