"""Pattern binning: bin_patterns, output shapes, and binning of the static background."""

from __future__ import annotations

import numpy as np
import pytest
from preprocess_oracles import bin_oracle, host, seeded

from ebsdxc.preprocess import PatternPreprocessor, PreprocessConfig, bin_patterns


@pytest.mark.parametrize("shape,f", [((1, 1), 1), ((3, 9), 3), ((6, 10), 2), ((15, 21), 3), ((16, 16), 4),
                                     ((7, 5), 1), ((2, 2), 2), ((1, 4), 1), ((20, 5), 5), ((12, 18), 6)])
@pytest.mark.parametrize("lead", [(), (1,), (5,), (2, 3)])
@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.float64])
def test_bin_patterns_matches_oracle(xp, shape, f, lead, dtype):
    rng = seeded("bin", shape, f, lead, np.dtype(dtype).name)
    x = (rng.uniform(0, 60000, lead + shape)).astype(dtype)
    out = bin_patterns(xp.asarray(x), f)
    assert type(out) is xp.ndarray and out.dtype == np.float32
    assert out.shape == lead + (shape[0] // f, shape[1] // f)
    np.testing.assert_allclose(host(out), bin_oracle(x, f), rtol=2e-7, atol=0)


def test_bin_patterns_of_counts_is_exact():
    # sums of <= 16 uint16 counts are exact in float32; a 2^k-pixel mean divides exactly
    x = seeded("exact").integers(0, 65536, (4, 8, 12)).astype(np.uint16)
    np.testing.assert_array_equal(bin_patterns(x, 2), bin_oracle(x, 2).astype(np.float32))
    np.testing.assert_array_equal(bin_patterns(x, 4), bin_oracle(x, 4).astype(np.float32))


@pytest.mark.parametrize("shape,f", [((3, 10), 2), ((10, 3), 2), ((9, 9), 2), ((16, 15), 4), ((1, 1), 2)])
def test_bin_patterns_refuses_sides_not_multiple(xp, shape, f):
    with pytest.raises(ValueError, match="multiples of"):
        bin_patterns(xp.zeros((2,) + shape), f)


@pytest.mark.parametrize("f", [0, -2, 2.0, 1.5, True, "2", None])
def test_bin_patterns_bad_factor(f):
    with pytest.raises(ValueError, match="binning"):
        bin_patterns(np.zeros((1, 4, 4)), f)


def test_bin_patterns_factor_one_keeps_float32_without_copy():
    x = np.ones((2, 3, 5), np.float32)
    assert bin_patterns(x, 1) is x
    assert bin_patterns(x.astype(np.uint8), 1).dtype == np.float32


@pytest.mark.parametrize("raw,f", [((160, 160), 2), ((60, 90), 3), ((12, 8), 4), ((7, 5), 1)])
@pytest.mark.parametrize("op", ["subtract", "divide"])
def test_preprocessor_bins_patterns_and_static_background(be, raw, f, op):
    xp = be.xp
    rng = seeded("ppbin", raw, f, op)
    pats = rng.integers(100, 4000, (3,) + raw).astype(np.uint16)
    bg = rng.uniform(20, 80, raw)
    pp = PatternPreprocessor(PreprocessConfig(binning=f, static_operation=op), be, static_background=bg)
    assert pp.output_shape(raw) == (raw[0] // f, raw[1] // f)
    assert pp.is_identity is False
    out = host(pp(xp.asarray(pats)))
    assert out.dtype == np.float32 and out.shape == (3,) + pp.output_shape(raw)
    b, g = bin_oracle(pats, f), bin_oracle(bg, f)
    np.testing.assert_allclose(out, b - g if op == "subtract" else b / g, rtol=2e-6, atol=2e-4)


def test_output_shape_refuses_indivisible(be):
    pp = PatternPreprocessor(PreprocessConfig(binning=4), be)
    assert pp.output_shape((480, 640)) == (120, 160)
    assert pp.output_shape((3, 480, 640)) == (120, 160)
    with pytest.raises(ValueError, match="multiples of 4"):
        pp.output_shape((482, 640))
    assert PatternPreprocessor(PreprocessConfig(), be).output_shape((7, 5)) == (7, 5)


def test_static_background_of_indivisible_size_is_refused(be):
    with pytest.raises(ValueError, match="multiples"):
        PatternPreprocessor(PreprocessConfig(binning=2), be, static_background=np.ones((9, 10)))
