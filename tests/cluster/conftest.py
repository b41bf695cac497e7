"""Fixtures shared by the cluster tests."""

from __future__ import annotations

import h5py
import numpy as np
import pytest


@pytest.fixture(scope="module")
def big_scan(tmp_path_factory, sample_dir):
    """40 x 10 points: the sample's 10 x 10 patterns four times over (enough tasks to kill or
    cancel a run in the middle)."""
    path = tmp_path_factory.mktemp("scan") / "big.h5"
    with h5py.File(f"{sample_dir}/scan.h5", "r") as f:
        p = f["patterns"][...]
    with h5py.File(path, "w") as f:
        f["patterns"] = np.concatenate([p] * 4, axis=0)
    return str(path)
