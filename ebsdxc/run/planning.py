"""Planning a run: which points, in which tasks and batches, with which halo rows.

Pure functions of the scan's ``done`` mask and a few sizes: nothing here reads a file or
touches a device, so every rule of what gets (re)computed is visible and testable alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError

__all__ = ["Task", "MAX_BATCH", "MIN_SCAN_BATCH", "SCAN_BATCHES", "auto_batch", "plan_chunks", "plan_tasks",
           "processed_shape", "ROWS_PER_TASK_PATTERNS"]

ROWS_PER_TASK_PATTERNS = 2048  # a task of a parallel executor holds about this many patterns: seconds of work


@dataclass(frozen=True)
class Task:
    """Scan rows ``row0:row1`` and which of their points are done already.

    ``done`` is (row1 - row0, cols) bool: the points a task leaves alone (computed by an
    earlier run, or flagged without data).
    """

    row0: int
    row1: int
    done: np.ndarray

    @property
    def cols(self) -> int:
        return int(self.done.shape[1])

    @property
    def n_todo(self) -> int:
        return int((~self.done).sum())


def plan_tasks(done: np.ndarray, rows_per_task: int | None) -> list[Task]:
    """Tasks covering every scan row that holds a point not yet done.

    ``rows_per_task=None``: one task for the whole scan (a single process streams it
    through one reader, which keeps reading ahead across the whole run).
    """
    done = np.asarray(done, dtype=bool)
    rows = done.shape[0]
    todo = np.flatnonzero(~done.all(axis=1))
    if todo.size == 0:
        return []
    if rows_per_task is None:
        return [Task(0, rows, done)]
    out = []
    breaks = np.flatnonzero(np.diff(todo) != 1) + 1
    for run in np.split(todo, breaks):
        for r0 in range(int(run[0]), int(run[-1]) + 1, rows_per_task):
            r1 = min(r0 + rows_per_task, int(run[-1]) + 1)
            out.append(Task(r0, r1, done[r0:r1]))
    return out


def plan_chunks(done_flat: np.ndarray, batch: int, *, offset: int = 0, cols=None, halo=0, rows=None) -> list[tuple]:
    """Contiguous runs of not-done points, split into chunks of at most ``batch``.

    Points are flat indices ``offset + i`` for ``done_flat[i]``. Without a halo a chunk is
    ``(start, stop)``. With neighbour averaging (``halo`` rows, ``cols`` points per row,
    ``rows`` rows in the whole scan) a chunk is whole scan rows, ``(start, stop, read_start,
    read_stop)``: every row holding an undone point is redone, and the halo rows around the
    chunk are read with it.
    """
    done_flat = np.asarray(done_flat, dtype=bool)
    if halo:
        if offset % cols or done_flat.size % cols:
            raise ValueError("with a halo, chunks are planned over whole scan rows")
        row_off = offset // cols
        rows = row_off + done_flat.size // cols if rows is None else rows
        todo_rows = np.flatnonzero(~done_flat.reshape(-1, cols).all(axis=1)) + row_off
        per = max(1, batch // cols)
        out = []
        if todo_rows.size:
            breaks = np.flatnonzero(np.diff(todo_rows) != 1) + 1
            for run in np.split(todo_rows, breaks):
                for r0 in range(int(run[0]), int(run[-1]) + 1, per):
                    r1 = min(r0 + per, int(run[-1]) + 1)
                    out.append((r0 * cols, r1 * cols, max(0, r0 - halo) * cols, min(rows, r1 + halo) * cols))
        return out
    idx = np.flatnonzero(~done_flat)
    if idx.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(idx) != 1) + 1
    out = []
    for run in np.split(idx, breaks):
        a, b = int(run[0]) + offset, int(run[-1]) + 1 + offset
        out.extend((s, min(s + batch, b)) for s in range(a, b, batch))
    return out


#: Most patterns in a batch.
MAX_BATCH = 4096
#: Batches a scan is cut into at least, where that leaves :data:`MIN_SCAN_BATCH` patterns or more
#: in each: the first batch's read and the last one's compute overlap nothing, so in a scan of a
#: few batches they are a large share of the run (50,000 patterns, tensor engine, H100: 127k
#: patterns/s end to end with batches of 2048, 123k with 4096).
SCAN_BATCHES = 24
MIN_SCAN_BATCH = 1024


def auto_batch(bytes_per_pattern: int, n_patterns: int, *, gpu_free_bytes: int | None = None) -> int:
    """Patterns per batch: device working memory near a fifth of free GPU memory (at most
    16 GiB), or near 1 GiB on the CPU (``gpu_free_bytes=None``); at most :data:`MAX_BATCH`, and
    at most a :data:`SCAN_BATCHES`-th of the scan (in whole 64s) unless that is below
    :data:`MIN_SCAN_BATCH`."""
    budget = (1 << 30) if gpu_free_bytes is None else min(gpu_free_bytes // 5, 16 << 30)
    share = max(MIN_SCAN_BATCH, -(-n_patterns // (SCAN_BATCHES * 64)) * 64)
    b = int(max(1, min(budget // max(bytes_per_pattern, 1), MAX_BATCH, share)))
    return max(1, min(b, n_patterns))


def processed_shape(binning: int, raw_shape, path=None) -> tuple[int, int]:
    """(H, W) of the patterns after pattern binning, for ROI layouts and the strain fit."""
    b = int(binning)
    h, w = int(raw_shape[0]), int(raw_shape[1])
    if h % b or w % b:
        raise InputError(f"preprocess.binning {b} does not divide the {w}x{h} px patterns", path)
    return h // b, w // b
