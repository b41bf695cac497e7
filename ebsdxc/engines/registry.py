"""The registered correlation engines: one :func:`register` line per engine module.

:data:`ENGINES` maps each engine's name (``EngineConfig.engine``) to its class, in the
order the modules registered. The dispatcher, ``ebsdxc bench``, :mod:`ebsdxc.xcorr` and
:func:`ebsdxc.engines.make_engine` read the classes' descriptions
(:class:`~ebsdxc.engines.base.EngineInfo` and the classmethods of
:class:`~ebsdxc.engines.base.CorrelationEngine`), never engine names, so a new engine is
one module that subclasses the interface and registers here.
"""

from __future__ import annotations

__all__ = ["ENGINES", "register", "engine_class", "names"]

#: name -> engine class, in registration order.
ENGINES: dict = {}


def register(cls):
    """Add the engine class ``cls`` under ``cls.info.name``; returns ``cls`` (usable as a decorator)."""
    name = cls.info.name
    if name == "auto":
        raise ValueError("'auto' is the automatic choice, not an engine name")
    other = ENGINES.get(name)
    if other is not None and other is not cls:
        raise ValueError(f"engine {name!r} is registered already ({other.__module__}.{other.__qualname__})")
    ENGINES[name] = cls
    return cls


def names():
    """``"auto, fft, ..."``: the values ``EngineConfig.engine`` takes, for messages."""
    return ", ".join(("auto", *ENGINES))


def engine_class(name):
    """The class registered as ``name``; ValueError naming the choices otherwise."""
    try:
        return ENGINES[name]
    except (KeyError, TypeError):
        raise ValueError(f"correlation.engine must be one of {names()}, got {name!r}") from None
