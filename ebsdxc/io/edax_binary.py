"""Placeholder: reader being written (issue 5)."""

NAME = "edax_binary"
DESCRIPTION = "not yet available"


def detect(path) -> bool:
    return False


def open(path, *, dataset=None, grid_shape=None):  # noqa: A001
    from ..errors import InputError

    raise InputError("this reader is not available yet", path)
