"""The automatic engine choice with several reference sets (a reference per grain): it weighs
the patterns a batch holds per set, not the batch, because the engines that correlate
pairings (tensor, direct) match a batch set by set, or as pairs (H100, 86 ROIs of 96x96 at
+-16, 2048 patterns: the tensor engine 179k patterns/s with one set, 49k with 64 random sets,
12k with 256, the fused engine 100k throughout; BENCHMARKS.md, twenty-fifth session)."""

import numpy as np
import pytest

from ebsdxc.backend import select_backend
from ebsdxc.engines import EngineConfig, choose_engine, dispatch
from ebsdxc.references import ReferenceSet
from ebsdxc.run.pipeline import _patterns_per_set

WINDOW = EngineConfig(mode="window", max_shift=16, subpixel="quadratic")


def _refs(index, k):
    return ReferenceSet(np.zeros((k, 4, 4), np.uint16), None if index is None else np.asarray(index), ())


def test_one_set_leaves_the_batch_as_it_is():
    assert _patterns_per_set(_refs(None, 1), 2048) == 2048
    assert _patterns_per_set(_refs(None, 1), None) is None
    assert _patterns_per_set(_refs(np.zeros(5000, np.int32), 1), 2048) == 2048


def test_patterns_a_set_holds_in_a_batch():
    # grains as runs of 100 points: a batch of 200 holds two sets, a batch of 50 one
    runs = np.repeat(np.arange(40), 100)
    assert _patterns_per_set(_refs(runs, 40), 200) == 100
    assert _patterns_per_set(_refs(runs, 40), 50) == 50
    # runs not aligned with the batches: every batch of 250 holds parts of three sets
    assert _patterns_per_set(_refs(runs, 40), 250) == round(4000 / (16 * 3))
    # 64 sets drawn at random for 2048 points: every batch of 2048 holds all of them
    rng = np.random.default_rng(0)
    mixed = rng.integers(0, 64, 2048 * 4).astype(np.int32)
    assert _patterns_per_set(_refs(mixed, 64), 2048) == 32
    # no batch given: the automatic choice's own 256, so at most 256 a set
    assert _patterns_per_set(_refs(runs, 40), None) == round(4000 / sum(len(np.unique(runs[s:s + 256]))
                                                                       for s in range(0, 4000, 256)))
    assert _patterns_per_set(_refs(np.zeros(1000, np.int32), 3), None) == 250


@pytest.mark.parametrize("gpu", ("NVIDIA H100 80GB HBM3", "NVIDIA H200"))
def test_many_sets_a_batch_leave_the_tensor_engine(shipped, monkeypatch, gpu):
    """The paper layout at +-16 with 2048 patterns a batch: the tensor engine with one set, or
    grains of 1000 points (2 sets a batch); the fused engine with 64 sets mixed in every batch."""
    if not dispatch._shipped():
        pytest.skip("no shipped table")

    class OnGPU:  # the automatic choice asks the backend only whether it is a GPU
        is_gpu = True

    monkeypatch.setattr(dispatch, "gpu_model", lambda device=None: gpu)
    rng = np.random.default_rng(1)
    n = 2048 * 8
    cases = {"tensor": [_refs(None, 1), _refs(np.repeat(np.arange(n // 1000 + 1), 1000)[:n], n // 1000 + 1)],
             "fused": [_refs(rng.integers(0, 64, n).astype(np.int32), 64),
                       _refs(rng.integers(0, 256, n).astype(np.int32), 256)]}
    for want, sets in cases.items():
        for refs in sets:
            batch = _patterns_per_set(refs, 2048)
            assert choose_engine(OnGPU(), (96, 96), WINDOW, n_tiles=86, batch=batch) == want, (refs.count, batch)
    # and on the CPU the FFT engine, whatever the sets
    assert choose_engine(select_backend("cpu"), (96, 96), WINDOW, n_tiles=86, batch=32) == "fft"


@pytest.mark.gpu
def test_a_run_with_grain_references_mixed_in_its_batches_takes_the_fused_engine():
    """As a run builds it: the pipeline of the paper layout at +-16 on this GPU, batch 2048."""
    from ebsdxc.config import load_config
    from ebsdxc.rois import layout_for
    from ebsdxc.run.pipeline import Pipeline

    config, _ = load_config(None, {"roi": {"layout": "grid", "grid": [9, 10], "size": 96, "drop_corners": True},
                                   "correlation": {"engine": "auto", "mode": "window", "max_shift": 16,
                                                   "subpixel": "quadratic"}})
    layout = layout_for(config.roi, (256, 256))
    assert layout.n == 86
    rng = np.random.default_rng(2)
    be = select_backend("cuda")
    n = 2048 * 4
    got = {}
    for k in (1, 64):
        pats = rng.integers(1000, 60000, (k, 256, 256)).astype(np.uint16)
        refs = ReferenceSet(pats, None if k == 1 else rng.integers(0, k, n).astype(np.int32), ())
        got[k] = Pipeline(be, config, layout, refs, batch=2048).engine.info.name
    assert got == {1: "tensor", 64: "fused"}


def test_which_batches_the_pairing_engines_match_set_by_set():
    """The rule the measurements above are read against (pairing._launches): a set's launch
    needs the engine's least patterns (GROUP_MIN unless it has its own) and GROUP_FMAS
    multiply-adds, else the batch goes as pairs."""
    from ebsdxc.engines.direct import DirectEngine
    from ebsdxc.engines.pairing import GROUP_MIN, matched_set_by_set
    from ebsdxc.engines.tensor import TensorEngine

    assert matched_set_by_set((96, 96), (16, 16), 86, 8)
    assert not matched_set_by_set((96, 96), (16, 16), 86, GROUP_MIN - 1)
    assert not matched_set_by_set((16, 16), (2, 2), 25, 85)  # too little work a launch
    # the direct engine's launches win from 8 patterns a set, the tensor engine's from 16
    assert DirectEngine.group_min is None and GROUP_MIN <= 8
    assert matched_set_by_set((96, 96), (16, 16), 86, 16, group_min=TensorEngine.group_min)
    assert not matched_set_by_set((96, 96), (16, 16), 86, 10, group_min=TensorEngine.group_min)


@pytest.mark.gpu
def test_patterns_against_references_of_their_own_take_the_pairs_engine():
    """Remapping (Pipeline.match_pairs) gives every pattern its own reference: a run on the
    tensor engine matches them on the engine the choice gives one pattern a set (fused), and
    finds each pattern's known shift; a run that names its engine keeps it."""
    from scipy import ndimage

    from ebsdxc.config import load_config
    from ebsdxc.rois import layout_for
    from ebsdxc.run.pipeline import Pipeline

    corr = {"mode": "window", "max_shift": 16, "subpixel": "quadratic"}
    roi = {"layout": "grid", "grid": [9, 10], "size": 96, "drop_corners": True}
    rng = np.random.default_rng(3)
    be = select_backend("cuda")
    B = 24
    base = ndimage.gaussian_filter(rng.standard_normal((B, 256, 256)), (0, 3, 3))
    raw = np.round(30000 + 20000 * base / np.abs(base).max()).astype(np.uint16)
    shifts = rng.uniform(-6, 6, (B, 2))  # (dy, dx): pattern b's content sits there in the reference
    moved = np.stack([ndimage.shift(p.astype(np.float64), s, order=3, mode="nearest") for p, s in zip(raw, shifts)])
    got = {}
    for engine in ("auto", "tensor"):
        config, _ = load_config(None, {"roi": roi, "correlation": {"engine": engine, **corr}})
        layout = layout_for(config.roi, (256, 256))
        pipe = Pipeline(be, config, layout, ReferenceSet(raw[:1], None, ()), batch=2048)
        refs = pipe.preprocessor(be.xp.asarray(moved.astype(np.float32)))
        res = pipe.match_pairs(refs, raw)
        got[engine] = (pipe.engine.info.name, pipe.pairs_engine().info.name,
                       *(be.asnumpy(a) for a in (res.displacement, res.status)))
    assert got["auto"][:2] == ("tensor", "fused") and got["tensor"][:2] == ("tensor", "tensor")
    for name, (_, _, d, s) in got.items():
        inner = s == 0
        assert inner.mean() > 0.9, name
        # the reference holds the content at +shift: the pattern's displacement is -shift, (dx, dy)
        # (ROIs on the pattern's edge see the shift's edge padding: a looser bound there)
        err = np.abs(d - np.broadcast_to(-shifts[:, None, ::-1], d.shape))[inner]
        assert np.median(err) < 0.02 and err.max() < 0.25, (name, np.median(err), err.max())
    np.testing.assert_array_equal(got["auto"][3], got["tensor"][3])
    assert np.abs(got["auto"][2] - got["tensor"][2]).max() < 2e-3
