"""Every reader, fed truncated, bit-flipped and header-corrupted copies of every sample format.

Inputs come from hypothesis; each is read in a worker subprocess
(``benchmarks/fuzz_readers.py``), so a crash or a hang is a failed example, not a dead
pytest. A bounded run here (``EBSDXC_FUZZ_EXAMPLES``, default 200); the long run is
``python benchmarks/fuzz_readers.py --minutes 25``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_SPEC = importlib.util.spec_from_file_location(
    "ebsdxc_fuzz_readers", Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_readers.py")
fuzz = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = fuzz  # dataclasses look their module up there
_SPEC.loader.exec_module(fuzz)

EXAMPLES = int(os.environ.get("EBSDXC_FUZZ_EXAMPLES", "200"))


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("fuzz")
    f = fuzz.Fuzzer(fuzz.build_seeds(scratch / "seeds"), scratch, timeout=30.0)
    yield f
    f.close()


@pytest.fixture(scope="module")
def seed_names(fuzzer):
    return sorted(fuzzer.seeds)


def test_every_format_has_a_seed(fuzzer):
    from ebsdxc.io import registry

    kinds = {name.split("_orientation")[0] for name in fuzzer.seeds}
    if importlib.util.find_spec("kikuchipy") is None:
        pytest.skip("kikuchipy ships most sample formats")
    for fmt in registry.names():
        assert any(k.startswith(fmt.split("_")[0]) for k in kinds), fmt
    assert {"ang", "ctf", "reference_tiff", "edax_h5_orientation", "bruker_h5_orientation"} <= set(
        fuzzer.seeds)


def test_the_judge_catches_what_it_must():
    # the judge is what makes this test able to fail: feed it the outcomes it must reject
    p = "/x/scan.h5"
    assert fuzz.judge({"outcome": "crash", "message": "worker exited with -11"}, "bitflip", p)
    assert fuzz.judge({"outcome": "hang", "message": "no answer"}, "header", p)
    assert fuzz.judge({"outcome": "other_error", "message": "error: zlib"}, "bitflip", p)
    assert fuzz.judge({"outcome": "input_error", "message": f"{p}: a\nb"}, "bitflip", p)
    assert fuzz.judge({"outcome": "input_error", "message": "scan.h5: bad"}, "bitflip", p)
    ok = {"outcome": "ok", "n_diff": 0, "n_dropped": 0, "warnings": []}
    assert fuzz.judge(ok, "truncate", p) is None
    assert fuzz.judge({**ok, "n_diff": 5}, "truncate", p)
    assert fuzz.judge({**ok, "n_diff": 2}, "bitflip", p)
    assert fuzz.judge({**ok, "n_diff": 1}, "bitflip", p) is None  # a raw value: undetectable
    assert fuzz.judge({**ok, "n_dropped": 3}, "truncate", p)
    assert fuzz.judge({**ok, "n_dropped": 3, "warnings": ["cut"]}, "truncate", p) is None


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_files_give_the_data_or_one_input_error(fuzzer, seed_names, data):
    name = data.draw(st.sampled_from(seed_names), label="seed")
    mutation = data.draw(st.sampled_from(fuzz.MUTATIONS), label="mutation")
    a = data.draw(st.integers(0, 2**31 - 1), label="a")
    b = data.draw(st.integers(0, 2**31 - 1), label="b")
    answer, problem = fuzzer.run(name, mutation, a, b)
    assert problem is None, f"{name} {mutation} a={a} b={b}: {problem}\n{answer.get('traceback', '')}"
