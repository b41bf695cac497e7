"""Lazy, strided access to a results file for drawing maps.

Maps are read block of scan rows by block of scan rows, every ``stride``-th point, so a figure
of a 10^6-point scan never holds a whole dataset: a map has at most ``max_points`` points.
"""

from __future__ import annotations

import json
import math
import os

import h5py
import numpy as np

from ..errors import InputError
from ..io.results import GROUP, ResultsHandle, require_results

ROW_BLOCK = 64  # scan rows read at once (results are chunked by scan row)


class ResultsView(ResultsHandle):
    """An open results file (read only) and what maps need to know about its grid.

    Parameters
    ----------
    path : str or os.PathLike
        An ebsdxc results file.
    """

    def __init__(self, path):
        self.path = require_results(os.fspath(path))
        self._f = h5py.File(self.path, "r")
        g = self.g = self._f[GROUP]
        a = g.attrs
        self.rows, self.cols, self.n_roi = g["status"].shape
        self.grid_kind = str(a.get("grid_kind", "square"))
        step = a.get("step")
        self.step = None if step is None else (float(step[0]), float(step[1]))  # (sy, sx)
        self.centres = g["roi/centers"][...]
        self.roi_size = tuple(int(v) for v in g["roi/size"][...])
        self.parameters = json.loads(a["parameters"])
        self.inputs = {i["name"]: i for i in json.loads(a["inputs"])}
        self.pattern_shape = tuple(int(v) for v in a.get("pattern_shape", ()))
        self.complete = bool(a["complete"])

    def has(self, name) -> bool:
        return name in self.g

    # -- geometry ------------------------------------------------------------------------
    @property
    def units(self) -> str:
        return "µm" if self.step is not None else "scan steps"

    def stride(self, max_points: int) -> int:
        """Every how many rows and columns a map of at most ``max_points`` points is read."""
        s = max(1, math.ceil(math.sqrt(self.rows * self.cols / max(int(max_points), 1))))
        if self.grid_kind == "hexagonal" and s > 1 and s % 2:
            s += 1  # even rows only: every read row has the same offset (drawn as a square grid)
        return s

    def flat_index(self, point) -> int:
        """A scan point given as a flat index or (row, col), checked against the grid."""
        if isinstance(point, (tuple, list, np.ndarray)):
            r, c = (int(v) for v in point)
            if not (0 <= r < self.rows and 0 <= c < self.cols):
                raise ValueError(f"scan point ({r}, {c}) is outside the {self.rows} x {self.cols} grid")
            return r * self.cols + c
        i = int(point)
        if not 0 <= i < self.rows * self.cols:
            raise ValueError(f"scan point {i} is outside the {self.rows * self.cols} points of the scan")
        return i

    def extent(self, stride: int, image_shape) -> tuple[float, float, float, float]:
        """imshow extent (left, right, bottom, top) of an image from :meth:`to_image`."""
        sy, sx = self.step if self.step is not None else (1.0, 1.0)
        sy, sx = sy * stride, sx * stride
        h, w = image_shape
        if self.grid_kind == "hexagonal" and stride == 1:
            return (-sx / 2, -sx / 2 + w * sx / 2, (h - 0.5) * sy, -sy / 2)  # bricks: half-step columns
        return (-sx / 2, (w - 0.5) * sx, (h - 0.5) * sy, -sy / 2)

    def image_shape(self, map_shape, stride: int) -> tuple[int, int]:
        """Shape of :meth:`to_image` of a ``map_shape`` (rows', cols') map."""
        h, w = (int(v) for v in map_shape[:2])
        return (h, 2 * w + 1) if self.grid_kind == "hexagonal" and stride == 1 else (h, w)

    def padding(self, map_shape, stride: int) -> np.ndarray:
        """(rows', cols') bool: slots of a map read with ``stride`` that are no scan point (the
        last slot of every odd row of a hexagonal grid)."""
        pad = np.zeros(tuple(int(v) for v in map_shape[:2]), dtype=bool)
        if self.grid_kind == "hexagonal" and stride == 1:
            pad[1::2, -1] = True
        return pad

    def xy(self, rows, cols) -> np.ndarray:
        """(n, 2) [x, y] map coordinates of scan points (rows, cols): x = column x step (odd
        rows of a hexagonal grid half a step further), y = row x step, as ``/ebsdxc/positions``."""
        sy, sx = self.step if self.step is not None else (1.0, 1.0)
        r = np.asarray(rows, dtype=np.float64).ravel()
        c = np.asarray(cols, dtype=np.float64).ravel()
        if self.grid_kind == "hexagonal":
            c = c + 0.5 * (r % 2)
        return np.stack([c * sx, r * sy], axis=-1)

    def to_image(self, values: np.ndarray, stride: int) -> np.ndarray:
        """A (rows', cols') map as an image: hexagonal grids read whole become 'bricks', two
        image columns per point with odd rows shifted by one (half a step), so every point
        sits where ``/ebsdxc/positions`` puts it. Padding slots are NaN."""
        if self.grid_kind != "hexagonal" or stride != 1:
            return values
        h, w = values.shape
        img = np.full((h, 2 * w + 1), np.nan, dtype=np.float64)
        for parity in (0, 1):
            v = values[parity::2]
            img[parity::2, parity:parity + 2 * w:2] = v
            img[parity::2, parity + 1:parity + 1 + 2 * w:2] = v
        return img

    # -- reading -------------------------------------------------------------------------
    def read_map(self, name: str, index=(), *, stride: int = 1, reduce=None, dtype=np.float64) -> np.ndarray:
        """``dataset[::stride, ::stride, *index]`` read in blocks of rows, optionally reduced.

        ``reduce(block)`` turns a (r, c, ...) block into (r, c, ...) values (e.g. a mean over
        ROIs) before it is kept, so only the reduced map is ever held whole.
        """
        if name not in self.g:
            raise InputError(f"holds no '{name}' dataset", self.path)
        ds = self.g[name]
        out = []
        for r0 in range(0, self.rows, ROW_BLOCK * stride):
            r1 = min(self.rows, r0 + ROW_BLOCK * stride)
            block = ds[(slice(r0, r1, stride), slice(None, None, stride), *index)]
            out.append(np.asarray(reduce(block) if reduce is not None else block, dtype=dtype))
        return np.concatenate(out, axis=0)

    def point(self, name: str, point):
        """One scan point's values of dataset ``name``."""
        i = self.flat_index(point)
        return self.g[name][i // self.cols, i % self.cols]

    def input_path(self, role: str):
        """The recorded path of the scan (``role="scan"``) or reference file, if it still exists."""
        name = self.parameters.get(role)
        rec = self.inputs.get(name) if name else None
        path = rec.get("path") if rec else None
        return path if path and os.path.exists(path) else None
