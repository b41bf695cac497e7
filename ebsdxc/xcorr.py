"""The four forms of cross-correlation as functions (the seed paper's vocabulary).

- :func:`one_to_one`: one left matrix, one right matrix;
- :func:`one_to_many`: one left matrix against m right matrices;
- :func:`n_to_mn`: n left matrices, each against its own m right matrices (EBSD: n reference
  ROIs, m scan patterns);
- :func:`n_to_m`: every one of n left matrices against every one of m right matrices.

The correlation is the definition: ``C[dy, dx] = sum_{y,x} left[y, x] * right[y + dy, x + dx]``
over the overlap (zero outside the matrices), so the peak lag is where the right matrix's
content sits relative to the left's. No mean is removed and no window applied: prepare the
matrices first (:func:`ebsdxc.preprocess.prepare_tiles`) for image registration.

Arrays in, arrays out: NumPy inputs run on the CPU unless ``device`` says otherwise, CuPy
inputs on their GPU, and results come back in the same kind of array. Maps are centred:
element ``[..., ry + dy, rx + dx]`` holds lag (dy, dx), with ``(ry, rx)`` the largest lags
(``h - 1, w - 1`` in full mode, ``max_shift`` in window mode). With ``peaks=True`` the maps
stay on the device and only the peaks come back.
"""

from __future__ import annotations

import numpy as np

from .backend import select_backend
from .engines import ENGINES, EngineConfig, make_engine
from .engines.definition import Pairing
from .peaks import SUBPIXEL_METHODS

__all__ = ["one_to_one", "one_to_many", "n_to_mn", "n_to_m", "Peaks"]


class Peaks(tuple):
    """(displacement [..., 2] as [dx, dy], peak_height [...], status [...]) of :mod:`ebsdxc.peaks`."""

    __slots__ = ()

    def __new__(cls, displacement, peak_height, status):
        return super().__new__(cls, (displacement, peak_height, status))

    displacement = property(lambda self: self[0])
    peak_height = property(lambda self: self[1])
    status = property(lambda self: self[2])


def _is_cupy(a):
    return type(a).__module__.startswith("cupy")


def _backend(device, gpu_in):
    return select_backend(device if device != "auto" else ("cuda" if gpu_in else "cpu"))


def _pairing_engine(engine, peaks, backend):
    """The engine class named ``engine`` where it builds maps of any pairing natively on this
    device (``info.pairings``), else None (the engine interface's n-to-mn form serves)."""
    cls = ENGINES.get(engine)
    if cls is None or peaks or not cls.info.pairings:
        return None
    return cls if ("gpu" if backend.is_gpu else "cpu") in cls.info.devices else None


def _pairing_maps(cls, backend, lefts, rights, pairing, mode, max_shift, kernel):
    """Maps in any pairing: (n_pairs, 2ry+1, 2rx+1), centred."""
    config = EngineConfig(mode=mode, max_shift=max_shift, subpixel="none", compensate=False, kernel=kernel,
                          engine=cls.info.name)
    maps = cls.pairing_maps(lefts, rights, pairing, config)
    return backend.xp.fft.fftshift(maps, axes=(-2, -1))


def _n_to_mn(lefts, rights, *, mode, max_shift, subpixel, peaks, engine, device, kernel="auto"):
    """Core: lefts (n, h, w), rights (m, n, h, w) -> maps (m, n, 2ry+1, 2rx+1) or Peaks (m, n)."""
    backend = _backend(device, _is_cupy(lefts) or _is_cupy(rights))
    xp = backend.xp
    lefts = xp.asarray(lefts, dtype=xp.float32)
    rights = xp.asarray(rights, dtype=xp.float32)
    n, h, w = lefts.shape
    if rights.ndim != 4 or rights.shape[1:] != (n, h, w):
        raise ValueError(f"right matrices must be (m, {n}, {h}, {w}) for {n} left matrices of {h}x{w}, "
                         f"got shape {tuple(rights.shape)}")
    if subpixel not in SUBPIXEL_METHODS:
        raise ValueError(f"subpixel method must be one of {SUBPIXEL_METHODS}, got {subpixel!r}")
    config = EngineConfig(mode=mode, max_shift=max_shift, subpixel=subpixel if peaks else "none",
                          compensate=False, kernel=kernel)
    native = _pairing_engine(engine, peaks, backend)
    if native is not None:
        m = rights.shape[0]
        maps = _pairing_maps(native, backend, lefts, rights.reshape(m * n, h, w), Pairing.n_to_mn(n, m), mode,
                             max_shift, kernel)
        return maps.reshape(m, n, *maps.shape[1:]), backend
    eng = make_engine(engine, backend, (h, w), config, n_tiles=n, batch=rights.shape[0])

    def energy_status(t):
        e = (t.astype(xp.float64) ** 2).sum(axis=(-2, -1))
        finite = xp.isfinite(e)
        s = xp.where(~finite, np.uint8(3), xp.where(e <= 0, np.uint8(2), np.uint8(0))).astype(xp.uint8)
        return e.astype(xp.float32), s

    le, ls = energy_status(lefts)
    eng.set_reference(xp.where(xp.isfinite(lefts), lefts, 0), le, ls)
    re, rs = energy_status(rights)
    rights_clean = xp.where(xp.isfinite(rights), rights, 0)
    if peaks:
        r = eng.match(rights_clean, re, rs)
        return Peaks(r.displacement, r.peak_height, r.status), backend
    maps = eng.correlation_maps(rights_clean)  # circular lag layout
    ry, rx = eng.max_lag
    My, Mx = maps.shape[-2:]
    iy = xp.asarray(np.arange(-ry, ry + 1) % My)
    ix = xp.asarray(np.arange(-rx, rx + 1) % Mx)
    return maps[..., iy[:, None], ix[None, :]].astype(xp.float32), backend


def _out(result, backend, like_gpu):
    # Same kind of array as the inputs: NumPy in, NumPy out.
    if like_gpu or not backend.is_gpu:
        return result
    if isinstance(result, Peaks):
        return Peaks(*(backend.asnumpy(a) for a in result))
    return backend.asnumpy(result)


def _check(a, ndim, what):
    if a.ndim != ndim:
        raise ValueError(f"{what} must have {ndim} dimensions, got shape {tuple(a.shape)}")


def n_to_mn(lefts, rights, *, mode="full", max_shift=None, peaks=False, subpixel="quadratic",
            engine="auto", kernel="auto", device="auto"):
    """Correlate each of n left matrices with its own m right matrices.

    Parameters
    ----------
    lefts : (n, h, w) array
    rights : (m, n, h, w) array
        ``rights[j, k]`` is matched with ``lefts[k]``.
    mode : {"full", "window"}
        ``full``: every lag with any overlap; ``window``: ``|dy|, |dx| <= max_shift``.
    max_shift : int, optional
        Required for window mode.
    peaks : bool
        Return :class:`Peaks` (subpixel peak, normalised height, status) instead of maps.
    subpixel : str
        Subpixel method for ``peaks=True`` (:data:`ebsdxc.peaks.SUBPIXEL_METHODS`).
    engine : str
        ``"auto"`` or a registered engine (:data:`ebsdxc.engines.ENGINES`: ``fft``, ``direct``,
        ``fused``, ...). ``auto``: the dispatcher's measured choice on the GPU
        (:mod:`ebsdxc.engines.dispatch`), FFT on the CPU.
    kernel : str
        Definition-based kernel of the ``direct`` engine (``"auto"`` or a label such as
        ``"grouped_overlap:g=4,kr=8"``, :mod:`ebsdxc.engines.definition`).
    device : {"auto", "cpu", "cuda", "cuda:i"}
        ``auto``: where the inputs are.

    Returns
    -------
    (m, n, 2ry+1, 2rx+1) float32 centred maps, or :class:`Peaks` of shape (m, n).
    """
    gpu_in = _is_cupy(lefts) or _is_cupy(rights)
    _check(lefts, 3, "left matrices")
    _check(rights, 4, "right matrices")
    res, be = _n_to_mn(lefts, rights, mode=mode, max_shift=max_shift, subpixel=subpixel, peaks=peaks,
                       engine=engine, device=device, kernel=kernel)
    return _out(res, be, gpu_in)


def one_to_one(left, right, **options):
    """Correlate two (h, w) matrices: a (2ry+1, 2rx+1) map, or :class:`Peaks` of scalars.

    Options as :func:`n_to_mn`.
    """
    _check(left, 2, "left matrix")
    _check(right, 2, "right matrix")
    res = n_to_mn(left[None], right[None, None], **options)
    return Peaks(*(a[0, 0] for a in res)) if isinstance(res, Peaks) else res[0, 0]


def one_to_many(left, rights, **options):
    """Correlate one (h, w) matrix with m right matrices (m, h, w): (m, ...) maps or :class:`Peaks`.

    Options as :func:`n_to_mn`.
    """
    _check(left, 2, "left matrix")
    _check(rights, 3, "right matrices")
    res = n_to_mn(left[None], rights[:, None], **options)
    return Peaks(*(a[:, 0] for a in res)) if isinstance(res, Peaks) else res[:, 0]


def n_to_m(lefts, rights, **options):
    """Correlate every left matrix (n, h, w) with every right matrix (m, h, w).

    Returns (n, m, ...) maps or :class:`Peaks`: element ``[i, j]`` is ``lefts[i]`` against
    ``rights[j]``. Options as :func:`n_to_mn`.
    """
    _check(lefts, 3, "left matrices")
    _check(rights, 3, "right matrices")
    n = lefts.shape[0]
    gpu_in = _is_cupy(lefts) or _is_cupy(rights)
    cls = ENGINES.get(options.get("engine"))
    if cls is not None and cls.info.pairings and not options.get("peaks"):
        # Every left against every right without copying the rights n times.
        backend = _backend(options.get("device", "auto"), gpu_in)
        native = _pairing_engine(options.get("engine"), options.get("peaks"), backend)
        if native is not None:
            xp = backend.xp
            lefts = xp.asarray(lefts, dtype=xp.float32)
            rights = xp.asarray(rights, dtype=xp.float32)
            if rights.shape[1:] != lefts.shape[1:]:
                raise ValueError(f"right matrices must be (m, {lefts.shape[1]}, {lefts.shape[2]}), "
                                 f"got shape {tuple(rights.shape)}")
            m = rights.shape[0]
            mode, max_shift = options.get("mode", "full"), options.get("max_shift")
            maps = _pairing_maps(native, backend, lefts, rights, Pairing.n_to_m(n, m), mode, max_shift,
                                 options.get("kernel", "auto"))
            return _out(maps.reshape(n, m, *maps.shape[1:]), backend, gpu_in)
    xp = np if not gpu_in else __import__("cupy")
    tiled = xp.broadcast_to(rights[:, None], (rights.shape[0], n, *rights.shape[1:]))
    res = n_to_mn(lefts, tiled, **options)
    if isinstance(res, Peaks):
        return Peaks(*(a.swapaxes(0, 1) for a in res))
    return res.swapaxes(0, 1)
