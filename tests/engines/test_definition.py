"""The definition-based kernels: every algorithm, form and mode against a float64 oracle (GPU),
and their parameter rules (CPU)."""

import numpy as np
import pytest
from scipy.signal import correlate2d

from ebsdxc.engines.definition import (
    ALGORITHMS,
    KernelChoice,
    Pairing,
    default_choice,
    overlap_fmas,
    parse_kernel,
)


def oracle(left, right, max_lag):
    """[ry + dy, rx + dx] = sum over the overlap of left[y, x] * right[y + dy, x + dx], float64."""
    h, w = left.shape
    full = correlate2d(right.astype(np.float64), left.astype(np.float64), mode="full")
    ry, rx = max_lag
    return full[h - 1 - ry:h + ry, w - 1 - rx:w + rx]


# One kernel per algorithm and blocking factor worth covering (partial blocks included:
# the counts below are not multiples of kl, kr, g or the segment width).
CHOICES = [
    KernelChoice("overlap_wise"),
    KernelChoice("warp_per_overlap"),
    KernelChoice("warp_shuffle"),
    KernelChoice("warp_shuffle", width=16),
    KernelChoice("warp_shuffle", width=8),
    KernelChoice("multi_matrix_right", kr=4),
    KernelChoice("multi_matrix_right", width=16, kr=8),
    KernelChoice("grouped_overlap", g=4),
    KernelChoice("grouped_overlap", g=8, kr=4),
    KernelChoice("grouped_overlap", width=8, g=2, kr=2),
    KernelChoice("split_row", splits=3),
    KernelChoice("split_row", splits=8, g=4, kr=2),
]
N_TO_M_CHOICES = [
    KernelChoice("multi_matrix_both", kl=2, kr=4),
    KernelChoice("multi_matrix_both", width=16, kl=8, kr=8),
    KernelChoice("grouped_overlap", g=4, kl=4, kr=4),
    KernelChoice("split_row", splits=4, kl=2, kr=2),
]
SHAPES = [(1, 1), (5, 7), (13, 6), (33, 20), (40, 40), (31, 64)]


def test_every_algorithm_is_covered():
    assert {c.algorithm for c in CHOICES + N_TO_M_CHOICES} == set(ALGORITHMS)


@pytest.mark.parametrize("text", ["warp_shuffle", "grouped_overlap:kr=8,g=4", "split_row:width=16,splits=32",
                                  "multi_matrix_both:kl=4,kr=4", "overlap_wise"])
def test_label_round_trip(text):
    assert parse_kernel(text).label == text


def test_options_in_any_order():
    assert parse_kernel("grouped_overlap: g=4, kr=8") == KernelChoice("grouped_overlap", kr=8, g=4)


@pytest.mark.parametrize("text, words", [
    ("nonsense", "unknown definition-based kernel"),
    ("warp_shuffle:kr=4", "not a valid warp_shuffle"),
    ("grouped_overlap:g=1", "not a valid grouped_overlap"),
    ("grouped_overlap:g=8,kr=8,kl=2", "64"),
    ("warp_shuffle:width=12", "width must be one of"),
    ("warp_shuffle:depth=3", "expected width="),
    ("warp_shuffle:width=x", "needs an integer"),
    ("overlap_wise:kr=2", "takes no blocking factors"),
])
def test_bad_kernels_are_plain_errors(text, words):
    with pytest.raises(ValueError, match=words):
        parse_kernel(text)


def test_several_lefts_per_thread_need_n_to_m():
    k = KernelChoice("multi_matrix_both", kl=2, kr=2)
    assert k.fits(Pairing.n_to_m(3, 4))
    assert not k.fits(Pairing.n_to_mn(3, 4))


def test_pairings_index_every_right_once():
    for p in (Pairing.n_to_mn(3, 5), Pairing.n_to_m(3, 5)):
        rights = {a * p.rs_a + b * p.rs_b for a in range(p.na) for b in range(p.nb)}
        outs = sorted(a * p.os_a + b * p.os_b for a in range(p.na) for b in range(p.nb))
        assert outs == list(range(15))  # every output map written exactly once
        assert max(rights) + 1 == p.n_rights


@pytest.mark.parametrize("shape, lag", [((5, 7), (4, 6)), ((9, 4), (2, 1)), ((1, 1), (0, 0))])
def test_overlap_fmas_is_the_sum_of_overlaps(shape, lag):
    h, w = shape
    want = sum((h - abs(dy)) * (w - abs(dx)) for dy in range(-lag[0], lag[0] + 1)
               for dx in range(-lag[1], lag[1] + 1))
    assert overlap_fmas(shape, lag, 3) == 3 * want


def test_default_choice_is_valid_for_every_form():
    for p in (Pairing.n_to_mn(86, 50), Pairing.n_to_m(1, 1), Pairing.n_to_mn(1, 3)):
        for shape, lag in (((96, 96), (95, 95)), ((8, 8), (7, 7)), ((64, 64), (4, 4))):
            k = default_choice(p, shape, lag)
            assert k.fits(p)
            assert parse_kernel(k.label) == k


# ---------------------------------------------------------------- GPU against the oracle

def _check(cp, maps, lefts, rights, pairing, max_lag):
    from numpy.fft import fftshift

    got = fftshift(cp.asnumpy(maps), axes=(-2, -1))
    assert got.dtype == np.float32
    worst = 0.0
    for a in range(pairing.na):
        for b in range(pairing.nb):
            want = oracle(lefts[a], rights[a * pairing.rs_a + b * pairing.rs_b], max_lag)
            g = got[a * pairing.os_a + b * pairing.os_b]
            scale = max(np.abs(want).max(), 1e-30)
            worst = max(worst, np.abs(g - want).max() / scale)
    assert worst <= 1e-5, worst


def _lags(shape, mode):
    h, w = shape
    return (h - 1, w - 1) if mode == "full" else (min(3, h - 1), min(3, w - 1))


@pytest.mark.gpu
@pytest.mark.parametrize("choice", CHOICES, ids=lambda c: c.label)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("mode", ["full", "window"])
def test_n_to_mn_matches_oracle(rng, choice, shape, mode):
    import cupy as cp

    from ebsdxc.engines.definition import correlate_maps

    n, m = 3, 5
    lefts = rng.standard_normal((n, *shape)).astype(np.float32)
    rights = rng.standard_normal((m * n, *shape)).astype(np.float32)
    p = Pairing.n_to_mn(n, m)
    lag = _lags(shape, mode)
    maps = correlate_maps(cp.asarray(lefts), cp.asarray(rights), p, lag, choice)
    _check(cp, maps, lefts, rights, p, lag)


@pytest.mark.gpu
@pytest.mark.parametrize("choice", CHOICES + N_TO_M_CHOICES, ids=lambda c: c.label)
@pytest.mark.parametrize("shape", [(1, 1), (13, 6), (33, 20)], ids=str)
@pytest.mark.parametrize("mode", ["full", "window"])
def test_n_to_m_matches_oracle(rng, choice, shape, mode):
    import cupy as cp

    from ebsdxc.engines.definition import correlate_maps

    lefts = rng.standard_normal((5, *shape)).astype(np.float32)
    rights = rng.standard_normal((6, *shape)).astype(np.float32)
    p = Pairing.n_to_m(5, 6)
    lag = _lags(shape, mode)
    maps = correlate_maps(cp.asarray(lefts), cp.asarray(rights), p, lag, choice)
    _check(cp, maps, lefts, rights, p, lag)


@pytest.mark.gpu
@pytest.mark.parametrize("choice", [KernelChoice("grouped_overlap", g=8, kr=8),
                                    KernelChoice("multi_matrix_right", kr=8), KernelChoice("split_row", splits=16)],
                         ids=lambda c: c.label)
def test_large_tiles_and_wide_window(rng, choice):
    # A 96x96 full-mode case (the EBSD layout) and a window wider than a warp.
    import cupy as cp

    from ebsdxc.engines.definition import correlate_maps

    for shape, lag in (((96, 96), (95, 95)), ((70, 90), (20, 40))):
        lefts = rng.standard_normal((2, *shape)).astype(np.float32)
        rights = rng.standard_normal((6, *shape)).astype(np.float32)
        p = Pairing.n_to_mn(2, 3)
        maps = correlate_maps(cp.asarray(lefts), cp.asarray(rights), p, lag, choice)
        _check(cp, maps, lefts, rights, p, lag)


@pytest.mark.gpu
def test_out_of_range_arguments_are_refused():
    import cupy as cp

    from ebsdxc.engines.definition import correlate_maps

    a = cp.zeros((2, 8, 8), cp.float32)
    with pytest.raises(ValueError, match="n-to-m"):
        correlate_maps(a, a, Pairing.n_to_mn(2, 1), (7, 7), KernelChoice("multi_matrix_both", kl=2))
    with pytest.raises(ValueError, match="do not fit"):
        correlate_maps(a, a, Pairing.n_to_mn(2, 1), (8, 7))
    with pytest.raises(ValueError, match="right matrices must be"):
        correlate_maps(a, a[:1], Pairing.n_to_mn(2, 1), (7, 7))


@pytest.mark.gpu
@pytest.mark.parametrize("label", ["grouped_overlap:g=4,kr=2", "warp_per_overlap", "auto"])
def test_direct_engine_kernels_agree_with_fft_peaks(label):
    # Whole engine path: the direct engine with a given (or dispatched) kernel finds the
    # same peaks as the FFT engine.
    import cupy as cp

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, make_engine

    rng = np.random.default_rng(3)
    be = select_backend("cuda")
    ref = rng.standard_normal((4, 24, 24)).astype(np.float32)
    scan = np.stack([np.roll(ref, (j % 3 - 1, 2 - j % 5), axis=(1, 2)) for j in range(6)])
    scan += 0.05 * rng.standard_normal(scan.shape).astype(np.float32)
    res = []
    for engine in ("fft", "direct"):
        cfg = EngineConfig(mode="window", max_shift=5, subpixel="quadratic", compensate=False,
                           kernel=label if engine == "direct" else "auto")
        eng = make_engine(engine, be, (24, 24), cfg)
        e = cp.asarray((ref.astype(np.float64) ** 2).sum(axis=(1, 2)), cp.float32)
        eng.set_reference(cp.asarray(ref), e, cp.zeros(4, cp.uint8))
        es = cp.asarray((scan.astype(np.float64) ** 2).sum(axis=(2, 3)), cp.float32)
        r = eng.match(cp.asarray(scan), es, cp.zeros((6, 4), cp.uint8))
        res.append(cp.asnumpy(r.displacement))
    np.testing.assert_allclose(res[1], res[0], atol=1e-3)
    want = np.array([[2 - j % 5, j % 3 - 1] for j in range(6)], float)
    np.testing.assert_allclose(res[1][:, 0], want, atol=0.05)
