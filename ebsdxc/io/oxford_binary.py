"""Oxford Instruments binary pattern files (``.ebsp``, AZtec).

Layout, as found in the files (all numbers little-endian; the format is not published,
this follows kikuchipy's reader and PyEBSDIndex)::

    int64    -version            versions 1 to 6; version 0 files start with the table
    uint8    (unknown)           versions 4 and later only
    int64    offset[n]           byte where the record of map point i starts, in map
                                 (row-major) order; 0: the point's pattern is not stored
    records, in any order, each:
        int32  map_x, map_y      versions 5 and later only
        int32  compressed        0: raw pixels
        int32  rows, cols        of the pattern, px
        int32  n_bytes           rows * cols (8-bit) or 2 * rows * cols (16-bit)
        pixels                   n_bytes, row by row
        footer                   version 0: none; version 1: float64 beam x, y (um);
                                 version 2+: uint8 has_x, [float64 x], uint8 has_y,
                                 [float64 y]

The table's length is not stored: it ends where the first record begins, which is the
smallest offset in it. Compressed patterns are refused, as are unknown versions.

Grid: the file does not store the map's shape. It is found from the beam positions (or,
without them, from ``map_x``/``map_y``) of a few stored points spread over the file: the
number of columns ``C`` is the divisor of the table length for which every sampled point
``i`` sits at column ``i % C``, row ``i // C`` of a regular grid; the step comes from
the same fit. When no divisor fits, or the version stores no positions, the points form
one row unless ``grid_shape`` is given. kikuchipy finds the shape from the first, second
and last points; it reads a file with missing points as one row of the stored ones.

Missing points: a table entry 0 (not acquired, or not stored because it was indexed),
and records lying past the end of a truncated file (with a warning), are not ``present``
and read as zeros.

Reading is lazy. Points whose records follow each other in the file are read together:
one ``preadv`` call scatters the pixels of up to ~500 records straight into the caller's
buffer (a single bounded read and a strided copy where ``preadv`` is missing).
"""

from __future__ import annotations

import builtins
import os
import struct
import warnings

import numpy as np

from ..errors import InputError
from .edax_binary import RawFile
from .source import PatternSource, ScanGrid, choose_grid, consecutive_runs

NAME = "oxford_binary"
DESCRIPTION = "Oxford Instruments binary patterns (.ebsp, uncompressed, versions 0-6)"

#: File versions this reader knows.
KNOWN_VERSIONS = range(7)

_RECORD_HEAD = struct.Struct("<4i")         # compressed, rows, cols, n_bytes
_RECORD_HEAD_MAP = struct.Struct("<6i")     # map_x, map_y, then as above (version >= 5)
_MAX_PATTERN_SIDE = 1 << 16
_TABLE_BLOCK = 1 << 16                      # table entries read at a time
_SAMPLE_QUANTILES = 9                       # spread of the points sampled for the grid
# Scatter lists stay below the usual IOV_MAX (1024): two entries per record.
_RUN_RECORDS = 500
_COPY_BUFFER_BYTES = 64 << 20               # bound of the fallback's intermediate buffer
_PREADV = hasattr(os, "preadv")


def _version(first: int) -> int:
    # Version 0 files have no version field: their first 8 bytes are the first offset.
    return -first if first < 0 else 0


def _table_start(version: int) -> int:
    if version == 0:
        return 0
    return 8 if version <= 3 else 9


def _head_struct(version: int) -> struct.Struct:
    return _RECORD_HEAD_MAP if version >= 5 else _RECORD_HEAD


def _scan_table(fh, start: int, size: int) -> np.ndarray | None:
    """The offset table at ``start``: it ends where the first record begins.

    Entries are read in blocks until the end of the entries read so far reaches their
    smallest non-zero value, which must be exactly there. ``None`` when the bytes cannot
    be such a table (a negative entry, an entry pointing into the table, no end).
    """
    found = []
    run_min = np.iinfo(np.int64).max
    k0 = 0
    pos = start
    while pos + 8 <= size:
        fh.seek(pos)
        raw = fh.read(min(_TABLE_BLOCK, (size - pos) // 8) * 8)
        vals = np.frombuffer(raw, dtype="<i8")
        if vals.size == 0:
            return None
        mins = np.minimum(np.minimum.accumulate(
            np.where(vals > 0, vals, np.iinfo(np.int64).max)), run_min)
        ends = start + 8 * (k0 + np.arange(1, vals.size + 1, dtype=np.int64))
        hit = np.flatnonzero(ends >= mins)
        last = int(hit[0]) + 1 if hit.size else vals.size
        if (vals[:last] < 0).any():
            return None
        if hit.size:
            j = int(hit[0])
            if ends[j] != mins[j]:
                return None
            found.append(vals[:j + 1])
            return np.concatenate(found).astype(np.int64)
        found.append(vals)
        run_min = int(mins[-1])
        k0 += vals.size
        pos += vals.size * 8
    return None


def _read_record_head(fh, offset: int, version: int) -> dict | None:
    st = _head_struct(version)
    fh.seek(offset)
    raw = fh.read(st.size)
    if len(raw) < st.size:
        return None
    vals = st.unpack(raw)
    head = dict(zip(("compressed", "rows", "cols", "n_bytes"), vals[-4:]))
    if version >= 5:
        head["map_x"], head["map_y"] = vals[0], vals[1]
    return head


def _plausible_head(head) -> bool:
    return (head is not None and 0 <= head["compressed"] <= 255 and head["n_bytes"] > 0
            and 1 <= head["rows"] <= _MAX_PATTERN_SIDE and 1 <= head["cols"] <= _MAX_PATTERN_SIDE)


def _read_footer(fh, offset: int, version: int) -> tuple[float | None, float | None, int]:
    """(beam x, beam y, footer size) of the footer at ``offset`` (``None``: not stored)."""
    if version == 0:
        return None, None, 0
    fh.seek(offset)
    raw = fh.read(18)
    if version == 1:
        if len(raw) < 16:
            return None, None, 16
        x, y = struct.unpack_from("<2d", raw)
        return x, y, 16
    x = y = None
    pos = 0
    if len(raw) >= 1 and raw[0]:
        x = struct.unpack_from("<d", raw, 1)[0] if len(raw) >= 9 else None
        pos = 9
    else:
        pos = 1
    if len(raw) > pos and raw[pos]:
        y = struct.unpack_from("<d", raw, pos + 1)[0] if len(raw) >= pos + 9 else None
        pos += 9
    else:
        pos += 1
    return x, y, pos


def _layout(fh, size: int, version: int):
    """(table, first record head) of a file of a known version, or ``None``."""
    table = _scan_table(fh, _table_start(version), size)
    if table is None:
        return None
    head = _read_record_head(fh, int(table[table > 0].min()), version)
    return (table, head) if _plausible_head(head) else None


def _read_version(fh) -> int | None:
    fh.seek(0)
    raw = fh.read(8)
    return _version(struct.unpack("<q", raw)[0]) if len(raw) == 8 else None


def detect(path) -> bool:
    """Whether ``path`` is an Oxford ``.ebsp`` file, judged from its structure.

    The offset table must end exactly where its smallest offset points, with no negative
    entry, and the first record must have a plausible pattern header. Files of an
    unknown version are claimed when their table looks right, so that :func:`open` can
    name the version.
    """
    try:
        size = os.path.getsize(path)
        with builtins.open(path, "rb") as fh:
            version = _read_version(fh)
            if version is None:
                return False
            if version in KNOWN_VERSIONS:
                return _layout(fh, size, version) is not None
            if version > 1000:
                return False
            return any(_scan_table(fh, start, size) is not None for start in (9, 8))
    except OSError:
        return False


# --------------------------------------------------------------------------- grid


def _divisors(n: int) -> list[int]:
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def _fit_axis(index: np.ndarray, value: np.ndarray):
    """Step of ``value = v0 + step * index`` (``None``: one index only), or ``False``."""
    if np.unique(index).size < 2:
        return None
    a = np.stack([np.ones_like(value), index.astype(np.float64)], axis=1)
    (v0, step), *_ = np.linalg.lstsq(a, value, rcond=None)
    if step == 0 or np.abs(value - v0 - step * index).max() > 0.01 * abs(step):
        return False
    # Least squares leaves float noise on exact steps (1.5000000000000002).
    return float(f"{step:.12g}")


def fit_grid(points: np.ndarray, xy: np.ndarray, n: int):
    """The grid that puts map points ``points`` (row-major indices) at positions ``xy``.

    Parameters
    ----------
    points : (k,) int
        Sampled map point indices, at least two.
    xy : (k, 2) float
        Their [x, y] positions.
    n : int
        Number of map points.

    Returns
    -------
    (rows, cols, step_x, step_y) or None
        ``None`` when no number of columns (a divisor of ``n``) fits, or several fit
        equally well. A step is ``None`` along an axis the samples do not span.
    """
    fits = []
    for cols in _divisors(n):
        r, c = points // cols, points % cols
        sx, sy = _fit_axis(c, xy[:, 0]), _fit_axis(r, xy[:, 1])
        if sx is False or sy is False or (sx is None and sy is None):
            continue
        known = abs(sx if sx is not None else sy)
        # Along an axis the samples do not span, the position must not change.
        if sx is None and np.ptp(xy[:, 0]) > 0.01 * known:
            continue
        if sy is None and np.ptp(xy[:, 1]) > 0.01 * known:
            continue
        fits.append((n // cols, cols, sx, sy))
    if len(fits) > 1:
        fits = [f for f in fits if f[2] is not None and f[3] is not None
                and abs(abs(f[2]) - abs(f[3])) <= 0.01 * abs(f[2])]
    return fits[0] if len(fits) == 1 else None


def _sample_points(stored: np.ndarray) -> np.ndarray:
    """A few stored points spread over the map: first, second, last and quantiles with
    their successors, so that several rows and columns are seen."""
    k = stored.size
    picks = {0, 1, k - 2, k - 1}
    for q in np.linspace(0, k - 1, _SAMPLE_QUANTILES).astype(int):
        picks.update((int(q), int(q) + 1))
    return stored[sorted(i for i in picks if 0 <= i < k)]


# --------------------------------------------------------------------------- source


class OxfordBinarySource(PatternSource):
    """Patterns of an Oxford ``.ebsp`` file, read lazily (see module notes).

    Parameters
    ----------
    path : str or os.PathLike
    grid : ScanGrid
    pattern_shape : (int, int)
    dtype : numpy.dtype
    offsets : (grid.size,) int64
        Byte where the record of each slot starts; 0 where none is stored.
    head_bytes : int
        Size of a record's header; the pixels follow it.
    record_bytes : int
        Size of one whole record (header, pixels, footer) of the file's first record.
    metadata : dict, optional

    Notes
    -----
    The source can be pickled: the file descriptor is not, it is reopened on first use.
    """

    format = NAME

    def __init__(self, path, *, grid, pattern_shape, dtype, offsets, head_bytes,
                 record_bytes, metadata=None):
        super().__init__(path, grid=grid, pattern_shape=pattern_shape, dtype=dtype,
                         metadata=metadata)
        self._file = RawFile(self.path)
        self._offsets = np.asarray(offsets, dtype=np.int64)
        self._head = int(head_bytes)
        self._record = int(record_bytes)
        self.set_present(self._offsets > 0)

    def read_into(self, start: int, stop: int, out: np.ndarray) -> None:
        """Read patterns ``start:stop`` into ``out`` in place; missing points read as zeros.

        Points whose records are consecutive in the file (at the common record size) are
        read together.
        """
        start, stop = self._check_range(start, stop, out)
        if start == stop:
            return
        offs = self._offsets[start:stop]
        ok = offs > 0
        if not ok.all():
            out[~ok] = 0
        for first, end in consecutive_runs(offs, ok, self._record):
            for s in range(0, end - first, _RUN_RECORDS):
                m = min(_RUN_RECORDS, end - first - s)
                self._read_run(int(offs[first]) + s * self._record, out[first + s:first + s + m])

    def _read_run(self, offset: int, dst: np.ndarray) -> None:
        """Pixels of ``len(dst)`` consecutive records, the first at ``offset``, into ``dst``."""
        k = dst.shape[0]
        pixels = self.nbytes_per_pattern
        start = offset + self._head
        if dst.flags.c_contiguous and dst.dtype == self.dtype:
            if k == 1:
                self._file.read_into(dst, start)
                return
            if _PREADV:
                # One call: each record's pixels land in its slot of dst, the footer and
                # next header in between land in a scratch buffer.
                gap = bytearray(self._record - pixels)
                iov = [memoryview(dst[0]).cast("B")]
                for p in dst[1:]:
                    iov += [gap, memoryview(p).cast("B")]
                want = k * pixels + (k - 1) * len(gap)
                if os.preadv(self._file.fileno(), iov, start) == want:
                    return
                # A short read (interrupted, or the file changed): the path below loops
                # and reports a file that ends early.
        per_buffer = max(1, _COPY_BUFFER_BYTES // self._record)
        for s in range(0, k, per_buffer):
            m = min(per_buffer, k - s)
            buf = np.empty(m * self._record, dtype=np.uint8)
            # Up to the last record's pixels: its footer is not needed.
            self._file.read_into(buf[:(m - 1) * self._record + pixels], start + s * self._record)
            recs = buf.reshape(m, self._record)[:, :pixels]
            dst[s:s + m] = recs.view(self.dtype).reshape(m, *self.pattern_shape)

    def close(self) -> None:
        self._file.close()


# --------------------------------------------------------------------------- open


def _positions(fh, version, offsets, points, head, head_size, path):
    """Beam and map [x, y] of ``points`` (NaN where not stored), checking their headers."""
    beam = np.full((points.size, 2), np.nan)
    mapxy = np.full((points.size, 2), np.nan)
    for i, p in enumerate(points):
        off = int(offsets[p])
        h = _read_record_head(fh, off, version)
        if h is None or any(h[k] != head[k] for k in ("compressed", "rows", "cols", "n_bytes")):
            got = "none" if h is None else f"{h['rows']} x {h['cols']} px, {h['n_bytes']} bytes"
            raise InputError(f"the record of map point {p} (byte {off}) has a pattern header "
                             f"({got}) unlike the first record's ({head['rows']} x "
                             f"{head['cols']} px, {head['n_bytes']} bytes)", path)
        x, y, _ = _read_footer(fh, off + head_size + head["n_bytes"], version)
        beam[i] = (np.nan if x is None else x, np.nan if y is None else y)
        if "map_x" in h:
            mapxy[i] = (h["map_x"], h["map_y"])
    return beam, mapxy


def open(path, *, dataset=None, grid_shape=None) -> OxfordBinarySource:  # noqa: A001
    """Open an Oxford ``.ebsp`` file.

    Parameters
    ----------
    path : str or os.PathLike
    dataset : None
        Not used: the file holds one scan. Giving one is an error.
    grid_shape : (int, int) or str, optional
        (rows, cols) when the file's positions do not give the grid (``--grid``); it must
        agree with a grid they give.

    Returns
    -------
    OxfordBinarySource

    Raises
    ------
    InputError
        Not an ``.ebsp`` file, an unknown version, compressed patterns, a pixel count that
        is neither 8- nor 16-bit, records of different sizes, or a ``grid_shape`` that
        contradicts the positions.

    Warns
    -----
    UserWarning
        Records lie past the end of the file (flagged missing), or the stored positions
        do not form a grid (one row is used).
    """
    path = os.fspath(path)
    if dataset is not None:
        raise InputError(f"an .ebsp file holds one scan; --dataset {dataset!r} does not "
                         "apply", path)
    try:
        size = os.path.getsize(path)
        fh = builtins.open(path, "rb")  # noqa: SIM115 - closed by the with block below
    except OSError as exc:
        raise InputError(f"could not be opened ({exc.strerror})", path) from exc
    with fh:
        version = _read_version(fh)
        if version is None:
            raise InputError("is too short for an Oxford .ebsp file", path)
        if version not in KNOWN_VERSIONS:
            raise InputError(f"is an Oxford .ebsp file of unknown version {version} (ebsdxc "
                             f"reads versions {KNOWN_VERSIONS[0]} to {KNOWN_VERSIONS[-1]})", path)
        found = _layout(fh, size, version)
        if found is None:
            raise InputError(f"is not an Oxford .ebsp file of version {version}: its offset "
                             "table does not end where its first pattern starts", path)
        table, head = found
        shape = (head["rows"], head["cols"])
        if head["compressed"]:
            raise InputError("holds compressed patterns; compressed patterns are not "
                             "supported (store them uncompressed in AZtec, or export "
                             "to .h5oina)", path)
        npix = shape[0] * shape[1]
        if head["n_bytes"] == npix:
            dtype = np.dtype("<u1")
        elif head["n_bytes"] == 2 * npix:
            dtype = np.dtype("<u2")
        else:
            raise InputError(f"has {shape[0]} x {shape[1]} px patterns of {head['n_bytes']} "
                             f"bytes: neither 8-bit ({npix}) nor 16-bit ({2 * npix})", path)
        head_size = _head_struct(version).size
        first = int(table[table > 0].min())
        _, _, footer_size = _read_footer(fh, first + head_size + head["n_bytes"], version)
        record = head_size + head["n_bytes"] + footer_size

        n = table.size
        offsets = table.copy()
        past_end = (offsets > 0) & (offsets + head_size + head["n_bytes"] > size)
        if past_end.any():
            warnings.warn(f"{path}: {int(past_end.sum())} of the {n} patterns its table lists "
                          "lie past the end of the file (a truncated file?); those points "
                          "read as zeros and are flagged, not processed", stacklevel=2)
            offsets[past_end] = 0
        stored = np.flatnonzero(offsets)
        if stored.size == 0:
            raise InputError(f"stores none of the {n} patterns its table lists", path)

        meta = {"header": {"version": version, "record_bytes": record},
                "bit_depth": 8 * dtype.itemsize}
        file_grid = None
        if stored.size >= 2:
            points = _sample_points(stored)
            beam, mapxy = _positions(fh, version, offsets, points, head, head_size, path)
            for label, xy in (("beam positions", beam), ("map positions", mapxy)):
                if np.isnan(xy).any():
                    continue
                fit = fit_grid(points, xy, n)
                if fit is None:
                    continue
                rows, cols, sx, sy = fit
                step = None
                if label == "beam positions":
                    sx, sy = abs(sx or sy), abs(sy or sx)
                    step = (sy, sx)
                file_grid = ScanGrid(rows, cols, step=step)
                meta["grid_from"] = label
                break
            else:
                if grid_shape is None and not (np.isnan(beam).any() and np.isnan(mapxy).any()):
                    warnings.warn(f"{path}: the stored positions do not form a grid of the {n} "
                                  "points; reading them as one row (give the grid with --grid)",
                                  stacklevel=2)
        elif n == 1:
            file_grid = ScanGrid(1, 1)
        grid = choose_grid(file_grid, grid_shape, n, path)

    slots = np.zeros(grid.size, dtype=np.int64)
    slots[:n] = offsets
    if stored.size < grid.n_points:
        meta["n_stored"] = int(stored.size)
    return OxfordBinarySource(path, grid=grid, pattern_shape=shape, dtype=dtype, offsets=slots,
                              head_bytes=head_size, record_bytes=record, metadata=meta)
