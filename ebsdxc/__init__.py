"""ebsdxc: cross-correlation of EBSD patterns (and DIC images) on GPU and CPU.

The package is layered; arrows point down only (ARCHITECTURE.md)::

    cli, cluster, plot ──► run/, config ──► references, preprocess, rois, engines/, peaks,
                                            hrebsd, strain, geometry ... ──► io/, backend, kernel loader

Start from :func:`ebsdxc.process` (``ebsdxc.run.process``) for the whole pipeline,
:func:`ebsdxc.read_results` for its output, or use the stages
(:mod:`ebsdxc.rois`, :mod:`ebsdxc.preprocess`, :mod:`ebsdxc.engines`, :mod:`ebsdxc.peaks`)
as array-in/array-out functions.
"""

__version__ = "0.1.0"

from .errors import InputError  # noqa: E402,F401

# The everyday entry points, imported on first use so that `import ebsdxc` stays light.
_LAZY = {
    "process": ("ebsdxc.run", "process"),
    "strain": ("ebsdxc.run", "strain"),
    "ReferenceSet": ("ebsdxc.references", "ReferenceSet"),
    "open_scan": ("ebsdxc.io", "open_scan"),
    "read_results": ("ebsdxc.io.results", "read_results"),
    "load_config": ("ebsdxc.config", "load_config"),
    "ProcessConfig": ("ebsdxc.config", "ProcessConfig"),
    "RunConfig": ("ebsdxc.config", "RunConfig"),
    "read_strain": ("ebsdxc.io.results", "read_strain"),
    "StrainConfig": ("ebsdxc.hrebsd", "StrainConfig"),
}

__all__ = ["InputError", "__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'ebsdxc' has no attribute {name!r}")
