"""RecordingProgress's rates: the whole stream's and the rate once the first batch is through."""

from __future__ import annotations

import time

from ebsdxc.progress import RecordingProgress


def test_steady_rate_leaves_out_the_pipelines_start():
    p = RecordingProgress()
    p.start(300)
    assert p.steady_rate is None
    time.sleep(0.3)  # the first batch: read with nothing to overlap it
    p.update(100)
    assert p.steady_rate is None  # one update: no rate yet
    for _ in range(2):
        time.sleep(0.05)
        p.update(100)
    assert p.count == 300
    whole = p.count / p.elapsed
    # 200 items in about 0.1 s after the first update, against 300 in about 0.4 s in all
    assert p.steady_rate > 2.5 * whole, (p.steady_rate, whole)
    assert 200 / p.steady_rate < p.elapsed - 0.3 + 0.05
