"""Correlation engines behind one interface (:class:`CorrelationEngine`).

``fft``: FFT correlation (CPU and GPU); ``direct``: the paper's definition-based
overlap-wise kernel (GPU); ``fused``: FFT correlation and peak search in one
shared-memory kernel (GPU).
"""

from ..errors import InputError
from .base import CorrelationEngine, EngineConfig, PeakResult
from .direct import DirectEngine
from .fft import FFTEngine
from .fused import FusedFFTEngine

ENGINES = {"fft": FFTEngine, "direct": DirectEngine, "fused": FusedFFTEngine}

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
        raise InputError(f"unknown engine {name!r} (auto, {', '.join(ENGINES)})") from None
    try:
        return cls(backend, tile_shape, config, window_1d=window_1d)
    except ValueError as e:  # options that do not fit these tiles: the user's to change
        if isinstance(e, InputError):
            raise
        raise InputError(str(e)) from None
