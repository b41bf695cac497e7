"""Correlation engines behind one interface (:class:`CorrelationEngine`).

``fft`` is the FFT engine; the paper's direct CUDA kernels register here too.
"""

from .base import CorrelationEngine, EngineConfig, PeakResult
from .fft import FFTEngine

ENGINES = {"fft": FFTEngine}

__all__ = ["CorrelationEngine", "EngineConfig", "PeakResult", "ENGINES", "make_engine"]


def make_engine(name, backend, tile_shape, config: EngineConfig, *, window_1d=None) -> CorrelationEngine:
    """Build the engine registered as ``name`` (``"auto"`` picks the best available).

    ``window_1d`` = (wy, wx) are the 1-D factors of the subregion window, used for
    window compensation.
    """
    if name == "auto":
        name = "fft"
    try:
        cls = ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}") from None
    return cls(backend, tile_shape, config, window_1d=window_1d)
