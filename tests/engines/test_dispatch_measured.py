"""The dispatcher's choice against a measurement on this GPU (issue 17): for the realistic
HR-EBSD sizes it never picks an engine slower than the cuFFT path of the same case."""

from __future__ import annotations

import pytest

from ebsdxc.engines.dispatch import Case, Choice

# (n ROIs, patterns, ROI side, mode, window): the paper layout, and 512x512 / 1024x1024
# patterns with ROIs of a quarter of the width, +-24 px (issue 17's realistic sizes), and 128x128
# ROIs in full mode (the fused engine's two-block split)
CASES = [
    Case("n_to_mn", 86, 50, 96, 96, "full", None, True),
    Case("n_to_mn", 86, 50, 96, 96, "window", 16, True),
    Case("n_to_mn", 45, 50, 128, 128, "window", 24, True),
    Case("n_to_mn", 45, 50, 128, 128, "full", None, True),
    Case("n_to_mn", 49, 16, 256, 256, "window", 24, True),
    Case("n_to_mn", 86, 512, 96, 96, "window", 16, True),
]

# Window mode at a run's batch size, where the fused and tensor engines compete.
RUN_CASES = [
    Case("n_to_mn", 86, 512, 96, 96, "window", 16, True),
    Case("n_to_mn", 86, 512, 96, 96, "window", 8, True),
    Case("n_to_mn", 45, 512, 128, 128, "window", 24, True),
]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.n_left}x{c.h}-{c.mode}{c.max_shift or ''}")
def test_the_choice_is_never_slower_than_the_fft_path(case):
    pytest.importorskip("cupy")
    from ebsdxc import bench
    from ebsdxc.backend import gpu_available
    from ebsdxc.engines import dispatch

    if not gpu_available():
        pytest.skip("no CUDA GPU here")
    choice = dispatch.choose(case)
    if choice.engine == "fft":
        return
    times = {m.choice: m.ms for m in bench.measure_case(case, choices=[choice, Choice("fft", None)], skip=False)}
    assert times[choice] is not None and times[Choice("fft", None)] is not None
    # 15% for the spread between runs of one machine
    assert times[choice] <= 1.15 * times[Choice("fft", None)], (choice, times)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("case", RUN_CASES, ids=lambda c: f"{c.n_left}x{c.h}-{c.mode}{c.max_shift}")
def test_the_choice_at_a_run_batch_is_the_fastest_engine(case):
    """At the batch sizes of a run, the engine the dispatcher picks is within the spread between
    runs of the fastest of the engines that serve the case, measured now."""
    pytest.importorskip("cupy")
    from ebsdxc import bench
    from ebsdxc.backend import gpu_available
    from ebsdxc.engines import dispatch

    if not gpu_available():
        pytest.skip("no CUDA GPU here")
    table = dispatch.load_table(dispatch.gpu_model())
    if table is None or not any(r["n_right"] == bench.RUN_BATCH for r in table.rows):
        # (a table measured before those cells were: its choice here is the 50-pattern cells')
        pytest.skip(f"this GPU's dispatch table has no cells at {bench.RUN_BATCH} patterns: "
                    "run ebsdxc bench --calibrate")
    choice = dispatch.choose(case, engines=("fft", "fused", "tensor"))
    rivals = [Choice(e, None) for e in ("fft", "fused", "tensor")]
    # The best of three rounds: the suite runs several workers on one GPU. In one H200 run the
    # fused engine took 5.64 ms here against the tensor engine's 4.26, where the table's cells
    # (the same time per pair at 25 and 86 ROIs) put it ahead; the next run passed.
    measured = {}
    for _ in range(3):
        for m in bench.measure_case(case, choices=rivals, skip=False):
            if m.ms is not None:
                measured[m.choice] = min(m.ms, measured.get(m.choice, m.ms))
    assert choice in measured, (choice, measured)
    assert measured[choice] <= 1.15 * min(measured.values()), (choice, measured)
