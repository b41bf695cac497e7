"""The per-ROI results kernels (``kernels/results.cu``) against the array code they replace,
run in NumPy float64 on the CPU: the same codes, heights and displacements bit for bit
(run with ``pytest -m gpu``)."""

from types import SimpleNamespace

import numpy as np
import pytest

from ebsdxc import status as st
from ebsdxc.engines.base import CorrelationEngine, PreparedReferences
from ebsdxc.run.pipeline import _flag_arrays

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


def _peaks(rng, B, n, K, coord, value_dtype):
    """Peaks with every case the codes tell apart: fits that failed (NaN), peaks on the border,
    bad scan and reference tiles, zero energies, correlations beyond +-1."""
    y = rng.uniform(-30, 30, (B, n)).astype(coord)
    x = rng.uniform(-30, 30, (B, n)).astype(coord)
    y[rng.random((B, n)) < 0.1] = np.nan
    x[rng.random((B, n)) < 0.1] = np.inf
    value = rng.normal(0, 2, (B, n)).astype(value_dtype)  # some beyond the energies: clipped
    border = rng.random((B, n)) < 0.15
    energy = rng.uniform(0.5, 2, (B, n)).astype(np.float32)
    energy[rng.random((B, n)) < 0.05] = 0
    status = np.where(rng.random((B, n)) < 0.15, rng.integers(2, 4, (B, n)), st.OK).astype(np.uint8)
    ref_energy = rng.uniform(0.5, 2, (K, n)).astype(np.float32)
    ref_energy[0, 0] = 0
    ref_status = np.where(rng.random((K, n)) < 0.2, st.CONSTANT_TILE, st.OK).astype(np.uint8)
    return y, x, value, border, energy, status, ref_energy, ref_status


@pytest.mark.parametrize("coord", [np.float64, np.float32])
@pytest.mark.parametrize("value_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 49, 1), (33, 45, 3), (0, 5, 1)])
@pytest.mark.parametrize("indexed", [False, True])
def test_assemble_kernel_equals_the_array_code(cp, shape, coord, value_dtype, indexed):
    from ebsdxc.engines.gpu_results import assemble_results

    B, n, K = shape
    rng = np.random.default_rng(B * 100 + n + K)
    y, x, value, border, energy, status, ref_energy, ref_status = _peaks(rng, B, n, K, coord, value_dtype)
    index = rng.integers(0, K, B).astype(np.int32) if indexed else None
    refs = PreparedReferences(None, ref_energy, ref_status, ())
    want = CorrelationEngine._assemble_arrays(SimpleNamespace(xp=np), y, x, value, border, energy, status, refs, index)
    got = assemble_results(*(cp.asarray(a) for a in (y, x, value, border, energy, status, ref_energy, ref_status)),
                           None if index is None else cp.asarray(index))
    for name, g, w in zip(("displacement", "peak_height", "status"), got,
                          (want.displacement, want.peak_height, want.status)):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        np.testing.assert_array_equal(cp.asnumpy(g), w, err_msg=name)
    if B * n:  # every code the kernel tells apart occurs
        codes = set(np.unique(want.status).tolist())
        assert {st.OK, st.PEAK_ON_BORDER, st.SUBPIXEL_FAILED} <= codes or n * B < 50


def test_the_engine_uses_the_kernel_and_gives_the_array_codes_result(cp):
    from ebsdxc.engines.gpu_results import assemble_results

    rng = np.random.default_rng(5)
    B, n, K = 9, 12, 2
    y, x, value, border, energy, status, ref_energy, ref_status = _peaks(rng, B, n, K, np.float64, np.float32)
    refs = PreparedReferences(None, cp.asarray(ref_energy), cp.asarray(ref_status), ())
    dev = [cp.asarray(a) for a in (y, x, value, border, energy, status)]
    index = cp.asarray(rng.integers(0, K, B))
    engine = SimpleNamespace(xp=cp)
    via_engine = CorrelationEngine._assemble(SimpleNamespace(xp=cp, _assemble_arrays=None), *dev, refs, index)
    arrays = CorrelationEngine._assemble_arrays(engine, *dev, refs, index)  # CuPy array operations
    direct = assemble_results(*dev, refs.energy, refs.status, index)
    for a, b, c in zip((via_engine.displacement, via_engine.peak_height, via_engine.status),
                       (arrays.displacement, arrays.peak_height, arrays.status), direct):
        np.testing.assert_array_equal(cp.asnumpy(a), cp.asnumpy(b))
        np.testing.assert_array_equal(cp.asnumpy(a), cp.asnumpy(c))


@pytest.mark.parametrize("shape", [(1, 1), (6, 49), (40, 7), (0, 3)])
@pytest.mark.parametrize("with_mask", [False, True])
def test_flag_kernel_equals_the_array_code(cp, shape, with_mask):
    from ebsdxc.engines import PeakResult
    from ebsdxc.engines.gpu_results import flag_results

    B, n = shape
    rng = np.random.default_rng(B + 7 * n)
    disp = rng.normal(size=(B, n, 2)).astype(np.float32)
    disp[rng.random((B, n)) < 0.1] = np.nan
    height = rng.uniform(-1, 1, (B, n)).astype(np.float32)
    status = rng.integers(0, 4, (B, n)).astype(np.uint8)
    empty = rng.random(B) < 0.3
    outside = (rng.random(n) < 0.3) if with_mask else None
    want = _flag_arrays(PeakResult(disp, height, status), empty, outside, np)
    got = flag_results(cp.asarray(disp), cp.asarray(height), cp.asarray(status), cp.asarray(empty),
                       None if outside is None else cp.asarray(outside))
    for name, g, w in zip(("displacement", "peak_height", "status"), got,
                          (want.displacement, want.peak_height, want.status)):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        np.testing.assert_array_equal(cp.asnumpy(g), w, err_msg=name)
    if B * n >= 49 and with_mask:
        assert {st.MISSING_PATTERN, st.OUTSIDE_MASK} <= set(np.unique(want.status).tolist())
