"""ebsdxc: cross-correlation of EBSD patterns (and DIC images) on GPU and CPU.

The package is layered; arrows point down only::

    cli ──► runner, recipes ──► preprocess, rois, engines/, peaks ──► io/, backend, kernel loader

Start from :func:`ebsdxc.runner.process` for the whole pipeline, or use the stages
(:mod:`ebsdxc.rois`, :mod:`ebsdxc.preprocess`, :mod:`ebsdxc.engines`, :mod:`ebsdxc.peaks`)
as array-in/array-out functions.
"""

__version__ = "0.1.0"

from .errors import InputError  # noqa: E402,F401
