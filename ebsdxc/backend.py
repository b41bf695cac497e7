"""Array backend: NumPy + scipy.fft on the CPU, CuPy + cuFFT on a CUDA GPU.

Stages take a :class:`Backend` and use ``backend.xp`` as their array module, so the
CPU and GPU run the same code path; only the few kernels that need it are
specialised (see :mod:`ebsdxc.kernel_loader`).
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError

__all__ = ["Backend", "select_backend", "gpu_available", "is_out_of_memory", "pinned_empty", "array_module",
           "to_host"]


def array_module(*arrays):
    """NumPy, or CuPy where one of ``arrays`` is a CuPy array: the module that computes on them.

    CuPy is imported only when the caller already holds CuPy arrays, so NumPy callers never
    pay for its import (or need it installed).
    """
    for a in arrays:
        if type(a).__module__.startswith("cupy"):
            import cupy

            return cupy
    return np


def to_host(a) -> np.ndarray:
    """``a`` as a NumPy array: copied from the device if it is a CuPy array."""
    return a.get() if type(a).__module__.startswith("cupy") else np.asarray(a)


def _load_cupy():
    """(cupy module or None, why not or None). ``why`` is None also when CuPy is simply not
    installed: a CPU-only install is the expected case, not a fault."""
    try:
        import cupy  # whichever wheel provides it (cupy-cuda12x, cupy-cuda13x, ...)
    except ModuleNotFoundError as e:
        if e.name == "cupy":
            return None, None
        return None, f"CuPy cannot be imported ({_one_line(e)})"
    except Exception as e:  # a CUDA library that fails to load: CuPy is there but broken
        return None, f"CuPy cannot be imported ({_one_line(e)})"
    return cupy, None


def _import_cupy():
    return _load_cupy()[0]


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _probe(cp, idx: int) -> str | None:
    """Why CUDA device ``idx`` is not usable, or None when it is.

    Counting devices is not enough: a driver older than the CUDA runtime, a device in
    exclusive mode held by another process, or ``CUDA_VISIBLE_DEVICES=""`` only show
    when a context is made, so one is made here (the run makes it next anyway).
    """
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as e:
        return f"no CUDA device is usable ({_one_line(e)})"
    if n == 0:
        return "no CUDA device found"
    if idx >= n:
        return f"only {n} CUDA device(s) found"
    try:
        with cp.cuda.Device(idx):
            cp.cuda.runtime.memGetInfo()
    except Exception as e:
        return f"CUDA device {idx} is not usable ({_one_line(e)})"
    return None


_fallback_lock = threading.Lock()
_fallback_warned = False


def _warn_fallback(why: str) -> None:
    # Once per process: every task of a run (and every thread's pipeline) asks for the
    # backend again, and one line says all there is to say.
    global _fallback_warned
    with _fallback_lock:
        if _fallback_warned:
            return
        _fallback_warned = True
    warnings.warn(f"device auto found no usable GPU: {why}; running on the CPU (device cpu runs there "
                  "without this warning)", UserWarning, stacklevel=3)


def is_out_of_memory(error: BaseException) -> bool:
    """True when ``error`` says the device (or the host) ran out of memory.

    CuPy's ``OutOfMemoryError`` and NumPy's memory errors are ``MemoryError``; cuFFT and cuBLAS say
    so with their own error codes when their internal allocations fail, and the CUDA
    runtime with ``cudaErrorMemoryAllocation``. Matched by name, so that no caller needs
    CuPy to ask.
    """
    if isinstance(error, MemoryError):
        return True
    kind = type(error).__name__
    text = str(error)
    if kind in ("CuFFTError", "CUBLASError", "CUSOLVERError"):
        return "ALLOC_FAILED" in text
    if kind in ("CUDARuntimeError", "CUDADriverError"):
        return "cudaErrorMemoryAllocation" in text or "CUDA_ERROR_OUT_OF_MEMORY" in text
    return False


_pinned_warned = False


def pinned_empty(shape, dtype) -> np.ndarray:
    """An empty host array for copies to the GPU: page-locked ("pinned") memory where the
    system gives it, else ordinary memory, with one warning per process.

    Copies from pinned memory are asynchronous and run at the bus's speed; some systems hand
    out little of it (WSL2 limits it; a host short of memory refuses it). Copies from ordinary
    memory are slower and hold the thread that queues them; the results are the same. Errors
    other than the CUDA runtime's or driver's, and a host out of memory altogether
    (``MemoryError`` from the ordinary array too), are raised.
    """
    global _pinned_warned
    import cupyx

    try:
        return cupyx.empty_pinned(shape, dtype=dtype)
    except Exception as e:
        if type(e).__name__ not in ("CUDARuntimeError", "CUDADriverError"):
            raise
        why = _one_line(e)
    out = np.empty(shape, dtype=dtype)
    with _fallback_lock:
        warn, _pinned_warned = not _pinned_warned, True
    if warn:
        warnings.warn(f"pinned host memory refused ({why}); batches go through ordinary memory, whose copies "
                      "to the GPU are slower (the results are the same)", UserWarning, stacklevel=2)
        # CuPy falls back the same way for its own small transfers, with a warning each time
        # (the byte count in its text defeats the once-per-text filter): this line says it all.
        warnings.filterwarnings("ignore", message="Using synchronous transfer as pinned memory")
    return out


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    cp = _import_cupy()
    if cp is None:
        return False
    try:
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@dataclass
class Backend:
    """Where arrays live and how FFTs run.

    Attributes
    ----------
    kind : {"cpu", "cuda"}
    xp : module
        ``numpy`` or ``cupy``.
    device_id : int or None
        CUDA device ordinal.
    """

    kind: str
    xp: object
    device_id: int | None = None
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)

    @property
    def is_gpu(self) -> bool:
        return self.kind == "cuda"

    @property
    def name(self) -> str:
        if not self.is_gpu:
            return f"cpu ({self.workers} threads)"
        props = self.xp.cuda.runtime.getDeviceProperties(self.device_id)
        gpu = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        return f"cuda:{self.device_id} ({gpu})"

    def asarray(self, a, dtype=None):
        return self.xp.asarray(a, dtype=dtype)

    def asnumpy(self, a) -> np.ndarray:
        return self.xp.asnumpy(a) if self.is_gpu else np.asarray(a)

    # FFTs: real-to-complex over the last two axes.
    def rfft2(self, a, s=None):
        if self.is_gpu:
            import cupyx.scipy.fft as cfft

            return cfft.rfft2(a, s=s, axes=(-2, -1))
        import scipy.fft

        return scipy.fft.rfft2(a, s=s, axes=(-2, -1), workers=self.workers)

    def irfft2(self, a, s, *, overwrite=False):
        if self.is_gpu:
            import cupyx.scipy.fft as cfft

            return cfft.irfft2(a, s=s, axes=(-2, -1), overwrite_x=overwrite)
        import scipy.fft

        return scipy.fft.irfft2(a, s=s, axes=(-2, -1), workers=self.workers, overwrite_x=overwrite)

    def fft1(self, kind, a, *, n=None, axis=-1, overwrite=False):
        """One-axis FFT ``kind`` ("rfft", "irfft", "fft", "ifft") of ``a`` along ``axis``;
        ``overwrite``: ``a`` may be destroyed (cuFFT's inverse real transform does, so CuPy
        copies it first otherwise)."""
        if self.is_gpu:
            import cupyx.scipy.fft as cfft

            return getattr(cfft, kind)(a, n=n, axis=axis, overwrite_x=overwrite)
        import scipy.fft

        return getattr(scipy.fft, kind)(a, n=n, axis=axis, workers=self.workers, overwrite_x=overwrite)

    def synchronize(self):
        if self.is_gpu:
            self.xp.cuda.get_current_stream().synchronize()

    def use(self):
        """Context manager making this backend's device current (no-op on the CPU)."""
        if self.is_gpu:
            return self.xp.cuda.Device(self.device_id)
        import contextlib

        return contextlib.nullcontext()


def select_backend(device: str = "auto", *, threads: int | None = None) -> Backend:
    """Pick the backend for ``device`` = ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:i"``.

    ``"auto"`` takes GPU 0 when it is usable, else the CPU: silently where CuPy is not
    installed (a CPU-only install), with one warning per process where CuPy is installed
    but no GPU is usable (the user meant to use one). Asking for CUDA where none is
    usable is an :class:`~ebsdxc.errors.InputError` saying why (not a silent fall-back).
    ``threads``: CPU worker threads of a CPU backend (default: all cores); a GPU backend
    ignores it.
    """
    d = (device or "auto").strip().lower()
    cpu = Backend("cpu", np) if not threads else Backend("cpu", np, workers=int(threads))
    if d == "cpu":
        return cpu
    if d == "auto":
        cp, why = _load_cupy()
        if cp is None:
            if why is not None:
                _warn_fallback(why)
            return cpu
        why = _probe(cp, 0)
        if why is not None:
            _warn_fallback(why)
            return cpu
        return Backend("cuda", cp, 0)
    if d == "cuda" or d.startswith("cuda:") or d == "gpu":
        idx = 0
        if ":" in d:
            try:
                idx = int(d.split(":", 1)[1])
            except ValueError:
                raise InputError(f"device must be auto, cpu, cuda or cuda:N, got {device!r}") from None
            if idx < 0:
                raise InputError(f"device must be auto, cpu, cuda or cuda:N, got {device!r}")
        cp, why = _load_cupy()
        if cp is None:
            why = why or "CuPy is not installed (pip install 'ebsdxc[gpu]')"
            raise InputError(f"device {d} asked for, but {why}; use device cpu or auto")
        why = _probe(cp, idx)
        if why is not None:
            raise InputError(f"device {d} asked for, but {why}; use device cpu or auto")
        return Backend("cuda", cp, idx)
    raise InputError(f"device must be auto, cpu, cuda or cuda:N, got {device!r}")
