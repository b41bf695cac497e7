"""Categorical colours that differ between neighbours (overlapping ROIs, adjacent grains)."""

from __future__ import annotations

import numpy as np

__all__ = ["PALETTE", "distinct_colours", "label_pairs"]

#: Qualitative colours that read on a grey pattern and on each other (matplotlib's tab10
#: without its grey, then three more); grey itself is kept for "no grain".
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
           "#ffd92f", "#00d084", "#f032e6")


def distinct_colours(n: int, pairs, *, n_colours: int = len(PALETTE)) -> np.ndarray:
    """A colour index in ``0..n_colours-1`` for each of ``n`` items, different for every pair
    of neighbours ``pairs`` ((P, 2) item indices) wherever ``n_colours`` allow.

    Greedy colouring, items with the most neighbours first (Welsh and Powell): a planar
    neighbourhood such as a grain map needs at most six colours this way. An item whose
    neighbours already use every colour takes the one they use least.

    Returns
    -------
    (n,) int64 ndarray
    """
    n = int(n)
    if n_colours < 1:
        raise ValueError(f"n_colours must be at least 1, got {n_colours}")
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    if pairs.size and (pairs.min() < 0 or pairs.max() >= n):
        raise ValueError(f"pairs must name items 0..{n - 1}")
    both = np.concatenate([pairs, pairs[:, ::-1]])
    both = np.unique(both, axis=0) if both.size else both
    starts = np.searchsorted(both[:, 0], np.arange(n + 1)) if both.size else np.zeros(n + 1, np.int64)
    degree = np.diff(starts)
    colour = np.full(n, -1, dtype=np.int64)
    for i in np.argsort(-degree, kind="stable"):
        near = colour[both[starts[i]:starts[i + 1], 1]]
        used = np.bincount(near[near >= 0], minlength=n_colours)
        free = np.flatnonzero(used == 0)
        colour[i] = free[0] if free.size else int(np.argmin(used))
    return colour


def label_pairs(labels: np.ndarray, point_pairs) -> np.ndarray:
    """Pairs of different labels that meet across neighbouring points ``point_pairs``
    ((P, 2) flat indices into ``labels``); labels below 0 (none) are left out. Each pair once."""
    flat = np.asarray(labels).ravel()
    a, b = flat[point_pairs[:, 0]], flat[point_pairs[:, 1]]
    keep = (a != b) & (a >= 0) & (b >= 0)
    p = np.sort(np.stack([a[keep], b[keep]], axis=1), axis=1)
    return np.unique(p, axis=0) if p.size else p.reshape(0, 2)
