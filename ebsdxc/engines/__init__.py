"""Correlation engines behind one interface (:class:`CorrelationEngine`).

``fft``: FFT correlation (CPU and GPU); ``direct``: the paper's definition-based
kernels (GPU); ``fused``: FFT correlation and peak search in shared memory, one CUDA
block per tile pair (GPU, tiles whose spectrum fits in shared memory).

Each engine module registers its class (:mod:`ebsdxc.engines.registry`); the class
describes what it serves (:class:`EngineInfo`), so a new engine is one more module
imported below. References are an input of their own: ``engine.prepare_references``
makes K resident sets (:class:`PreparedReferences`), and ``engine.match(..., references=,
index=)`` takes a set per pattern.
"""

from ..errors import InputError
from .base import CorrelationEngine, EngineConfig, EngineInfo, PeakResult, PreparedReferences
from .registry import ENGINES, engine_class

# Each engine module registers its class; this order is the order of ENGINES.
from . import fft  # noqa: F401, I001  # isort: skip
from . import direct  # noqa: F401  # isort: skip
from . import fused  # noqa: F401  # isort: skip
from . import tensor  # noqa: F401  # isort: skip

__all__ = ["CorrelationEngine", "EngineConfig", "EngineInfo", "PeakResult", "PreparedReferences", "ENGINES",
           "make_engine", "choose_engine"]


def choose_engine(backend, tile_shape, config, *, n_tiles=None, batch=None):
    """The registered engine ``"auto"`` stands for: among the engines that serve ``config`` on
    this device and tile size, the dispatcher's measured choice (:mod:`ebsdxc.engines.dispatch`) for
    ``n_tiles`` reference subregions and ``batch`` patterns per call."""
    gpu = backend.is_gpu
    serving = tuple(name for name, cls in ENGINES.items() if cls.supports(tile_shape, config, gpu=gpu))
    if not serving:
        why = "; ".join(cls.refusal(tile_shape, config, gpu=gpu) for cls in ENGINES.values())
        raise InputError(f"no correlation engine serves these options: {why}")
    if len(serving) == 1:
        return serving[0]
    from .dispatch import Case, choose

    h, w = tile_shape
    case = Case("n_to_mn", n_tiles or 86, batch or 256, h, w, config.mode,
                config.max_shift if config.mode == "window" else None, peaks=True)
    return choose(case, engines=serving).engine


def make_engine(name, backend, tile_shape, config: EngineConfig, *, window_1d=None, n_tiles=None,
                batch=None) -> CorrelationEngine:
    """Build the engine registered as ``name`` (None: ``config.engine``); ``"auto"`` asks
    :func:`choose_engine`.

    ``window_1d`` = (wy, wx) are the 1-D factors of the subregion window, used for
    window compensation. ``n_tiles`` (reference subregions) and ``batch`` (patterns per
    call) inform the automatic choice.
    """
    if name is None:
        name = config.engine
    if name == "auto":
        name = choose_engine(backend, tile_shape, config, n_tiles=n_tiles, batch=batch)
    try:
        cls = engine_class(name)
    except ValueError as e:
        raise InputError(str(e)) from None
    try:
        return cls(backend, tile_shape, config, window_1d=window_1d)
    except ValueError as e:  # options that do not fit these tiles: the user's to change
        if isinstance(e, InputError):
            raise
        raise InputError(str(e)) from None
