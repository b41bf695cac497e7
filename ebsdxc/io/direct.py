"""Reading HDF5 pattern data around h5py: positioned reads and parallel decompression.

h5py serialises every call behind one global lock, so a read through it uses one core:
enough for uncompressed data (a memcpy from the page cache), far too little for gzip,
where inflating runs at a few hundred MB/s per core. This module asks HDF5 only where the
bytes are (the dataset's offset, or each chunk's offset and size), then

- uncompressed contiguous data: ``os.preadv`` straight into the caller's buffer (which may
  be pinned host memory), split over threads for large reads;
- chunked data, raw or with the deflate and shuffle filters: each chunk's stored bytes
  read with ``os.pread`` and inflated with :mod:`zlib` on a thread pool (both release the
  GIL), so every core decompresses.

Anything else (other filters, non-native byte order, chunks that split a pattern, external
or virtual storage, a file not on a plain local driver) is left to h5py: :func:`plan`
returns ``None`` and the reader falls back.
"""

from __future__ import annotations

import os
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np

from ..errors import InputError
from . import h5check

__all__ = ["DirectReader", "byte_groups", "plan", "threads"]

_FILTER_DEFLATE = 1
_FILTER_SHUFFLE = 2
# Below this many bytes a read is not split over threads: thread hand-off would cost more.
_SPLIT_BYTES = 8 << 20
# Unfiltered chunked reads: a task per this many bytes, at most one per thread.
_GROUP_BYTES = 1 << 20

_pool = None
_pool_lock = threading.Lock()


def threads() -> int:
    """Threads used for reading and decompressing (``EBSDXC_READ_THREADS``, else all cores)."""
    env = os.environ.get("EBSDXC_READ_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(threads(), thread_name_prefix="ebsdxc-read")
        return _pool


def _filters(dcpl) -> list[int]:
    """Filter ids of a dataset creation property list, in the order they were applied."""
    return [int(dcpl.get_filter(i)[0]) for i in range(dcpl.get_nfilters())]


class DirectReader:
    """Reads flat pattern ranges of one dataset without going through h5py's data path.

    Build it with :func:`plan`. ``nav_shape`` is the dataset's shape before the two pattern
    axes; flat record ``i`` is ``np.unravel_index(i, nav_shape)``.
    """

    def __init__(self, path, ds: h5py.Dataset, *, offset=None, chunks=None, filters=(),
                 chunk_table=None):
        self.path = os.fspath(path)
        self.shape = tuple(int(n) for n in ds.shape)
        self.nav_shape = self.shape[:-2]
        self.dtype = ds.dtype
        self.pattern_bytes = self.shape[-1] * self.shape[-2] * self.dtype.itemsize
        self.offset = offset
        self.chunks = None if chunks is None else tuple(int(c) for c in chunks)
        self.filters = tuple(filters)
        self._fd = None
        self._pid = None
        self._last = (None, None)  # (chunk key, array): consecutive batches share an edge chunk
        if self.chunks is not None:
            self._chunk_index = self._index_chunks(ds, chunk_table)
            self._chunk_bytes = int(np.prod(self.chunks)) * self.dtype.itemsize

    # file handle: one per process (readers are pickled to other processes) ------------
    def _file(self) -> int:
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self.path, os.O_RDONLY)
            self._pid = os.getpid()
        return self._fd

    def close(self):
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_fd"] = None
        state["_last"] = (None, None)
        state["_dense"] = None
        return state

    def __del__(self):
        try:  # noqa: SIM105 - no contextlib at interpreter shutdown, when module globals may be gone
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release
            pass

    # chunk index ------------------------------------------------------------------------
    def _index_chunks(self, ds, table=None):
        """{chunk origin (nav coords): (file offset, stored size, filter mask)} for every stored
        chunk, from the checked chunk index (:func:`ebsdxc.io.h5check.chunk_table`)."""
        if table is None:
            table = h5check.chunk_table(ds, self.path)
        return table.as_dict(axes=len(self.nav_shape))

    # reading ------------------------------------------------------------------------------
    def read(self, start: int, stop: int, out: np.ndarray) -> None:
        """Records ``start:stop`` (flat over the nav axes) into C-contiguous ``out``."""
        if stop <= start:
            return
        if self.chunks is None:
            self._read_contiguous(start, stop, out)
        else:
            self._read_chunked(start, stop, out)

    def _pread_all(self, fd, view, offset):
        """Fill ``view`` (a writable memoryview) from file offset ``offset``; a file that ends
        first is an InputError naming it."""
        done = 0
        while done < len(view):
            got = os.preadv(fd, [view[done:]], offset + done)
            if got == 0:
                raise InputError("is truncated: the file ends before its pattern data do", self.path)
            done += got

    def _read_contiguous(self, start, stop, out):
        fd = self._file()
        flat = out.reshape(-1).view(np.uint8)
        nbytes = (stop - start) * self.pattern_bytes
        base = self.offset + start * self.pattern_bytes
        n_parts = min(threads(), max(1, nbytes // _SPLIT_BYTES))
        bounds = np.linspace(0, nbytes, n_parts + 1).astype(np.int64)
        bounds[1:-1] -= bounds[1:-1] % 4096  # page-aligned pieces

        def part(a, b):
            self._pread_all(fd, memoryview(flat[a:b]), base + a)

        if n_parts == 1:
            part(0, nbytes)
        else:
            list(_executor().map(lambda ab: part(*ab), zip(bounds[:-1], bounds[1:])))

    def _inflate(self, key) -> np.ndarray:
        """The chunk at nav origin ``key``, decompressed, shaped like a chunk."""
        info = self._chunk_index.get(key)
        cshape = self.chunks
        if info is None:  # never written: HDF5 reads the fill value, zero for patterns
            return np.zeros(cshape, dtype=self.dtype)
        offset, size, mask = info
        raw = os.pread(self._file(), size, offset)
        if len(raw) != size:
            raise InputError(f"is truncated: the file ends inside the chunk of the pattern data "
                             f"at byte {offset}", self.path)
        # Filters run in reverse on reading; a bit set in `mask` means that filter was skipped.
        for i in reversed(range(len(self.filters))):
            if mask & (1 << i):
                continue
            if self.filters[i] == _FILTER_DEFLATE:
                try:
                    raw = zlib.decompress(raw, bufsize=self._chunk_bytes)  # sized once: no regrowth
                except zlib.error as exc:  # a flipped bit: the adler32 check or the stream breaks
                    raise InputError(f"is damaged: the compressed chunk of the pattern data at byte "
                                     f"{offset} does not inflate ({exc})", self.path) from None
            else:  # shuffle: byte k of every value was stored in the k-th block
                k = self.dtype.itemsize
                if len(raw) % k:
                    raise InputError(f"is damaged: the chunk of the pattern data at byte {offset} "
                                     f"holds {len(raw)} bytes, not whole {k}-byte values", self.path)
                raw = np.frombuffer(raw, np.uint8).reshape(k, -1).T.tobytes()
        if len(raw) != self._chunk_bytes:
            raise InputError(f"is damaged: the chunk of the pattern data at byte {offset} inflates "
                             f"to {len(raw)} bytes, not {self._chunk_bytes}", self.path)
        data = np.frombuffer(raw, dtype=self.dtype)
        if data.size != int(np.prod(cshape)):
            raise InputError(f"is damaged: the chunk of the pattern data at byte {offset} inflates "
                             f"to {data.size} values, not {int(np.prod(cshape))}", self.path)
        return data.reshape(cshape)

    def _read_chunked(self, start, stop, out):
        keys, nav, runs = self._chunk_runs(start, stop)
        if not self.filters:
            self._read_stored_runs(keys, nav, runs, out)
            return
        last_key, last_data = self._last

        def work(run):
            a, b = run
            key = tuple(int(v) for v in keys[a])
            data = last_data if key == last_key else self._inflate(key)
            out[a:b] = data[tuple(nav[d][a:b] - key[d] for d in range(len(key)))]
            return key, data

        done = [work(runs[0])] if len(runs) == 1 else list(_executor().map(work, runs))
        self._last = done[-1]

    def _dense_chunk_index(self):
        """(offsets, sizes) of the chunks by chunk-grid position (flat), -1 where never written:
        run starts are looked up with arrays, not per-run Python (chunks of one pattern make a
        run per pattern)."""
        if getattr(self, "_dense", None) is None:
            cnav = self.chunks[:-2]
            grid = tuple(-(-s // k) for s, k in zip(self.nav_shape, cnav))
            offsets = np.full(int(np.prod(grid)), -1, np.int64)
            sizes = np.zeros(offsets.size, np.int64)
            for key, (offset, size, _) in self._chunk_index.items():
                i = np.ravel_multi_index(tuple(k // c for k, c in zip(key, cnav)), grid)
                offsets[i], sizes[i] = offset, size
            self._dense = (grid, offsets, sizes)
        return self._dense

    def _stored_pieces(self, keys, nav, runs, split):
        """(offset in the output, file offset or -1 for zeros, bytes) int64 arrays of the
        unfiltered chunks' byte ranges holding ``runs`` of records, cut at ``split`` bytes."""
        pb = self.pattern_bytes
        cnav = self.chunks[:-2]
        grid, offsets, sizes = self._dense_chunk_index()
        a = np.array([r[0] for r in runs], np.int64)
        b = np.array([r[1] for r in runs], np.int64)
        cid = np.ravel_multi_index(tuple(keys[a, d] // cnav[d] for d in range(len(cnav))), grid)
        off, size = offsets[cid], sizes[cid]
        bad = (off >= 0) & (size != self._chunk_bytes)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"is damaged: the chunk of the pattern data at byte {off[i]} holds {size[i]} "
                             f"bytes, not {self._chunk_bytes}", self.path)
        pos = np.ravel_multi_index(tuple(nav[d][a] - keys[a, d] for d in range(len(cnav))), cnav)
        start = np.where(off >= 0, off + pos * pb, -1)  # -1: never written, zeros
        return _cut(a * pb, start, (b - a) * pb, split)

    def byte_pieces(self, start: int, stop: int, split: int = _SPLIT_BYTES):
        """(m, 3) int64 rows [offset in a C-contiguous buffer of records ``start:stop``, file
        offset (-1: never written, zeros), bytes]: positioned reads of :attr:`path` that fill
        the buffer, none longer than ``split``; ``None`` when chunks are filtered (they need
        inflating, not just reading)."""
        if self.filters:
            return None
        if stop <= start:
            return np.zeros((0, 3), np.int64)
        if self.chunks is None:
            n = (stop - start) * self.pattern_bytes
            o, f, k = _cut(np.zeros(1, np.int64), np.array([self.offset + start * self.pattern_bytes], np.int64),
                           np.array([n], np.int64), split)
        else:
            o, f, k = self._stored_pieces(*self._chunk_runs(start, stop), split)
        return np.stack([o, f, k], axis=1)

    def _chunk_runs(self, start, stop):
        ids = np.arange(start, stop)
        nav = np.unravel_index(ids, self.nav_shape)
        keys = np.stack([(c // k) * k for c, k in zip(nav, self.chunks[:-2])], axis=1)
        change = np.flatnonzero((np.diff(keys, axis=0) != 0).any(axis=1)) + 1
        return keys, nav, list(zip(np.r_[0, change], np.r_[change, ids.size]))

    def _read_stored_runs(self, keys, nav, runs, out):
        """Unfiltered chunks: each run of records is one contiguous byte range of its chunk
        (runs end where the chunk changes, and records of one chunk row lie in order), read
        with ``os.preadv`` straight into ``out``. Ranges are cut into pieces of at most
        :data:`_SPLIT_BYTES` and the pieces dealt to a few tasks of equal size: chunks of one
        pattern cost a system call each, not a thread hand-off and two copies, and a batch of
        two large chunks still keeps every thread busy."""
        o, start, n = self._stored_pieces(keys, nav, runs, _SPLIT_BYTES)
        fd = self._file()
        raw = out.reshape(-1).view(np.uint8)
        flat = memoryview(raw)
        pieces = list(zip(o.tolist(), start.tolist(), n.tolist()))

        def work(group):
            for o, off, n in group:
                if off < 0:
                    raw[o:o + n] = 0
                else:
                    self._pread_all(fd, flat[o:o + n], off)

        total = int(n.sum())
        n_groups = min(threads(), len(pieces), max(1, total // _GROUP_BYTES))
        if n_groups == 1:
            work(pieces)
            return
        groups = byte_groups(n, n_groups)
        list(_executor().map(work, [pieces[g[0]:g[-1] + 1] for g in groups if g.size]))


def byte_groups(nbytes, k: int) -> list[np.ndarray]:
    """``k`` contiguous groups (index arrays, some perhaps empty) of pieces of ``nbytes`` bytes
    each, of about equal bytes per group: a piece goes to the group its end falls in."""
    nbytes = np.asarray(nbytes, np.int64)
    if nbytes.size == 0:
        return [np.zeros(0, np.int64) for _ in range(k)]
    ends = np.cumsum(nbytes)
    cuts = np.searchsorted(ends, np.arange(1, k) * ends[-1] / k) + 1
    return np.split(np.arange(nbytes.size), cuts.clip(0, nbytes.size))


def _cut(o, start, n, split):
    """Byte ranges (offsets ``o`` in the output, file offsets ``start`` or -1, lengths ``n``)
    cut into pieces of at most ``split`` bytes."""
    if (n > split).any():
        k = -(-n // split)
        rep = np.repeat(np.arange(n.size), k)
        within = (np.arange(rep.size) - np.repeat(np.cumsum(k) - k, k)) * split
        o = o[rep] + within
        start = np.where(start[rep] >= 0, start[rep] + within, -1)
        n = np.minimum(n[rep] - within, split)
    return o, start, n


def plan(path, ds: h5py.Dataset, *, chunk_table=None) -> DirectReader | None:
    """A :class:`DirectReader` for ``ds`` when its storage allows one, else ``None``.

    ``chunk_table`` is the dataset's checked chunk index when the caller has it already
    (:func:`ebsdxc.io.h5check.chunk_table`); it is built otherwise.
    """
    try:
        if ds.ndim < 3 or ds.dtype.kind not in "uif" or not ds.dtype.isnative:
            return None
        if ds.is_virtual or ds.external or ds.file.driver not in ("sec2", None):
            return None
        if ds.file.userblock_size and ds.chunks is None and ds.id.get_offset() is None:
            return None
        dcpl = ds.id.get_create_plist()
        if ds.chunks is None:
            if dcpl.get_nfilters():
                return None
            offset = ds.id.get_offset()
            if offset is None:  # never written: nothing on disk to read
                return None
            return DirectReader(path, ds, offset=int(offset))
        if tuple(ds.chunks[-2:]) != tuple(ds.shape[-2:]):
            return None  # chunks cut patterns apart: h5py assembles those better
        filters = _filters(dcpl)
        if any(f not in (_FILTER_DEFLATE, _FILTER_SHUFFLE) for f in filters):
            return None
        return DirectReader(path, ds, chunks=ds.chunks, filters=filters, chunk_table=chunk_table)
    except (AttributeError, OSError, ValueError, RuntimeError):
        return None
