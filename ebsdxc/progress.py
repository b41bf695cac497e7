"""Progress reporting, as an interface: the runner calls it, front ends choose how to show it."""

from __future__ import annotations

import sys
import time


class Progress:
    """Receives progress events; the base class ignores them."""

    def start(self, total: int, *, done: int = 0, desc: str = "") -> None: ...

    def update(self, n: int) -> None: ...

    def message(self, text: str) -> None: ...

    def close(self) -> None: ...


class NullProgress(Progress):
    pass


class BarProgress(Progress):
    """A tqdm bar on stderr showing patterns/s."""

    def __init__(self, file=None):
        self._file = file or sys.stderr
        self._bar = None

    def start(self, total, *, done=0, desc=""):
        from tqdm import tqdm

        self._bar = tqdm(total=total, initial=done, desc=desc, unit="pattern", file=self._file,
                         dynamic_ncols=True, smoothing=0.1)

    def update(self, n):
        if self._bar is not None:
            self._bar.update(n)

    def message(self, text):
        if self._bar is not None:
            self._bar.write(text, file=self._file)
        else:
            print(text, file=self._file)

    def close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class RecordingProgress(Progress):
    """Keeps totals and timing (used by benchmarks and tests)."""

    def __init__(self):
        self.total = 0
        self.count = 0
        self.messages = []
        self._t0 = None
        self.elapsed = 0.0
        self._first = None  # (elapsed, count) at the first update

    def start(self, total, *, done=0, desc=""):
        self.total, self.count, self._t0, self._first = total, done, time.perf_counter(), None

    def update(self, n):
        self.count += n
        self.elapsed = time.perf_counter() - self._t0
        if self._first is None:
            self._first = (self.elapsed, self.count)

    @property
    def steady_rate(self) -> float | None:
        """Items/s from the first update to the last: the rate once the first batch is through,
        without the start of a pipeline (the first batch read before anything overlaps), which
        weighs on a short run and not on a long one. None before two updates."""
        if self._first is None or self.elapsed <= self._first[0]:
            return None
        return (self.count - self._first[1]) / (self.elapsed - self._first[0])

    def message(self, text):
        self.messages.append(text)
