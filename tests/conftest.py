import os

import numpy as np
import pytest

from ebsdxc.backend import gpu_available

SAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, "sample_data")


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU (CuPy with a device) here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def sample_dir():
    return os.path.abspath(SAMPLE)


@pytest.fixture(scope="session")
def sample_truth(sample_dir):
    """(pattern_shape, F (rows, cols, 3, 3), pc (rows, cols, 3), pc_ref, tilts) of the sample scan."""
    import h5py

    with h5py.File(os.path.join(sample_dir, "truth.h5"), "r") as f:
        return {
            "F": f["F"][...],
            "pc": f["pattern_centre"][...],
            "pc_ref": f["pattern_centre_ref"][...],
            "sample_tilt": float(f.attrs["sample_tilt"]),
            "detector_tilt": float(f.attrs["detector_tilt"]),
            "shape": tuple(int(v) for v in f.attrs["detector_shape"]),
        }


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """The dispatcher with the shipped calibration tables only (no user calibration), its
    caches cleared before and after."""
    from ebsdxc.engines import dispatch

    monkeypatch.setenv("EBSDXC_CACHE_DIR", str(tmp_path))
    dispatch.load_table.cache_clear()
    dispatch._choose.cache_clear()
    yield
    dispatch.load_table.cache_clear()
    dispatch._choose.cache_clear()
