"""Images with exactly known deformations for the IC-GN and DIC tests: a band-limited analytic
texture (a sum of plane waves) evaluated at the inverse-mapped position of every pixel."""

from __future__ import annotations

import numpy as np


def texture(seed=0, n=250, spread=0.35):
    """``f(x, y)``: a sum of ``n`` random plane waves (wave vectors ~ N(0, spread) rad/px)."""
    rng = np.random.default_rng(seed)
    k = rng.normal(size=(n, 2)) * spread
    ph = rng.uniform(0, 2 * np.pi, n)
    amp = rng.uniform(0.5, 1, n)

    def f(x, y):
        out = np.zeros(np.broadcast(x, y).shape)
        for a, (kx, ky), p in zip(amp, k, ph):
            out += a * np.sin(kx * x + ky * y + p)
        return out
    return f


def affine_pair(G, t, shape, *, seed=0):
    """Reference f and frame g (float64, ``shape``) with g(X + t + G X) = f(X), exactly."""
    f = texture(seed)
    yy, xx = np.mgrid[0:shape[0], 0:shape[1]].astype(float)
    X = (np.stack([xx, yy], -1) - np.asarray(t)) @ np.linalg.inv(np.eye(2) + np.asarray(G)).T
    return f(xx, yy), f(X[..., 0], X[..., 1])
