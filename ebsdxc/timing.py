"""Where a run's time goes: busy time per pipeline stage, for ``ebsdxc process --profile``.

Code marks its stages with :func:`stage` (``with timing.stage("peaks", xp=xp): ...``); that is a
no-op unless a :class:`StageProfile` is active (:func:`activate`), so the marks cost nothing in
a normal run. Host stages are timed by the wall clock; device stages (``xp`` CuPy) by CUDA
events on the current stream, read only when the report is made, so timing never stalls the
pipeline. A stage opened inside another is exclusive: the outer one's time stops while the
inner one runs (an engine's ``peaks`` inside the pipeline's ``correlate``).

The report gives each stage's busy time (summed over the threads that ran it: a CPU run's
worker threads can make a stage busier than the wall time), its idle time (the run's wall time
minus its busy time) and names the stage that bounds the run: the busiest one, which in a
pipelined run (a reader thread ahead of the device) is the one the others wait for.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict

__all__ = ["STAGES", "StageProfile", "activate", "active", "format_report", "stage"]

#: The stages, in pipeline order (``refine``: whole-pattern IC-GN, when a run refines;
#: ``results``: a batch's results copied back to the host, on a GPU with the wait for the batch
#: to finish), then ``other``: the time of the thread that ran the work outside every other
#: stage (set-up, waiting for the reader). Neither of those two bounds a run: they wait.
STAGES = ("read", "transfer", "preprocess", "correlate", "peaks", "refine", "results", "strain", "write",
          "other")

_active: StageProfile | None = None


class StageProfile:
    """Busy time per stage, from any thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._host = defaultdict(float)
        self._events = defaultdict(list)  # stage -> [(start, stop) CUDA events]
        self._calls = defaultdict(int)
        self._local = threading.local()
        self.started = time.perf_counter()
        self.last_report = None  # set by whoever ran the profiled work

    # markers: a perf_counter value on the host, a recorded CUDA event on the device
    @staticmethod
    def _mark(gpu):
        if not gpu:
            return time.perf_counter()
        import cupy as cp

        e = cp.cuda.Event()
        e.record()
        return e

    def _close(self, name, gpu, start):
        end = self._mark(gpu)
        with self._lock:
            if gpu:
                self._events[name].append((start, end))
            else:
                self._host[name] += end - start

    @contextlib.contextmanager
    def span(self, name, *, gpu=False):
        """Time the block as stage ``name`` (exclusive of stages opened inside it)."""
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        if stack:  # pause the enclosing stage
            outer = stack[-1]
            self._close(outer[0], outer[1], outer[2])
        stack.append([name, gpu, self._mark(gpu)])
        with self._lock:
            self._calls[name] += 1
        try:
            yield
        finally:
            n, g, start = stack.pop()
            self._close(n, g, start)
            if stack:  # resume it
                stack[-1][2] = self._mark(stack[-1][1])

    def busy(self) -> dict:
        """Seconds per stage (device stages synchronise on their last events)."""
        with self._lock:
            out = dict(self._host)
            events = {k: list(v) for k, v in self._events.items()}
        if events:
            import cupy as cp

            for name, pairs in events.items():
                s = 0.0
                for a, b in pairs:
                    b.synchronize()
                    s += cp.cuda.get_elapsed_time(a, b) / 1e3
                out[name] = out.get(name, 0.0) + s
        return out

    def report(self, wall_s: float | None = None) -> dict:
        """``{"wall_s", "bound", "stages": {name: {"busy_s", "idle_s", "calls"}}}``, stages in
        :data:`STAGES` order (others after them)."""
        wall = time.perf_counter() - self.started if wall_s is None else float(wall_s)
        busy = self.busy()
        names = [s for s in STAGES if s in busy] + sorted(s for s in busy if s not in STAGES)
        stages = {n: {"busy_s": busy[n], "idle_s": max(0.0, wall - busy[n]), "calls": self._calls[n]} for n in names}
        work = [n for n in names if n not in ("results", "other")]  # waits, not work
        bound = max(work, key=lambda n: busy[n]) if work else None
        return {"wall_s": wall, "bound": bound, "stages": stages}


def format_report(report: dict) -> str:
    """The report as a small table for a terminal."""
    wall = report["wall_s"]
    lines = [f"{'stage':<11} {'busy s':>9} {'idle s':>9} {'busy %':>7} {'calls':>7}"]
    for name, r in report["stages"].items():
        share = 100.0 * r["busy_s"] / wall if wall > 0 else 0.0
        lines.append(f"{name:<11} {r['busy_s']:9.3f} {r['idle_s']:9.3f} {share:6.1f}% {r['calls']:7d}")
    lines.append(f"wall {wall:.3f} s; bound by {report['bound'] or 'nothing measured'}")
    return "\n".join(lines)



def active() -> StageProfile | None:
    """The profile being recorded, or None."""
    return _active


@contextlib.contextmanager
def activate(profile: StageProfile):
    """Record stages into ``profile`` within the block (in every thread of this process)."""
    global _active
    before, _active = _active, profile
    try:
        yield profile
    finally:
        _active = before


@contextlib.contextmanager
def stage(name: str, *, xp=None):
    """Mark the block as stage ``name``; device-timed when ``xp`` is CuPy. No-op without an
    active profile."""
    p = _active
    if p is None:
        yield
        return
    with p.span(name, gpu=xp is not None and getattr(xp, "__name__", "") == "cupy"):
        yield
