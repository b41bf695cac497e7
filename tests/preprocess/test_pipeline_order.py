"""The order of the pattern-level steps: binning first, then the rest against float64 pieces."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from preprocess_oracles import bin_oracle, fill_oracle, host, mask_oracle, seeded

from ebsdxc.preprocess import PatternPreprocessor, PreprocessConfig


def test_binning_is_the_first_step(be):
    # binning then dynamic background + band-pass == the unbinned pipeline run on binned input
    xp = be.xp
    rng = seeded("first")
    pats = rng.uniform(50, 200, (2, 64, 90))
    opts = dict(dynamic_background_sigma=3.0, bandpass=(0.5, 6.0))
    a = host(PatternPreprocessor(PreprocessConfig(binning=2, **opts), be)(xp.asarray(pats)))
    b = host(PatternPreprocessor(PreprocessConfig(**opts), be)(xp.asarray(bin_oracle(pats, 2))))
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("raw", [(120, 160), (90, 90)])
def test_full_pipeline_against_float64_pieces(be, raw):
    """binning + static divide + mask + dynamic + erf band-pass on the backend vs the CPU pipeline."""
    from ebsdxc.backend import select_backend

    rng = seeded("full", raw)
    pats = rng.integers(500, 3000, (4,) + raw).astype(np.uint16)
    bg = rng.uniform(300, 600, raw)
    cfg = PreprocessConfig(binning=2, static_operation="divide", mask="circle", dynamic_background_sigma=5.0,
                           bandpass_kind="erf", bandpass_cutoffs=(0.02, 0.3), bandpass_width=0.03)
    out = host(PatternPreprocessor(cfg, be, static_background=bg)(be.xp.asarray(pats)))
    cpu = PatternPreprocessor(cfg, select_backend("cpu"), static_background=bg)(pats)
    assert out.dtype == np.float32 and out.shape == (4, raw[0] // 2, raw[1] // 2)
    np.testing.assert_allclose(out, cpu, rtol=1e-5, atol=1e-6)
    assert np.isfinite(out).all()
    # the same, step by step in float64 on the host, for the parts that have closed forms
    x = bin_oracle(pats, 2) / bin_oracle(bg, 2)
    m = mask_oracle(x.shape[1:])
    x = fill_oracle(x, m)
    pp_f = PatternPreprocessor(dataclasses.replace(cfg, binning=1, mask=None, static_operation="subtract"),
                               select_backend("cpu"))
    y = fill_oracle(pp_f(x), m)
    np.testing.assert_allclose(out, y, rtol=1e-4, atol=1e-5)
