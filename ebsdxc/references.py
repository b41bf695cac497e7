"""Reference patterns as an input of their own: K references and a reference index per scan point.

A :class:`ReferenceSet` holds the raw reference patterns (one, one per grain, or one per
simulated orientation) and, for every scan point, which of them it is correlated with.
One reference is the case K = 1 (``index`` is ``None``: every point uses reference 0).
Where the patterns come from (an image file, scan points, simulation) is the caller's
business; what each one is is kept in ``labels`` and recorded with the results.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["ReferenceSet"]


@dataclass(frozen=True)
class ReferenceSet:
    """K reference patterns and the reference of every scan point.

    Attributes
    ----------
    patterns : (K, H, W) ndarray
        Raw reference patterns, native byte order, as a scan pattern arrives (before any
        preprocessing: the pipeline preprocesses them as it preprocesses the scan).
    index : (n_points,) int32 ndarray or None
        Reference of each flat scan point (``row * cols + col``), in ``0 .. K-1``; ``None``
        when every point uses reference 0.
    labels : tuple of dict
        What each reference is, JSON-able (``{"file": "ref.tif"}``, ``{"point": [r, c]}``).
    """

    patterns: np.ndarray
    index: np.ndarray | None = None
    labels: tuple = field(default=())

    def __post_init__(self):
        p = np.asarray(self.patterns)
        if p.ndim == 2:
            p = p[None]
        if p.ndim != 3 or p.shape[0] < 1:
            raise ValueError(f"patterns must be (K, H, W) with K >= 1, got shape {np.shape(self.patterns)}")
        object.__setattr__(self, "patterns", p.astype(p.dtype.newbyteorder("="), copy=False))
        if self.index is not None:
            idx = np.asarray(self.index)
            if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
                raise ValueError(f"index must be a 1-D integer array, got {idx.dtype} of shape {idx.shape}")
            if idx.size and (idx.min() < 0 or idx.max() >= p.shape[0]):
                raise ValueError(f"index must lie in 0..{p.shape[0] - 1} (one of the {p.shape[0]} references), "
                                 f"got values from {idx.min()} to {idx.max()}")
            object.__setattr__(self, "index", idx.astype(np.int32, copy=False))
        labels = tuple(self.labels) or tuple({} for _ in range(p.shape[0]))
        if len(labels) != p.shape[0]:
            raise ValueError(f"labels must name each of the {p.shape[0]} references, got {len(labels)}")
        object.__setattr__(self, "labels", labels)

    @classmethod
    def single(cls, pattern, label: dict | None = None) -> ReferenceSet:
        """One reference for every point."""
        return cls(np.asarray(pattern)[None], None, (label or {},))

    @property
    def count(self) -> int:
        """K, the number of references."""
        return int(self.patterns.shape[0])

    @property
    def pattern_shape(self) -> tuple[int, int]:
        return tuple(int(v) for v in self.patterns.shape[1:])

    def check_points(self, n_points: int) -> None:
        """ValueError unless ``index`` covers exactly ``n_points`` scan points."""
        if self.index is not None and self.index.size != n_points:
            raise ValueError(f"index gives a reference for {self.index.size} points, the scan has {n_points}")

    def of(self, start: int, stop: int) -> np.ndarray | None:
        """References of flat points ``start:stop`` (int32), or ``None`` when all use reference 0."""
        return None if self.index is None else self.index[start:stop]
