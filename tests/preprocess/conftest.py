"""Backends for the preprocessing tests.

Tests that take ``xp`` or ``be`` run on NumPy and, marked ``gpu``, on CuPy (compared with the
NumPy float64 oracles at float32 tolerances).
"""

from __future__ import annotations

import numpy as np
import pytest

XP = [pytest.param("numpy", id="numpy"), pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)]


@pytest.fixture(params=XP)
def xp(request):
    if request.param == "numpy":
        return np
    return pytest.importorskip("cupy")


@pytest.fixture
def be(xp):
    from ebsdxc.backend import select_backend

    return select_backend("cpu" if xp is np else "cuda")
