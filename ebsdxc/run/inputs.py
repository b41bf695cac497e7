"""The run's inputs besides the scan: reference patterns and the static background.

Each is read (or averaged from the scan) once by the process that plans the run and then
travels with the job, so every worker uses exactly the same arrays.
"""

from __future__ import annotations

import os

import numpy as np

from .. import io as scan_io
from ..errors import InputError
from ..preprocess import average_neighbours
from ..references import ReferenceSet

__all__ = ["averaged_points", "check_averaging", "mean_pattern", "native", "read_points", "reference_set",
           "scan_reference", "static_background"]


# Most pixels of whole scan rows :func:`averaged_points` reads and averages at once (float32:
# 1 GB; at least the rows one point needs).
AVERAGE_PIXELS = 1 << 28


def native(a: np.ndarray) -> np.ndarray:
    """``a`` in native byte order (CuPy and the kernels take no other)."""
    a = np.asarray(a)
    return a.astype(a.dtype.newbyteorder("="), copy=False)


def check_averaging(preprocess, source) -> None:
    if preprocess.average_neighbours and source.grid.kind != "square":
        raise InputError(f"neighbour averaging needs a square scan grid; this scan's grid is "
                         f"{source.grid.kind}", source.path)


def averaged_points(source, preprocess, flat) -> np.ndarray:
    """Patterns at flat scan indices ``flat`` (k, H, W) float32, neighbour-averaged as the
    correlation pass averages them.

    Points are taken a group of nearby scan rows at a time. A group that fills its rows (a
    remapping batch) has those rows and the kernel's halo rows read and averaged once; a few
    points far apart (a reference per grain) each have just their neighbourhood read and
    averaged. Either gives each point bit for bit what averaging whole rows around it gives
    (the block contract of :func:`~ebsdxc.preprocess.average_neighbours`: a point's mean
    depends only on its neighbours inside the block). Each point read and averaged its own
    rows before: 300 patterns for a point of a 100-column scan.
    """
    rows, cols = source.grid.rows, source.grid.cols
    h = preprocess.average_neighbours // 2
    present = None if source.present is None else source.present.reshape(-1)
    flat = np.asarray(flat, dtype=np.int64).reshape(-1)
    out = np.empty((flat.size, *source.pattern_shape), dtype=np.float32)
    span = max(1, (AVERAGE_PIXELS // int(np.prod(source.pattern_shape))) // cols - 2 * h)  # rows of points a read
    order = np.argsort(flat // cols, kind="stable")
    point_rows = (flat // cols)[order]
    start = 0
    while start < flat.size:
        first = int(point_rows[start])
        stop = int(np.searchsorted(point_rows, first + span, side="left"))
        a, b = max(0, first - h) * cols, min(rows, int(point_rows[stop - 1]) + h + 1) * cols
        sel = order[start:stop]
        start = stop
        if len(sel) * (2 * h + 1) ** 2 < b - a:  # a few points: their neighbourhoods only
            for k in sel:
                out[k] = _averaged_neighbourhood(source, preprocess, present, int(flat[k]))
            continue
        out[sel] = _averaged_block(source, preprocess, present, a, b)[flat[sel] - a]
    return out


def _averaged_block(source, preprocess, present, a, b):
    """Whole scan rows [a, b) (flat indices) neighbour-averaged: (b - a, H, W) float32."""
    return _averaged(native(source.read(a, b)), np.arange(a, b), source.grid.cols, preprocess, present)


def _averaged_neighbourhood(source, preprocess, present, i):
    """Point ``i`` neighbour-averaged from the points of its kernel only (H, W) float32: a block
    of the kernel's rows and columns, as a scan of its own."""
    rows, cols = source.grid.rows, source.grid.cols
    h = preprocess.average_neighbours // 2
    r, c = divmod(i, cols)
    r0, r1, c0, c1 = max(0, r - h), min(rows, r + h + 1), max(0, c - h), min(cols, c + h + 1)
    starts = [y * cols + c0 for y in range(r0, r1)]
    block = np.concatenate([native(source.read(s, s + c1 - c0)) for s in starts])
    flat = np.add.outer(starts, np.arange(c1 - c0)).reshape(-1)
    return _averaged(block, flat, c1 - c0, preprocess, present)[(r - r0) * (c1 - c0) + c - c0]


def _averaged(block, flat, cols, preprocess, present):
    """(k, H, W) patterns of scan points ``flat``, whole rows of ``cols`` points, neighbour-averaged
    as a scan of their own: float32, points without a pattern (absent, all zeros) left out."""
    block = block.astype(np.float32)
    ok = (block.reshape(len(block), -1) != 0).any(axis=1)
    if present is not None:
        ok &= present[flat]
    return average_neighbours(block, cols=cols, kernel=preprocess.average_kernel, size=preprocess.average_neighbours,
                              sigma=preprocess.average_sigma, present=ok, xp=np)


def read_points(source, preprocess, flat, out=None) -> np.ndarray:
    """Patterns at flat scan indices ``flat`` (k, H, W) as a pipeline takes them: as stored,
    or neighbour-averaged when the preprocessing averages.

    ``out``: a (k, H, W) host array of the dtype a call without it returns (a pinned buffer),
    filled and returned. Runs of points in order are read straight into it.
    """
    if preprocess.average_neighbours:
        patterns = averaged_points(source, preprocess, flat)
        if out is None:
            return patterns
        np.copyto(out, patterns)
        return out
    flat = np.asarray(flat, dtype=np.int64).reshape(-1)
    dtype = np.dtype(source.dtype).newbyteorder("=")
    if out is not None and (out.shape != (flat.size, *source.pattern_shape) or out.dtype != dtype):
        raise ValueError(f"out must be {(flat.size, *source.pattern_shape)} {dtype}, got {out.shape} {out.dtype}")
    if not flat.size:
        return np.empty((0, *source.pattern_shape), dtype=dtype) if out is None else out
    # Each run of consecutive points is one read: a remapping batch of neighbouring points
    # read one by one spent 6 ms a batch of 32 in the reader's per-call work (H100 host).
    order = np.argsort(flat, kind="stable")
    ranked = flat[order]
    runs = np.split(np.arange(flat.size), np.flatnonzero(np.diff(ranked) != 1) + 1)
    if out is None and len(runs) == 1 and (order == runs[0]).all():  # one run in order: the read is the answer
        return native(source.read(int(flat[0]), int(flat[-1]) + 1))
    if out is None:
        out = np.empty((flat.size, *source.pattern_shape), dtype=dtype)
    for run in runs:
        first, last = int(ranked[run[0]]), int(ranked[run[-1]]) + 1
        at = order[run]
        if (np.diff(at) == 1).all() and out.flags.c_contiguous:  # in order: read in place
            source.read_into(first, last, out[at[0]:at[0] + len(at)])
        else:
            out[at] = native(source.read(first, last))
    return out


def scan_reference(source, ref_index, preprocess) -> np.ndarray:
    """The reference pattern taken from the scan, averaged with its neighbours as every point is."""
    return read_points(source, preprocess, [scan_io.flat_index(source, ref_index)])[0]


def reference_set(source, preprocess, *, ref=None, ref_index=None, index=None) -> ReferenceSet:
    """The references of a run: an image file (``ref``), or scan points (``ref_index``: one
    point, ``N`` or ``(row, col)``, or a list of them with ``index`` (rows, cols) or flat
    giving each point's reference).

    Raises InputError naming the file when a reference does not fit the scan.
    """
    if (ref is None) == (ref_index is None):
        raise InputError("give a reference: ref (an image file) or ref_index (a scan point), one of them")
    if ref is not None:
        pattern = native(scan_io.read_reference(ref))
        if pattern.shape != source.pattern_shape:
            raise InputError(f"reference is {pattern.shape[1]}x{pattern.shape[0]} px but the scan's "
                             f"patterns are {source.pattern_shape[1]}x{source.pattern_shape[0]} px", ref)
        if index is not None:
            raise InputError("a per-point reference index needs several references (ref_index as a list)")
        return ReferenceSet.single(pattern, {"file": os.path.basename(os.fspath(ref))})
    check_averaging(preprocess, source)
    points = list(ref_index) if _is_point_list(ref_index) else [ref_index]
    if len(points) > 1 and index is None:
        raise InputError(f"{len(points)} reference points need an index saying which one each scan point uses")
    # in one call: points near one another share their reads
    patterns = read_points(source, preprocess, [scan_io.flat_index(source, p) for p in points])
    labels = tuple({"point": _jsonable_point(p)} for p in points)
    flat = None
    if index is not None:
        flat = np.asarray(index).reshape(-1)
        if flat.size != source.grid.size:
            raise InputError(f"the reference index covers {flat.size} points; the scan has {source.grid.size}",
                             source.path)
    try:
        return ReferenceSet(patterns, flat, labels)
    except ValueError as e:
        raise InputError(str(e), source.path) from None


def _is_point_list(ref_index) -> bool:
    # (row, col) is one point; [p, q, ...] of ints or pairs is several.
    if isinstance(ref_index, list):
        return True
    return isinstance(ref_index, tuple) and len(ref_index) > 0 and not all(np.ndim(v) == 0 for v in ref_index)


def _jsonable_point(p):
    return int(p) if np.ndim(p) == 0 else [int(v) for v in p]


def mean_pattern(source, backend, batch=64) -> np.ndarray:
    """Mean of the scan's patterns; points without a pattern (not present, all zeros) left out."""
    xp = backend.xp
    acc = xp.zeros(source.pattern_shape, dtype=xp.float64)
    count = 0
    present = None if source.present is None else source.present.reshape(-1)
    for a in range(0, source.n_patterns, batch):
        b = min(a + batch, source.n_patterns)
        x = xp.asarray(native(source.read(a, b)))
        keep = (x.reshape(b - a, -1) != 0).any(axis=1)
        if present is not None:
            keep &= xp.asarray(present[a:b])
        acc += x[keep].astype(xp.float64).sum(axis=0)
        count += int(keep.sum())
    if count == 0:
        raise InputError("holds no patterns to average for a static background", source.path)
    return backend.asnumpy(acc / count)


def static_background(spec, source, backend=None):
    """The static background ``spec`` names, (H, W) or None: ``None``; ``"mean"`` (of the scan's
    patterns; needs ``backend``); ``"file"`` (the one the vendor stored in the scan); an image."""
    if spec is None:
        return None
    if spec == "mean":
        return mean_pattern(source, backend)
    if spec == "file":
        bg = source.static_background()
        if bg is None:
            raise InputError(f"preprocess.static_background 'file': this {source.format} scan stores no static "
                             "background (use 'mean' or an image)", source.path)
        where = source.path
    else:
        bg, where = scan_io.read_reference(spec), spec
    bg = native(np.asarray(bg))
    if bg.shape != source.pattern_shape:
        raise InputError(f"static background is {bg.shape[1]}x{bg.shape[0]} px but the scan's patterns "
                         f"are {source.pattern_shape[1]}x{source.pattern_shape[0]} px", where)
    return bg
