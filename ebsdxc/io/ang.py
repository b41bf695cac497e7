"""EDAX/TSL ``.ang`` orientation maps: read and write, square and hexagonal grids.

An ``.ang`` file is a header of ``#`` lines, then one line of numbers per scan point in
acquisition order::

    # x-star  0.4139            pattern centre (TSL convention), WorkingDistance (mm)
    # Phase 1                   one block per phase: MaterialName, Formula, Info,
    # MaterialName  Nickel      Symmetry (TSL code: 43 cubic, 62 hexagonal, ...),
    # Symmetry  43              LatticeConstants a b c (angstrom) alpha beta gamma (deg)
    # LatticeConstants 3.52 3.52 3.52 90 90 90
    # GRID: SqrGrid             or HexGrid
    # XSTEP: 1.5                micrometres; YSTEP: 1.5
    # NCOLS_ODD: 3              points of rows 1, 3, ... (counted from 1), i.e. ebsdxc's
    # NCOLS_EVEN: 3             rows 0, 2, ...; NCOLS_EVEN the others (one fewer on HexGrid)
    # NROWS: 3
    phi1 Phi phi2 x y IQ CI phase [detector signal] [fit] [...]

Euler angles are Bunge, in radians, in EDAX/TSL's sample frame (``frame = "tsl"``).
``orix.io.load`` turns them into rotations as they are, without any change of frame, and so
does :func:`read_ang` (in degrees); see :mod:`ebsdxc.io.orientation_map`.

Columns: the names of an OIM 8 ``COLUMN_HEADERS`` line or of orix's ``Column names`` line
when the file has one; otherwise the layout orix assumes from the header (EMsoft: ``iq``,
``dp``; NanoMegas ASTAR: ``ind``, ``rel``, ``relx100``; EDAX/TSL: ``iq``, ``ci``,
``detector_signal``, ``fit``, and ``column_11``... beyond). Every column but the angles,
the position and the phase becomes a quality map.

Not indexed: a point whose confidence index is -1 (EDAX/TSL's mark, and orix's rule), or
whose phase is 0 in a file of several phases (or -1, as orix writes). In a single-phase file
OIM writes phase 0 for indexed points, which then belong to the header's only phase. A phase
number the header does not declare is an error, as are an unknown symmetry code, a line that
does not parse, fewer or more points than the header's grid holds (a truncated file), and
points that do not sit where the header's grid puts them.

:func:`write_ang` writes what OIM Analysis 7, MTEX and orix read: the ten standard columns
(``iq``, ``ci``, ``detector_signal`` and ``fit`` from the map's quality, else 0, with CI 1
for indexed points of a map without ``ci``), phases numbered 1, 2, ... in the map's order
(listed last to first, as orix writes them for OIM), points that are not indexed as phase
0, CI -1, fit 180 and Euler angles 4 pi (orix's and OIM's mark). Euler angles are written
in the TSL frame whatever the map's :attr:`~ebsdxc.io.orientation_map.OrientationMap.frame`.
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
    laue_group_name,
    phase_indices,
    quality_name,
    read_table,
    tsl_symmetry_code,
    write_rows,
    writing,
)
from .source import ScanGrid, grid_kind

__all__ = ["detect", "read_ang", "write_ang"]

NAME = "ang"
DESCRIPTION = "EDAX/TSL .ang orientation map (square or hexagonal grid)"

# Header keys only .ang files have (lower case), for detection.
_SIGNATURE = ("ncols_odd", "ncols_even", "nrows:", "grid:", "tem_pixperum", "xstep:")
_MAX_HEADER_LINES = 100_000

# Column layouts by vendor when the header does not name the columns (as orix assumes them).
_LAYOUTS = {
    "tsl": ("phi1", "phi", "phi2", "x", "y", "iq", "ci", "phase", "detector_signal", "fit"),
    "emsoft": ("phi1", "phi", "phi2", "x", "y", "iq", "dp", "phase"),
    "astar": ("phi1", "phi", "phi2", "x", "y", "ind", "rel", "phase", "relx100"),
}
# Names OIM 8 and orix give the columns, as the keys used here.
_COLUMN_ALIASES = {
    "phi1": "phi1", "phi": "phi", "phi2": "phi2", "x": "x", "y": "y",
    "iq": "iq", "image_quality": "iq", "ci": "ci", "confidence_index": "ci",
    "phase": "phase", "phase_index": "phase", "phase_id": "phase",
    "sem": "detector_signal", "sem_signal": "detector_signal",
    "detector_signal": "detector_signal", "detector_intensity": "detector_signal",
    "fit": "fit", "pattern_fit": "fit",
}


# --------------------------------------------------------------------------- detection


def detect(path) -> bool:
    """Whether ``path`` is an ``.ang`` file, judged from its header (not its extension)."""
    try:
        with builtins.open(path, "rb") as fh:
            head = fh.read(16384)
    except OSError:
        return False
    text = head.decode("latin-1").lstrip("\ufeff \t\r\n")
    if not text.startswith("#"):
        return False
    header = "\n".join(line for line in text.splitlines() if line.startswith("#")).lower()
    return any(key in header for key in _SIGNATURE)


# --------------------------------------------------------------------------- header


def _read_header(path) -> tuple[list[str], int]:
    """The header lines (``#`` stripped) and the number of lines before the data."""
    lines = []
    with builtins.open(path, encoding="latin-1") as fh:
        for number, line in enumerate(fh):
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                return lines, number
            if number >= _MAX_HEADER_LINES:
                break
            lines.append(stripped.lstrip("\ufeff").lstrip("#").strip())
    raise InputError("holds no data lines after its header (a truncated file?)", path)


def _parse_header(lines, path) -> dict:
    info = {"phases": [], "keys": {}, "column_headers": None, "column_names": None, "text": ""}
    phase = None
    for line in lines:
        if not line:
            continue
        parts = line.split(None, 1)
        key = parts[0].rstrip(":").lower()
        value = parts[1].strip() if len(parts) > 1 else ""
        if key == "phase" and value.split()[:1] and value.split()[0].lstrip("-").isdigit():
            phase = {"id": int(value.split()[0]), "line": line}
            info["phases"].append(phase)
        elif key in ("materialname", "formula", "info", "symmetry", "latticeconstants") and phase is not None:
            phase[key] = value
        elif key == "column_headers":
            info["column_headers"] = [v.strip() for v in value.split(",")]
        elif key == "column" and value.lower().startswith("names:"):
            info["column_names"] = [v.strip() for v in value[len("names:"):].split(",")]
        elif key in ("x-star", "y-star", "z-star", "workingdistance", "tem_pixperum", "grid",
                     "xstep", "ystep", "ncols_odd", "ncols_even", "nrows", "operator",
                     "sampleid", "scanid"):
            info["keys"][key] = value
    info["text"] = "\n".join(lines)
    return info


def _phase_info(block, path) -> PhaseInfo:
    pid = block["id"]
    name = block.get("materialname", "").strip()
    where = f"phase {pid}" + (f" ({name})" if name else "")
    sym = block.get("symmetry", "").split()
    if not sym:
        raise InputError(f"{where} declares no Symmetry", path)
    try:
        laue = laue_group_name(tsl_code=sym[0])
    except ValueError as e:
        # orix writes point group names where OIM has no code ("112" for 2/m)
        try:
            laue = laue_group_name(point_group=sym[0])
        except ValueError:
            raise InputError(f"{where}: {e}", path) from None
    lattice = (1.0, 1.0, 1.0, 90.0, 90.0, 90.0)
    if "latticeconstants" in block:
        try:
            values = [float(v) for v in block["latticeconstants"].replace(",", " ").split()]
        except ValueError:
            values = []
        if len(values) != 6:
            raise InputError(f"{where}: LatticeConstants {block['latticeconstants']!r} are not 6 "
                             "numbers (a b c alpha beta gamma)", path)
        lattice = tuple(values)
    return PhaseInfo(id=pid, name=name, laue=laue, lattice=lattice,
                     formula=block.get("formula", "").strip())


def _columns(info, n_cols, path) -> tuple[list[str], str]:
    """Column keys of the data and the vendor layout they follow."""
    text = info["text"]
    named = info["column_headers"] or info["column_names"]
    if named and len(named) == n_cols:
        keys = [_COLUMN_ALIASES.get(quality_name(n), quality_name(n)) for n in named]
        return keys, "orix" if info["column_names"] else "tsl"
    vendor = "emsoft" if "EMsoft" in text else "astar" if "ACOM" in text else "tsl"
    layout = list(_LAYOUTS[vendor])
    if n_cols < 8:
        raise InputError(f"data lines hold {n_cols} values; an .ang line holds at least 8 "
                         "(phi1 Phi phi2 x y IQ CI phase)", path)
    if vendor != "tsl" and n_cols != len(layout):
        vendor, layout = "tsl", list(_LAYOUTS["tsl"])
    keys = layout[:n_cols] + [f"column_{i + 1}" for i in range(len(layout), n_cols)]
    return keys, vendor


def _number(info, key, path, *, integer=False):
    raw = info["keys"].get(key)
    if raw is None or raw == "":
        return None
    try:
        value = float(raw.split()[0])
    except ValueError:
        raise InputError(f"header entry {key.upper()} = {raw!r} is not a number", path) from None
    if integer:
        if not value.is_integer() or value < 0:
            raise InputError(f"header entry {key.upper()} = {raw!r} is not a count", path)
        return int(value)
    return value


def _grid(info, n, x, y, path, first_line) -> ScanGrid:
    try:
        kind = grid_kind(info["keys"].get("grid", "SqrGrid"))
    except ValueError as e:
        raise InputError(f"header: {e}", path) from None
    rows = _number(info, "nrows", path, integer=True)
    odd = _number(info, "ncols_odd", path, integer=True)
    even = _number(info, "ncols_even", path, integer=True)
    sx, sy = _number(info, "xstep", path), _number(info, "ystep", path)
    if rows is None or odd is None:
        return _grid_from_positions(x, y, path)
    if even is None:
        even = odd - 1 if kind == "hexagonal" else odd
    want_even = odd - 1 if kind == "hexagonal" else odd
    if even != want_even and rows > 1:
        raise InputError(f"header says NCOLS_ODD {odd} and NCOLS_EVEN {even} on a {kind} grid; "
                         f"ebsdxc reads {kind} grids with NCOLS_EVEN = {want_even}", path)
    try:
        grid = ScanGrid(rows, odd, step=(sy or 0.0, sx or 0.0) if sx is not None else None,
                        kind=kind)
    except ValueError as e:
        raise InputError(f"header: {e}", path) from None
    said = f"{'HexGrid' if kind == 'hexagonal' else 'SqrGrid'}, NROWS {rows}, NCOLS_ODD {odd}, " \
           f"NCOLS_EVEN {even}"
    if n != grid.n_points:
        hint = "a truncated file?" if n < grid.n_points else "the header contradicts the data"
        raise InputError(f"holds {n} points but its header's grid ({said}) has "
                         f"{grid.n_points} ({hint})", path)
    check_positions(x, y, grid, path, first_line=first_line,
                    header=f"{said}, XSTEP {sx:g}, YSTEP {sy or 0:g}" if sx is not None else said)
    return grid


def _grid_from_positions(x, y, path) -> ScanGrid:
    # headers without NROWS/NCOLS (some third-party writers): a square grid from the positions
    n = x.size
    ys = np.unique(np.round(y, 4))
    rows = ys.size
    if n % rows:
        raise InputError(f"header gives no grid (NROWS, NCOLS_ODD) and the {n} points do not "
                         f"form {rows} equal rows", path)
    cols = n // rows
    sx = float(x[1] - x[0]) if cols > 1 else 1.0
    sy = float(ys[1] - ys[0]) if rows > 1 else sx
    return ScanGrid(rows, cols, step=(sy, sx))


# --------------------------------------------------------------------------- reading


def read_ang(path) -> OrientationMap:
    """Read an EDAX/TSL ``.ang`` orientation map (see the module notes).

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    OrientationMap
        Euler angles in degrees in the TSL frame (``frame = "tsl"``), as orix reads them.

    Raises
    ------
    InputError
        Not an ``.ang`` file, an unknown symmetry code or undeclared phase, a line that does
        not parse, or a grid header that contradicts the points present.
    """
    path = os.fspath(path)
    if not detect(path):
        raise InputError("not an .ang file (it needs a header of '#' lines with GRID, NROWS, "
                         "NCOLS_ODD, XSTEP, ...)", path)
    lines, skip = _read_header(path)
    info = _parse_header(lines, path)
    phases = sorted((_phase_info(block, path) for block in info["phases"]), key=lambda p: p.id)
    ids = [p.id for p in phases]
    if len(set(ids)) != len(ids):
        raise InputError(f"header declares phase numbers {ids} more than once", path)

    table = read_table(path, skip_lines=skip, what="numbers")
    keys, vendor = _columns(info, table.shape[1], path)
    col = {k: table[:, i] for i, k in enumerate(keys)}
    x, y = col["x"], col["y"]
    if vendor == "astar":
        # ASTAR writes positions and steps in nanometres (orix's scan unit "nm")
        x, y = x / 1000.0, y / 1000.0
        for key in ("xstep", "ystep"):
            if key in info["keys"]:
                info["keys"][key] = str(float(info["keys"][key].split()[0]) / 1000.0)
    grid = _grid(info, table.shape[0], x, y, path, first_line=skip + 1)

    # OIM writes phase 0 for the indexed points of a single-phase scan
    phase_index = phase_indices(col["phase"], phases, path, first_line=skip + 1,
                                zero_is_single_phase=True)
    if "ci" in col and vendor in ("tsl", "orix"):
        phase_index[col["ci"] == -1] = -1
    euler = np.degrees(np.column_stack([col["phi1"], col["phi"], col["phi2"]]))
    check_angles(euler, path, first_line=skip + 1, limit_deg=720.0 + 1e-3)  # 4 pi: not indexed
    quality = {k: v for k, v in col.items() if k not in ("phi1", "phi", "phi2", "x", "y", "phase")}

    meta = {"vendor": vendor, "columns": keys}
    star = [_number(info, k, path) for k in ("x-star", "y-star", "z-star")]
    if all(v is not None for v in star) and star[2] > 0:
        meta["pattern_centre"] = star
        meta["pattern_centre_convention"] = "tsl"
    wd = _number(info, "workingdistance", path)
    if wd:
        meta["working_distance"] = wd
    for key, name in (("operator", "operator"), ("sampleid", "sample_id"), ("scanid", "scan_id")):
        if info["keys"].get(key):
            meta[name] = info["keys"][key]
    return build_map(path, grid, grid.slot_to_record(), euler_deg=euler, phase_index=phase_index,
                     phases=phases, quality=quality, frame="tsl", metadata=meta)


# --------------------------------------------------------------------------- writing


def write_ang(path, omap: OrientationMap, *, overwrite=False) -> str:
    """Write an orientation map as an EDAX/TSL ``.ang`` file (see the module notes).

    Parameters
    ----------
    path : str or os.PathLike
    omap : OrientationMap
        Square or hexagonal grid; its Euler angles are written in the TSL frame.
    overwrite : bool
        Replace an existing file; without it an existing ``path`` is an error.

    Returns
    -------
    str
        The path written. The file is written as ``path.part`` and renamed when complete.

    Raises
    ------
    InputError
        ``path`` exists and ``overwrite`` is not set, or is a directory.
    """
    if not isinstance(omap, OrientationMap):
        raise ValueError(f"omap must be an OrientationMap, got {type(omap).__name__}")
    path = os.fspath(path)
    omap = omap.in_frame("tsl")
    grid = omap.grid
    keep = grid.in_grid().reshape(-1)
    indexed = omap.indexed.reshape(-1)[keep]
    euler = np.radians(omap.euler_deg.reshape(-1, 3)[keep])
    euler[~indexed] = 4 * np.pi
    sy, sx = grid.step if grid.step is not None else (1.0, 1.0)
    xy = grid.positions().reshape(-1, 2)[keep]
    phase = np.where(indexed, omap.phase.reshape(-1)[keep] + 1, 0)

    def column(name, fallback):
        values = omap.quality.get(name)
        out = (np.full(indexed.shape, fallback, dtype=np.float64) if values is None
               else np.nan_to_num(values.reshape(-1)[keep].astype(np.float64)))
        return out

    iq = column("iq", 0.0)
    ci = column("ci", 1.0)
    ci[~indexed] = -1.0
    signal = column("detector_signal", 0.0)
    fit = column("fit", 0.0)
    fit[~indexed] = 180.0

    columns = [euler[:, 0], euler[:, 1], euler[:, 2], xy[:, 0], xy[:, 1], iq, ci, phase, signal, fit]
    formats = ["%9.5f", "%9.5f", "%9.5f", "%12.5f", "%12.5f", "%.5f", "%.5f", "%d", "%.5f", "%.5f"]
    with writing(path, overwrite) as fh:
        fh.write(_header(omap, sx, sy))
        write_rows(fh, columns, formats)
    return path


def _header(omap: OrientationMap, sx, sy) -> str:
    meta = omap.metadata
    star = (meta.get("pattern_centre") if meta.get("pattern_centre_convention") == "tsl"
            else None) or (0.0, 0.0, 0.0)
    lines = ["TEM_PIXperUM          1.000000",
             f"x-star                {float(star[0]):.6f}",
             f"y-star                {float(star[1]):.6f}",
             f"z-star                {float(star[2]):.6f}",
             f"WorkingDistance       {float(meta.get('working_distance', 0.0)):.6f}",
             ""]
    # listed last to first: OIM Analysis 7 reads the phase blocks in reverse (as orix notes)
    for number, phase in reversed(list(enumerate(omap.phases, start=1))):
        name = _one_line(phase.name) or f"phase{number}"
        a, b, c, alpha, beta, gamma = phase.lattice
        lines += [f"Phase {number}",
                  f"MaterialName  \t{name}",
                  f"Formula     \t{_one_line(phase.formula) or name}",
                  "Info \t\t",
                  f"Symmetry              {tsl_symmetry_code(phase.laue)}",
                  f"LatticeConstants      {a:.3f} {b:.3f} {c:.3f}  {alpha:.3f}  {beta:.3f}  "
                  f"{gamma:.3f}",
                  "NumberFamilies        0",
                  ""]
    hexagonal = omap.grid.kind == "hexagonal"
    lines += [f"GRID: {'HexGrid' if hexagonal else 'SqrGrid'}",
              f"XSTEP: {float(sx):.6f}",
              f"YSTEP: {float(sy):.6f}",
              f"NCOLS_ODD: {omap.grid.cols}",
              f"NCOLS_EVEN: {omap.grid.cols - 1 if hexagonal else omap.grid.cols}",
              f"NROWS: {omap.grid.rows}",
              "",
              f"OPERATOR: \tebsdxc {__version__}",
              "",
              f"SAMPLEID: \t{_one_line(meta.get('sample_id', ''))}",
              "",
              f"SCANID: \t{_one_line(meta.get('scan_id', ''))}",
              ""]
    return "".join(f"# {line}".rstrip(" ") + "\n" for line in lines)


def _one_line(text) -> str:
    return " ".join(str(text).split())
