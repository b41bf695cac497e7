"""kikuchipy's real Ni patterns (a 3x3 scan of 60x60 patterns) cut into prepared subregions,
for tests that hold the engines to the CPU float64 engine on real data."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest


def ni_patterns():
    """kikuchipy's nine real Ni patterns (9, 60, 60) in their stored dtype; skips where
    kikuchipy is missing."""
    import h5py

    spec = importlib.util.find_spec("kikuchipy")
    path = os.path.join(os.path.dirname(spec.origin), "data", "kikuchipy_h5ebsd", "patterns.h5") if spec else ""
    if not os.path.exists(path):
        pytest.skip("kikuchipy's Ni patterns are not installed")
    with h5py.File(path, "r") as f:
        return f["Scan 1/EBSD/Data/patterns"][()]


def ni_tiles(size=24):
    """(tiles, energies, statuses) of nine ``size`` px ROIs on a 3x3 grid of each of the nine
    patterns, windowed and prepared as the runner does; skips where kikuchipy is missing."""
    from ebsdxc.preprocess import prepare_tiles, window_2d
    from ebsdxc.rois import extract_tiles, grid_layout

    pats = ni_patterns().astype(np.float32)
    tiles = extract_tiles(pats, grid_layout(pats.shape[1:], grid=(3, 3), size=size), dtype=np.float32)
    return prepare_tiles(tiles, window_2d((size, size)))
