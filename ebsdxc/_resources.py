"""Where the package data folders (``kernels/``, ``pipelines/``) are.

Installed (wheel or editable), they are the packages ``ebsdxc.kernels`` and
``ebsdxc.pipelines``. Run from a source checkout without installing (or with the checkout
shadowing an installed copy on ``sys.path``), they are the top-level folders beside
``ebsdxc/``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def data_dir(name: str):
    """Traversable of the package data folder ``name`` ("kernels" or "pipelines")."""
    try:
        return resources.files(f"ebsdxc.{name}")
    except ModuleNotFoundError:
        here = Path(__file__).resolve().parent.parent / name
        if here.is_dir():
            return here
        raise
