"""PatternPreprocessor as a whole: identity, input dtypes, independence of the batch items."""

from __future__ import annotations

import numpy as np
import pytest
from preprocess_oracles import kikuchi_like

from ebsdxc.backend import select_backend
from ebsdxc.preprocess import PatternPreprocessor, PreprocessConfig


@pytest.fixture(scope="module")
def be():
    # CPU only: overrides the NumPy / CuPy `be` of conftest.py.
    return select_backend("cpu")

def test_identity_returns_float32(be):
    rng = np.random.default_rng(1)
    pats = rng.integers(0, 4000, size=(2, 17, 23)).astype(np.uint16)
    pp = PatternPreprocessor(PreprocessConfig(), be)
    assert pp.is_identity
    out = pp(pats)
    assert out.dtype == np.float32 and out.shape == pats.shape
    np.testing.assert_array_equal(out, pats.astype(np.float32))


@pytest.mark.parametrize("config", [PreprocessConfig(dynamic_background_sigma=5),
                                    PreprocessConfig(bandpass=(1.0, 6.0)),
                                    PreprocessConfig(dynamic_background_sigma=4, bandpass=(0.0, 8.0))])
def test_input_dtypes_give_same_result(be, config):
    rng = np.random.default_rng(4)
    H, W = 41, 58
    base = np.round(60 + 120 * kikuchi_like((H, W), 2)[None] * rng.uniform(0.8, 1.0, (2, 1, 1)))
    base = np.clip(base, 0, 255)
    outs = [PatternPreprocessor(config, be)(base.astype(dt)) for dt in
            (np.uint8, np.uint16, np.float32, np.float64)]
    for o in outs:
        assert o.dtype == np.float32 and o.shape == (2, H, W)
        np.testing.assert_allclose(o, outs[0], rtol=1e-6, atol=1e-6)


def test_batch_items_processed_independently(be):
    rng = np.random.default_rng(6)
    pats = rng.uniform(1, 100, size=(3, 30, 37)) * np.array([1, 50, 0.01])[:, None, None]
    pp = PatternPreprocessor(PreprocessConfig(dynamic_background_sigma=4, bandpass=(1.0, 5.0)), be)
    batch = pp(pats)
    for b in range(3):
        np.testing.assert_allclose(batch[b], pp(pats[b:b + 1])[0], rtol=1e-5, atol=1e-6)
