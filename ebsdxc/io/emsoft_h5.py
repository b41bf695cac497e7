"""EMsoft EBSD simulations (the HDF5 output of EMsoft's EMEBSD program).

Layout, as found in the files themselves::

    /EMheader/EBSD/ProgramName          dataset, b"EMEBSD.f90"
    /EMheader/EBSD/Version              dataset, e.g. b"4_2_0_0" or b"5_0_20200217_0"
    /EMData/EBSD/EBSDPatterns           (n, H, W) simulated patterns
    /EMData/EBSD/EulerAngles            (n, 3) Bunge Euler angles in radians
    /NMLparameters/EBSDNameList/        numsx, numsy (detector size, unbinned px),
                                        binning, delta (unbinned pixel size, um),
                                        xpc, ypc (px from the detector centre),
                                        L (detector distance, um), thetac (detector
                                        tilt, degrees), energymin, energymax (keV),
                                        eulerconvention, ...
    /CrystalData/...                    the phase

Detection: an HDF5 file whose ``EMheader/EBSD/ProgramName`` reads ``EMEBSD.f90`` and
which holds ``EMData/EBSD``. EMsoft major versions :data:`KNOWN_MAJOR_VERSIONS` are read;
others are refused with a message naming the version. ``dataset=`` may only name the one
pattern dataset (``"/EMData/EBSD/EBSDPatterns"``).

Grid: the file has none. The patterns form one row, or the ``grid_shape`` (``--grid``)
given, filled row by row; a grid larger than the number of patterns leaves its last points
empty (not ``present``, read as zeros).

The projection centre ``(xpc, ypc, L)`` goes into the metadata with the EMsoft convention,
which needs ``detector_pixel_size`` (``delta``) and ``binning`` to convert. Before EMsoft
5.0, ``xpc`` pointed the other way (kikuchipy's ``EBSDDetector`` notes), so files written
by EMsoft 4 are labelled ``"emsoft4"``; kikuchipy reads every file as ``"emsoft"``
(version 5), which mirrors the PC of version-4 files about the detector's vertical centre
line.
"""

from __future__ import annotations

import re

import h5py
import numpy as np

from ..errors import InputError
from .edax_h5 import (
    check_pattern_dataset,
    entry,
    jsonable_scalars,
    number,
    per_slot,
    text,
)
from .hdf5 import HDF5Source, dataset_metadata, file_matches, open_file, read_entry
from .source import choose_grid

NAME = "emsoft_h5"
DESCRIPTION = "EMsoft EMEBSD simulation h5 (/EMData/EBSD/EBSDPatterns)"

#: EMsoft major versions whose EMEBSD output this reader knows.
KNOWN_MAJOR_VERSIONS = (4, 5, 6)

_PROGRAM = "EMheader/EBSD/ProgramName"
_VERSION = "EMheader/EBSD/Version"
_PATTERNS = "/EMData/EBSD/EBSDPatterns"
_EULER = "/EMData/EBSD/EulerAngles"
_NML = "NMLparameters/EBSDNameList"


def _program(f) -> str | None:
    group = f.get("EMheader/EBSD")
    return text(group, "ProgramName") if isinstance(group, h5py.Group) else None


def is_emsoft_ebsd(f) -> bool:
    """Whether open file ``f`` is EMsoft EMEBSD output."""
    return _program(f) == "EMEBSD.f90" and isinstance(f.get("EMData/EBSD"), h5py.Group)


def detect(path) -> bool:
    """Whether ``path`` is an EMsoft EMEBSD simulation file, judged from its content."""
    return file_matches(path, is_emsoft_ebsd)


def _check_version(f, path) -> tuple[str, int]:
    version = text(f["EMheader/EBSD"], "Version")
    m = re.match(r"^(\d+)[_.]", version or "")
    if m is None or int(m.group(1)) not in KNOWN_MAJOR_VERSIONS:
        known = ", ".join(str(v) for v in KNOWN_MAJOR_VERSIONS)
        raise InputError(f"EMsoft version {version!r} is not one ebsdxc can read (it reads "
                         f"EMEBSD output of EMsoft {known}); read the pattern dataset as plain "
                         f"HDF5 with --format hdf5 --dataset {_PATTERNS}", path)
    return version, int(m.group(1))


class EMsoftSource(HDF5Source):
    """Simulated patterns of an EMsoft EMEBSD file, read lazily (see module notes)."""

    format = NAME

    def orientations(self) -> np.ndarray | None:
        """``EulerAngles`` per slot, ``(rows, cols, 3)`` Bunge degrees (stored in radians),
        NaN for slots past the stored patterns, or ``None``."""
        obj = self.dataset.file.get(_EULER)
        if not isinstance(obj, h5py.Dataset) or obj.ndim != 2 or obj.shape[1] != 3:
            return None
        euler = np.degrees(read_entry(obj).astype(np.float64))
        return per_slot(euler, self._records).reshape(self.grid.rows, self.grid.cols, 3)


def open(path, *, dataset=None, grid_shape=None) -> EMsoftSource:  # noqa: A001 - registry interface
    """Open the patterns of an EMsoft EMEBSD simulation file.

    Parameters
    ----------
    path : str or os.PathLike
    dataset : str, optional
        Only ``"/EMData/EBSD/EBSDPatterns"`` (the file holds one pattern dataset).
    grid_shape : (int, int), optional
        (rows, cols) to arrange the patterns in (``--grid``); default one row.

    Returns
    -------
    EMsoftSource

    Raises
    ------
    InputError
        Not EMEBSD output, an unknown EMsoft version, no patterns, a name list that does not
        fit the stored patterns, or patterns compressed with an HDF5 filter that is not
        available.
    """
    f = open_file(path)
    try:
        if not is_emsoft_ebsd(f):
            raise InputError("not an EMsoft EMEBSD file (it needs EMheader/EBSD/ProgramName = "
                             "'EMEBSD.f90' and a group EMData/EBSD)", path)
        version, major = _check_version(f, path)
        if dataset is not None and str(dataset).strip().strip("/") != _PATTERNS.strip("/"):
            raise InputError(f"has no pattern dataset {str(dataset)!r}; an EMsoft EMEBSD file "
                             f"holds one, {_PATTERNS}", path)
        ds = f.get(_PATTERNS)
        if not isinstance(ds, h5py.Dataset):
            raise InputError(f"holds no simulated patterns ({_PATTERNS} is missing)", path)
        nml = f.get(_NML)
        nml = nml if isinstance(nml, h5py.Group) else None

        def value(key):
            return number(nml, key) if nml is not None else None

        binning = value("binning") or 1.0
        numsy, numsx = value("numsy"), value("numsx")
        # numsx/numsy count unbinned detector pixels; EMEBSD stores binned patterns
        height = None if numsy is None else int(numsy // binning)
        width = None if numsx is None else int(numsx // binning)
        check_pattern_dataset(ds, path, height, width)
        n = int(ds.shape[0])
        grid = choose_grid(None, grid_shape, n, path)

        meta = {**dataset_metadata(ds), "file_version": version}
        if grid.size > n:
            meta["n_stored"] = n
        xpc, ypc, dist, delta = value("xpc"), value("ypc"), value("L"), value("delta")
        if xpc is not None and ypc is not None and dist is not None:
            meta["pattern_centre"] = [xpc, ypc, dist]
            meta["pattern_centre_convention"] = "emsoft4" if major < 5 else "emsoft"
        if delta is not None:
            meta["detector_pixel_size"] = delta
        meta["binning"] = int(binning) if float(binning).is_integer() else binning
        thetac = value("thetac")
        if thetac is not None:
            meta["detector_tilt"] = thetac
        if nml is not None:
            info = {"beam_energy": entry(nml, "energymax"), "energy_min": entry(nml, "energymin"),
                    "euler_convention": text(nml, "eulerconvention"),
                    "detector_columns": None if numsx is None else int(numsx),
                    "detector_rows": None if numsy is None else int(numsy),
                    "program": _program(f)}
            info = jsonable_scalars(info)
            if info:
                meta["header"] = info

        src = EMsoftSource(path, f, ds.name, grid=grid, metadata=meta, n_stored=n)
        euler = f.get(_EULER)
        if (isinstance(euler, h5py.Dataset) and euler.ndim == 2 and euler.shape[1] == 3
                and len(euler)):
            first = np.degrees(euler[0].astype(np.float64))
            if np.isfinite(first).all():
                src.metadata["euler_angles"] = first.tolist()
        return src
    except BaseException:
        f.close()
        raise
