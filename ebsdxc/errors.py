"""Exceptions the CLI turns into one clear line and a non-zero exit."""

from __future__ import annotations

import os


class InputError(ValueError):
    """Bad user input: a file that cannot be used, or options that do not fit it.

    The message names the file (when there is one) and the problem, in plain words.
    """

    def __init__(self, problem: str, path: str | os.PathLike | None = None):
        self.path = None if path is None else os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path else problem)
