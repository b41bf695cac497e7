"""EDAX/TSL binary pattern files, ``.up1`` (8-bit) and ``.up2`` (16-bit).

Layout, as found in the files (all numbers little-endian)::

    version 1 (16-byte header)
        uint32   version             1
        uint32   width, height       of one pattern, px
        uint32   data offset         byte where the patterns start (16)
    version 3 and later (42-byte header): the above, then
        uint8    extra patterns      1: hexagonal rows are padded, see below
        uint32   cols, rows          the scan grid
        uint8    hex flag            1: hexagonal grid
        float64  step x, step y      um
    then the patterns, one after another in acquisition order, each ``height x width``
    pixels row by row, uint8 (``.up1``) or uint16 (``.up2``).

Version 2 has not been seen documented anywhere and is refused, as kikuchipy and
PyEBSDIndex do.

Bit depth: the header does not say; the extension does (``.up1`` 8-bit, ``.up2`` 16-bit),
as for EDAX's own software. A file forced to this reader under another name gets the
bit depth its header's grid fits exactly, or an error. A version >= 3 file whose size
exactly fits the other bit depth is refused with a message saying so (a renamed file).

Grid: version 1 stores none; the patterns form one row unless ``grid_shape`` is given.
Version 3 gives ``rows x cols``. On a hexagonal grid ``cols`` counts the points of the
even rows (0, 2, ...; EDAX's ``NCOLS_ODD``) and odd rows hold one point fewer, as in
:class:`ebsdxc.io.source.ScanGrid`. With the ``extra patterns`` byte 0 the file stores
only the scan points; with 1 every odd row is padded to ``cols`` records with one dummy
pattern at its end (the reading of NRL's ``read_up2.pro`` by the author of PyEBSDIndex).
If the file size fits exactly the other of these two layouts and not the one the byte
says, the size decides (recorded as ``metadata["hex_rows_padded"]``). kikuchipy reads
hexagonal files as one row of every stored record, dummy patterns included.

Size checks (version 3): fewer bytes than the grid needs is an interrupted scan: a
warning, the points not stored (and a partial last pattern) are not ``present`` and read
as zeros. More bytes is accepted when the surplus is whole patterns (they are ignored,
with a warning; kikuchipy's sample ``.up2`` has one); any other surplus means the header
or bit depth is wrong and is refused. Version 1 has as many patterns as fit; a partial
last pattern is ignored with a warning.

Reading is lazy: :meth:`EDAXBinarySource.read_records` reads a run of consecutive
records with one ``pread`` straight into the caller's buffer.
"""

from __future__ import annotations

import builtins
import math
import os
import struct
import threading
import warnings

import numpy as np

from ..errors import InputError
from .source import PatternSource, ScanGrid, choose_grid

NAME = "edax_binary"
DESCRIPTION = "EDAX/TSL binary patterns (.up1 8-bit, .up2 16-bit; versions 1 and 3+)"

#: Pattern dtype per extension: EDAX's own convention, the header does not say.
EXTENSION_DTYPES = {".up1": np.dtype("<u1"), ".up2": np.dtype("<u2")}

_HEAD_V1 = struct.Struct("<4I")        # version, width, height, data offset
_HEAD_V3 = struct.Struct("<4IB2IB2d")  # ... extra patterns, cols, rows, hex flag, step x, y
# Headers with a version above this are not claimed: no such files are known, and a
# small bound keeps random files from looking like one.
_MAX_VERSION = 255
_MAX_PATTERN_SIDE = 1 << 16

# --------------------------------------------------------------------------- raw reads

_PREADV = hasattr(os, "preadv")
_SEEK_LOCK = threading.Lock()  # only for platforms without pread (Windows)


def pread_into(fd: int, buf, offset: int) -> int:
    """Fill ``buf`` (a C-contiguous writable buffer) from byte ``offset`` of file ``fd``.

    One system call for the whole buffer where the OS allows it, with no intermediate
    copy; safe to call from several threads at once. Returns the number of bytes read,
    fewer than ``len(buf)`` only at the end of the file.
    """
    view = memoryview(buf).cast("B")
    done = 0
    while done < len(view):
        if _PREADV:
            n = os.preadv(fd, [view[done:]], offset + done)
        else:
            with _SEEK_LOCK:
                os.lseek(fd, offset + done, os.SEEK_SET)
                data = os.read(fd, len(view) - done)
            n = len(data)
            view[done:done + n] = data
        if n == 0:
            break
        done += n
    return done


class RawFile:
    """A read-only OS file descriptor opened on first use; pickles as its path only."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._fd = None

    def fileno(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
            except OSError as exc:
                raise InputError(f"could not be opened ({exc.strerror})", self.path) from exc
        return self._fd

    def read_into(self, buf, offset: int) -> None:
        """Fill ``buf`` from ``offset``; the file ending first is an :class:`InputError`."""
        got = pread_into(self.fileno(), buf, offset)
        want = memoryview(buf).nbytes
        if got < want:
            raise InputError(f"ended at byte {offset + got} while reading {want} bytes from "
                             f"byte {offset} (did it change since it was opened?)", self.path)

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None

    def __getstate__(self):
        return {"path": self.path, "_fd": None}

    def __del__(self):
        try:  # noqa: SIM105 - no contextlib at interpreter shutdown, when module globals may be gone
            self.close()
        except (OSError, AttributeError, TypeError):  # at interpreter shutdown: nothing to do
            pass


# --------------------------------------------------------------------------- header


def _read_head(path) -> tuple[dict, int] | None:
    """The header fields and the file size, or ``None`` when too short or unreadable."""
    try:
        size = os.path.getsize(path)
        with builtins.open(path, "rb") as fh:
            raw = fh.read(_HEAD_V3.size)
    except OSError:
        return None
    if len(raw) < _HEAD_V1.size:
        return None
    version, width, height, offset = _HEAD_V1.unpack_from(raw)
    head = {"version": version, "width": width, "height": height, "data_offset": offset}
    if version >= 2 and len(raw) == _HEAD_V3.size:
        _, _, _, _, extra, cols, rows, hexflag, step_x, step_y = _HEAD_V3.unpack(raw)
        head.update(extra_patterns=extra, cols=cols, rows=rows, hex_flag=hexflag,
                    step_x=step_x, step_y=step_y)
    return head, size


def _plausible(head: dict, size: int) -> bool:
    v = head["version"]
    if not 1 <= v <= _MAX_VERSION:
        return False
    if not (1 <= head["width"] <= _MAX_PATTERN_SIDE and 1 <= head["height"] <= _MAX_PATTERN_SIDE):
        return False
    header_size = _HEAD_V1.size if v == 1 else _HEAD_V3.size
    if not header_size <= head["data_offset"] <= size:
        return False
    if v >= 3:
        return "cols" in head and head["hex_flag"] in (0, 1)
    return True


def detect(path) -> bool:
    """Whether ``path`` is an EDAX ``.up1``/``.up2`` file.

    The header must be plausible (a version from 1 to 255, pattern sides from 1 to 65536
    px, a data offset past the header and inside the file, a hex flag of 0 or 1) and the
    extension ``.up1`` or ``.up2``, which alone says the bit depth. Whether the size fits
    is checked by :func:`open`, which says what is wrong.
    """
    if os.path.splitext(os.fspath(path))[1].lower() not in EXTENSION_DTYPES:
        return False
    found = _read_head(path)
    return found is not None and _plausible(*found)


# --------------------------------------------------------------------------- source


class EDAXBinarySource(PatternSource):
    """Patterns of an EDAX ``.up1``/``.up2`` file, read lazily (see module notes).

    Parameters
    ----------
    path : str or os.PathLike
    grid : ScanGrid
    pattern_shape : (int, int)
    dtype : numpy.dtype
        ``<u1`` or ``<u2``.
    data_offset : int
        Byte where record 0 starts.
    n_stored : int
        Whole records in the file that belong to the grid.
    padded : bool
        The file stores a dummy record in the last slot of every odd row of a hexagonal
        grid, so record ``i`` is slot ``i``; otherwise records are the scan points in
        acquisition order.
    metadata : dict, optional

    Notes
    -----
    The source can be pickled: the file descriptor is not, it is reopened on first use.
    """

    format = NAME

    def __init__(self, path, *, grid, pattern_shape, dtype, data_offset, n_stored,
                 padded=False, metadata=None):
        super().__init__(path, grid=grid, pattern_shape=pattern_shape, dtype=dtype,
                         metadata=metadata)
        self._file = RawFile(self.path)
        self._data_offset = int(data_offset)
        if padded:
            # Record i is slot i, dummies included; the base class's mapping skips the
            # padding slots, which this layout stores.
            rec = np.arange(grid.size, dtype=np.int64)
            rec[~grid.in_grid().reshape(-1) | (rec >= n_stored)] = -1
            self._records = rec
            self.set_present(rec >= 0)
        else:
            self.use_records(n_stored)

    def read_records(self, start: int, stop: int, out: np.ndarray) -> None:
        """Records ``start:stop`` into ``out`` with one read (straight into ``out`` when it
        is C-contiguous in the file's dtype)."""
        offset = self._data_offset + start * self.nbytes_per_pattern
        if out.flags.c_contiguous and out.dtype == self.dtype:
            self._file.read_into(out, offset)
            return
        tmp = np.empty((stop - start, *self.pattern_shape), dtype=self.dtype)
        self._file.read_into(tmp, offset)
        out[...] = tmp

    def close(self) -> None:
        self._file.close()


# --------------------------------------------------------------------------- open


def _bits(dtype) -> str:
    return f"{8 * np.dtype(dtype).itemsize}-bit"


def _choose_dtype(path, head, size) -> np.dtype:
    ext = os.path.splitext(path)[1].lower()
    if ext in EXTENSION_DTYPES:
        return EXTENSION_DTYPES[ext]
    # Forced onto a file of another name: only a grid that one bit depth fits exactly says.
    npix = head["width"] * head["height"]
    data = size - head["data_offset"]
    fits = []
    if head["version"] >= 3 and head.get("cols") and head.get("rows"):
        n_full = head["cols"] * head["rows"]
        n_points = n_full - (head["rows"] // 2 if head["hex_flag"] else 0)
        fits = [dt for dt in EXTENSION_DTYPES.values()
                if data in (n_full * npix * dt.itemsize, n_points * npix * dt.itemsize)]
    if len(fits) == 1:
        return fits[0]
    raise InputError("cannot tell 8-bit from 16-bit patterns: EDAX binary files say it by "
                     "their extension; name the file .up1 (8-bit) or .up2 (16-bit)", path)


def _step(head):
    sx, sy = head["step_x"], head["step_y"]
    if math.isfinite(sx) and math.isfinite(sy) and sx > 0 and sy > 0:
        return (float(sy), float(sx))
    return None


def open(path, *, dataset=None, grid_shape=None) -> EDAXBinarySource:  # noqa: A001 - registry
    """Open an EDAX ``.up1``/``.up2`` file.

    Parameters
    ----------
    path : str or os.PathLike
    dataset : None
        Not used: the file holds one scan. Giving one is an error.
    grid_shape : (int, int) or str, optional
        (rows, cols) for version 1 files, which store no grid (``--grid``); for version 3
        it must agree with the header.

    Returns
    -------
    EDAXBinarySource

    Raises
    ------
    InputError
        Not an EDAX binary file, version 2, a header that does not fit the file size (see
        the module notes), or a ``grid_shape`` that contradicts the header.

    Warns
    -----
    UserWarning
        The file holds fewer patterns than its grid (the rest are flagged missing), more
        whole patterns than its grid (ignored), or ends in a partial pattern (ignored).
    """
    path = os.fspath(path)
    if dataset is not None:
        raise InputError(f"an EDAX binary file holds one scan; --dataset {dataset!r} does "
                         "not apply", path)
    found = _read_head(path)
    if found is None:
        raise InputError("is too short or unreadable for an EDAX .up1/.up2 file (it needs a "
                         f"{_HEAD_V1.size}-byte header)", path)
    head, size = found
    version = head["version"]
    if version == 2:
        raise InputError("is an EDAX binary file of unsupported version 2 (ebsdxc reads "
                         "versions 1 and 3 or later)", path)
    if not _plausible(head, size):
        raise InputError(
            f"is not an EDAX .up1/.up2 file: its header (version {version}, patterns "
            f"{head['width']} x {head['height']} px, data at byte {head['data_offset']} of "
            f"{size}) is not one", path)
    header_size = _HEAD_V1.size if version == 1 else _HEAD_V3.size
    if head["data_offset"] != header_size:
        # every known writer starts the patterns right after the header; another offset is a
        # damaged field, and reading from it would shift every pattern
        raise InputError(f"header says the patterns start at byte {head['data_offset']}, not "
                         f"right after its {header_size}-byte version {version} header (a "
                         "damaged header?)", path)
    dtype = _choose_dtype(path, head, size)
    shape = (head["height"], head["width"])
    pattern_bytes = shape[0] * shape[1] * dtype.itemsize
    data = size - head["data_offset"]
    meta = {"header": {k: head[k] for k in ("version", "data_offset", "extra_patterns",
                                             "hex_flag") if k in head},
            "bit_depth": 8 * dtype.itemsize}

    if version == 1:
        n_stored, partial = divmod(data, pattern_bytes)
        if n_stored == 0:
            raise InputError(f"holds no whole pattern ({data} bytes after the header; one "
                             f"{shape[0]} x {shape[1]} px {_bits(dtype)} pattern is "
                             f"{pattern_bytes})", path)
        if partial:
            warnings.warn(f"{path}: ends in {partial} bytes that are not a whole pattern; "
                          "they are ignored", stacklevel=2)
        grid = choose_grid(None, grid_shape, n_stored, path)
        if n_stored < grid.n_points:
            meta["n_stored"] = int(n_stored)
        return EDAXBinarySource(path, grid=grid, pattern_shape=shape, dtype=dtype,
                                data_offset=head["data_offset"], n_stored=n_stored,
                                metadata=meta)

    rows, cols = head["rows"], head["cols"]
    if rows < 1 or cols < 1:
        raise InputError(f"header says {rows} x {cols} scan points", path)
    kind = "hexagonal" if head["hex_flag"] else "square"
    try:
        grid = ScanGrid(rows, cols, step=_step(head), kind=kind)
    except ValueError as e:
        raise InputError(f"header: {e}", path) from None
    grid = choose_grid(grid, grid_shape, 0, path)

    padded = kind == "hexagonal" and head["extra_patterns"] != 0
    n_records = grid.size if padded or kind == "square" else grid.n_points
    if kind == "hexagonal":
        other = grid.n_points if padded else grid.size
        if data != n_records * pattern_bytes and data == other * pattern_bytes:
            padded, n_records = not padded, other
        meta["hex_rows_padded"] = padded
    need = n_records * pattern_bytes
    what = (f"{n_records} patterns of {shape[0]} x {shape[1]} px, {_bits(dtype)}, for its "
            f"{rows} x {cols} {kind} grid")

    other_dtype = next(dt for dt in EXTENSION_DTYPES.values() if dt != dtype)
    if data != need and data == n_records * shape[0] * shape[1] * other_dtype.itemsize:
        raise InputError(
            f"holds {data} bytes of patterns: exactly {n_records} {_bits(other_dtype)} "
            f"patterns, not {_bits(dtype)} as its extension says (the header needs {need} "
            f"bytes for {what}); is it a .up{other_dtype.itemsize} file?", path)
    n_stored = n_records
    if data < need:
        n_stored = data // pattern_bytes
        warnings.warn(f"{path}: holds {n_stored} whole patterns of the {n_records} its header "
                      f"needs ({data} of {need} bytes; an interrupted scan?); the missing "
                      "points read as zeros and are flagged, not processed", stacklevel=2)
    elif data > need:
        surplus = data - need
        if surplus % pattern_bytes:
            raise InputError(
                f"holds {data} bytes of patterns but its header needs {need} ({what}); the "
                f"{surplus} bytes more are not a whole number of patterns, so the header or "
                "the bit depth is wrong", path)
        k = surplus // pattern_bytes
        warnings.warn(f"{path}: holds {k} pattern{'s' if k > 1 else ''} more than the "
                      f"{n_records} of its header's grid; ignored", stacklevel=2)
        meta["n_surplus"] = int(surplus // pattern_bytes)
    src = EDAXBinarySource(path, grid=grid, pattern_shape=shape, dtype=dtype,
                           data_offset=head["data_offset"], n_stored=n_stored, padded=padded,
                           metadata=meta)
    if n_stored < n_records:
        # Scan points, not records: a padded hexagonal layout stores dummies too.
        src.metadata["n_stored"] = int(src.present[grid.in_grid()].sum())
    return src
