"""The interface every scan reader returns."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..errors import InputError


@dataclass(frozen=True)
class ScanGrid:
    """Where the patterns of a scan sit on the sample.

    ``rows`` x ``cols`` points in row-major order (a 1-D scan has ``rows == 1``).
    ``step`` is (step_y, step_x) in micrometres when the file says, else ``None``.
    """

    rows: int
    cols: int
    step: tuple[float, float] | None = None
    kind: str = "square"

    @property
    def size(self) -> int:
        return self.rows * self.cols


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
        Format-specific extras (pattern centre, dataset name, ...), JSON-serialisable.
    """

    format: str = "?"

    def __init__(self, path, *, grid: ScanGrid, pattern_shape, dtype, metadata=None):
        self.path = os.fspath(path)
        self.grid = grid
        self.pattern_shape = (int(pattern_shape[0]), int(pattern_shape[1]))
        self.dtype = np.dtype(dtype)
        self.metadata = dict(metadata or {})

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

        ``out`` may be a pinned host buffer; readers must fill it in place.
        """
        raise NotImplementedError

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
                     "step": self.grid.step, "kind": self.grid.kind},
            "pattern_shape": list(self.pattern_shape),
            "dtype": self.dtype.name,
            "n_patterns": self.n_patterns,
            **({"metadata": self.metadata} if self.metadata else {}),
        }


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

