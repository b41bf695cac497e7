"""CuPy launchers for the fused CUDA kernels of ``kernels/`` (tile preparation and statistics,
peak search).

They compute what :func:`ebsdxc.preprocess.prepare_tiles` and
:func:`ebsdxc.peaks.locate_peaks` compute, in one pass each, and are tested against them.
"""

from __future__ import annotations

import functools

import numpy as np

from ..kernel_loader import NULL_POINTER, get_function

_TILE_TYPES = {np.dtype(np.uint8): "unsigned char", np.dtype(np.uint16): "unsigned short",
               np.dtype(np.int16): "short", np.dtype(np.int32): "int",
               np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
_STAGED_TYPES = ("unsigned char", "unsigned short", "short")
_TILE_NAMES = tuple(f"prepare_tiles<{t}>" for t in _TILE_TYPES.values())
#: Largest tile (bytes) that prepare_tiles_shaped keeps in shared memory (256x256 uint16 is 128 KB).
STAGED_TILE_MAX = 160 * 1024
#: Widest tile of prepare_tiles_shaped: a lane holds (width / 32) values of each row it reads.
_SHAPED_WIDTH_MAX = 512
_TILE_STATIC_SMEM = 512  # the tile kernels' own shared memory (reduction slots), rounded up
_METHODS = {"none": 0, "parabolic": 1, "gaussian": 2, "quadratic": 3}
_PEAK_NAMES = tuple(f"find_peaks<{m}>" for m in _METHODS.values())

__all__ = ["prepare_tiles_padded", "tile_statistics", "tile_dtype", "find_peaks", "dft_refine", "PaddedTileBuffer"]


class PaddedTileBuffer:
    """A (capacity, Ny, Nx) float32 FFT input buffer whose padding is zeroed once and kept."""

    def __init__(self, fft_shape):
        self.fft_shape = tuple(fft_shape)
        self._buf = None

    def get(self, n_tiles):
        import cupy as cp

        if self._buf is None or self._buf.shape[0] < n_tiles:
            self._buf = cp.zeros((n_tiles, *self.fft_shape), dtype=cp.float32)
        return self._buf[:n_tiles]


def prepare_tiles_padded(patterns, origins, tile_shape, window, out):
    """Cut, zero-mean, window ROIs of (B, H, W) ``patterns`` into ``out`` (B*n, Ny, Nx).

    Returns (energy (B*n,), status (B*n,) uint8). Only the h x w corner of each frame
    of ``out`` is written; the caller keeps the rest at zero.
    """
    _, _, energy, status = _tile_pass(patterns, origins, tile_shape, window, out)
    return energy, status


def tile_statistics(patterns, origins, tile_shape, window, *, packed=None):
    """What :func:`prepare_tiles_padded` finds about each ROI, without writing the tiles.

    Returns (patterns, mean, energy, status), each of the last three (B*n,): ``patterns`` as
    the kernel read them (C-contiguous; float32 where their dtype has no kernel), the float32
    mean a tile's values are centred on, and energy and status as :func:`prepare_tiles_padded`
    gives them. The fused engine prepares each value from these as it loads it
    (:meth:`~ebsdxc.engines.fused.FusedFFTEngine.match_rois`), so a tile it correlates is
    bit for bit the tile :func:`prepare_tiles_padded` writes.

    ``packed`` = (array, pad): a (B*n, h + 2 pad, row) uint16 device array that also receives
    each prepared value in bf16 (rounded to nearest even; zeros for a rejected tile) at
    [t, pad + y, x], the tensor engine's right operand; the rest of it is left as it is.
    """
    return _tile_pass(patterns, origins, tile_shape, window, None, packed)


def tile_dtype(dtype) -> str | None:
    """The C type of the tile kernels for pattern ``dtype`` (``None``: read as float32)."""
    return _TILE_TYPES.get(np.dtype(dtype))


def _tile_pass(patterns, origins, tile_shape, window, out, packed=None):
    import cupy as cp

    dt = np.dtype(patterns.dtype)
    if dt not in _TILE_TYPES:
        patterns = patterns.astype(cp.float32)
        dt = np.dtype(np.float32)
    patterns = cp.ascontiguousarray(patterns)
    B, H, W = patterns.shape
    n = origins.shape[0]
    h, w = tile_shape
    T = B * n
    Ny, Nx = (0, 0) if out is None else out.shape[-2:]
    energy = cp.empty(T, dtype=cp.float32)
    status = cp.empty(T, dtype=cp.uint8)
    mean = None if out is not None else cp.empty(T, dtype=cp.float32)
    if T == 0:
        return patterns, mean, energy, status
    pk, pk_row, pk_pad = NULL_POINTER, 0, 0
    if packed is not None:
        pk, pk_pad = packed
        if pk.dtype != cp.uint16 or pk.ndim != 3 or pk.shape[0] < T or pk.shape[1] != h + 2 * pk_pad or \
                pk.shape[2] < w or not pk.flags.c_contiguous:
            raise ValueError(f"packed must be a contiguous uint16 array of ({T} or more, {h + 2 * pk_pad}, {w} or "
                             f"more), got {pk.dtype} of shape {tuple(pk.shape)}")
        pk_row = pk.shape[2]
    name, threads, smem = _tile_kernel(dt, h, w, smem_limit=_smem_optin(cp.cuda.Device().id))
    # the shaped kernel is compiled for each shape on its own (about 0.2 s of NVRTC)
    fn = get_function("tiles.cu", name, name_expressions=_TILE_NAMES if name in _TILE_NAMES else (name,))
    if smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = smem
    fn((T,), (threads,), (patterns, np.int32(H), np.int32(W), origins, np.int32(n), np.int32(h),
                          np.int32(w), window, NULL_POINTER if out is None else out, np.int32(Ny), np.int32(Nx), energy,
                          status, NULL_POINTER if mean is None else mean, pk, np.int32(pk_row), np.int32(pk_pad)),
       shared_mem=smem)
    return patterns, mean, energy, status


@functools.cache
def _smem_optin(device_id) -> int:
    import cupy as cp

    return int(cp.cuda.Device(device_id).attributes.get("MaxSharedMemoryPerBlockOptin", 48 * 1024))


def _tile_kernel(dtype, h, w, *, smem_limit):
    """(kernel name, block size, dynamic shared memory) of the tile pass for ``dtype`` tiles of
    h x w: tiles of 1- and 2-byte values up to :data:`STAGED_TILE_MAX` that fit the device's
    ``smem_limit`` (opt-in shared memory per block: 227 KB on an H100, 99 KB on sm_86) are read
    from global memory once, by a kernel compiled for their shape (``prepare_tiles_shaped``).
    Measured on an H100 (``BENCHMARKS.md``, "The tile statistics for one tile shape"): 128
    threads and three rows a warp in flight where several tiles fit an SM, 1024 threads and one
    row where only one or two do; 4-byte values keep the plain kernel, which was faster there.
    Both uses of the pass (prepared tiles, statistics only) take the same kernel, so their sums
    agree bit for bit."""
    c_type = _TILE_TYPES[np.dtype(dtype)]
    nbytes = h * w * np.dtype(dtype).itemsize
    if c_type not in _STAGED_TYPES or nbytes > min(STAGED_TILE_MAX, smem_limit - _TILE_STATIC_SMEM) \
            or w > _SHAPED_WIDTH_MAX:
        return f"prepare_tiles<{c_type}>", 256 if h * w >= 2048 else 128, 0
    threads, rows = (1024, 1) if nbytes > 48 * 1024 else (128, 3)
    return f"prepare_tiles_shaped<{c_type}, {h}, {w}, {threads}, {rows}>", threads, nbytes


def find_peaks(corr, max_lag, method, window_lags=None, *, with_flat=False):
    """Fused integer search + 3x3 fit on (T, Ny, Nx) maps.

    ``window_lags`` = (wy (Ny,), wx (Nx,)) float64 window autocorrelation by lag mod N,
    or None (no compensation). Returns (y, x, value, on_border, ly, lx), and with
    ``with_flat`` also (T,) bool ``flat``: the compensated peak is barely concave
    (:func:`ebsdxc.peaks.barely_concave`; all false without compensation), for refinements
    that fit later (:func:`ebsdxc.peaks.drop_loose_peaks`). The 3x3 fits drop their loose
    peaks themselves.
    """
    import cupy as cp

    corr = cp.ascontiguousarray(corr, dtype=cp.float32)
    T, Ny, Nx = corr.shape
    ry, rx = max_lag
    y = cp.empty(T, dtype=cp.float64)
    x = cp.empty(T, dtype=cp.float64)
    value = cp.empty(T, dtype=cp.float32)
    border = cp.empty(T, dtype=cp.uint8)
    ly = cp.empty(T, dtype=cp.int64)
    lx = cp.empty(T, dtype=cp.int64)
    flat = cp.zeros(T, dtype=cp.uint8)  # always written: a few sums of thread 0 per map
    if T:
        m = _METHODS[method]
        fn = get_function("peaks.cu", f"find_peaks<{m}>", name_expressions=_PEAK_NAMES + ("dft_refine",))
        comp = window_lags is not None
        if not comp:  # no compensation: the kernel still reads the (unused) tables
            window_lags = (cp.ones(Ny), cp.ones(Nx))
        wy, wx = (cp.ascontiguousarray(a, dtype=cp.float64) for a in window_lags)
        n = (2 * ry + 1) * (2 * rx + 1)
        threads = 256 if n >= 1024 else 64
        fn((T,), (threads,), (corr, np.int32(Ny), np.int32(Nx), np.int32(ry), np.int32(rx),
                              wy, wx, np.int32(comp), y, x, value, border, ly, lx, flat))
    if with_flat:
        return y, x, value, border.astype(bool), ly, lx, flat.astype(bool)
    return y, x, value, border.astype(bool), ly, lx


def dft_refine(cross_power, y, x, shape, *, steps, max_moves, window_spectra=None, reference=None,
               reference_index=None):
    """Fused :func:`ebsdxc.peaks.dft_refine_peak` for (T,) float64 estimates (y, x).

    ``cross_power`` is (T, Ny, Nx//2+1) complex64. With ``reference`` ((n, Ny, Nx//2+1)
    complex64), ``cross_power`` holds scan spectra and map ``t`` uses
    ``cross_power[t] * reference[t % n]``, formed on the fly. With ``reference_index``
    ((B,) integers on the device, T = B n), ``reference`` is (K, n, Ny, Nx//2+1) and map ``t``
    uses ``reference[reference_index[t // n], t % n]``. Returns new (y, x) arrays.
    """
    import cupy as cp

    Ny, Nx = shape
    T = cross_power.shape[0]
    cps = cp.ascontiguousarray(cross_power, dtype=cp.complex64)
    y = cp.array(y, dtype=cp.float64)
    x = cp.array(x, dtype=cp.float64)
    if T == 0:
        return y, x
    if window_spectra is None:
        Sy, Sx, comp = cp.zeros(Ny), cp.zeros(Nx), 0
    else:
        Sy, Sx = (cp.ascontiguousarray(a, dtype=cp.float64) for a in window_spectra)
        comp = 1
    st = cp.asarray(np.asarray(steps, dtype=np.float64))
    ref_of, indexed = cp.zeros(1, dtype=cp.int32), 0
    if reference is None:
        ref, n_ref = cp.zeros(1, dtype=cp.complex64), 0
    else:
        ref = cp.ascontiguousarray(reference, dtype=cp.complex64)
        if reference_index is None:
            n_ref = ref.shape[0]
        else:
            if ref.ndim != 4:
                raise ValueError(f"with reference_index, reference must be (K, n, Ny, Nx//2+1), got {ref.shape}")
            n_ref = ref.shape[1]
            if T % n_ref or tuple(reference_index.shape) != (T // n_ref,):
                raise ValueError(f"reference_index must hold one set per {n_ref} maps: {T // n_ref} entries, "
                                 f"got shape {tuple(reference_index.shape)}")
            ref_of, indexed = cp.ascontiguousarray(reference_index, dtype=cp.int32), 1
    fn = get_function("peaks.cu", "dft_refine", name_expressions=_PEAK_NAMES + ("dft_refine",))
    smem = 3 * (Ny + Nx // 2 + 1) * 8
    fn((T,), (256,), (cps, ref, np.int32(n_ref), ref_of, np.int32(indexed), np.int32(Ny), np.int32(Nx), Sy, Sx,
                      np.int32(comp), st, np.int32(len(steps)), np.int32(max_moves), y, x),
       shared_mem=smem)
    return y, x
