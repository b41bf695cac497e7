"""Engines describe themselves: the registry, what each engine serves, and the dispatcher's
choices, pinned to what they were before the engines described themselves (same tables,
same inputs, same choices)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ebsdxc import bench
from ebsdxc.backend import select_backend
from ebsdxc.engines import ENGINES, EngineConfig, choose_engine, dispatch, make_engine
from ebsdxc.engines.base import CorrelationEngine, EngineInfo
from ebsdxc.engines.dispatch import Case, Choice
from ebsdxc.engines.fft import FFTEngine
from ebsdxc.engines.registry import register
from ebsdxc.errors import InputError
from ebsdxc.peaks import SUBPIXEL_METHODS

GPU = "NVIDIA H200"  # the shipped table

# (case, engines, choice label) as ebsdxc.dispatch.choose gave them with the shipped H200 table
# before the engines described themselves.
CHOOSE = [
    (Case("n_to_m", 8, 8, 8, 8, "full", None, False), ('fft', 'fused', 'direct'), "direct/multi_matrix_right:kr=2"),
    (Case("n_to_m", 32, 32, 16, 16, "full", None, True), ('fft', 'fused', 'direct'), "direct/grouped_overlap:kr=8,g=4"),
    (Case("n_to_m", 8, 8, 96, 80, "window", 3, True),
     ('fft', 'fused', 'direct'), "direct/multi_matrix_right:width=8,kr=8"),
    (Case("n_to_mn", 4, 3, 16, 16, "full", None, False), ('fft', 'fused', 'direct'), "direct/grouped_overlap:kr=2,g=4"),
    (Case("n_to_mn", 86, 256, 384, 384, "window", 3, False),
     ('fft', 'fused', 'direct'), "direct/multi_matrix_right:width=8,kr=8"),
    (Case("one_to_many", 1, 50, 16, 16, "full", None, True),
     ('fft', 'fused', 'direct'), "direct/grouped_overlap:kr=8,g=4"),
    (Case("one_to_many", 1, 50, 96, 80, "window", 3, True),
     ('fft', 'fused', 'direct'), "direct/multi_matrix_right:width=8,kr=8"),
    (Case("one_to_one", 1, 1, 16, 16, "full", None, False), ('fft', 'fused', 'direct'), "direct/warp_per_overlap"),
    (Case("one_to_one", 1, 1, 16, 16, "full", None, True), ('fft', 'fused', 'direct'), "direct/grouped_overlap:g=4"),
    (Case("one_to_one", 1, 1, 96, 80, "window", 16, False),
     ('fft', 'fused', 'direct'), "direct/split_row:g=4,splits=32"),
    (Case("one_to_one", 1, 1, 8, 8, "window", 16, True), ('fft', 'fused', 'direct'), "direct/warp_per_overlap"),
    (Case("n_to_m", 32, 32, 200, 200, "full", None, False), ('fft', 'fused', 'direct'), "fft"),
    (Case("n_to_m", 32, 32, 96, 80, "full", None, True), ('fft', 'fused', 'direct'), "fft"),
    (Case("n_to_m", 32, 32, 16, 16, "window", 16, False), ('fft', 'fused', 'direct'), "fft"),
    (Case("n_to_mn", 25, 50, 200, 200, "full", None, False), ('fft', 'fused', 'direct'), "fft"),
    (Case("n_to_mn", 25, 50, 384, 384, "full", None, True), ('fft', 'fused', 'direct'), "fft"),
    (Case("n_to_mn", 4, 3, 384, 384, "window", 16, True), ('fft', 'fused', 'direct'), "fft"),
    (Case("one_to_many", 1, 50, 128, 128, "full", None, False), ('fft', 'fused', 'direct'), "fused"),
    (Case("one_to_many", 1, 8, 384, 384, "full", None, True), ('fft', 'fused', 'direct'), "fft"),
    # fused since the tables of 2026-11-27 (sixteenth session), the first measured since the fused
    # engine took 256x256 window maps (a column split): its nearest cell, 1-32 256x256 at +-4,
    # 0.058 ms fused against 0.096 fft (H200)
    (Case("one_to_many", 1, 50, 200, 200, "window", 8, False), ('fft', 'fused', 'direct'), "fused"),
    (Case("one_to_one", 1, 1, 384, 384, "full", None, False), ('fft', 'fused', 'direct'), "fft"),
    (Case("one_to_one", 1, 1, 128, 128, "full", None, True), ('fft', 'fused', 'direct'), "fused"),
    (Case("one_to_one", 1, 1, 200, 200, "window", 16, False), ('fft', 'fused', 'direct'), "fft"),
    (Case("n_to_mn", 25, 50, 24, 24, "full", None, False), ('fft', 'fused', 'direct'), "fused"),
    (Case("n_to_mn", 86, 256, 40, 40, "full", None, True), ('fft', 'fused', 'direct'), "fused"),
    (Case("n_to_mn", 4, 3, 8, 8, "window", 16, True), ('fft', 'fused', 'direct'), "fused"),
    (Case("one_to_many", 1, 50, 64, 64, "full", None, False), ('fft', 'fused', 'direct'), "fused"),
    (Case("one_to_many", 1, 8, 64, 64, "full", None, True), ('fft', 'fused', 'direct'), "fused"),
    (Case("one_to_many", 1, 8, 40, 40, "window", 8, False), ('fft', 'fused', 'direct'), "fused"),
    (Case("one_to_one", 1, 1, 24, 24, "full", None, False), ('fft', 'fused', 'direct'), "fused"),
    (Case("one_to_one", 1, 1, 24, 24, "full", None, True), ('fft', 'fused', 'direct'), "fused"),
    (Case("one_to_one", 1, 1, 24, 24, "window", 3, False), ('fft', 'fused', 'direct'), "fused"),
    (Case("n_to_m", 8, 8, 200, 200, "full", None, False), ('fft', 'fused'), "fft"),
    (Case("n_to_mn", 4, 3, 16, 16, "full", None, False), ('fft', 'direct'), "direct/grouped_overlap:kr=2,g=4"),
    (Case("one_to_many", 1, 8, 128, 128, "full", None, True), ('fft', 'fused'), "fused"),
    (Case("n_to_mn", 4, 3, 16, 16, "window", 3, False), ('direct',), "direct/multi_matrix_right:width=8,kr=2"),
    (Case("one_to_many", 1, 8, 128, 128, "full", None, True), ('direct',), "direct/grouped_overlap:kr=8,g=4"),
    (Case("one_to_one", 1, 1, 8, 8, "full", None, False), ('direct',), "direct/warp_per_overlap"),
    (Case("one_to_many", 1, 8, 8, 8, "window", 3, False), ('fft', 'direct'), "direct/warp_per_overlap"),
    (Case("one_to_many", 1, 50, 384, 384, "window", 16, False), ('fft', 'direct'), "fft"),
    (Case("n_to_m", 8, 8, 24, 24, "window", 8, True), ('direct',), "direct/grouped_overlap:kr=8,g=4"),
    (Case("n_to_mn", 4, 3, 64, 64, "full", None, True), ('fft', 'fused'), "fused"),
    (Case("n_to_mn", 25, 50, 24, 24, "full", None, False), ('fft', 'direct'), "fft"),
    (Case("one_to_one", 1, 1, 128, 128, "full", None, True), ('direct',), "direct/grouped_overlap:g=4"),
]

# (tile shape, mode, max_shift, subpixel, n_tiles, batch, engine) of make_engine's "auto" on an H200.
AUTO = [
    ((16, 16), "full", None, "quadratic", 86, 256, "fused"),
    ((16, 16), "full", None, "dft", 86, 256, "fused"),
    ((16, 16), "window", 4, "quadratic", 86, 256, "fused"),
    ((16, 16), "window", 4, "dft", 86, 256, "fused"),
    ((40, 40), "full", None, "quadratic", 86, 256, "fused"),
    ((40, 40), "full", None, "dft", 86, 256, "fused"),
    # tensor since the tables with cells at a run's batch: its nearest, 86 ROIs x 512 of 48x48 at
    # +-8, 0.808 ms against fused 0.843 (H200); measured at 40x40 +-4, 86 x 256, a tie: tensor
    # 0.296 ms, fused 0.293 (2026-11-27)
    ((40, 40), "window", 4, "quadratic", 86, 256, "tensor"),
    ((40, 40), "window", 4, "dft", 86, 256, "fused"),
    ((64, 64), "full", None, "quadratic", 86, 256, "fused"),
    ((64, 64), "full", None, "dft", 86, 256, "fused"),
    # the tensor engine, registered later, measured faster here (H200, 86 ROIs x 50, +-8: 0.232 ms, fused 0.261)
    ((64, 64), "window", 4, "quadratic", 86, 256, "tensor"),
    ((64, 64), "window", 4, "dft", 86, 256, "fused"),
    ((96, 96), "full", None, "quadratic", 86, 256, "fused"),
    ((96, 96), "full", None, "dft", 86, 256, "fused"),
    # the tensor engine's wgmma GEMM measured faster here (H200, 86 ROIs x 50, +-8: 0.330 ms, fused 0.368)
    ((96, 96), "window", 4, "quadratic", 86, 256, "tensor"),
    ((96, 96), "window", 4, "dft", 86, 256, "fused"),
    ((128, 128), "full", None, "quadratic", 86, 256, "fused"),  # the two-block split (before it, fft)
    ((128, 128), "full", None, "dft", 86, 256, "fused"),
    # the tensor engine's faster exact peaks (H200, 86 ROIs x 50, 128x128 +-8: 0.436 ms, fused 0.479)
    ((128, 128), "window", 4, "quadratic", 86, 256, "tensor"),
    ((128, 128), "window", 4, "dft", 86, 256, "fused"),
    ((200, 160), "full", None, "quadratic", 86, 256, "fft"),
    ((200, 160), "full", None, "dft", 86, 256, "fft"),
    ((200, 160), "window", 4, "quadratic", 86, 256, "tensor"),  # the largest measured size's choice
    ((200, 160), "window", 4, "dft", 86, 256, "fused"),
]

# (case, engines, choice label) of the fixed rules (no table).
FALLBACK = [
    (Case("one_to_one", 1, 1, 8, 8, "full", None, False), ('fft', 'fused', 'direct'), "direct/warp_per_overlap"),
    (Case("one_to_one", 1, 1, 8, 8, "full", None, False), ('direct',), "direct/warp_per_overlap"),
    (Case("one_to_one", 1, 1, 8, 8, "full", None, False), ('fft', 'direct'), "direct/warp_per_overlap"),
    (Case("one_to_one", 1, 1, 8, 8, "full", None, False), ('fft', 'fused'), "fused"),
    (Case("one_to_one", 1, 1, 8, 8, "window", 3, False), ('fft', 'fused', 'direct'), "direct/warp_per_overlap"),
    (Case("one_to_one", 1, 1, 8, 8, "window", 3, False), ('direct',), "direct/warp_per_overlap"),
    (Case("one_to_one", 1, 1, 8, 8, "window", 3, False), ('fft', 'direct'), "direct/warp_per_overlap"),
    (Case("one_to_one", 1, 1, 8, 8, "window", 3, False), ('fft', 'fused'), "fused"),
    (Case("one_to_one", 1, 1, 24, 24, "full", None, False), ('fft', 'fused', 'direct'), "fused"),
    (Case("one_to_one", 1, 1, 24, 24, "full", None, False), ('direct',), "direct/grouped_overlap:g=4"),
    (Case("one_to_one", 1, 1, 24, 24, "full", None, False), ('fft', 'direct'), "fft"),
    (Case("one_to_one", 1, 1, 24, 24, "full", None, False), ('fft', 'fused'), "fused"),
    (Case("one_to_one", 1, 1, 24, 24, "window", 3, False), ('fft', 'fused', 'direct'), "direct/warp_shuffle:width=8"),
    (Case("one_to_one", 1, 1, 24, 24, "window", 3, False), ('direct',), "direct/warp_shuffle:width=8"),
    (Case("one_to_one", 1, 1, 24, 24, "window", 3, False), ('fft', 'direct'), "direct/warp_shuffle:width=8"),
    (Case("one_to_one", 1, 1, 24, 24, "window", 3, False), ('fft', 'fused'), "fused"),
    (Case("one_to_one", 1, 1, 128, 128, "full", None, False), ('fft', 'fused', 'direct'), "fused"),
    (Case("one_to_one", 1, 1, 128, 128, "full", None, False), ('fft', 'fused'), "fused"),
    (Case("one_to_one", 1, 1, 384, 384, "window", 3, False), ('fft', 'fused'), "fft"),
    (Case("n_to_m", 8, 8, 8, 8, "full", None, False), ('fft', 'fused'), "fft"),
    (Case("n_to_m", 8, 8, 8, 8, "window", 3, False), ('fft', 'fused'), "fft"),
]

CANDIDATES = {
    Case("one_to_many", 1, 32, 16, 16): [
        "fft", "fused", "direct/overlap_wise", "direct/warp_shuffle", "direct/warp_per_overlap",
        "direct/multi_matrix_right:kr=2", "direct/multi_matrix_right:kr=4", "direct/multi_matrix_right:kr=8",
        "direct/grouped_overlap:g=4", "direct/grouped_overlap:kr=4,g=4", "direct/grouped_overlap:kr=8,g=4",
        "direct/grouped_overlap:g=8", "direct/grouped_overlap:kr=4,g=8", "direct/grouped_overlap:kr=8,g=8"],
    Case("n_to_mn", 86, 50, 96, 96, "window", 8, True): [
        "fft", "fused", "tensor", "direct/overlap_wise", "direct/warp_shuffle", "direct/grouped_overlap:width=16,g=4",
        "direct/grouped_overlap:width=16,kr=8,g=4", "direct/multi_matrix_right:kr=2",
        "direct/multi_matrix_right:kr=4", "direct/multi_matrix_right:kr=8", "direct/grouped_overlap:g=4",
        "direct/grouped_overlap:kr=4,g=4", "direct/grouped_overlap:kr=8,g=4", "direct/grouped_overlap:g=8",
        "direct/grouped_overlap:kr=4,g=8", "direct/grouped_overlap:kr=8,g=8"],
}


@pytest.mark.parametrize("case,engines,label", CHOOSE)
def test_choices_are_those_of_before(shipped, case, engines, label):
    if not dispatch._shipped():
        pytest.skip("no shipped table")
    assert dispatch.choose(case, engines=engines, gpu=GPU).label == label
    if engines == ("fft", "fused", "direct"):
        # default: every registered engine, the tensor engine (registered later) where it measured faster
        got = dispatch.choose(case, gpu=GPU)
        assert got.label == label or (got.engine == "tensor" and case.mode == "window")


@pytest.mark.parametrize("shape,mode,max_shift,subpixel,n_tiles,batch,engine", AUTO)
def test_auto_engine_is_that_of_before(shipped, monkeypatch, shape, mode, max_shift, subpixel, n_tiles, batch,
                                       engine):
    class OnGPU:  # make_engine's "auto" asks the backend only whether it is a GPU
        is_gpu = True

    monkeypatch.setattr(dispatch, "gpu_model", lambda device=None: GPU)
    cfg = EngineConfig(mode=mode, max_shift=max_shift, subpixel=subpixel)
    assert choose_engine(OnGPU(), shape, cfg, n_tiles=n_tiles, batch=batch) == engine
    assert choose_engine(select_backend("cpu"), shape, cfg, n_tiles=n_tiles, batch=batch) == "fft"


@pytest.mark.parametrize("case,engines,label", FALLBACK)
def test_fixed_rules_are_those_of_before(case, engines, label):
    if label == "error":
        with pytest.raises(ValueError, match="no engine"):
            dispatch.fallback(case, engines)
    else:
        assert dispatch.fallback(case, engines).label == label


@pytest.mark.parametrize("case", list(CANDIDATES))
def test_bench_candidates_are_those_of_before(case):
    assert [c.label for c in bench.candidates(case)] == CANDIDATES[case]


# ------------------------------------------------------------------ self-description


def test_every_engine_describes_itself():
    assert list(ENGINES)[:3] == ["fft", "direct", "fused"]
    for name, cls in ENGINES.items():
        assert issubclass(cls, CorrelationEngine) and isinstance(cls.info, EngineInfo) and cls.info.name == name
        assert set(cls.info.devices) <= {"cpu", "gpu"} and cls.info.method in ("fft", "definition", "tensor")
        assert set(cls.info.subpixel) <= set(SUBPIXEL_METHODS) and set(cls.info.modes) <= {"full", "window"}
        assert cls.families() and cls.family(None) in (name, *cls.families())
        # an engine that says it reads ROIs from whole patterns has the method the runner calls
        assert cls.reads_rois == callable(getattr(cls, "match_rois", None))
    assert [n for n, c in ENGINES.items() if c.info.baseline] == ["fft"]
    assert [n for n, c in ENGINES.items() if c.reads_rois] == ["fused", "tensor"]
    fused, direct = ENGINES["fused"], ENGINES["direct"]
    quad = EngineConfig(subpixel="quadratic")
    assert fused.supports((128, 128), quad) and not fused.supports((200, 200), quad)
    assert "shared memory" in fused.refusal((200, 200), quad)
    assert not direct.supports((16, 16), EngineConfig(subpixel="dft"))
    # the dft method refines in the fused kernel, where its scratch fits beside the spectrum
    assert fused.supports((96, 96), EngineConfig(subpixel="dft"))
    assert fused.supports((96, 96), EngineConfig(subpixel="upsampled"))
    # its grid does not fit (64 did not either until the grid was summed at 12 x 12 nodes)
    assert not fused.supports((96, 96), EngineConfig(subpixel="upsampled", upsample=128))
    assert not fused.supports((16, 16), quad, gpu=False) and FFTEngine.supports((16, 16), quad, gpu=False)


@pytest.mark.parametrize("name,words", [
    ("fused", "the fused engine (correlation.engine 'fused') runs on a CUDA GPU"),
    ("direct", "the direct engine (correlation.engine 'direct') runs on a CUDA GPU"),
])
def test_refusals_name_settings_not_flags(name, words):
    with pytest.raises(InputError) as e:
        make_engine(name, select_backend("cpu"), (16, 16), EngineConfig(subpixel="quadratic"))
    assert words in str(e.value) and "--" not in str(e.value) and "correlation.engine 'fft'" in str(e.value)
    msgs = [cls.refusal((16, 16), EngineConfig(subpixel="dft"), gpu=True) for cls in ENGINES.values()]
    msgs += [cls.refusal((16, 16), EngineConfig(mode="window", max_shift=2, circular=True), gpu=True)
             for cls in ENGINES.values()]
    for m in filter(None, msgs):
        assert "correlation." in m and "--" not in m


def test_engine_is_a_setting():
    assert EngineConfig().engine == "auto"
    cfg = EngineConfig(engine="fft", subpixel="none")
    assert type(make_engine(None, select_backend("cpu"), (8, 8), cfg)) is FFTEngine
    with pytest.raises(ValueError, match="correlation.engine must be one of auto, fft, direct, fused"):
        EngineConfig(engine="nope")
    with pytest.raises(InputError, match="correlation.engine must be one of"):
        make_engine("nope", select_backend("cpu"), (8, 8), EngineConfig())
    with pytest.raises(ValueError, match="correlation.kernel: unknown definition-based kernel"):
        EngineConfig(kernel="bogus")
    with pytest.raises(ValueError, match="correlation.circular needs window mode"):
        EngineConfig(circular=True)


@pytest.fixture
def toy():
    """A new engine: one class and its registration, nothing else edited."""

    class ToyEngine(FFTEngine):
        info = dataclasses.replace(FFTEngine.info, name="toy", baseline=False, circular=False,
                                   forms=("one_to_one", "one_to_many", "n_to_mn"))

        @classmethod
        def fallback_rank(cls, case):
            return -1  # first in the fixed rules

    register(ToyEngine)
    dispatch._choose.cache_clear()
    yield ToyEngine
    del ENGINES["toy"]
    dispatch._choose.cache_clear()


def test_a_new_engine_is_one_registration(toy, shipped):
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((2, 12, 10)).astype(np.float32)
    scan = rng.standard_normal((3, 2, 12, 10)).astype(np.float32)
    be = select_backend("cpu")
    out = []
    for name in ("toy", None):  # None: the configuration's engine
        eng = make_engine(name, be, (12, 10), EngineConfig(engine="toy" if name else "fft", subpixel="quadratic"))
        eng.set_reference(ref, np.ones(2), np.zeros(2, np.uint8))
        r = eng.match(scan, np.ones((3, 2), np.float32), np.zeros((3, 2), np.uint8))
        out.append((eng.name, r.displacement))
    assert [o[0] for o in out] == ["toy", "fft"] and np.array_equal(out[0][1], out[1][1])
    case = Case("n_to_mn", 4, 8, 32, 32, "window", 4, True)
    assert "toy" in [c.engine for c in bench.candidates(case)]
    assert not dispatch.applies(Choice("toy"), Case("n_to_m", 4, 8, 32, 32))
    assert dispatch.fallback(case).engine == "toy"
    assert dispatch.fallback(case, engines=("fft", "direct")).engine == "direct"
    assert dispatch.choose(case, engines=("toy",), gpu=GPU).engine == "toy"  # not measured: the fixed rules
    row = dispatch.CalibrationTable.row(case, Choice("toy"), 0.001)
    table = dispatch.CalibrationTable("x", [row], {})
    assert table.best(case).engine == "toy" and table.best(case, engines=("fft",)) is None
    with pytest.raises(ValueError, match="circular"):
        make_engine("toy", be, (12, 12), EngineConfig(mode="window", max_shift=2, circular=True, engine="toy"),
                    window_1d=(np.hanning(12), np.hanning(12)))
    with pytest.raises(ValueError, match="registered already"):
        register(type("Other", (toy,), {}))
