"""Oxford Instruments ``.ctf`` (Channel Text File) orientation maps: read and write.

A ``.ctf`` file is a tab-separated header, then one line per scan point in row order::

    Channel Text File
    Prj     name.cpr            Author, JobMode (Grid or LineScan)
    XCells  3                   points per row; YCells rows
    XStep   1.5                 micrometres; YStep
    AcqE1   0                   acquisition Euler angles, AcqE2, AcqE3
    Euler angles refer to Sample Coordinate system (CS0)!  Mag 200  ...  KV 20  TiltAngle 70
    Phases  1
    3.52;3.52;3.52  90;90;90  Nickel  11  225     a;b;c (angstrom), angles (deg), name,
                                                  Laue group number (1 -1 .. 11 m-3m),
                                                  space group, optional comments
    Phase   X   Y   Bands   Error   Euler1  Euler2  Euler3  MAD BC  BS

Euler angles are Bunge, in degrees, in Oxford's sample frame (``frame = "oxford"``).
``orix.io.load`` turns them into rotations as they are, without any change of frame, and so
does :func:`read_ctf`. kikuchipy documents that these orientations refer to a sample frame
turned 90 degrees about Z from its own (EDAX/TSL) one: see
:mod:`ebsdxc.io.orientation_map` and :meth:`~ebsdxc.io.orientation_map.OrientationMap.in_frame`.

Phase 0 means not indexed (Euler angles NaN). Columns become quality maps under their
lower-case names (``bands``, ``error``, ``mad`` in degrees, ``bc``, ``bs``); files EMsoft
writes, which say so in their header, hold a dot product, an orientation similarity and an
image quality in the MAD, BC and BS columns, named ``dp``, ``osm`` and ``iq`` here as orix
names them. A phase number the header does not declare, an unknown Laue group number, a line
that does not parse, fewer or more points than XCells x YCells (a truncated file) and points
that do not sit where the grid puts them are errors.

:func:`write_ctf` writes square grids (a ``.ctf`` file has no hexagonal layout; write those
with :func:`ebsdxc.io.ang.write_ang`) with the eleven standard columns, phases numbered 1, 2,
... in the map's order, Euler angles in Oxford's frame whatever the map's ``frame``, and
``bands``, ``error``, ``mad``, ``bc``, ``bs`` from the map's quality (else 0; error code 3,
no solution, at points that are not indexed).
"""

from __future__ import annotations

import builtins
import os

import numpy as np

from .. import __version__
from ..errors import InputError
from .orientation_map import (
    OrientationMap,
    PhaseInfo,
    build_map,
    check_angles,
    check_positions,
    ctf_laue_number,
    laue_group_name,
    phase_indices,
    quality_name,
    read_table,
    write_rows,
    writing,
)
from .source import ScanGrid

__all__ = ["detect", "read_ctf", "write_ctf"]

NAME = "ctf"
DESCRIPTION = "Oxford Instruments .ctf orientation map (Channel Text File)"

_MAGIC = "channel text file"
_MAX_HEADER_LINES = 10_000
_EMSOFT = "MAD=CI, BC=OSM, BS=IQ"
_COLUMNS = ("Phase", "X", "Y", "Bands", "Error", "Euler1", "Euler2", "Euler3", "MAD", "BC", "BS")
_ACQUISITION = {"mag": "magnification", "coverage": "coverage", "device": "device",
                "kv": "beam_energy", "tiltangle": "sample_tilt", "tiltaxis": "tilt_axis",
                "workingdistance": "working_distance"}


# --------------------------------------------------------------------------- detection


def detect(path) -> bool:
    """Whether ``path`` is a ``.ctf`` file: its first line reads ``Channel Text File``."""
    try:
        with builtins.open(path, "rb") as fh:
            head = fh.read(64)
    except OSError:
        return False
    return head.decode("latin-1").lstrip("\ufeff \t\r\n").lower().startswith(_MAGIC)


# --------------------------------------------------------------------------- reading


def _read_header(path) -> tuple[list[str], list[str], int]:
    """Header lines, the column names and the number of lines before the data."""
    lines = []
    with builtins.open(path, encoding="latin-1") as fh:
        for number, line in enumerate(fh):
            parts = line.strip("\r\n").split("\t")
            if parts[:2] == ["Phase", "X"] or line.split()[:2] == ["Phase", "X"]:
                return lines, line.split(), number + 1
            if number >= _MAX_HEADER_LINES:
                break
            lines.append(line.rstrip("\r\n"))
    raise InputError("has no column line ('Phase X Y ...') after its header (a truncated file?)",
                     path)


def _float(text, what, path) -> float:
    try:
        return float(str(text).strip().replace(",", "."))
    except ValueError:
        raise InputError(f"header: {what} {text!r} is not a number", path) from None


def _parse_header(lines, path) -> tuple[dict, list[PhaseInfo]]:
    keys, phases = {}, []
    i = 0
    while i < len(lines):
        parts = [p.strip() for p in lines[i].split("\t")]
        if len(parts) == 1:
            parts = lines[i].split(None, 1) or [""]
        key = parts[0].lower()
        if key == "phases":
            count = _float(parts[1] if len(parts) > 1 else "", "Phases", path)
            if not count.is_integer() or count < 0:
                raise InputError(f"header: Phases {parts[1]!r} is not a count", path)
            block = lines[i + 1:i + 1 + int(count)]
            if len(block) < count:
                raise InputError(f"header says {int(count)} phases but lists {len(block)}", path)
            phases = [_phase(n, line, path) for n, line in enumerate(block, start=1)]
            i += 1 + int(count)
            continue
        if key.startswith("euler angles refer to"):
            pairs = parts[1:]
            for name, value in zip(pairs[0::2], pairs[1::2]):
                keys[f"acq:{name.lower()}"] = value
        elif key:
            keys[key] = parts[1] if len(parts) > 1 else ""
        i += 1
    return keys, phases


def _phase(number, line, path) -> PhaseInfo:
    fields = line.strip("\r\n").split("\t")
    if len(fields) < 4:
        raise InputError(f"phase {number}: line {line.strip()!r} does not hold the lattice, "
                         "the name and the Laue group number", path)
    try:
        lattice = [float(v.strip().replace(",", ".")) for v in ";".join(fields[:2]).split(";")]
    except ValueError:
        lattice = []
    name = fields[2].strip()
    where = f"phase {number}" + (f" ({name})" if name else "")
    if len(lattice) != 6:
        raise InputError(f"{where}: lattice {fields[0]!r} {fields[1]!r} is not a;b;c and "
                         "alpha;beta;gamma", path)
    try:
        laue = laue_group_name(ctf_number=fields[3].strip())
    except ValueError as e:
        raise InputError(f"{where}: {e}", path) from None
    space_group = 0
    if len(fields) > 4 and fields[4].strip():
        value = _float(fields[4], f"{where} space group", path)
        space_group = int(value) if value.is_integer() and 0 <= value <= 230 else 0
    return PhaseInfo(id=number, name=name, laue=laue, lattice=tuple(lattice), formula="",
                     space_group=space_group)


def read_ctf(path) -> OrientationMap:
    """Read an Oxford Instruments ``.ctf`` orientation map (see the module notes).

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    OrientationMap
        Euler angles in degrees in Oxford's frame (``frame = "oxford"``), as orix reads them.

    Raises
    ------
    InputError
        Not a ``.ctf`` file, an unknown Laue group or undeclared phase, a line that does not
        parse, or a grid header that contradicts the points present.
    """
    path = os.fspath(path)
    if not detect(path):
        raise InputError("not a .ctf file (its first line must read 'Channel Text File')", path)
    lines, names, skip = _read_header(path)
    keys, phases = _parse_header(lines, path)
    table = read_table(path, skip_lines=skip, what="numbers")
    if table.shape[1] != len(names):
        raise InputError(f"data lines hold {table.shape[1]} values but the column line names "
                         f"{len(names)} ({' '.join(names)})", path)
    missing = [c for c in _COLUMNS[:8] if c not in names]
    if missing:
        raise InputError(f"the column line names no {', '.join(missing)} column", path)
    col = {name: table[:, i] for i, name in enumerate(names)}

    mode = keys.get("jobmode", "Grid")
    if mode.lower() not in ("grid", "linescan"):
        raise InputError(f"header says JobMode {mode!r}; ebsdxc reads .ctf maps of square grids "
                         "(JobMode Grid) and line scans", path)
    cols = keys.get("xcells")
    rows = keys.get("ycells", "1" if mode.lower() == "linescan" else None)
    if cols is None or rows is None:
        raise InputError("header gives no XCells and YCells", path)
    cols, rows = (_float(v, k, path) for v, k in ((cols, "XCells"), (rows, "YCells")))
    if not (cols.is_integer() and rows.is_integer() and cols >= 1 and rows >= 1):
        raise InputError(f"header says {rows:g} x {cols:g} cells (YCells x XCells)", path)
    sx = _float(keys.get("xstep", "1"), "XStep", path)
    sy = _float(keys.get("ystep", "0"), "YStep", path) if rows > 1 else 0.0
    grid = ScanGrid(int(rows), int(cols), step=(sy, sx))
    n = table.shape[0]
    said = f"YCells {int(rows)} x XCells {int(cols)}"
    if n != grid.n_points:
        hint = "a truncated file?" if n < grid.n_points else "the header contradicts the data"
        raise InputError(f"holds {n} points but its header's grid ({said}) has {grid.n_points} "
                         f"({hint})", path)
    check_positions(col["X"], col["Y"], grid, path, first_line=skip + 1,
                    header=f"{said}, XStep {sx:g}, YStep {sy:g}")

    phase_index = phase_indices(col["Phase"], phases, path, first_line=skip + 1)
    euler = np.column_stack([col["Euler1"], col["Euler2"], col["Euler3"]])
    check_angles(euler, path, first_line=skip + 1, limit_deg=720.0)
    rename = {"MAD": "dp", "BC": "osm", "BS": "iq"} if any(_EMSOFT in line for line in lines) else {}
    quality = {rename.get(k, quality_name(k)): v for k, v in col.items()
               if k not in ("Phase", "X", "Y", "Euler1", "Euler2", "Euler3")}

    meta = {"columns": names}
    for key, name in (("prj", "project"), ("author", "author")):
        if keys.get(key):
            meta[name] = keys[key]
    for key, name in _ACQUISITION.items():
        value = keys.get(f"acq:{key}")
        if value not in (None, ""):
            try:
                meta[name] = float(value.replace(",", "."))
            except ValueError:
                meta[name] = value
    return build_map(path, grid, grid.slot_to_record(), euler_deg=euler, phase_index=phase_index,
                     phases=phases, quality=quality, frame="oxford", metadata=meta)


# --------------------------------------------------------------------------- writing


def write_ctf(path, omap: OrientationMap, *, overwrite=False) -> str:
    """Write an orientation map as an Oxford Instruments ``.ctf`` file (see the module notes).

    Parameters
    ----------
    path : str or os.PathLike
    omap : OrientationMap
        On a square grid; its Euler angles are written in Oxford's frame.
    overwrite : bool
        Replace an existing file; without it an existing ``path`` is an error.

    Returns
    -------
    str
        The path written. The file is written as ``path.part`` and renamed when complete.

    Raises
    ------
    ValueError
        ``omap`` is on a hexagonal grid.
    InputError
        ``path`` exists and ``overwrite`` is not set, or is a directory.
    """
    if not isinstance(omap, OrientationMap):
        raise ValueError(f"omap must be an OrientationMap, got {type(omap).__name__}")
    if omap.grid.kind != "square":
        raise ValueError("omap is on a hexagonal grid, which a .ctf file cannot hold; write it "
                         "as .ang (write_ang)")
    path = os.fspath(path)
    omap = omap.in_frame("oxford")
    grid = omap.grid
    indexed = omap.indexed.reshape(-1)
    euler = np.where(indexed[:, None], omap.euler_deg.reshape(-1, 3), 0.0)
    xy = grid.positions().reshape(-1, 2)
    phase = np.where(indexed, omap.phase.reshape(-1) + 1, 0)

    def column(name, fallback, integer):
        values = omap.quality.get(name)
        if values is None:
            return np.full(indexed.shape, fallback, dtype=np.float64)
        out = np.nan_to_num(values.reshape(-1).astype(np.float64))
        return np.rint(out) if integer else out

    error = column("error", 0.0, True)
    if "error" not in omap.quality:
        error[~indexed] = 3.0  # "no solution"
    columns = [phase, xy[:, 0], xy[:, 1], column("bands", 0.0, True), error,
               euler[:, 0], euler[:, 1], euler[:, 2], column("mad", 0.0, False),
               column("bc", 0.0, True), column("bs", 0.0, True)]
    formats = "\t".join(["%d", "%.5f", "%.5f", "%d", "%d", "%.5f", "%.5f", "%.5f", "%.5f", "%d", "%d"])
    with writing(path, overwrite) as fh:
        fh.write(_header(omap, path))
        write_rows(fh, columns, formats)
    return path


def _header(omap: OrientationMap, path) -> str:
    sy, sx = omap.grid.step if omap.grid.step is not None else (1.0, 1.0)
    meta = omap.metadata
    tilt = float(meta.get("sample_tilt", 70.0))
    kv = float(meta.get("beam_energy", 0.0))
    lines = ["Channel Text File",
             f"Prj\t{_one_field(os.path.basename(path))}",
             f"Author\tebsdxc {__version__}",
             f"JobMode\t{'Grid' if omap.grid.rows > 1 else 'LineScan'}",
             f"XCells\t{omap.grid.cols}",
             f"YCells\t{omap.grid.rows}",
             f"XStep\t{float(sx):.6f}",
             f"YStep\t{float(sy):.6f}",
             "AcqE1\t0.0000",
             "AcqE2\t0.0000",
             "AcqE3\t0.0000",
             "Euler angles refer to Sample Coordinate system (CS0)!\tMag\t0.0000\tCoverage\t100"
             f"\tDevice\t0\tKV\t{kv:.4f}\tTiltAngle\t{tilt:.4f}\tTiltAxis\t0",
             f"Phases\t{len(omap.phases)}"]
    for phase in omap.phases:
        a, b, c, alpha, beta, gamma = phase.lattice
        lines.append(f"{a:.4f};{b:.4f};{c:.4f}\t{alpha:.4f};{beta:.4f};{gamma:.4f}\t"
                     f"{_one_field(phase.name) or 'phase'}\t{ctf_laue_number(phase.laue)}\t"
                     f"{phase.space_group}\t\t\tWritten by ebsdxc")
    lines.append("\t".join(_COLUMNS))
    return "".join(line + "\n" for line in lines)


def _one_field(text) -> str:
    return " ".join(str(text).split())
