"""Correlation engines behind one interface (:class:`CorrelationEngine`).

``fft``: FFT correlation (CPU and GPU); ``direct``: the paper's definition-based
kernels (GPU); ``fused``: FFT correlation and peak search in shared memory, one CUDA
block per tile pair (GPU, tiles whose spectrum fits in shared memory).
"""

from ..errors import InputError
from .base import CorrelationEngine, EngineConfig, PeakResult
from .direct import DirectEngine
from .fft import FFTEngine
from .fused import FusedFFTEngine

ENGINES = {"fft": FFTEngine, "direct": DirectEngine, "fused": FusedFFTEngine}

__all__ = ["CorrelationEngine", "EngineConfig", "PeakResult", "ENGINES", "make_engine"]


def _auto(backend, tile_shape, config, n_tiles, batch):
    # The spectrum-based subpixel methods and circular correlation exist only in the FFT
    # engine; elsewhere the dispatcher's measurements decide.
    if not backend.is_gpu or config.circular or config.subpixel in ("dft", "upsampled"):
        return "fft"
    from ..dispatch import Case, choose

    h, w = tile_shape
    case = Case("n_to_mn", n_tiles or 86, batch or 256, h, w, config.mode,
                config.max_shift if config.mode == "window" else None, peaks=True)
    return choose(case, engines=tuple(ENGINES)).engine


def make_engine(name, backend, tile_shape, config: EngineConfig, *, window_1d=None, n_tiles=None,
                batch=None) -> CorrelationEngine:
    """Build the engine registered as ``name``; ``"auto"`` asks :mod:`ebsdxc.dispatch`.

    ``window_1d`` = (wy, wx) are the 1-D factors of the subregion window, used for
    window compensation. ``n_tiles`` (reference subregions) and ``batch`` (patterns per
    call) inform the automatic choice.
    """
    if name == "auto":
        name = _auto(backend, tile_shape, config, n_tiles, batch)
    try:
        cls = ENGINES[name]
    except KeyError:
        raise InputError(f"unknown engine {name!r} (auto, {', '.join(ENGINES)})") from None
    try:
        return cls(backend, tile_shape, config, window_1d=window_1d)
    except ValueError as e:  # options that do not fit these tiles: the user's to change
        if isinstance(e, InputError):
            raise
        raise InputError(str(e)) from None
