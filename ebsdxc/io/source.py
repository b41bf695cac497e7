"""The interface every scan reader returns."""

from __future__ import annotations

import functools
import os
import struct
import warnings
import zlib
from dataclasses import dataclass

import numpy as np

from ..errors import InputError

#: Scan grid kinds. ``hexagonal`` is EDAX/TSL's: even rows (0, 2, ...) hold ``cols``
#: points, odd rows hold ``cols - 1`` points shifted right by half a step.
GRID_KINDS = ("square", "hexagonal")


@dataclass(frozen=True)
class ScanGrid:
    """Where the patterns of a scan sit on the sample.

    ``rows`` x ``cols`` slots in row-major order (a 1-D scan has ``rows == 1``); the flat
    scan index of slot (r, c) is ``r * cols + c``. ``step`` is (step_y, step_x) in
    micrometres when the file says, else ``None``.

    On a ``hexagonal`` grid the last slot of every odd row is not a scan point (see
    :data:`GRID_KINDS`): readers leave it unread, the runner flags it, and
    :meth:`positions` puts odd rows half a step to the right.
    """

    rows: int
    cols: int
    step: tuple[float, float] | None = None
    kind: str = "square"

    def __post_init__(self):
        if self.kind not in GRID_KINDS:
            raise ValueError(f"grid kind must be one of {', '.join(GRID_KINDS)}, got {self.kind!r}")
        if self.rows < 1 or self.cols < 1:
            raise ValueError(f"a scan grid needs at least one row and column, got {self.rows} x {self.cols}")
        if self.kind == "hexagonal" and self.rows > 1 and self.cols < 2:
            raise ValueError("a hexagonal grid of several rows needs at least 2 columns")

    @property
    def size(self) -> int:
        """Number of slots, ``rows * cols`` (scan points plus hexagonal padding slots)."""
        return self.rows * self.cols

    @property
    def n_points(self) -> int:
        """Number of scan points (fewer than :attr:`size` on a hexagonal grid)."""
        if self.kind == "hexagonal":
            return self.size - self.rows // 2
        return self.size

    def in_grid(self) -> np.ndarray:
        """(rows, cols) bool: which slots are scan points of the grid."""
        mask = np.ones((self.rows, self.cols), dtype=bool)
        if self.kind == "hexagonal":
            mask[1::2, -1] = False
        return mask

    def slot_to_record(self) -> np.ndarray:
        """(rows * cols,) int64: the point's position in acquisition order, or -1.

        Vendors store the points of a scan one after another in acquisition order, without
        the padding slots of a hexagonal grid; this maps a flat slot index to that order.
        """
        mask = self.in_grid().reshape(-1)
        out = np.full(mask.size, -1, dtype=np.int64)
        out[mask] = np.arange(int(mask.sum()))
        return out

    def positions(self) -> np.ndarray:
        """(rows, cols, 2) [x, y] of every slot in micrometres (pixels of steps when no step
        is known); NaN where a slot is not a scan point."""
        sy, sx = self.step if self.step is not None else (1.0, 1.0)
        r, c = np.mgrid[0:self.rows, 0:self.cols].astype(np.float64)
        if self.kind == "hexagonal":
            c += 0.5 * (r % 2)
        out = np.stack([c * sx, r * sy], axis=-1)
        out[~self.in_grid()] = np.nan
        return out


#: What reading a damaged file raises below ebsdxc's own checks: h5py raises OSError,
#: RuntimeError and KeyError for broken object headers, heaps and chunks; zlib and struct
#: raise their own errors for broken compressed data and short headers, a damaged name
#: does not decode; a corrupt size
#: field can ask for more memory than exists.
READ_ERRORS = (OSError, RuntimeError, KeyError, EOFError, zlib.error, struct.error,
               MemoryError, OverflowError, UnicodeDecodeError)


def damaged(path, exc: BaseException) -> InputError:
    """``exc``, raised while reading file ``path``, as a one-line :class:`InputError`.

    The library's own words are kept (they say what is broken: "bad heap free list",
    "incorrect data check"), on one line and without a repeated path.
    """
    path = os.fspath(path)
    detail = str(exc).strip() or type(exc).__name__
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        detail = str(exc.args[0])  # KeyError quotes its message
    detail = detail.replace(f"{path}: ", "").replace(path, "the file")
    detail = " ".join(detail.split())
    if len(detail) > 300:
        detail = detail[:297] + "..."
    return InputError(f"is damaged or truncated: it could not be read ({detail})", path)


def guard_reads(method, *, ranged=True):
    """Decorate a reader method so that :data:`READ_ERRORS` become :func:`damaged` errors.

    The method's first argument must have a ``path``; :class:`InputError` passes through
    unchanged, and so do, for methods given a range (``ranged``), the ``IndexError``/``ValueError``
    a caller's bad range or buffer raises. A method without arguments (an orientation map,
    pattern centres) has no caller's mistake to pass on: its ``ValueError``/``TypeError`` (h5py
    meeting a damaged datatype) are the file's.
    """
    errors = READ_ERRORS if ranged else (*READ_ERRORS, ValueError, TypeError)

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except InputError:
            raise
        except errors as exc:
            raise damaged(self.path, exc) from exc

    guarded.__guarded__ = True
    return guarded


def consecutive_runs(keys, ok, step=1) -> list[tuple[int, int]]:
    """``(a, b)`` runs of neighbouring slots with ``ok`` whose ``keys`` (record numbers, byte
    offsets) advance by ``step`` from one slot to the next: what one read can fetch."""
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return []
    k = np.asarray(keys)[idx]
    breaks = np.flatnonzero((np.diff(k) != step) | (np.diff(idx) != 1)) + 1
    return [(int(idx[a]), int(idx[b - 1]) + 1) for a, b in zip(np.r_[0, breaks], np.r_[breaks, idx.size])]


def grid_kind(text) -> str:
    """A vendor's grid-type text ("SqrGrid", "HexGrid", "square", "hexagonal", ...) as a
    :data:`GRID_KINDS` name; ``ValueError`` for anything else."""
    key = str(text).strip().lower().replace("_", "").replace(" ", "")
    if key in ("square", "sqrgrid", "sqr", "rectangular", ""):
        return "square"
    if key in ("hexagonal", "hexgrid", "hex"):
        return "hexagonal"
    raise ValueError(f"unknown scan grid type {text!r} (square or hexagonal)")


def parse_grid_shape(value) -> tuple[int, int] | None:
    """``"20x30"``, ``"20,30"``, ``(20, 30)`` -> (rows, cols); ``None`` passes through."""
    if value is None:
        return None
    if isinstance(value, str):
        parts = [p for p in value.lower().replace("x", ",").replace(" ", ",").split(",") if p]
    else:
        parts = list(value)
    try:
        rows, cols = (int(p) for p in parts)
    except (TypeError, ValueError):
        raise ValueError(f"a scan grid is ROWSxCOLS (e.g. 20x30), got {value!r}") from None
    if rows < 1 or cols < 1:
        raise ValueError(f"a scan grid needs at least one row and column, got {rows} x {cols}")
    return rows, cols


def choose_grid(file_grid: ScanGrid | None, grid_shape, n_stored: int, path, *,
                step=None, kind="square") -> ScanGrid:
    """The scan grid from the file's header and the user's ``grid_shape`` (``--grid``).

    ``file_grid`` is what the file says (``None`` when it says nothing). A ``grid_shape``
    that contradicts it is an error; without either, the ``n_stored`` patterns form one row.
    A user's grid must hold at least the stored patterns (fewer points means data would be
    dropped) and is an error; more is read as an interrupted scan whose missing points are
    flagged, with a warning naming the file, since a mistyped grid looks the same.
    """
    from ..errors import InputError

    try:
        shape = parse_grid_shape(grid_shape)
    except ValueError as e:
        raise InputError(str(e), path) from None
    if file_grid is not None:
        if shape is not None and shape != (file_grid.rows, file_grid.cols):
            raise InputError(f"grid_shape {shape[0]}x{shape[1]} contradicts the file's own grid of "
                             f"{file_grid.rows} x {file_grid.cols} points", path)
        return file_grid
    if shape is None:
        return ScanGrid(1, max(int(n_stored), 1), step=step, kind="square")
    grid = ScanGrid(*shape, step=step, kind=kind)
    if grid.n_points < n_stored:
        raise InputError(f"grid_shape {shape[0]}x{shape[1]} has {grid.n_points} points but the file "
                         f"holds {n_stored} patterns; the grid must hold every pattern", path)
    if grid.n_points > n_stored:
        # an interrupted scan is read this way on purpose, a mistyped --grid by accident: say it
        warnings.warn(f"{os.fspath(path)}: grid_shape {shape[0]}x{shape[1]} has {grid.n_points} points "
                      f"but the file holds {n_stored} patterns; the last {grid.n_points - n_stored} "
                      "points are read as missing (an interrupted scan)", stacklevel=3)
    return grid


def header_grid(rows, cols, grid_shape, n_stored: int, path, *, step=None, kind="square") -> ScanGrid:
    """:func:`choose_grid` for a vendor header's ``rows`` x ``cols`` (``None``: the header has no
    grid); a header grid that cannot be (zero rows, say) is an error naming the file."""
    from ..errors import InputError

    if rows is None or cols is None:
        return choose_grid(None, grid_shape, n_stored, path, step=step, kind=kind)
    try:
        said = ScanGrid(rows, cols, step=step, kind=kind)
    except ValueError as e:
        raise InputError(f"header: {e}", path) from None
    return choose_grid(said, grid_shape, n_stored, path)


#: Reader methods given a range or window by the caller: a bad one is the caller's error.
_RANGED = ("read_into", "read_records", "read", "read_window")


class PatternSource:
    """A lazily read stack of patterns.

    Subclasses implement :meth:`read_into`; everything else is shared. Patterns are
    addressed by a flat scan index ``i = row * cols + col``. Nothing is read on
    construction beyond the file's metadata, so memory stays bounded by the caller's
    batch size whatever the scan size.

    Attributes
    ----------
    path : str
        The file the patterns come from.
    format : str
        Registered name of the reader (``"hdf5"``, ``"h5ebsd"``, ...).
    grid : ScanGrid
    pattern_shape : (int, int)
        (H, W) of one pattern.
    dtype : numpy.dtype
        Dtype of the stored patterns (uint8, uint16, float32, float64, ...).
    metadata : dict
        Format-specific extras, JSON-serialisable. Keys every reader uses the same way
        (where the file has them): ``pattern_centre`` [x, y, z] (first or mean point) with
        ``pattern_centre_convention`` (a name :func:`ebsdxc.geometry.canonical_convention`
        knows), ``euler_angles`` [phi1, Phi, phi2] Bunge degrees of the first point,
        ``sample_tilt`` and ``detector_tilt`` (degrees), ``detector_pixel_size`` (um),
        ``binning``, ``dataset`` (where the patterns sit in the file), ``n_stored`` (patterns
        actually in the file when fewer than the grid), ``static_background`` (where the
        vendor's background sits), ``header`` (other scalars from the file's header).
    present : numpy.ndarray or None
        (rows, cols) bool: slots that hold a stored pattern. ``None`` means all of them.
        False for the padding slots of a hexagonal grid, for points an interrupted scan
        never stored, and for points a vendor marks as not acquired; those read as zeros
        and the runner flags them ``MISSING_PATTERN`` instead of processing them.
    """

    format: str = "?"

    # Every method that touches the file turns what a damaged file raises into one
    # InputError naming it, in every reader (those registered by users too), so that no
    # reader has to remember it; see guard_reads.
    _GUARDED = ("read_into", "read_records", "read", "read_window", "orientation_map", "static_background",
                "pattern_centres", "orientations")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in cls._GUARDED:
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "__guarded__", False):
                setattr(cls, name, guard_reads(method, ranged=name in _RANGED))

    def __init__(self, path, *, grid: ScanGrid, pattern_shape, dtype, metadata=None):
        self.path = os.fspath(path)
        self.grid = grid
        self.pattern_shape = (int(pattern_shape[0]), int(pattern_shape[1]))
        self.dtype = np.dtype(dtype)
        self.metadata = dict(metadata or {})
        self.present = None
        self._records = None

    def set_present(self, present) -> None:
        """Set :attr:`present` from a flat or (rows, cols) bool array (``None``: all present)."""
        if present is None:
            self.present = None
            return
        present = np.asarray(present, dtype=bool).reshape(self.grid.rows, self.grid.cols)
        self.present = None if present.all() else present

    def use_records(self, n_stored: int | None = None) -> None:
        """Declare that the file stores points one after another in acquisition order.

        Slot ``i`` of the grid then holds record ``grid.slot_to_record()[i]``; the padding
        slots of a hexagonal grid and records at or past ``n_stored`` (an interrupted scan)
        are not present. Readers that call this implement :meth:`read_records` and get
        :meth:`read_into` for free.
        """
        rec = self.grid.slot_to_record()
        if n_stored is not None:
            rec[rec >= int(n_stored)] = -1
        self._records = rec
        self.set_present(rec >= 0)

    def read_records(self, start: int, stop: int, out: np.ndarray) -> None:
        """Read stored records ``start:stop`` (acquisition order) into ``out`` in place."""
        raise NotImplementedError

    def byte_pieces(self, start: int, stop: int, split: int):
        """How positioned reads of :attr:`path` fill patterns ``start:stop``, or ``None``.

        Returns (m, 3) int64 rows [byte offset in a C-contiguous (stop - start, H, W) buffer of
        :attr:`dtype`, file offset (-1: zeros), bytes], none longer than ``split``: what a
        reader in another process (:mod:`ebsdxc.run.device_readers`) needs to fill the buffer
        without this object. ``None`` (the default) where the storage needs decoding.
        """
        return None

    def _check_range(self, start, stop, out):
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= self.n_patterns:
            raise IndexError(f"pattern range {start}:{stop} outside 0:{self.n_patterns} of {self.path}")
        want = (stop - start, *self.pattern_shape)
        if tuple(out.shape) != want:
            raise ValueError(f"out has shape {tuple(out.shape)}, expected {want}")
        if not out.flags.writeable:
            raise ValueError("out is read-only")
        return start, stop

    def _read_slots(self, start, stop, out):
        # Slots map to records in runs of consecutive records (a whole square scan is one
        # run; a hexagonal row ends one): one read per run, zeros where nothing is stored.
        rec = self._records[start:stop]
        ok = rec >= 0
        if not ok.all():
            out[~ok] = 0
        for a, b in consecutive_runs(rec, ok):
            self.read_records(int(rec[a]), int(rec[b - 1]) + 1, out[a:b])

    def pattern_centres(self) -> np.ndarray | None:
        """Projection centre per slot, (rows, cols, 3) in ``metadata["pattern_centre_convention"]``,
        or ``None`` when the file stores none per point."""
        return None

    def orientations(self) -> np.ndarray | None:
        """Crystal orientation per slot, (rows, cols, 3) Bunge Euler angles in degrees, or ``None``."""
        return None

    def orientation_map(self):
        """What the file stores of the scan's indexing, or ``None``.

        Returns
        -------
        ebsdxc.io.orientation_map.OrientationMap or None
            Euler angles, phases and quality measures per slot of :attr:`grid`, as the
            vendor stored them (see :mod:`ebsdxc.io.orientation_map`); ``None`` for files
            without them. Read on each call.
        """
        return None

    def static_background(self) -> np.ndarray | None:
        """The static background pattern the vendor stored with the scan, (H, W), or ``None``."""
        return None

    @property
    def n_patterns(self) -> int:
        return self.grid.size

    @property
    def nbytes_per_pattern(self) -> int:
        return self.pattern_shape[0] * self.pattern_shape[1] * self.dtype.itemsize

    def read(self, start: int, stop: int) -> np.ndarray:
        """Patterns ``start:stop`` (flat scan indices) as a new (n, H, W) array."""
        out = np.empty((stop - start, *self.pattern_shape), dtype=self.dtype)
        self.read_into(start, stop, out)
        return out

    def read_into(self, start: int, stop: int, out: np.ndarray) -> None:
        """Read patterns ``start:stop`` into ``out`` ((stop-start, H, W), source dtype).

        ``out`` may be a pinned host buffer; readers must fill it in place. Slots that are
        not :attr:`present` read as zeros.
        """
        if getattr(self, "_records", None) is None:
            raise NotImplementedError
        start, stop = self._check_range(start, stop, out)
        if start < stop:
            self._read_slots(start, stop, out)

    def read_window(self, index: int, rows, cols) -> np.ndarray:
        """Pixels ``rows`` = (r0, r1), ``cols`` = (c0, c1) of pattern ``index`` (flat scan index)
        as a new (r1 - r0, c1 - c0) array in the source dtype; zeros for a slot that is not
        :attr:`present`.

        Images larger than memory are read this way, window by window (tiled DIC). This
        implementation reads the whole pattern; readers whose files allow it (tiled or striped
        TIFF, HDF5) read only what holds the window.
        """
        r0, r1, c0, c1 = self._check_window(index, rows, cols)
        return self.read(index, index + 1)[0, r0:r1, c0:c1].copy()

    def _check_window(self, index, rows, cols):
        index = int(index)
        if not 0 <= index < self.n_patterns:
            raise IndexError(f"pattern {index} outside 0:{self.n_patterns} of {self.path}")
        (r0, r1), (c0, c1) = ((int(a), int(b)) for a, b in (rows, cols))
        h, w = self.pattern_shape
        if not (0 <= r0 < r1 <= h and 0 <= c0 < c1 <= w):
            raise ValueError(f"window rows {r0}:{r1}, cols {c0}:{c1} outside the {w}x{h} px pattern")
        return r0, r1, c0, c1

    def _record_of(self, index: int) -> int:
        """The stored record of slot ``index`` (-1: none), for readers that :meth:`use_records`."""
        return int(self._records[int(index)])

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def describe(self) -> dict:
        """What ``ebsdxc info`` prints about the scan."""
        return {
            "path": self.path,
            "format": self.format,
            "grid": {"rows": self.grid.rows, "cols": self.grid.cols,
                     "step": self.grid.step, "kind": self.grid.kind,
                     "points": self.grid.n_points},
            **({"missing_points": int(self.grid.n_points - self.present[self.grid.in_grid()].sum())}
               if self.present is not None else {}),
            "static_background": self.static_background() is not None,
            "pattern_shape": list(self.pattern_shape),
            "dtype": self.dtype.name,
            "n_patterns": self.n_patterns,
            **({"metadata": self.metadata} if self.metadata else {}),
        }


for _name in PatternSource._GUARDED:  # the shared implementations, which subclasses inherit
    setattr(PatternSource, _name, guard_reads(getattr(PatternSource, _name), ranged=_name in _RANGED))
del _name


class ArraySource(PatternSource):
    """Patterns already in memory (tests, notebooks, DIC frames built in Python)."""

    format = "array"

    def __init__(self, patterns, *, path="<array>", grid: ScanGrid | None = None):
        patterns = np.asarray(patterns)
        if patterns.ndim == 3:
            grid = grid or ScanGrid(1, patterns.shape[0])
            self._data = patterns
        elif patterns.ndim == 4:
            grid = grid or ScanGrid(patterns.shape[0], patterns.shape[1])
            self._data = patterns.reshape(-1, *patterns.shape[2:])
        else:
            raise InputError(
                f"patterns must be (n, H, W) or (rows, cols, H, W), got shape {patterns.shape}", path)
        super().__init__(path, grid=grid, pattern_shape=self._data.shape[1:], dtype=self._data.dtype)

    def read_into(self, start, stop, out):
        out[...] = self._data[start:stop]

