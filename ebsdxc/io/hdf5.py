"""Generic HDF5 scans: one numeric 3-D ``(n, H, W)`` or 4-D ``(rows, cols, H, W)`` dataset.

This reader is the fallback for any HDF5 file: the registry asks the more specific
readers (h5ebsd) first. It finds the pattern dataset by itself when the file holds exactly
one candidate, wherever it sits in the group tree, or takes the one named by ``dataset=``
(the CLI's ``--dataset``).

A candidate is a dataset that is numeric (integer or float), 3-D or 4-D, with both
pattern dimensions (the last two) at least :data:`MIN_PATTERN_SIZE` pixels.

Scan grid
    4-D data: ``(rows, cols)`` from the shape. 3-D data: one row of ``n`` points unless
    attributes ``nrows``/``ncols`` (or ``rows``/``cols``, ``n_rows``/``n_columns``) on the
    dataset or one of its parent groups give a grid of ``n`` points. The step comes from
    attributes ``step_x``/``step_y`` found the same way, and a ``pattern_centre``
    attribute is copied into the metadata.

Reading is lazy: the file stays open and :meth:`HDF5Source.read_into` reads only the
requested hyperslab with :meth:`h5py.Dataset.read_direct`, straight into the caller's
buffer.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import warnings

import h5py
import numpy as np

from ..errors import InputError
from . import direct, h5check
from .source import PatternSource, ScanGrid, choose_grid, consecutive_runs

NAME = "hdf5"
DESCRIPTION = "any HDF5 file with one numeric (n, H, W) or (rows, cols, H, W) dataset"

#: Smallest pattern height/width a candidate dataset may have.
MIN_PATTERN_SIZE = 8

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"

# Chunk cache per open file: large enough that a compressed chunk holding many patterns
# is decompressed once per batch, not once per pattern; small enough to stay bounded.
_CHUNK_CACHE_BYTES = 64 * 2**20
_CHUNK_CACHE_SLOTS = 10007

_UNPLANNED = False  # the direct reader is planned on first read, after (re)opening (None: no direct path)
_UNCHECKED = False  # the chunk index is checked on first read, after (re)opening

_GRID_ATTRS = (("nrows", "ncols"), ("rows", "cols"), ("n_rows", "n_columns"))


# --------------------------------------------------------------------------- detection


def is_hdf5_file(path) -> bool:
    """Whether ``path`` starts with the HDF5 signature.

    The signature sits at byte 0, or at 512, 1024, 2048, ... when the file has a user
    block. Only these few bytes are read; a missing or unreadable file gives ``False``.
    """
    try:
        size = os.path.getsize(path)
        with builtins.open(path, "rb") as fh:
            offset = 0
            while offset + len(HDF5_SIGNATURE) <= size:
                fh.seek(offset)
                if fh.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE:
                    return True
                offset = 512 if offset == 0 else offset * 2
    except OSError:
        return False
    return False


def file_matches(path, test) -> bool:
    """Whether ``path`` is an HDF5 file for which ``test(h5py.File)`` is true; ``False`` for
    other and unreadable files (the generic reader then reports what is wrong with them)."""
    if not is_hdf5_file(path):
        return False
    try:
        with h5py.File(path, "r") as f:
            return bool(test(f))
    except Exception:  # a damaged HDF5 file or a layout the test trips over: not this format
        return False


def top_groups_holding(f, dataset, header) -> list[str]:
    """Top groups of open file ``f`` holding dataset ``dataset`` and group ``header``, in file order."""
    return [k for k in f
            if isinstance(f.get(k), h5py.Group) and isinstance(f[k].get(dataset), h5py.Dataset)
            and isinstance(f[k].get(header), h5py.Group)]


def detect(path) -> bool:
    """Whether this reader can try ``path``: any HDF5 file (checked from its content)."""
    return is_hdf5_file(path)


def open_file(path, *, check=True) -> h5py.File:
    """Open ``path`` read-only with h5py, turning failures into :class:`InputError`.

    With ``check`` (the default) the file's structure is checked first
    (:func:`ebsdxc.io.h5check.check_file`: names, objects, where data lie), so that a
    damaged file is one error here rather than data that quietly differ later; a file
    reopened after it was checked (a source sent to another process) skips it.
    """
    if not is_hdf5_file(path):
        raise InputError("not a file format ebsdxc can read (it is not an HDF5 file)", path)
    try:
        f = h5py.File(path, "r", rdcc_nbytes=_CHUNK_CACHE_BYTES,
                      rdcc_nslots=_CHUNK_CACHE_SLOTS)
    except OSError as exc:
        raise InputError(f"could not be opened as HDF5 ({exc})", path) from exc
    if check:
        try:
            h5check.check_file(f, os.fspath(path))
        except BaseException:
            f.close()
            raise
    return f


# --------------------------------------------------------------------------- helpers


def to_jsonable(value):
    """``value`` (from an HDF5 attribute or dataset) as plain JSON-friendly Python."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "SO":
            return [to_jsonable(v) for v in value.tolist()]
        return value.tolist()
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


def _scalar(value):
    """A one-element array or attribute as a Python scalar, else ``None``."""
    arr = np.asarray(value)
    if arr.size != 1:
        return None
    item = arr.reshape(()).item()
    return item.decode("utf-8", errors="replace") if isinstance(item, bytes) else item


def _lineage(obj):
    """``obj`` and its parent groups up to the root, nearest first."""
    while True:
        yield obj
        if obj.name in ("/", None):
            return
        obj = obj.parent


def _find_attr(obj, *names):
    """First attribute among ``names`` on ``obj`` or a parent group, else ``None``."""
    for node in _lineage(obj):
        for name in names:
            if name in node.attrs:
                return node.attrs[name]
    return None


def read_entry(ds):
    """The whole value of dataset ``ds`` (a header entry, a map column), read safely.

    Formats ebsdxc reads store numbers and strings; a variable-length sequence type is what
    a damaged datatype message turns a string into, and HDF5 crashes the interpreter
    reading one. It is refused with a ``ValueError`` (the caller names the file) instead.
    """
    if ds.id.get_type().get_class() == h5py.h5t.VLEN:
        raise ValueError(f"dataset {ds.name!r} has a variable-length sequence type, which no "
                         "EBSD format stores (a damaged datatype?)")
    return ds[()]


def _describe(ds) -> str:
    return f"{ds.name} {tuple(ds.shape)} {ds.dtype}"


def pattern_problem(ds) -> str | None:
    """Why ``ds`` cannot be a pattern dataset, in words, or ``None`` when it can."""
    if ds.dtype.kind not in "uif" or ds.dtype.names is not None:
        return f"holds {ds.dtype} values, not numbers"
    if ds.ndim not in (3, 4):
        return (f"has {ds.ndim} dimensions {tuple(ds.shape)}; patterns must be 3-D "
                "(n, H, W) or 4-D (rows, cols, H, W)")
    if min(ds.shape[-2:]) < MIN_PATTERN_SIZE:
        return (f"has patterns of {ds.shape[-2]} x {ds.shape[-1]} px; patterns must be at "
                f"least {MIN_PATTERN_SIZE} x {MIN_PATTERN_SIZE} px")
    if min(ds.shape[:-2]) == 0:
        return f"holds no patterns (shape {tuple(ds.shape)})"
    return None


def find_candidates(group) -> list:
    """Every dataset under ``group`` (all levels) that could hold patterns."""
    found = []

    def visit(_name, obj):
        if isinstance(obj, h5py.Dataset) and pattern_problem(obj) is None:
            found.append(obj)

    group.visititems(visit)
    return found


def _all_datasets(group, limit=10) -> list:
    found = []

    def visit(_name, obj):
        if isinstance(obj, h5py.Dataset):
            found.append(_describe(obj))
        return True if len(found) > limit else None

    group.visititems(visit)
    return found


def choose_dataset(f, dataset, path):
    """The pattern dataset of open file ``f``: the one named, or the only candidate."""
    if dataset is not None:
        name = str(dataset)
        try:
            obj = f.get(name)
        except (KeyError, OSError, ValueError):
            obj = None
        if obj is None:
            cands = ", ".join(_describe(d) for d in find_candidates(f)) or "none"
            raise InputError(f"has no dataset {name!r} (pattern datasets in the file: {cands})",
                             path)
        if isinstance(obj, h5py.Group):
            cands = ", ".join(_describe(d) for d in find_candidates(obj)) or "none"
            raise InputError(f"{obj.name!r} is a group, not a dataset (pattern datasets "
                             f"under it: {cands})", path)
        problem = pattern_problem(obj)
        if problem:
            raise InputError(f"dataset {obj.name!r} {problem}", path)
        return obj

    cands = find_candidates(f)
    if len(cands) == 1:
        return cands[0]
    if not cands:
        seen = _all_datasets(f)
        held = ("; the file holds " + ", ".join(seen[:10]) + (", ..." if len(seen) > 10 else "")
                if seen else "; the file holds no datasets")
        raise InputError(
            "no pattern dataset found: ebsdxc looks for a numeric 3-D (n, H, W) or 4-D "
            f"(rows, cols, H, W) dataset with patterns of at least {MIN_PATTERN_SIZE} x "
            f"{MIN_PATTERN_SIZE} px" + held, path)
    listing = ", ".join(_describe(d) for d in cands)
    raise InputError(f"holds several pattern datasets ({listing}); choose one with --dataset",
                     path)


def _grid_3d(ds, n, path) -> tuple[int, int]:
    """(rows, cols) for a 3-D dataset of ``n`` patterns, from attributes when they fit."""
    for node in _lineage(ds):
        for rkey, ckey in _GRID_ATTRS:
            r = _scalar(node.attrs[rkey]) if rkey in node.attrs else None
            c = _scalar(node.attrs[ckey]) if ckey in node.attrs else None
            if r is None and c is None:
                continue
            try:
                r = None if r is None else int(r)
                c = None if c is None else int(c)
            except (TypeError, ValueError):
                continue
            if r is None and c and n % c == 0:
                r = n // c
            if c is None and r and n % r == 0:
                c = n // r
            if r and c and r > 0 and c > 0 and r * c == n:
                return r, c
            warnings.warn(
                f"{path}: attributes {rkey}={r}, {ckey}={c} on {node.name!r} do not fit the "
                f"{n} patterns of {ds.name!r}; reading the scan as one row of {n} points",
                stacklevel=3)
            return 1, n
    return 1, n


def _step(ds):
    sx, sy = _find_attr(ds, "step_x"), _find_attr(ds, "step_y")
    sx = None if sx is None else _scalar(sx)
    sy = None if sy is None else _scalar(sy)
    if sx is None and sy is None:
        return None
    try:
        sx = float(sx if sx is not None else sy)
        sy = float(sy if sy is not None else sx)
    except (TypeError, ValueError):
        return None
    return (sy, sx)


def dataset_metadata(ds) -> dict:
    """Where the patterns are and how they are stored (JSON-friendly)."""
    return {
        "dataset": to_jsonable(ds.name),  # bytes when the name is not UTF-8
        "chunks": None if ds.chunks is None else list(ds.chunks),
        "compression": ds.compression,
    }


# Names of common third-party HDF5 filters, for messages (h5py reports an empty name for
# a filter the library does not have).
_FILTER_NAMES = {32001: "blosc", 32002: "mafisc", 32004: "lz4", 32008: "bitshuffle",
                 32013: "zfp", 32015: "zstd", 32017: "sz", 32026: "blosc2", 307: "bzip2"}


def check_filters(ds, path) -> None:
    """Raise :class:`InputError` when dataset ``ds`` needs an HDF5 filter that is not available.

    h5py opens a dataset compressed with a missing filter (blosc, bitshuffle, ...) without
    complaint and fails only when data are read, with an obscure OSError; checking the
    dataset's creation property list at open time turns that into one clear message naming
    the file and the filter. If the optional ``hdf5plugin`` package is installed it is
    imported first, since importing it is what registers its filters with HDF5.
    """
    plist = ds.id.get_create_plist()
    codes = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
    missing = [c for c in codes if not h5py.h5z.filter_avail(c)]
    if missing:
        with contextlib.suppress(ImportError):
            import hdf5plugin  # noqa: F401  (registers its filters on import)
        missing = [c for c in missing if not h5py.h5z.filter_avail(c)]
    if missing:
        names = ", ".join(f"{c} ({_FILTER_NAMES.get(c, 'unknown filter')})" for c in missing)
        raise InputError(f"dataset {ds.name!r} is compressed with HDF5 filter {names}, which is "
                         "not available here; the hdf5plugin package (pip install hdf5plugin) "
                         "provides the common ones", path)


# --------------------------------------------------------------------------- source


class HDF5Source(PatternSource):
    """Patterns in one HDF5 dataset, read lazily.

    Parameters
    ----------
    path : str or os.PathLike
    file : h5py.File
        Open file; the source keeps it open until :meth:`close`.
    dataset : str
        Full name of the pattern dataset, 3-D ``(n, H, W)`` or 4-D ``(rows, cols, H, W)``.
    grid : ScanGrid
        For 4-D data it must match the first two dimensions.
    metadata : dict, optional
    n_stored : int, optional
        Number of patterns actually stored (3-D data only), in acquisition order (see
        :meth:`ScanGrid.slot_to_record`). Points past it read as zeros and are not
        :attr:`present` (an interrupted scan). Default: all the dataset holds.

    Notes
    -----
    The source can be pickled (e.g. sent to a Dask worker): it then reopens the file by
    its path on first use.
    """

    format = NAME

    def __init__(self, path, file, dataset, *, grid: ScanGrid, metadata=None, n_stored=None):
        ds = file[dataset]
        super().__init__(path, grid=grid, pattern_shape=ds.shape[-2:], dtype=ds.dtype,
                         metadata=metadata)
        # a pattern dataset too large for check_file's walk is still checked itself
        h5check.check_dataset(ds, self.path)
        h5check.check_pattern_axes(ds, self.path)
        self._file = file
        self._ds = ds
        self._direct = _UNPLANNED
        self._chunk_table = _UNCHECKED
        self._dataset_name = ds.name
        self._ndim = ds.ndim
        if ds.ndim == 4:
            if tuple(ds.shape[:2]) != (grid.rows, grid.cols):
                raise ValueError(f"grid {grid.rows} x {grid.cols} does not match {ds.shape}")
            if grid.kind != "square":
                # slots as they lie on the grid: a hexagonal grid's padding slots are not points
                self.set_present(grid.in_grid().reshape(-1))
        else:
            stored = int(ds.shape[0]) if n_stored is None else min(int(n_stored), int(ds.shape[0]))
            self.use_records(stored)

    # pickling: drop the h5py handles, reopen lazily ---------------------------------
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_file"] = None
        state["_ds"] = None
        state["_direct"] = _UNPLANNED
        state["_chunk_table"] = _UNCHECKED
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)

    @property
    def dataset(self):
        """The open :class:`h5py.Dataset` (reopened after pickling or :meth:`close`)."""
        if self._ds is None or not self._ds.id.valid:
            self._file = open_file(self.path, check=False)  # checked when first opened
            self._ds = self._file[self._dataset_name]
        return self._ds

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._direct not in (None, _UNPLANNED):
            self._direct.close()
        self._direct = _UNPLANNED
        self._chunk_table = _UNCHECKED
        self._file = None
        self._ds = None

    def _checked_chunks(self):
        """The dataset's :class:`~ebsdxc.io.h5check.ChunkTable` (``None`` when not chunked),
        checked on first use after (re)opening: a damaged chunk index is an error before
        any pattern is returned, whichever path reads them."""
        if self._chunk_table is _UNCHECKED:
            self._chunk_table = h5check.chunk_table(self.dataset, self.path)
        return self._chunk_table

    def _direct_reader(self, out):
        """The :mod:`~ebsdxc.io.direct` reader when it can fill ``out``, else ``None`` (h5py reads)."""
        if self._direct is _UNPLANNED:
            use = os.environ.get("EBSDXC_DIRECT_READ", "1").strip().lower() not in ("0", "no", "false", "off")
            self._direct = (direct.plan(self.path, self.dataset, chunk_table=self._checked_chunks())
                            if use else None)
        if self._direct is None or out.dtype != self._direct.dtype or not out.flags.c_contiguous:
            return None
        return self._direct

    # reading ------------------------------------------------------------------------
    def byte_pieces(self, start: int, stop: int, split: int):
        start, stop = int(start), int(stop)
        self._checked_chunks()
        fast = self._direct_reader(np.empty((0, *self.pattern_shape), dtype=self.dtype))
        if fast is None:
            return None
        if self._ndim != 3:  # (rows, cols, H, W): flat slot index = flat index over the grid
            return fast.byte_pieces(start, stop, split)
        pb = self.nbytes_per_pattern
        rec = self._records[start:stop]
        ok = rec >= 0
        parts = [np.array([[a * pb, -1, (b - a) * pb]], np.int64)
                 for a, b in consecutive_runs(np.arange(rec.size), ~ok)]  # slots with no record: zeros
        for a, b in consecutive_runs(rec, ok):
            p = fast.byte_pieces(int(rec[a]), int(rec[b - 1]) + 1, split)
            if p is None:
                return None
            p[:, 0] += a * pb
            parts.append(p)
        return np.concatenate(parts) if parts else np.zeros((0, 3), np.int64)

    def read_records(self, start: int, stop: int, out: np.ndarray) -> None:
        """Records ``start:stop`` of a 3-D dataset straight into ``out`` (one hyperslab)."""
        fast = self._direct_reader(out)
        if fast is not None:
            fast.read(start, stop, out)
        else:
            self.dataset.read_direct(out, np.s_[start:stop], np.s_[0:stop - start])

    def read_into(self, start: int, stop: int, out: np.ndarray) -> None:
        """Read patterns ``start:stop`` (flat scan indices) into ``out`` in place.

        ``out`` has shape ``(stop - start, H, W)``; its dtype is normally the source
        dtype, another numeric dtype is converted by HDF5 on the way. Only the requested
        patterns are read (plus, for chunked data, the chunks holding them); slots with no
        stored pattern read as zeros.
        """
        start, stop = self._check_range(start, stop, out)
        if start == stop:
            return
        self._checked_chunks()
        if not out.flags.c_contiguous:
            tmp = np.empty(out.shape, dtype=out.dtype)
            self.read_into(start, stop, tmp)
            out[...] = tmp
            return
        if self._ndim == 3:
            self._read_slots(start, stop, out)
            return
        end = stop
        fast = self._direct_reader(out)
        if fast is not None:  # flat slot index = flat index over (rows, cols)
            fast.read(start, stop, out)
            return
        ds = self.dataset
        # 4-D (rows, cols, H, W): split the flat range into a partial first row, a block
        # of whole rows, and a partial last row.
        cols = self.grid.cols
        i = start
        while i < end:
            r, c = divmod(i, cols)
            o = i - start
            if c == 0 and end - i >= cols:
                nrows = (end - i) // cols
                # `out` is C-contiguous here, so this reshape is a view into it.
                view = out[o:o + nrows * cols].reshape(nrows, cols, *self.pattern_shape)
                ds.read_direct(view, np.s_[r:r + nrows])
                i += nrows * cols
            else:
                k = min(cols - c, end - i)
                ds.read_direct(out, np.s_[r, c:c + k], np.s_[o:o + k])
                i += k


    def read_window(self, index, rows, cols) -> np.ndarray:
        """A window of one pattern: one hyperslab (HDF5 reads only the chunks it meets)."""
        r0, r1, c0, c1 = self._check_window(index, rows, cols)
        out = np.zeros((r1 - r0, c1 - c0), self.dtype.newbyteorder("="))
        if self._ndim == 3:
            rec = self._record_of(index)
            if rec >= 0:
                self.dataset.read_direct(out, np.s_[rec, r0:r1, c0:c1])
        else:
            r, c = divmod(int(index), self.grid.cols)
            self.dataset.read_direct(out, np.s_[r, c, r0:r1, c0:c1])
        return out


# --------------------------------------------------------------------------- open


def open(path, *, dataset=None, grid_shape=None) -> HDF5Source:  # noqa: A001 - registry interface
    """Open a generic HDF5 scan.

    Parameters
    ----------
    path : str or os.PathLike
    dataset : str, optional
        Full name of the pattern dataset (``--dataset``). Needed only when the file holds
        several candidates.
    grid_shape : (int, int), optional
        (rows, cols) for 3-D data whose file says nothing of the grid (``--grid``).

    Returns
    -------
    HDF5Source

    Raises
    ------
    InputError
        Not HDF5, no or several candidate datasets, or the named dataset is missing or
        not a numeric 3-D/4-D array.
    """
    f = open_file(path)
    try:
        ds = choose_dataset(f, dataset, path)
        check_filters(ds, path)
        step = _step(ds)
        if ds.ndim == 4:
            # (rows, cols) slots as they lie on the grid; a hexagonal grid's padding slots hold zeros
            kind = _find_attr(ds, "grid_kind")
            kind = kind.decode() if isinstance(kind, bytes) else str(kind or "square")
            try:
                said = ScanGrid(int(ds.shape[0]), int(ds.shape[1]), step=step, kind=kind)
            except ValueError as e:
                raise InputError(f"grid_kind attribute: {e}", path) from None
            grid = choose_grid(said, grid_shape, 0, path)
        else:
            n = int(ds.shape[0])
            rows, cols = _grid_3d(ds, n, path)
            said = ScanGrid(rows, cols, step=step) if rows > 1 else None
            grid = choose_grid(said, grid_shape, n, path, step=step)
        meta = dataset_metadata(ds)
        # Geometry the strain fit can use when the user does not give it (attributes on the
        # dataset or a parent group; names as ebsdxc's own sample files write them).
        for key in ("pattern_centre", "pattern_centre_convention", "sample_tilt", "detector_tilt",
                    "euler_angles", "detector_pixel_size"):
            value = _find_attr(ds, key)
            if value is not None:
                meta[key] = to_jsonable(value)
        return HDF5Source(path, f, ds.name, grid=grid, metadata=meta)
    except BaseException:
        f.close()
        raise
