"""Float64 oracles of the correlation, shared by the CPU and GPU tests of the engines and forms."""

from __future__ import annotations

import numpy as np


def direct_oracle(ref, scan, n, max_lag):
    """float64 definition: lag (dy, dx) = sum over the overlap of ref[y, x] * scan[y + dy, x + dx]."""
    from scipy.signal import correlate2d

    T, h, w = scan.shape
    ry, rx = max_lag
    out = np.empty((T, 2 * ry + 1, 2 * rx + 1))
    for t in range(T):
        full = correlate2d(scan[t].astype(np.float64), ref[t % n].astype(np.float64), mode="full")
        for dy in range(-ry, ry + 1):
            for dx in range(-rx, rx + 1):
                out[t, dy % (2 * ry + 1), dx % (2 * rx + 1)] = full[dy + h - 1, dx + w - 1]
    return out
