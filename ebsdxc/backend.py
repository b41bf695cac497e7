"""Array backend: NumPy + scipy.fft on the CPU, CuPy + cuFFT on a CUDA GPU.

Stages take a :class:`Backend` and use ``backend.xp`` as their array module, so the
CPU and GPU run the same code path; only the few kernels that need it are
specialised (see :mod:`ebsdxc.kernel_loader`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError

__all__ = ["Backend", "select_backend", "gpu_available"]


def _import_cupy():
    try:
        import cupy  # whichever wheel provides it (cupy-cuda12x, cupy-cuda13x, ...)
    except Exception:  # ImportError, or a CUDA library that fails to load
        return None
    return cupy


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

    ``"auto"`` takes GPU 0 when CuPy sees one, else the CPU. Asking for CUDA where
    there is none is an error (not a silent fall-back). ``threads``: CPU worker threads
    of a CPU backend (default: all cores); a GPU backend ignores it.
    """
    d = (device or "auto").strip().lower()
    cpu = Backend("cpu", np) if not threads else Backend("cpu", np, workers=int(threads))
    if d == "cpu":
        return cpu
    if d == "auto":
        return Backend("cuda", _import_cupy(), 0) if gpu_available() else cpu
    if d == "cuda" or d.startswith("cuda:") or d == "gpu":
        idx = 0
        if ":" in d:
            try:
                idx = int(d.split(":", 1)[1])
            except ValueError:
                raise InputError(f"device must be auto, cpu, cuda or cuda:N, got {device!r}") from None
        cp = _import_cupy()
        if cp is None:
            raise InputError("device cuda asked for, but CuPy is not installed "
                             "(pip install 'ebsdxc[gpu]')")
        try:
            n = cp.cuda.runtime.getDeviceCount()
        except Exception as e:
            raise InputError(f"device cuda asked for, but no CUDA device is usable ({e})") from None
        if idx >= n:
            raise InputError(f"device cuda:{idx} asked for, but only {n} CUDA device(s) found")
        return Backend("cuda", cp, idx)
    raise InputError(f"device must be auto, cpu, cuda or cuda:N, got {device!r}")
