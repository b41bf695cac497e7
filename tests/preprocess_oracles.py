"""Float64 oracles and helpers shared by the preprocessing tests (tests/preprocess/).

Each oracle is written from the definition of the step it checks (loops where practical).
"""

from __future__ import annotations

import zlib

import numpy as np


def host(a):
    """NumPy copy of a NumPy or CuPy array."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def seeded(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def bin_oracle(x, f):
    x = np.asarray(x, dtype=np.float64)
    H, W = x.shape[-2:]
    out = np.empty(x.shape[:-2] + (H // f, W // f))
    for i in range(H // f):
        for j in range(W // f):
            out[..., i, j] = x[..., i * f:(i + 1) * f, j * f:(j + 1) * f].mean(axis=(-2, -1))
    return out


def mask_oracle(shape, centre=None, radius=None):
    H, W = shape
    cx, cy = ((W - 1) / 2, (H - 1) / 2) if centre is None else centre
    r = min(H, W) / 2 if radius is None else radius
    m = np.zeros(shape, bool)
    for i in range(H):  # row = y
        for j in range(W):  # column = x
            m[i, j] = (j - cx) ** 2 + (i - cy) ** 2 <= r * r
    return m


def fill_oracle(x, mask):
    """Off-screen pixels take the mean of the finite on-screen pixels; on-screen NaNs stay."""
    x = np.asarray(x, dtype=np.float64)
    out = x.copy()
    for b in range(len(x)):
        ok = mask & np.isfinite(x[b])
        out[b][~mask] = x[b][ok].mean() if ok.any() else 0.0
    return out


def kikuchi_like(shape, seed):
    """Smooth band texture around 1 (Kikuchi bands: Gaussian-profile lines)."""
    H, W = shape
    y, x = np.mgrid[0:H, 0:W].astype(float)
    rng = np.random.default_rng(seed)
    tex = np.ones(shape)
    for _ in range(12):
        th, off = rng.uniform(0, np.pi), rng.uniform(-60, 60)
        wd, a = rng.uniform(2, 5), rng.uniform(0.1, 0.3)
        d = (x - W / 2) * np.cos(th) + (y - H / 2) * np.sin(th) - off
        tex += a * np.exp(-d**2 / (2 * wd**2))
    return tex
