"""Per-point crystal orientations and phases of a scan: the record every orientation reader returns.

:class:`OrientationMap` holds what EBSD indexing software stores per scan point (Bunge Euler
angles, the phase, quality measures) on the scan's :class:`~ebsdxc.io.source.ScanGrid`, and
:class:`PhaseInfo` one phase of it. They come from :func:`ebsdxc.io.read_orientation_map`
(``.ang``, ``.ctf``, EDAX, Bruker and Oxford h5 files), from
:meth:`~ebsdxc.io.source.PatternSource.orientation_map` of the vendor scan readers, and go out
through :func:`ebsdxc.io.ang.write_ang` and :func:`ebsdxc.io.ctf.write_ctf`.

Orientations
    ``euler_deg`` holds Bunge angles ``(phi1, Phi, phi2)`` in degrees exactly as the file
    stores them (converted from radians where the file uses radians), which is what
    ``orix.io.load`` returns for the same file: the matrix ``g`` of
    ``orix.quaternion.Rotation.from_euler(radians(euler_deg)).to_matrix()`` (and of
    :func:`ebsdxc.crystal.euler_to_matrix`) takes sample to crystal coordinates. NaN where a
    point is not indexed and at the padding slots of a hexagonal grid.

Sample frames (``frame``)
    Each vendor refers its Euler angles to its own sample frame, and orix keeps them as they
    are (orix 0.15 applies no change of frame to .ang, .ctf or Bruker h5 angles): ``"tsl"``
    for EDAX/TSL (``.ang``, OIM h5), the frame kikuchipy, EMsoft and orix-written files use;
    ``"oxford"`` for Oxford Instruments (``.ctf``, H5OINA) and ``"bruker"`` for Bruker
    Esprit h5. kikuchipy's reference-frame tutorial brings Oxford and Bruker orientations to
    its own (TSL) frame with ``G_tsl = G_vendor * Rz(-90 deg)`` (orix notation), that is
    ``phi1_tsl = phi1_vendor + 90 deg`` with ``Phi, phi2`` unchanged (the 90 degrees EMsoft
    issue 155 adds to phi1 to turn Oxford angles into TSL ones). :meth:`OrientationMap.in_frame`
    applies it; the writers put each format's own frame in its files.

Crystal frames
    Also the file's: orix, EMsoft and :mod:`ebsdxc.crystal` put ``a1`` along x for hexagonal
    and trigonal phases, while the H5OINA specification puts Oxford's x perpendicular to b
    and c (along ``a*``, 30 degrees about c from ``a1``). Nothing here converts it, as orix
    does not; misorientation angles of ``6/mmm`` and ``6/m`` phases do not depend on it,
    those of ``-3m`` phases and crystal-frame tensors do.

Phases
    ``phase`` (rows, cols) int16 indexes ``phases`` (0-based), ``-1`` where a point is not
    indexed or is padding. :attr:`PhaseInfo.id` is the file's own number of the phase;
    :attr:`PhaseInfo.laue` its Laue group name (:data:`LAUE_GROUPS`, the names
    :func:`ebsdxc.crystal.laue_group` accepts), mapped from the file's symmetry code, Laue
    group number, point group or space group by :func:`laue_group_name`. ``io`` keeps its
    own table so that it imports nothing of the stages.

Quality
    ``quality`` maps names to (rows, cols) float32 maps (NaN at padding): ``iq``, ``ci``,
    ``fit``, ``detector_signal`` (``.ang``, EDAX h5); ``bands``, ``error``, ``mad`` (degrees),
    ``bc``, ``bs`` (``.ctf``, H5OINA, which adds ``pattern_quality``); ``mad``,
    ``radon_quality``, ... (Bruker). Values at points that are not indexed are kept.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import InputError
from .source import ScanGrid

__all__ = [
    "EULER_FRAMES",
    "LAUE_GROUPS",
    "OrientationMap",
    "PhaseInfo",
    "ctf_laue_number",
    "laue_group_name",
    "tsl_symmetry_code",
]

#: Laue group names, lowest symmetry first (those of :data:`ebsdxc.crystal.LAUE_GROUPS`).
LAUE_GROUPS = ("-1", "2/m", "mmm", "4/m", "4/mmm", "-3", "-3m", "6/m", "6/mmm", "m-3", "m-3m")

#: Sample frames Euler angles refer to (see the module notes).
EULER_FRAMES = ("tsl", "oxford", "bruker")

# phi1 of the TSL frame minus phi1 of each frame (kikuchipy: G_tsl = G_vendor * Rz(-90 deg))
_PHI1_TO_TSL = {"tsl": 0.0, "oxford": 90.0, "bruker": 90.0}

# EDAX/TSL .ang symmetry codes (OIM's "Symmetry" entry): 20 and 21 are monoclinic settings.
_TSL_CODES = {1: "-1", 2: "2/m", 20: "2/m", 21: "2/m", 22: "mmm", 4: "4/m", 42: "4/mmm",
              3: "-3", 32: "-3m", 6: "6/m", 62: "6/mmm", 23: "m-3", 43: "m-3m"}
_TSL_WRITE = {"-1": 1, "2/m": 2, "mmm": 22, "4/m": 4, "4/mmm": 42, "-3": 3, "-3m": 32,
              "6/m": 6, "6/mmm": 62, "m-3": 23, "m-3m": 43}

# Hermann-Mauguin point group names (and the settings vendors write) of each Laue group.
_POINT_GROUPS = {
    "-1": ("1", "-1"),
    "2/m": ("2", "m", "2/m", "121", "112", "211", "1m1", "11m", "m11", "12/m1", "112/m",
            "2/m11"),
    "mmm": ("222", "mm2", "2mm", "m2m", "mmm"),
    "4/m": ("4", "-4", "4/m"),
    "4/mmm": ("422", "4mm", "-42m", "-4m2", "4/mmm"),
    "-3": ("3", "-3"),
    "-3m": ("32", "321", "312", "3m", "3m1", "31m", "-3m", "-3m1", "-31m"),
    "6/m": ("6", "-6", "6/m"),
    "6/mmm": ("622", "6mm", "-6m2", "-62m", "6/mmm"),
    "m-3": ("23", "m3", "m-3"),
    "m-3m": ("432", "-43m", "m3m", "m-3m"),
}
_POINT_GROUP_LOOKUP = {pg: laue for laue, pgs in _POINT_GROUPS.items() for pg in pgs}

# Last space group number (International Tables) of each Laue group's range.
_SPACE_GROUP_ENDS = (2, 15, 74, 88, 142, 148, 167, 176, 194, 206, 230)


def laue_group_name(*, tsl_code=None, ctf_number=None, point_group=None, space_group=None) -> str:
    """The Laue group name (one of :data:`LAUE_GROUPS`) of a file's symmetry description.

    Give one of the keyword arguments; ``ValueError`` when it names no Laue group.

    Parameters
    ----------
    tsl_code : int, optional
        An EDAX/TSL symmetry code (43 cubic, 62 hexagonal, 42, 32, 22, 2, 20, 21, 1, ...).
    ctf_number : int, optional
        An Oxford Laue group number, 1 (``-1``) to 11 (``m-3m``), in :data:`LAUE_GROUPS` order.
    point_group : str, optional
        A Hermann-Mauguin point or Laue group name (``"m3m"``, ``"432"``, ``"6/mmm"``,
        ``"-3m1"``); text around it in square brackets, as EDAX writes ``"Cubic (Oh) [m3m]"``,
        is understood.
    space_group : int, optional
        An International Tables space group number, 1 to 230.
    """
    given = [v is not None for v in (tsl_code, ctf_number, point_group, space_group)]
    if sum(given) != 1:
        raise ValueError("give one of tsl_code, ctf_number, point_group or space_group")
    if tsl_code is not None:
        code = _whole(tsl_code)
        if code not in _TSL_CODES:
            raise ValueError(f"unknown EDAX/TSL symmetry code {tsl_code} (known: "
                             f"{', '.join(str(c) for c in sorted(_TSL_CODES))})")
        return _TSL_CODES[code]
    if ctf_number is not None:
        number = _whole(ctf_number)
        if number is None or not 1 <= number <= len(LAUE_GROUPS):
            raise ValueError(f"unknown Laue group number {ctf_number} (1 to {len(LAUE_GROUPS)})")
        return LAUE_GROUPS[number - 1]
    if space_group is not None:
        number = _whole(space_group)
        if number is None or not 1 <= number <= 230:
            raise ValueError(f"space group number {space_group} is not between 1 and 230")
        return LAUE_GROUPS[int(np.searchsorted(_SPACE_GROUP_ENDS, number))]
    text = str(point_group)
    if "[" in text and "]" in text:
        text = text[text.rindex("[") + 1:text.rindex("]")]
    key = text.strip().replace(" ", "").replace("\u0305", "").lower()
    if key not in _POINT_GROUP_LOOKUP:
        raise ValueError(f"unknown point group {point_group!r}")
    return _POINT_GROUP_LOOKUP[key]


def _whole(value) -> int | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if np.isfinite(number) and number.is_integer() else None


def tsl_symmetry_code(laue: str) -> int:
    """The EDAX/TSL symmetry code an ``.ang`` header writes for Laue group ``laue``."""
    return _TSL_WRITE[_check_laue(laue)]


def ctf_laue_number(laue: str) -> int:
    """The Oxford Laue group number (1..11) a ``.ctf`` phase line writes for ``laue``."""
    return LAUE_GROUPS.index(_check_laue(laue)) + 1


def _check_laue(laue) -> str:
    if laue not in LAUE_GROUPS:
        raise ValueError(f"laue must be one of {', '.join(LAUE_GROUPS)}, got {laue!r}")
    return laue


@dataclass(frozen=True)
class PhaseInfo:
    """One phase of an orientation map, as the file describes it.

    Attributes
    ----------
    id : int
        The file's number of the phase (``.ang``, ``.ctf``, h5 files: 1, 2, ...).
    name : str
        As the file says (``"Nickel"``, ``"Ni"``, ``"Iron fcc"``).
    laue : str
        Laue group name, one of :data:`LAUE_GROUPS`.
    lattice : tuple of 6 float
        ``(a, b, c)`` in angstrom and ``(alpha, beta, gamma)`` in degrees.
    formula : str
        Chemical formula when the file gives one.
    space_group : int
        International Tables number, 0 when the file does not say.
    """

    id: int
    name: str
    laue: str
    lattice: tuple = (1.0, 1.0, 1.0, 90.0, 90.0, 90.0)
    formula: str = ""
    space_group: int = 0

    def __post_init__(self):
        _check_laue(self.laue)
        lattice = tuple(float(v) for v in np.asarray(self.lattice, dtype=np.float64).reshape(-1))
        if len(lattice) != 6 or not all(np.isfinite(lattice)):
            raise ValueError(f"lattice must be 6 finite numbers (a, b, c, alpha, beta, gamma), "
                             f"got {self.lattice!r}")
        object.__setattr__(self, "lattice", lattice)
        object.__setattr__(self, "id", int(self.id))
        object.__setattr__(self, "space_group", int(self.space_group))


@dataclass(frozen=True, eq=False)
class OrientationMap:
    """Crystal orientation, phase and quality measures per scan point (see the module notes).

    Attributes
    ----------
    path : str
        The file it was read from (or will be written as).
    grid : ScanGrid
        Rows x cols slots, step (y, x) in micrometres, square or hexagonal.
    euler_deg : numpy.ndarray
        (rows, cols, 3) float64 Bunge angles in degrees in :attr:`frame`; NaN where the
        point is not indexed or is padding.
    phase : numpy.ndarray
        (rows, cols) int16 index into :attr:`phases`, -1 where not indexed or padding.
    phases : tuple of PhaseInfo
    quality : dict
        Name -> (rows, cols) float32 map.
    frame : str
        The sample frame of the Euler angles, one of :data:`EULER_FRAMES`.
    metadata : dict
        Other things the file says (pattern centre, working distance, operator, ...).
    """

    path: str
    grid: ScanGrid
    euler_deg: np.ndarray
    phase: np.ndarray
    phases: tuple
    quality: dict = field(default_factory=dict)
    frame: str = "tsl"
    metadata: dict = field(default_factory=dict)

    def __post_init__(self):
        shape = (self.grid.rows, self.grid.cols)
        euler = np.asarray(self.euler_deg, dtype=np.float64)
        if euler.shape != (*shape, 3):
            raise ValueError(f"euler_deg must have shape {(*shape, 3)} for a {shape[0]} x "
                             f"{shape[1]} grid, got {euler.shape}")
        phase = np.asarray(self.phase)
        if phase.shape != shape or phase.dtype.kind not in "iu":
            raise ValueError(f"phase must be an integer array of shape {shape}, got "
                             f"{phase.dtype} {phase.shape}")
        phases = tuple(self.phases)
        if not all(isinstance(p, PhaseInfo) for p in phases):
            raise ValueError("phases must be PhaseInfo records")
        if phase.size and (phase.min() < -1 or phase.max() >= len(phases)):
            raise ValueError(f"phase values must be -1 (not indexed) or 0..{len(phases) - 1} "
                             f"(indices into the {len(phases)} phases)")
        phase = phase.astype(np.int16, copy=False)
        indexed = phase >= 0
        if np.any(indexed & ~self.grid.in_grid()):
            raise ValueError("phase must be -1 at the padding slots of a hexagonal grid")
        if not np.isfinite(euler[indexed]).all():
            raise ValueError("euler_deg must be finite where a point is indexed (phase >= 0)")
        if not np.isnan(euler[~indexed]).all():
            raise ValueError("euler_deg must be NaN where a point is not indexed (phase -1)")
        if self.frame not in EULER_FRAMES:
            raise ValueError(f"frame must be one of {', '.join(EULER_FRAMES)}, got {self.frame!r}")
        quality = {}
        for name, values in dict(self.quality).items():
            values = np.asarray(values, dtype=np.float32)
            if values.shape != shape:
                raise ValueError(f"quality[{name!r}] must have shape {shape}, got {values.shape}")
            quality[str(name)] = values
        object.__setattr__(self, "path", os.fspath(self.path))
        object.__setattr__(self, "euler_deg", euler)
        object.__setattr__(self, "phase", phase)
        object.__setattr__(self, "phases", phases)
        object.__setattr__(self, "quality", quality)
        object.__setattr__(self, "metadata", dict(self.metadata))

    @property
    def indexed(self) -> np.ndarray:
        """(rows, cols) bool: points with an orientation (``phase >= 0``)."""
        return self.phase >= 0

    def pattern_quality(self) -> np.ndarray | None:
        """The map's image-quality-like measure, (rows, cols) float32, or ``None``.

        The first the map has of ``iq`` (EDAX image quality), ``bc`` (Oxford band contrast),
        ``pattern_quality`` (H5OINA) and ``radon_quality`` (Bruker): larger is a sharper
        pattern, for choosing reference points.
        """
        for name in ("iq", "bc", "pattern_quality", "radon_quality"):
            if name in self.quality:
                return self.quality[name]
        return None

    def in_frame(self, frame: str) -> OrientationMap:
        """The same orientations with Euler angles referred to sample frame ``frame``.

        Only ``phi1`` changes (see the module notes), and is wrapped to [0, 360).
        """
        if frame not in EULER_FRAMES:
            raise ValueError(f"frame must be one of {', '.join(EULER_FRAMES)}, got {frame!r}")
        if frame == self.frame:
            return self
        euler = self.euler_deg.copy()
        euler[..., 0] = (euler[..., 0] + _PHI1_TO_TSL[self.frame] - _PHI1_TO_TSL[frame]) % 360.0
        return replace(self, euler_deg=euler, frame=frame)

    def describe(self) -> dict:
        """A JSON-friendly summary (grid, phases with their point counts, quality names)."""
        counts = np.bincount(self.phase[self.indexed].astype(np.int64), minlength=len(self.phases))
        return {
            "path": self.path,
            "grid": {"rows": self.grid.rows, "cols": self.grid.cols, "step": self.grid.step,
                     "kind": self.grid.kind, "points": self.grid.n_points},
            "frame": self.frame,
            "indexed": int(counts.sum()),
            "phases": [{"id": p.id, "name": p.name, "laue": p.laue, "points": int(n)}
                       for p, n in zip(self.phases, counts)],
            "quality": sorted(self.quality),
        }


# --------------------------------------------------------------------------- shared by readers


def spread(values, records, fill=np.nan) -> np.ndarray:
    """Per-record ``values`` (n, ...) on the grid's slots (``records``: slot -> record or -1,
    flat); slots without a record, or whose record lies past ``values``, get ``fill``."""
    values = np.asarray(values)
    out = np.full((records.size, *values.shape[1:]), fill, dtype=np.result_type(values, fill))
    ok = (records >= 0) & (records < values.shape[0])
    out[ok] = values[records[ok]]
    return out


def check_angles(euler_deg, path, *, first_line: int, limit_deg: float) -> None:
    """Refuse Euler angles (n, 3) degrees that are not finite or beyond ``limit_deg`` in size.

    A text map keeps no checksum; a damaged digit that still parses (``98.4E540``) reads as
    infinity or a huge angle, which no vendor writes: the line is named.
    """
    bad = ~np.isfinite(euler_deg) | (np.abs(euler_deg) > limit_deg)
    if bad.any():
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise InputError(f"line {first_line + row}: Euler angles {euler_deg[row].tolist()} deg are "
                         f"not angles (finite, at most {limit_deg:g} deg); a damaged number?", path)


def build_map(path, grid: ScanGrid, records, *, euler_deg, phase_index, phases, quality,
              frame, metadata=None) -> OrientationMap:
    """An :class:`OrientationMap` from per-record arrays in the file's order.

    ``records`` maps flat slots to records (``-1`` for padding and points never stored);
    ``phase_index`` is per record (-1 not indexed). Records whose Euler angles are not finite
    are not indexed either (H5OINA stores NaN outside an irregular map's area).
    """
    euler = np.asarray(euler_deg, dtype=np.float64).reshape(-1, 3)
    phase_index = np.asarray(phase_index, dtype=np.int64).reshape(-1)
    phase_index = np.where(np.isfinite(euler).all(axis=1), phase_index, -1)
    euler = np.where((phase_index >= 0)[:, None], euler, np.nan)
    shape = (grid.rows, grid.cols)
    return OrientationMap(
        path=os.fspath(path), grid=grid,
        euler_deg=spread(euler, records).reshape(*shape, 3),
        phase=spread(phase_index, records, fill=-1).astype(np.int16).reshape(shape),
        phases=tuple(phases),
        quality={k: spread(np.asarray(v, dtype=np.float32), records).reshape(shape)
                 for k, v in quality.items()},
        frame=frame, metadata=metadata or {})


def phase_indices(numbers, phases, path, *, first_line=None, zero_is_single_phase=False) -> np.ndarray:
    """Per-record index into ``phases`` (-1: not indexed) from the file's phase numbers.

    0 and -1 mean not indexed unless declared (with ``zero_is_single_phase``, 0 is the only
    phase of a single-phase file, as EDAX writes it). A number that is not whole or not
    declared is an InputError naming the line (counted from ``first_line``) or the point.
    """
    values = np.asarray(numbers, dtype=np.float64).reshape(-1)
    where = (lambda i: f"line {first_line + i}") if first_line is not None else (lambda i: f"point {i}")
    whole = np.rint(values)
    if not np.array_equal(whole, values):
        i = int(np.flatnonzero(whole != values)[0])
        raise InputError(f"{where(i)}: phase {values[i]:g} is not a whole number", path)
    whole = whole.astype(np.int64)
    out = np.full(whole.shape, -1, dtype=np.int64)
    for index, phase in enumerate(phases):
        out[whole == phase.id] = index
    if zero_is_single_phase and len(phases) == 1 and phases[0].id != 0:
        out[whole == 0] = 0
    unknown = (out < 0) & (whole != 0) & (whole != -1)
    if unknown.any():
        i = int(np.flatnonzero(unknown)[0])
        declared = ", ".join(str(p.id) for p in phases) or "none"
        raise InputError(f"{where(i)}: phase {whole[i]} is not declared in the header (its "
                         f"phases: {declared})", path)
    return out


def quality_name(name: str) -> str:
    """A file's column or dataset name as a quality key: lower case, words joined by ``_``."""
    return "_".join(str(name).replace("-", " ").split()).lower()


def check_positions(x, y, grid: ScanGrid, path, *, first_line: int, header: str) -> None:
    """InputError when the points' stored ``x``, ``y`` (acquisition order) do not sit where the
    header's ``grid`` puts them, naming the first one (its file line counted from
    ``first_line``); files whose positions are all equal (not stored) are let through."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.size == 0 or (np.ptp(x) == 0 and np.ptp(y) == 0) or grid.step is None:
        return
    pos = grid.positions().reshape(-1, 2)[grid.in_grid().reshape(-1)][:x.size]
    sy, sx = grid.step
    # positions are printed with a few decimals; a tenth of a step tells rows and columns apart
    tol_x, tol_y = 0.1 * abs(sx) + 1e-4, 0.1 * abs(sy) + 1e-4
    bad = np.flatnonzero((np.abs(x - x[0] - pos[:, 0]) > tol_x) | (np.abs(y - y[0] - pos[:, 1]) > tol_y))
    if bad.size:
        i = int(bad[0])
        raise InputError(f"line {first_line + i}: point {i} sits at x = {x[i]:g}, y = {y[i]:g} but "
                         f"the header's grid ({header}) puts it at x = {x[0] + pos[i, 0]:g}, "
                         f"y = {y[0] + pos[i, 1]:g}; the header contradicts the points present", path)


def read_table(path, *, skip_lines: int, what: str) -> np.ndarray:
    """The numbers after ``skip_lines`` header lines of a text file, (n, columns) float64.

    Vectorised (numpy's C parser); a line that does not parse, or holds another number of
    values than the first one, is an InputError naming its line.
    """
    import warnings

    try:
        with warnings.catch_warnings():
            # numpy only warns on an input without numbers; that is an error here
            warnings.simplefilter("error")
            table = np.loadtxt(path, dtype=np.float64, skiprows=skip_lines, ndmin=2, comments=None)
    except (ValueError, UserWarning):
        raise InputError(_first_bad_line(path, skip_lines, what), path) from None
    if table.shape[0] == 0:
        raise InputError(f"holds no {what} after its header (a truncated file?)", path)
    return table


def _first_bad_line(path, skip_lines, what) -> str:
    with open(path, encoding="latin-1") as fh:
        width = None
        for number, line in enumerate(fh, start=1):
            if number <= skip_lines or not line.strip():
                continue
            parts = line.split()
            try:
                [float(p) for p in parts]
            except ValueError:
                return f"line {number} does not parse as {what}: {line.strip()[:80]!r}"
            if width is None:
                width = len(parts)
            elif len(parts) != width:
                return (f"line {number} holds {len(parts)} values where the lines before hold "
                        f"{width} (a truncated or damaged file?)")
    return f"holds no {what} after its header (a truncated file?)"


# --------------------------------------------------------------------------- writing


def check_writable(path, overwrite: bool) -> str:
    """``path`` as text; InputError when it exists and ``overwrite`` is not set."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise InputError("is a directory, not a file", path)
    if os.path.exists(path) and not overwrite:
        raise InputError("already exists; pass overwrite=True to replace it", path)
    return path


@contextlib.contextmanager
def writing(path, overwrite: bool):
    """Open ``path.part`` for text writing and rename it to ``path`` when the block succeeds,
    so that a failed or killed export never leaves a half-written file under the real name."""
    path = check_writable(path, overwrite)
    tmp = f"{path}.part"
    try:
        fh = open(tmp, "w", encoding="utf-8", newline="\n")  # noqa: SIM115 - closed below
    except OSError as e:
        raise InputError(f"cannot be written ({e.strerror or e})", path) from None
    try:
        with fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def write_rows(fh, columns, formats, *, chunk: int = 65536) -> None:
    """Write data lines of equal-length ``columns`` printed with ``formats`` (one per column,
    or one format string for the whole line) to text file ``fh``, ``chunk`` lines at a time
    so that a scan of millions of points never sits in memory as text."""
    fmt = (formats if isinstance(formats, str) else " ".join(formats)) + "\n"
    table = np.column_stack([np.asarray(c, dtype=np.float64) for c in columns])
    for start in range(0, table.shape[0], chunk):
        fh.write("".join(fmt % tuple(row) for row in table[start:start + chunk].tolist()))
