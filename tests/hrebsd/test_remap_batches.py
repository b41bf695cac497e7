"""The remapping pass's batches: read ahead (on the GPU through pinned buffers), prepared in
parts on the CPU's threads, and halved down to what fits where memory runs out."""

import warnings

import numpy as np
import pytest

from ebsdxc.backend import select_backend
from ebsdxc.config import load_config
from ebsdxc.hrebsd import _in_halves_when_out_of_memory, _read_ahead, _takes_out
from ebsdxc.references import ReferenceSet
from ebsdxc.rois import layout_for
from ebsdxc.run.pipeline import Pipeline


@pytest.fixture(scope="module")
def pipeline():
    config, _ = load_config(None, {"roi": {"layout": "grid", "grid": [2, 2], "size": 16}})
    rng = np.random.default_rng(0)
    refs = ReferenceSet(rng.integers(0, 4000, (1, 64, 64)).astype(np.uint16), None, ())
    return Pipeline(select_backend("cpu"), config, layout_for(config.roi, (64, 64)), refs)


def test_parts_halve_down_to_the_ones_that_fit(pipeline):
    done = []

    def work(p):
        if p.stop - p.start > 3:
            np.empty(1 << 62, np.uint8)  # NumPy's own MemoryError
        done.append((p.start, p.stop))

    with pytest.warns(UserWarning) as rec:
        _in_halves_when_out_of_memory(work, 10, pipeline)
    assert done == [(0, 2), (2, 5), (5, 7), (7, 10)]
    msgs = [str(w.message) for w in rec]
    assert [m.split(" points at a time")[0].rsplit(" ", 1)[1] for m in msgs] == ["10", "5", "5"], msgs
    assert all(m.startswith("remapping: out of memory with") and "\n" not in m for m in msgs)


def test_one_point_out_of_memory_and_other_errors_stand(pipeline):
    def oom(p):
        np.empty(1 << 62, np.uint8)

    with pytest.raises(MemoryError), pytest.warns(UserWarning):
        _in_halves_when_out_of_memory(oom, 2, pipeline)

    def bad(p):
        raise ValueError("not a memory error")

    with pytest.raises(ValueError, match="not a memory error"):
        _in_halves_when_out_of_memory(bad, 8, pipeline)


def test_pairs_prepared_on_threads_match_as_on_one_thread():
    """Each pattern's own reference, prepared in parts on the CPU's threads and joined, gives
    what one thread gives, bit for bit; and the known shift (the median: 16 px ROIs of noise resolve no better)."""
    from scipy.ndimage import gaussian_filter

    config, _ = load_config(None, {"roi": {"layout": "grid", "grid": [2, 2], "size": 16},
                                   "correlation": {"engine": "fft"}})
    rng = np.random.default_rng(4)
    refs = gaussian_filter(rng.random((150, 64, 64)), (0, 1.5, 1.5)).astype(np.float32)
    patterns = np.roll(refs, (1, -2), axis=(1, 2))
    ref_set = ReferenceSet(refs[:1], None, ())
    got = {}
    for threads in (1, 2):
        p = Pipeline(select_backend("cpu", threads=threads), config, layout_for(config.roi, (64, 64)), ref_set)
        assert (p._pool is not None) == (threads > 1) and p._sub_batch < len(refs) // 2  # parts: 64, 64, 22
        got[threads] = p.match_pairs(refs, patterns)
        p.close()
    for k in ("displacement", "peak_height", "status"):
        np.testing.assert_array_equal(getattr(got[2], k), getattr(got[1], k), err_msg=k)
    ok = got[2].status == 0
    assert ok.mean() > 0.7  # the rest: peaks on the border of the search, the same on both
    np.testing.assert_allclose(np.median(got[2].displacement[ok], axis=0), [-2, 1], atol=0.1)


def test_joined_references_keep_the_order_and_refuse_other_engines():
    from ebsdxc.engines import PreparedReferences

    a = PreparedReferences(np.arange(8.0).reshape(4, 2), np.ones((2, 2)), np.zeros((2, 2), np.uint8), ("fft", (16, 16)))
    b = PreparedReferences(np.arange(8.0, 10.0).reshape(1, 2), np.full((1, 2), 2.0), np.ones((1, 2), np.uint8),
                           ("fft", (16, 16)))
    j = PreparedReferences.joined([a, b])
    assert j.count == 3 and j.n == 2 and j.key == a.key
    np.testing.assert_array_equal(j.payload, np.arange(10.0).reshape(5, 2))
    np.testing.assert_array_equal(j.status[:, 0], [0, 0, 1])
    other = PreparedReferences(b.payload, b.energy, b.status, ("direct", (16, 16)))
    with pytest.raises(ValueError, match="one engine"):
        PreparedReferences.joined([a, other])



@pytest.mark.gpu
@pytest.mark.parametrize("dtype,reader,pinned", [(np.uint16, "fills", True), (np.float32, "own array", True),
                                                 (np.uint16, "no out", True), (np.uint16, "fills", False)])
def test_batches_reach_the_device_as_read_while_copies_wait(dtype, reader, pinned, monkeypatch):
    """On the GPU the read-ahead hands each batch over on the device, read into one of two
    pinned buffers. Here every copy waits in the stream behind a slow kernel while the reading
    thread goes on: a buffer read into before its copy ran would give a batch the contents of
    the one two along. Batch sizes grow and shrink. The first batch is read without ``out``
    (its dtype is learnt from it); a reader that returns its own array, or takes no ``out``,
    is copied in. With pinned memory refused (CuPy's pinned allocator hook raising the CUDA
    runtime's allocation error) the buffers are ordinary memory and the batches the same."""
    import cupy as cp

    from ebsdxc import backend

    spin = cp.RawKernel(r'''
    extern "C" __global__ void spin(long long cycles) {
        long long t0 = clock64();
        while (clock64() - t0 < cycles) {}
    }''', "spin")
    rng = np.random.default_rng(3)
    data = [(rng.random((b, 48, 40)) * 60000).astype(dtype) for b in (6, 30, 30, 3, 30, 7, 9, 30)]
    asked = []

    def read_points(flat, out=None):  # batch k's points are all k here
        asked.append(out is not None)
        want = data[int(flat[0])]
        assert len(flat) == len(want)
        if out is None or reader == "own array":
            return want
        out[...] = want
        return out

    refused = []

    def refuse(size):
        refused.append(size)
        raise cp.cuda.runtime.CUDARuntimeError(2)  # cudaErrorMemoryAllocation

    got = []
    if not pinned:
        monkeypatch.setattr(backend, "_pinned_warned", False)
        cp.cuda.set_pinned_memory_allocator(refuse)
    try:
        with cp.cuda.Stream(non_blocking=True) as stream, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            read = read_points if reader != "no out" else (lambda flat: read_points(flat))
            for patterns in _read_ahead(read, [np.full(len(d), k) for k, d in enumerate(data)], cp):
                assert isinstance(patterns, cp.ndarray)
                spin((1,), (1,), (np.int64(20_000_000),))  # about 10 ms: the next copies queue behind it
                got.append(patterns)
            stream.synchronize()
    finally:
        cp.cuda.set_pinned_memory_allocator(cp.get_default_pinned_memory_pool().malloc)
    said = [str(w.message) for w in caught if "pinned host memory refused" in str(w.message)]
    if pinned:
        assert not refused and not said
    else:  # asked for each buffer, warned once, and the copies still waited for the device
        assert len(refused) >= 2 and len(said) == 1 and "cudaErrorMemoryAllocation" in said[0], said
    assert asked == ([False] * len(data) if reader == "no out" else [False] + [True] * (len(data) - 1))
    assert len(got) == len(data)
    for k, (want, dev) in enumerate(zip(data, got)):
        assert dev.dtype == want.dtype and dev.shape == want.shape, k
        np.testing.assert_array_equal(cp.asnumpy(dev), want, err_msg=f"batch {k}")


def test_readers_that_take_out_are_told_apart():
    import functools

    from ebsdxc.run.inputs import read_points

    assert _takes_out(lambda flat, out=None: flat)
    assert _takes_out(lambda flat, **kw: flat)
    assert _takes_out(functools.partial(read_points, None, None))
    assert not _takes_out(lambda flat: flat)
    assert not _takes_out(lambda flat, out=None, /: flat)  # positional only: out= would fail
    assert not _takes_out({}.__getitem__)  # a builtin: no keyword arguments to be given


def test_read_ahead_on_the_cpu_gives_each_batch_in_order():
    data = {k: np.full((k + 1, 4, 4), k, np.uint16) for k in range(5)}
    got = list(_read_ahead(data.__getitem__, [3, 0, 4, 1]))
    assert [g[0, 0, 0] for g in got] == [3, 0, 4, 1] and all(type(g) is np.ndarray for g in got)
