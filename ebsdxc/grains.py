"""Grains of a polycrystal scan: segmentation, kernel average misorientation, a reference per grain.

Everything here works on the adjacency of scan points, :func:`neighbour_pairs`: the 4
neighbours of a square grid or the 6 of a hexagonal one (EDAX/TSL's layout, see
:class:`ebsdxc.io.ScanGrid`). A grain is a connected set of scan points:

- from orientations (:func:`segment`): neighbours join when their misorientation, the
  smallest over the crystal's Laue group, is below a tolerance; points of different phases
  never join;
- without orientations (:func:`segment_by_similarity`): neighbours join when the normalised
  cross-correlation of their whole patterns (:func:`pattern_similarity`) is high compared
  with what each of the two points reaches with its other neighbours;
- or from a file of grain IDs (:func:`grain_ids_from_file`).

Grain maps are ``(rows, cols)`` int32: ids ``0 .. n_grains - 1`` numbered by each grain's
first point in row-major order, ``-1`` for points in no grain (not indexed, no pattern,
padding slots of a hexagonal grid, grains smaller than a minimum size). Small grains are
never merged into a neighbour: they are left without a grain and reported.

A reference point per grain (:func:`choose_references`, :func:`references_from_file`) is an
``(n_grains, 2)`` int64 array of ``[row, col]``, ``[-1, -1]`` for a grain without a usable
point, together with one reason string per grain (``None`` where a point was found).

Orientations are matrices ``g`` (sample -> crystal, ``v_c = g v_s``), ``(rows, cols, 3, 3)``,
or Bunge Euler angles in degrees ``(rows, cols, 3)``; a point with any non-finite value is not
indexed. Misorientations are computed where the orientations live (NumPy or CuPy); the graph
work (connected components, distances) runs on the host.
"""

from __future__ import annotations

import math
import os

import numpy as np

from .backend import array_module, to_host
from .crystal import euler_to_matrix, laue_group, misorientation_angle
from .errors import InputError
from .io import ScanGrid

__all__ = ["REFERENCE_RULES", "neighbour_pairs", "segment", "segment_by_similarity", "pattern_similarity",
           "remove_small_grains", "kernel_average_misorientation", "mean_neighbour_similarity",
           "boundary_distance", "choose_references", "references_from_file", "grain_ids_from_file"]

#: Rules of :func:`choose_references`.
REFERENCE_RULES = ("kam", "quality", "centre")

# Pairs per misorientation call: bounds the (pairs, operators) trace array to ~50 MB.
_PAIR_CHUNK = 1 << 18
# The quality level of a grain is this quantile of its points' quality: its good points, not
# one outlier.
_QUALITY_QUANTILE = 0.9


# --------------------------------------------------------------------------- helpers


def _grid(rows, cols, kind, step=None) -> ScanGrid:
    for name, v in (("rows", rows), ("cols", cols)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise ValueError(f"{name} must be a whole number, got {v!r}")
    return ScanGrid(int(rows), int(cols), step=step, kind=kind)


def _map(name, a, rows, cols, dtype=None):
    """A (rows, cols) host array from a map argument, ValueError naming it otherwise."""
    a = to_host(a)
    if a.shape != (rows, cols):
        raise ValueError(f"{name} must have shape ({rows}, {cols}) like the scan, got {a.shape}")
    return a if dtype is None else a.astype(dtype, copy=False)


def _grain_map(grain_id):
    g = to_host(grain_id)
    if g.ndim != 2 or not np.issubdtype(g.dtype, np.integer):
        raise ValueError(f"grain_id must be a (rows, cols) integer map, got {g.dtype} of shape {g.shape}")
    return g.astype(np.int64)


def _relabel(labels: np.ndarray) -> np.ndarray:
    """Ids ``0..n-1`` in the order of each label's first point (row-major); negatives -> -1."""
    flat = labels.reshape(-1)
    out = np.full(flat.shape, -1, dtype=np.int32)
    inside = flat >= 0
    if not inside.any():
        return out.reshape(labels.shape)
    values, first = np.unique(flat[inside], return_index=True)
    new = np.empty(values.size, dtype=np.int32)
    new[np.argsort(first, kind="stable")] = np.arange(values.size, dtype=np.int32)
    out[inside] = new[np.searchsorted(values, flat[inside])]
    return out.reshape(labels.shape)


def _components(n_nodes, edges, ok) -> np.ndarray:
    """(n_nodes,) component labels of the graph of ``edges`` over the nodes ``ok``; -1 elsewhere."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(len(edges), dtype=np.int8), (edges[:, 0], edges[:, 1])),
                       shape=(n_nodes, n_nodes)).tocsr()
    _, labels = connected_components(graph, directed=False)
    labels = labels.astype(np.int64)
    labels[~ok] = -1
    return labels


def _check_min_size(min_grain_size) -> int:
    if not isinstance(min_grain_size, (int, np.integer)) or isinstance(min_grain_size, bool) or min_grain_size < 1:
        raise ValueError(f"min_grain_size must be a whole number of points >= 1, got {min_grain_size!r}")
    return int(min_grain_size)


# --------------------------------------------------------------------------- adjacency


def neighbour_pairs(rows: int, cols: int, *, kind: str = "square") -> np.ndarray:
    """Adjacent scan points of a grid, each pair once.

    Parameters
    ----------
    rows, cols : int
        Grid slots, as :class:`ebsdxc.io.ScanGrid`.
    kind : {"square", "hexagonal"}
        ``square``: the 4 neighbours left, right, up and down. ``hexagonal``: the 6 nearest
        neighbours of ScanGrid's layout (odd rows shifted half a step right; the padding slot
        at the end of every odd row is no scan point and has no neighbours).

    Returns
    -------
    (P, 2) int64 ndarray
        Flat slot indices ``[i, j]`` (``r * cols + c``) with ``i < j``, sorted by ``i`` then
        ``j``: the pairs of a block of scan rows are contiguous, so a caller can compute
        per-pair values block by block.
    """
    grid = _grid(rows, cols, kind)
    inside = grid.in_grid()
    r, c = np.mgrid[0:grid.rows, 0:grid.cols]
    odd = (r % 2).astype(bool)
    if grid.kind == "square":
        offsets = [((0, 1), (0, 1)), ((1, 0), (1, 0))]
    else:
        # (even-row offset, odd-row offset) of the forward neighbours: right, and the two
        # points of the next row that sit half a step to either side
        offsets = [((0, 1), (0, 1)), ((1, -1), (1, 0)), ((1, 0), (1, 1))]
    i_all, j_all = [], []
    for (dre, dce), (dro, dco) in offsets:
        r2 = r + np.where(odd, dro, dre)
        c2 = c + np.where(odd, dco, dce)
        ok = inside & (r2 < grid.rows) & (c2 >= 0) & (c2 < grid.cols)
        ok[ok] &= inside[r2[ok], c2[ok]]
        i_all.append((r * grid.cols + c)[ok])
        j_all.append((r2 * grid.cols + c2)[ok])
    i = np.concatenate(i_all).astype(np.int64)
    j = np.concatenate(j_all).astype(np.int64)
    order = np.lexsort((j, i))
    return np.stack([i[order], j[order]], axis=1)


# --------------------------------------------------------------------------- orientations


def _orientation_field(orientations):
    """(rows, cols, flat g (N, 3, 3) on its device, finite (N,) host bool)."""
    xp = array_module(orientations)
    o = xp.asarray(orientations, dtype=xp.float64)
    if o.ndim == 3 and o.shape[-1] == 3:
        o = euler_to_matrix(o, xp=xp)
    elif not (o.ndim == 4 and o.shape[-2:] == (3, 3)):
        raise ValueError("orientations must be (rows, cols, 3, 3) matrices g or (rows, cols, 3) Bunge Euler "
                         f"angles in degrees, got shape {o.shape}")
    rows, cols = o.shape[:2]
    g = o.reshape(rows * cols, 3, 3)
    finite = to_host(xp.isfinite(g).all(axis=(1, 2)))
    # non-finite points get the identity, so that no NaN reaches the symmetry reduction
    g = xp.where(xp.asarray(finite)[:, None, None], g, xp.eye(3))
    return rows, cols, g, finite


def _phase_groups(laue, phase, ok):
    """[(Laue group, (N,) bool host mask of its points)] and ``ok`` without negative phases.

    ``phase`` None: one group of all points. Otherwise one group per phase id present among
    ``ok`` points; a phase without a Laue group is a ValueError.
    """
    if phase is None:
        if isinstance(laue, (dict, list, tuple)):
            raise ValueError("laue per phase (a mapping or sequence) needs the phase map, phase=")
        return [(laue_group(laue), ok)], ok
    if not np.issubdtype(phase.dtype, np.integer):
        raise ValueError(f"phase must be an integer map, got {phase.dtype}")
    ok = ok & (phase >= 0)
    if isinstance(laue, dict):
        table = {int(k): v for k, v in laue.items()}
    elif isinstance(laue, (list, tuple)):
        table = dict(enumerate(laue))
    else:
        table = None
    groups = []
    for p in np.unique(phase[ok]):
        if table is not None and int(p) not in table:
            raise ValueError(f"laue gives no Laue group for phase {int(p)} "
                             f"({int((ok & (phase == p)).sum())} indexed points)")
        groups.append((laue_group(laue if table is None else table[int(p)]), ok & (phase == p)))
    return groups, ok


def _pair_angles(g, pairs, groups, xp) -> np.ndarray:
    """(P,) host float64 misorientations (radians) of the pairs whose points are both in one
    group; NaN for the others (different phases, points not indexed)."""
    out = np.full(len(pairs), np.nan)
    for laue, members in groups:
        sel = np.flatnonzero(members[pairs[:, 0]] & members[pairs[:, 1]])
        for a in range(0, sel.size, _PAIR_CHUNK):
            part = sel[a:a + _PAIR_CHUNK]
            i = xp.asarray(pairs[part, 0])
            j = xp.asarray(pairs[part, 1])
            out[part] = to_host(misorientation_angle(g[i], g[j], laue, xp=xp))
    return out


def _indexed_points(orientations, laue, phase, valid, kind):
    rows, cols, g, ok = _orientation_field(orientations)
    grid = _grid(rows, cols, kind)
    ok = ok & grid.in_grid().reshape(-1)
    if valid is not None:
        ok &= _map("valid", valid, rows, cols, bool).reshape(-1)
    ph = None if phase is None else _map("phase", phase, rows, cols).reshape(-1)
    groups, ok = _phase_groups(laue, ph, ok)
    pairs = neighbour_pairs(rows, cols, kind=kind)
    angles = _pair_angles(g, pairs, groups, array_module(g))
    return rows, cols, g, ok, pairs, angles


def segment(orientations, *, laue="m-3m", phase=None, valid=None, tolerance_deg: float = 5.0,
            min_grain_size: int = 1, kind: str = "square") -> np.ndarray:
    """Grains as connected regions of neighbours misoriented by less than a tolerance.

    Parameters
    ----------
    orientations : (rows, cols, 3, 3) or (rows, cols, 3) array
        Matrices ``g`` (sample -> crystal) or Bunge Euler angles in degrees, NumPy or CuPy.
        Points with a non-finite value are not indexed.
    laue : str or int, or dict or sequence of them
        The crystal's Laue group (anything :func:`ebsdxc.crystal.laue_group` accepts). With
        ``phase``: one for all phases, or one per phase id (``{1: "m-3m", 2: "6/mmm"}``, or a
        sequence indexed by phase id).
    phase : (rows, cols) int array, optional
        Phase of every point; negative = not indexed. Points of different phases never join
        a grain, whatever their orientations.
    valid : (rows, cols) bool array, optional
        Points to use (indexed, good enough); the others get no grain.
    tolerance_deg : float
        Neighbours join when their misorientation is below this, in degrees.
    min_grain_size : int
        Grains of fewer points get no grain (-1); they are not merged into a neighbour.
        :func:`remove_small_grains` does the same and lists them.
    kind : {"square", "hexagonal"}
        Scan grid kind, see :func:`neighbour_pairs`.

    Returns
    -------
    (rows, cols) int32 ndarray
        Grain ids ``0 .. n_grains - 1`` numbered by first point in row-major order, -1 for
        points in no grain.
    """
    if not (isinstance(tolerance_deg, (int, float, np.integer, np.floating)) and 0 < tolerance_deg < 180):
        raise ValueError(f"tolerance_deg must be a number of degrees between 0 and 180, got {tolerance_deg!r}")
    min_grain_size = _check_min_size(min_grain_size)
    rows, cols, _, ok, pairs, angles = _indexed_points(orientations, laue, phase, valid, kind)
    with np.errstate(invalid="ignore"):
        edge = angles < math.radians(tolerance_deg)
    labels = _components(rows * cols, pairs[edge], ok).reshape(rows, cols)
    return remove_small_grains(labels, min_grain_size)[0]


def remove_small_grains(grain_id, min_grain_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Take grains of fewer than ``min_grain_size`` points out of a grain map, and list them.

    Parameters
    ----------
    grain_id : (rows, cols) int array
        Any integer labels; negative = no grain.
    min_grain_size : int

    Returns
    -------
    grain_id : (rows, cols) int32 ndarray
        The grains left, renumbered ``0 .. n - 1`` by first point (row-major); -1 elsewhere.
    removed : (k, 3) int64 ndarray
        ``[row, col, n_points]`` of each grain taken out: its first point and its size, in
        row-major order of first points.
    """
    min_grain_size = _check_min_size(min_grain_size)
    labels = _relabel(_grain_map(grain_id))
    flat = labels.reshape(-1)
    sizes = np.bincount(flat[flat >= 0], minlength=1)
    small = np.flatnonzero(sizes < min_grain_size) if flat.max(initial=-1) >= 0 else np.empty(0, np.int64)
    if small.size == 0:
        return labels, np.empty((0, 3), dtype=np.int64)
    cols = labels.shape[1]
    # ids are numbered by first point, so the first point of grain k is the first index holding k
    inside = flat >= 0
    _, first = np.unique(flat[inside], return_index=True)
    first_flat = np.flatnonzero(inside)[first]
    removed = np.stack([first_flat[small] // cols, first_flat[small] % cols, sizes[small]], axis=1)
    dropped = np.zeros(sizes.size, dtype=bool)
    dropped[small] = True
    flat = np.where(inside & dropped[np.where(inside, flat, 0)], -1, flat)
    return _relabel(flat.reshape(labels.shape)), removed.astype(np.int64)


def kernel_average_misorientation(orientations, grain_id, *, laue="m-3m", phase=None, kind: str = "square",
                                  max_deg: float | None = None):
    """Kernel average misorientation: mean misorientation to the in-grain neighbours.

    First-order kernel: the neighbours of :func:`neighbour_pairs` that are in the same grain.

    Parameters
    ----------
    orientations : (rows, cols, 3, 3) or (rows, cols, 3) array
        As :func:`segment` takes them (NumPy or CuPy).
    grain_id : (rows, cols) int array
        Grain map; points in no grain (negative) have no KAM.
    laue, phase, kind
        As :func:`segment`.
    max_deg : float, optional
        Neighbours misoriented by more than this (degrees) are left out of the mean, as
        commercial software does to keep boundaries inside a grain map out of the KAM.

    Returns
    -------
    (rows, cols) float64 array, on the orientations' device
        KAM in radians; NaN where a point has no in-grain neighbour to average over.
    """
    if max_deg is not None and not (isinstance(max_deg, (int, float, np.integer, np.floating)) and max_deg > 0):
        raise ValueError(f"max_deg must be a positive number of degrees or None, got {max_deg!r}")
    rows, cols, g, ok, pairs, angles = _indexed_points(orientations, laue, phase, None, kind)
    gid = _map("grain_id", _grain_map(grain_id), rows, cols).reshape(-1)
    a, b = pairs[:, 0], pairs[:, 1]
    use = (gid[a] >= 0) & (gid[a] == gid[b]) & np.isfinite(angles)
    if max_deg is not None:
        use[use] &= angles[use] <= math.radians(max_deg)
    n = rows * cols
    ends = np.concatenate([a[use], b[use]])
    both = np.concatenate([angles[use], angles[use]])
    total = np.bincount(ends, weights=both, minlength=n)
    count = np.bincount(ends, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        kam = np.where(count > 0, total / np.maximum(count, 1), np.nan).reshape(rows, cols)
    xp = array_module(g)
    return kam if xp is np else xp.asarray(kam)


# --------------------------------------------------------------------------- pattern similarity


def pattern_similarity(a, b, xp=None, *, mask=None):
    """Zero-mean normalised cross-correlation of two stacks of patterns, row by row.

    Parameters
    ----------
    a, b : (n, H, W) arrays
        Patterns (preprocessed as the run preprocesses them), NumPy or CuPy.
    xp : module, optional
        ``numpy`` or ``cupy``; default: the module of ``a`` and ``b``.
    mask : (H, W) bool array, optional
        Pixels to compare (the detector screen); default all.

    Returns
    -------
    (n,) array
        NCC in [-1, 1] of ``a[k]`` and ``b[k]`` (float64 for float64 input, else float32),
        NaN where either pattern is constant.
    """
    xp = xp or array_module(a, b)
    a = xp.asarray(a)
    b = xp.asarray(b)
    if a.shape != b.shape or a.ndim != 3:
        raise ValueError(f"a and b must be two (n, H, W) stacks of one shape, got {a.shape} and {b.shape}")
    dtype = xp.float64 if xp.float64 in (a.dtype, b.dtype) else xp.float32
    n, shape = a.shape[0], tuple(a.shape[1:])
    a = a.reshape(n, -1).astype(dtype)
    b = b.reshape(n, -1).astype(dtype)
    if mask is not None:
        m = xp.asarray(mask, dtype=bool)
        if tuple(m.shape) != shape:
            raise ValueError(f"mask must be (H, W) = {shape} like the patterns, got shape {tuple(m.shape)}")
        idx = xp.flatnonzero(m.reshape(-1))
        a, b = a[:, idx], b[:, idx]
    a -= a.mean(axis=1, keepdims=True)
    b -= b.mean(axis=1, keepdims=True)
    num = (a * b).sum(axis=1)
    den = xp.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return xp.where(den > 0, num / xp.where(den > 0, den, 1), xp.nan).astype(dtype)


def segment_by_similarity(similarity, *, rows: int, cols: int, kind: str = "square", threshold: float = 0.5,
                          min_similarity: float | None = None, valid=None, min_grain_size: int = 1) -> np.ndarray:
    """Grains of a scan without orientations, from the similarity of neighbouring patterns.

    A pair of neighbours ``i, j`` joins when ``s_ij >= threshold * max(m_i, m_j)`` and
    ``s_ij > 0``, where ``m_i`` is the highest similarity point ``i`` has with any neighbour
    (or, with ``min_similarity``, when ``s_ij >= min_similarity``).

    Why relative to the pair's own points and not one level for the scan: the NCC of two
    patterns of one grain is set by their noise and deformation, which differ from grain
    to grain (a grain in a poor orientation for the detector, a deformed grain) by more than
    a fixed or scan-wide threshold can allow; across a high-angle boundary the NCC of whole
    Kikuchi patterns falls to a small fraction of the in-grain level at any noise (at most
    0.13, against 0.2-0.9 within grains, on simulated Ni patterns of 0.5 to 1000 counts per
    pixel). Taking the larger
    of ``m_i`` and ``m_j`` keeps a point that resembles nothing (a bad pattern at a
    boundary) from bridging the two grains on either side of it: it stays alone.
    Boundaries of a few degrees (sub-grains) keep a high NCC and are not found.

    Parameters
    ----------
    similarity : (P,) array
        Similarity of each pair of :func:`neighbour_pairs` ``(rows, cols, kind=kind)``, in
        that order (e.g. :func:`pattern_similarity`); NaN = not comparable.
    rows, cols : int
        Scan grid.
    kind : {"square", "hexagonal"}
    threshold : float
        Fraction (0 to 1] of the local similarity level that a pair must reach to join.
    min_similarity : float, optional
        A fixed similarity (NCC, in (-1, 1)) a pair must reach to join, instead of the
        relative rule: for users who know their scan's levels.
    valid : (rows, cols) bool array, optional
        Points to use; points without any finite similarity are left out too.
    min_grain_size : int
        As :func:`segment`.

    Returns
    -------
    (rows, cols) int32 ndarray
        Grain ids as :func:`segment` gives them.
    """
    if not (isinstance(threshold, (int, float, np.integer, np.floating)) and 0 < threshold <= 1):
        raise ValueError(f"threshold must be a fraction in (0, 1], got {threshold!r}")
    if min_similarity is not None and not (
            isinstance(min_similarity, (int, float, np.integer, np.floating)) and -1 < min_similarity < 1):
        raise ValueError(f"min_similarity must be a correlation coefficient in (-1, 1) or None, "
                         f"got {min_similarity!r}")
    min_grain_size = _check_min_size(min_grain_size)
    pairs = neighbour_pairs(rows, cols, kind=kind)
    s = to_host(similarity).astype(np.float64, copy=False)
    if s.shape != (len(pairs),):
        raise ValueError(f"similarity must have one value per neighbour pair, ({len(pairs)},) for a "
                         f"{rows} x {cols} {kind} grid, got shape {s.shape}")
    n = rows * cols
    ok = _grid(rows, cols, kind).in_grid().reshape(-1)
    if valid is not None:
        ok &= _map("valid", valid, rows, cols, bool).reshape(-1)
    a, b = pairs[:, 0], pairs[:, 1]
    usable = ok[a] & ok[b] & np.isfinite(s)
    best = np.full(n, -np.inf)
    np.maximum.at(best, a[usable], s[usable])
    np.maximum.at(best, b[usable], s[usable])
    ok &= np.isfinite(best)
    edge = usable.copy()
    if min_similarity is None:
        level = np.maximum(best[a], best[b])
        edge[usable] = (s[usable] > 0) & (s[usable] >= threshold * level[usable])
    else:
        edge[usable] = s[usable] >= min_similarity
    labels = _components(n, pairs[edge], ok).reshape(rows, cols)
    return remove_small_grains(labels, min_grain_size)[0]


def mean_neighbour_similarity(similarity, grain_id, *, kind: str = "square") -> np.ndarray:
    """Mean similarity of every point to its neighbours in the same grain.

    What :func:`kernel_average_misorientation` is to orientations, for a scan without them:
    a pattern quality (and, turned round, a local deformation measure) for
    :func:`choose_references`.

    Parameters
    ----------
    similarity : (P,) array
        Per pair of :func:`neighbour_pairs`, as :func:`segment_by_similarity` takes it.
    grain_id : (rows, cols) int array
    kind : {"square", "hexagonal"}

    Returns
    -------
    (rows, cols) float64 ndarray
        Mean of the finite similarities to in-grain neighbours; NaN where there is none.
    """
    gid = _grain_map(grain_id)
    rows, cols = gid.shape
    pairs = neighbour_pairs(rows, cols, kind=kind)
    s = to_host(similarity).astype(np.float64, copy=False)
    if s.shape != (len(pairs),):
        raise ValueError(f"similarity must have one value per neighbour pair, ({len(pairs)},) for a "
                         f"{rows} x {cols} {kind} grid, got shape {s.shape}")
    flat = gid.reshape(-1)
    a, b = pairs[:, 0], pairs[:, 1]
    use = (flat[a] >= 0) & (flat[a] == flat[b]) & np.isfinite(s)
    ends = np.concatenate([a[use], b[use]])
    total = np.bincount(ends, weights=np.concatenate([s[use], s[use]]), minlength=flat.size)
    count = np.bincount(ends, minlength=flat.size)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan).reshape(rows, cols)


# --------------------------------------------------------------------------- references


def boundary_distance(grain_id, *, kind: str = "square", map_edge: bool = False) -> np.ndarray:
    """Steps from every grain point to the nearest point of another grain or of no grain.

    Steps are moves between neighbours (:func:`neighbour_pairs`) inside the point's own
    grain: a point next to another grain is 1 step away, its in-grain neighbours 2, ... The
    edge of the map is not a boundary (the grain may go on beyond it) unless ``map_edge``:
    then a point on it is 1 step away too (for choosing references, whose KAM should come from
    a full set of neighbours).

    Returns
    -------
    (rows, cols) float64 ndarray
        Steps; 0 for points in no grain, ``inf`` in a grain that touches no other grain and
        no point without a grain.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import dijkstra

    gid = _grain_map(grain_id)
    rows, cols = gid.shape
    flat = gid.reshape(-1)
    pairs = neighbour_pairs(rows, cols, kind=kind)
    a, b = pairs[:, 0], pairs[:, 1]
    differ = flat[a] != flat[b]
    edge_of = np.zeros(flat.size, dtype=bool)
    edge_of[a[differ]] = True
    edge_of[b[differ]] = True
    if map_edge:
        full = 6 if kind == "hexagonal" else 4
        degree = np.bincount(a, minlength=flat.size) + np.bincount(b, minlength=flat.size)
        edge_of |= degree < full
    edge_of &= flat >= 0
    out = np.where(flat >= 0, np.inf, 0.0)
    sources = np.flatnonzero(edge_of)
    if sources.size:
        same = ~differ & (flat[a] >= 0)
        graph = coo_matrix((np.ones(int(same.sum())), (a[same], b[same])), shape=(flat.size, flat.size)).tocsr()
        steps = dijkstra(graph, directed=False, indices=sources, unweighted=True, min_only=True)
        out = np.where(flat >= 0, steps + 1.0, 0.0)
    return out.reshape(rows, cols)


def _check_step(step, kind):
    if step is None:
        # a regular hexagonal grid: rows sqrt(3)/2 of a step apart, as EDAX/TSL scan them
        return (math.sqrt(3) / 2, 1.0) if kind == "hexagonal" else (1.0, 1.0)
    try:
        sy, sx = (float(v) for v in step)
    except (TypeError, ValueError):
        raise ValueError(f"step must be (step_y, step_x), got {step!r}") from None
    if not (sy > 0 and sx > 0 and math.isfinite(sy) and math.isfinite(sx)):
        raise ValueError(f"step must be two positive numbers (step_y, step_x), got {step!r}")
    return sy, sx


def choose_references(grain_id, *, rule: str = "kam", kam=None, quality=None, kind: str = "square",
                      min_boundary_distance: int = 2, quality_fraction: float = 0.5, min_grain_size: int = 1,
                      step=None) -> tuple[np.ndarray, list]:
    """One reference point per grain, chosen by a rule.

    The candidates of a grain are its points with a usable value (a finite KAM for rule
    ``kam``, a finite quality when ``quality`` is given) and good pattern quality (quality at
    least ``quality_fraction`` times the grain's 90th percentile of quality; no filter without
    a quality map), at least ``min_boundary_distance`` steps from the grain boundary and the
    map edge (:func:`boundary_distance` with ``map_edge``). A grain whose candidates all lie closer to its boundary (a
    small or thin grain) keeps those farthest from it rather than failing. Among the
    candidates:

    - ``kam``: the lowest kernel average misorientation (least deformed);
    - ``quality``: the highest pattern quality;
    - ``centre``: the point nearest the centroid of the whole grain (for a non-convex grain
      the centroid may lie outside; the point chosen is always one of the grain's).

    Ties go to the point farther from the boundary, then to the first in row-major order.

    Parameters
    ----------
    grain_id : (rows, cols) int array
        Grain ids 0..n-1, negative = no grain.
    rule : {"kam", "quality", "centre"}
    kam : (rows, cols) array, optional
        Kernel average misorientation (:func:`kernel_average_misorientation`); needed by
        ``kam``.
    quality : (rows, cols) array, optional
        Pattern quality, larger is better (image quality, band contrast, confidence index,
        mean similarity to the neighbours); needed by ``quality``.
    kind : {"square", "hexagonal"}
    min_boundary_distance : int
        Steps from the boundary a candidate should have (0 or 1: any point of the grain).
    quality_fraction : float
        In [0, 1]: the quality filter's fraction of the grain's quality level.
    min_grain_size : int
        Grains of fewer points get no reference.
    step : (float, float), optional
        (step_y, step_x) of the grid for the centroid of ``centre``; default 1 and, on a
        hexagonal grid, rows sqrt(3)/2 apart.

    Returns
    -------
    reference_point : (n_grains, 2) int64 ndarray
        ``[row, col]`` of each grain's reference, ``[-1, -1]`` where there is none
        (``n_grains`` = largest id + 1).
    reasons : list of (str or None)
        Per grain: why it has no reference (``"grain 7: 3 points, fewer than min_grain_size
        5"``), or None.
    """
    if rule not in REFERENCE_RULES:
        raise ValueError(f"rule must be one of {', '.join(REFERENCE_RULES)}, got {rule!r}")
    if not isinstance(min_boundary_distance, (int, np.integer)) or min_boundary_distance < 0:
        raise ValueError(f"min_boundary_distance must be a whole number of steps >= 0, got {min_boundary_distance!r}")
    if not (isinstance(quality_fraction, (int, float, np.integer, np.floating)) and 0 <= quality_fraction <= 1):
        raise ValueError(f"quality_fraction must be a fraction in [0, 1], got {quality_fraction!r}")
    min_grain_size = _check_min_size(min_grain_size)
    gid = _grain_map(grain_id)
    rows, cols = gid.shape
    if rule == "kam" and kam is None:
        raise ValueError("rule kam needs the kam map (kernel_average_misorientation)")
    if rule == "quality" and quality is None:
        raise ValueError("rule quality needs the quality map")
    kam = None if kam is None else _map("kam", kam, rows, cols, np.float64).reshape(-1)
    quality = None if quality is None else _map("quality", quality, rows, cols, np.float64).reshape(-1)
    # the map edge counts: a KAM from fewer neighbours is noisier, so its minimum is biased there
    dist = boundary_distance(gid, kind=kind, map_edge=True).reshape(-1)
    sy, sx = _check_step(step, kind)
    pos = _grid(rows, cols, kind, step=(sy, sx)).positions().reshape(-1, 2)

    flat = gid.reshape(-1)
    n_grains = int(flat.max(initial=-1)) + 1
    inside = np.flatnonzero(flat >= 0)
    # the points of every grain, each group in row-major order
    order = inside[np.argsort(flat[inside], kind="stable")]
    bounds = np.concatenate([[0], np.cumsum(np.bincount(flat[inside], minlength=n_grains))])
    refs = np.full((n_grains, 2), -1, dtype=np.int64)
    reasons: list = [None] * n_grains
    for k in range(n_grains):
        pts = order[bounds[k]:bounds[k + 1]]
        if pts.size == 0:
            reasons[k] = f"grain {k}: no points"
            continue
        if pts.size < min_grain_size:
            reasons[k] = f"grain {k}: {pts.size} point{'s' if pts.size > 1 else ''}, fewer than " \
                         f"min_grain_size {min_grain_size}"
            continue
        usable = np.ones(pts.size, dtype=bool)
        if rule == "kam":
            usable &= np.isfinite(kam[pts])
            if not usable.any():
                reasons[k] = f"grain {k}: no point with a finite KAM"
                continue
        if quality is not None:
            q = quality[pts]
            usable &= np.isfinite(q)
            if not usable.any():
                reasons[k] = f"grain {k}: no point with a finite quality" + (" and KAM" if rule == "kam" else "")
                continue
            level = np.quantile(q[usable], _QUALITY_QUANTILE)
            if level > 0:
                usable &= q >= quality_fraction * level
        d = dist[pts]
        usable &= d >= min(float(min_boundary_distance), d[usable].max())
        cand = pts[usable]
        if rule == "kam":
            score = kam[cand]
        elif rule == "quality":
            score = -quality[cand]
        else:
            centroid = pos[pts].mean(axis=0)
            score = ((pos[cand] - centroid) ** 2).sum(axis=1)
        # lexsort: last key first; cand is in row-major order, so stable ties keep the first
        best = cand[np.lexsort((-dist[cand], score))[0]]
        refs[k] = (best // cols, best % cols)
    return refs, reasons


# --------------------------------------------------------------------------- files


def _numbers_in_text(path) -> list[tuple[int, list[str]]]:
    """(line number, fields) of the non-empty, non-comment lines of a text file."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read it as text: {e}", path) from None
    out = []
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].replace(",", " ").replace(";", " ").split()
        if text:
            out.append((number, text))
    return out


def references_from_file(path, grain_id) -> tuple[np.ndarray, list]:
    """Reference points from a text file of ``row,col`` lines, one per grain.

    Each point belongs to the grain it lies in. Blank lines and ``#`` comments are skipped, a
    first line of words (``row,col``) is a header; commas, semicolons, tabs or spaces separate
    the two whole numbers.

    Parameters
    ----------
    path : str or os.PathLike
    grain_id : (rows, cols) int array
        The grain map the points refer to.

    Returns
    -------
    reference_point, reasons
        As :func:`choose_references`; a grain the file lists no point for has ``[-1, -1]``
        and the reason ``"grain 3: no point listed in FILE"``.

    Raises
    ------
    InputError
        Naming the file and line: a line that is not two whole numbers, a point outside the
        scan or in no grain, a second point in one grain.
    """
    gid = _grain_map(grain_id)
    rows, cols = gid.shape
    n_grains = int(gid.max(initial=-1)) + 1
    refs = np.full((n_grains, 2), -1, dtype=np.int64)
    line_of = {}
    entries = _numbers_in_text(path)
    for pos, (number, fields) in enumerate(entries):
        try:
            r, c = (int(v) for v in fields)
        except ValueError:
            if pos == 0 and not any(ch.isdigit() for ch in "".join(fields)):
                continue  # a header
            raise InputError(f"line {number}: expected two whole numbers row,col, got {' '.join(fields)!r}",
                             path) from None
        if not (0 <= r < rows and 0 <= c < cols):
            raise InputError(f"line {number}: point ({r}, {c}) lies outside the {rows} x {cols} scan", path)
        k = int(gid[r, c])
        if k < 0:
            raise InputError(f"line {number}: point ({r}, {c}) lies in no grain", path)
        if k in line_of:
            raise InputError(f"line {number}: point ({r}, {c}) lies in grain {k}, which line {line_of[k]} "
                             f"already gives a reference", path)
        line_of[k] = number
        refs[k] = (r, c)
    name = os.path.basename(os.fspath(path))
    reasons = [None if k in line_of else f"grain {k}: no point listed in {name}" for k in range(n_grains)]
    return refs, reasons


def _split_dataset(path):
    """(file, dataset or None) of ``file.h5:/dataset`` (a path that exists is a plain file)."""
    path = os.fspath(path)
    if os.path.exists(path):
        return path, None
    head, sep, tail = path.rpartition(":")
    if sep and head and os.path.isfile(head):
        return head, tail or "/"
    raise InputError("no such file", path)


def grain_ids_from_file(path, rows: int, cols: int, *, kind: str = "square") -> np.ndarray:
    """A grain map from a file: CSV or whitespace text, ``.npy``, or an HDF5 dataset.

    Parameters
    ----------
    path : str or os.PathLike
        ``ids.csv`` (``rows`` lines of ``cols`` numbers, or one number per line in
        row-major order; ``#`` comments), ``ids.npy``, or ``file.h5:/path/to/dataset``.
    rows, cols : int
        The scan grid; the map must be (rows, cols), or rows * cols values in row-major
        order (a 1-D array, one value per line).
    kind : {"square", "hexagonal"}
        Padding slots of a hexagonal grid get no grain whatever the file says.

    Returns
    -------
    (rows, cols) int32 ndarray
        The file's grains renumbered ``0 .. n - 1`` by first point (row-major); negative or
        NaN values mean no grain.

    Raises
    ------
    InputError
        Naming the file: unreadable, not whole numbers, or another shape than the scan's.
    """
    grid = _grid(rows, cols, kind)
    file, dataset = _split_dataset(path)
    ext = os.path.splitext(file)[1].lower()
    try:
        if dataset is not None or ext in (".h5", ".hdf5", ".hdf", ".he5", ".h5oina"):
            import h5py

            if dataset is None:
                raise InputError("name the dataset of grain IDs as FILE.h5:/path/to/dataset", file)
            with h5py.File(file, "r") as f:
                if not isinstance(f.get(dataset), h5py.Dataset):
                    raise InputError(f"has no dataset {dataset!r}", file)
                values = f[dataset][()]
        elif ext == ".npy":
            values = np.load(file, allow_pickle=False)
        else:
            entries = _numbers_in_text(file)
            values = np.array([[float(v) for v in fields] for _, fields in entries], dtype=np.float64)
    except InputError:
        raise
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read grain IDs: {e}", path) from None
    values = np.asarray(values)
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]  # one value per line
    if values.shape not in ((rows, cols), (rows * cols,)):
        raise InputError(f"grain IDs have shape {values.shape}, the scan is {rows} x {cols} points", path)
    if not (np.issubdtype(values.dtype, np.integer) or np.issubdtype(values.dtype, np.floating)):
        raise InputError(f"grain IDs must be numbers, got {values.dtype}", path)
    values = values.reshape(rows, cols).astype(np.float64)
    finite = np.isfinite(values)
    if (values[finite] != np.round(values[finite])).any():
        raise InputError("grain IDs must be whole numbers", path)
    ids = np.where(finite, values, -1).astype(np.int64)
    ids[~grid.in_grid()] = -1
    return _relabel(ids)
