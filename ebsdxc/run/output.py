"""Where a run's results go: the default name beside the scan, and the checks before writing."""

from __future__ import annotations

import os

from ..errors import InputError
from ..io.results import check_not_damaged, lock_holder

__all__ = ["check_output", "default_output", "on_disk"]


def on_disk(scan_path) -> str:
    """The file or folder behind a scan path; for a glob of images (``frames/*.tif``), its folder."""
    path = os.path.abspath(scan_path)
    while not os.path.exists(path) and any(ch in path for ch in "*?["):
        path = os.path.dirname(path)
    return path


def default_output(scan_path) -> str:
    """``SCAN_STEM.ebsdxc.h5`` beside the scan (a folder of images, or a glob's folder, is the scan)."""
    path = on_disk(scan_path)
    d, name = os.path.split(path.rstrip(os.sep))
    stem = name if os.path.isdir(path) else os.path.splitext(name)[0]
    return os.path.join(d, f"{stem}.ebsdxc.h5")


def check_output(out, *, inputs, resume: bool, overwrite: bool) -> str:
    """The absolute output path, refused when it is one of ``inputs``, exists unasked, is being
    written by another run, or (to resume) is a results file HDF5 can no longer open: checked
    before any work, so the refusal comes at once (the writer takes the lock itself)."""
    out = os.path.abspath(out)
    for p in inputs:
        if p is not None and os.path.abspath(p) == out:
            raise InputError("output would overwrite an input file", out)
    holder = lock_holder(out)
    if holder is not None:
        who = f"pid {holder.get('pid')} on {holder.get('host')}, since {holder.get('started')}" if holder else "?"
        raise InputError(f"in use by another ebsdxc run ({who}); one run writes a results file at a time: wait "
                         f"for it, or delete {os.path.basename(out)}.lock if that run is gone", out)
    if os.path.exists(out) and not (resume or overwrite):
        raise InputError("output already exists; pass overwrite=True to replace it or resume=True to continue it", out)
    if os.path.exists(out) and resume:
        check_not_damaged(out, action="resumed")
    return out
