"""The remapping pass's batches where memory runs out: halved down to what fits."""

import numpy as np
import pytest

from ebsdxc.backend import select_backend
from ebsdxc.config import load_config
from ebsdxc.hrebsd import _in_halves_when_out_of_memory
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
