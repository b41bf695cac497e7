"""All the figures of a results file, written to a folder (``ebsdxc plot``)."""

from __future__ import annotations

import errno
import gc
import os
import sys
import threading

from .dic import dic_displacement_fields, dic_frame_series, dic_strain_fields, dic_vectors, is_dic_results
from .maps import displacement_maps, peak_height_map, rotation_maps, status_map, strain_maps
from .pattern import displacement_quiver, roi_layout
from .polycrystal import gnd_density_map, grain_map, grain_strain_statistics
from .results_view import ResultsView

__all__ = ["write_figures", "figure_jobs", "FORMATS"]

FORMATS = ("png", "pdf", "svg")

#: Drawing time of each figure relative to a one-map figure (measured on the sample scan): the
#: longest are handed out first.
COST = {"strain": 3.5, "grain_strain_statistics": 3.5, "status": 2.4, "roi_layout": 1.8, "rotation": 1.8,
        "displacement_magnitude": 1.6, "displacement_dx": 1.6, "displacement_dy": 1.6, "gnd_density": 1.6,
        "grain_map": 1.5, "quiver": 1.3, "peak_height": 1.0, "dic_strain": 3.0, "dic_displacement": 2.0,
        "dic_vectors": 1.5, "dic_frames": 1.0}


def figure_jobs(results, *, point=None, max_points=1_000_000) -> list[tuple]:
    """The figures a results file supports: ``(name, function, args, kwargs)``, each drawn by
    ``function(*args, **kwargs)``. Module-level functions and plain arguments: a job can be
    sent to another process.

    Always ``roi_layout``, ``displacement_magnitude``, ``displacement_dx``,
    ``displacement_dy``, ``quiver`` (at ``point``, default the scan's centre),
    ``peak_height`` and ``status``; with ``strain``: ``strain`` and ``rotation``; with
    ``grain_id``: ``grain_map`` (and, with strain too, ``grain_strain_statistics``); with
    ``gnd_density``: ``gnd_density``.
    """
    results = os.fspath(results)
    if is_dic_results(results):  # subsets on an image grid: the DIC figures, not the EBSD maps
        return [("dic_displacement", dic_displacement_fields, (results,), {}),
                ("dic_strain", dic_strain_fields, (results,), {}),
                ("dic_vectors", dic_vectors, (results,), {}),
                ("dic_frames", dic_frame_series, (results,), {})]
    with ResultsView(results) as v:
        if point is None:
            point = (v.rows // 2, v.cols // 2)
        point = v.flat_index(point)
        has = {name: v.has(name) for name in ("strain", "grain_id", "gnd_density")}
    per_map = max(10_000, max_points // 16)  # one small map per ROI
    mp = {"max_points": max_points}
    jobs = [("roi_layout", roi_layout, (results,), {}),
            ("displacement_magnitude", displacement_maps, (results,), {"max_points": per_map}),
            ("displacement_dx", displacement_maps, (results,), {"component": "dx", "max_points": per_map}),
            ("displacement_dy", displacement_maps, (results,), {"component": "dy", "max_points": per_map}),
            ("quiver", displacement_quiver, (results, point), {}),
            ("peak_height", peak_height_map, (results,), mp),
            ("status", status_map, (results,), mp)]
    if has["strain"]:
        jobs += [("strain", strain_maps, (results,), mp), ("rotation", rotation_maps, (results,), mp)]
    if has["grain_id"]:
        jobs.append(("grain_map", grain_map, (results,), mp))
    if has["gnd_density"]:
        jobs.append(("gnd_density", gnd_density_map, (results,), mp))
    if has["grain_id"] and has["strain"]:
        jobs.append(("grain_strain_statistics", grain_strain_statistics, (results,), mp))
    return jobs


def _draw_and_save(job, out_dir, formats, dpi) -> list[str]:
    name, draw, args, kwargs = job
    # A figure is thousands of objects in reference cycles: the cyclic collector, run while they
    # are made, walks them again and again (a tenth of the time); it runs after, when enabled.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        fig = draw(*args, **kwargs)
        written = []
        for fmt in formats:
            path = os.path.join(out_dir, f"{name}.{fmt}")
            tmp = f"{path}.part"
            # zlib level 3 instead of 6: PNGs a quarter larger, written in 60% of the time
            fig.savefig(tmp, format=fmt, dpi=dpi, **({"pil_kwargs": {"compress_level": 3}} if fmt == "png" else {}))
            os.replace(tmp, path)  # a killed run leaves no half-written figure under the real name
            written.append(path)
    finally:
        if was_enabled:
            gc.enable()
    return written


def _workers(workers, n_jobs) -> int:
    """Processes to draw with: the figures are independent, and matplotlib draws on one core."""
    if workers is None:
        # fork only: a spawned process would import matplotlib again, which costs what it saves;
        # and only from a process of one thread (a Jupyter kernel has several): a lock another
        # thread holds at the fork would stay held in the child
        if not sys.platform.startswith("linux") or threading.active_count() > 1:
            return 1
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        workers = min(cores, 4)
    workers = int(workers)
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():  # Windows: drawn here
        return 1
    return max(1, min(workers, n_jobs))


def write_figures(results, out_dir, *, formats=("png",), point=None, dpi=150, overwrite=False,
                  max_points=1_000_000, workers=None) -> list[str]:
    """Draw every figure a results file supports and write each in ``formats``.

    Figures (:func:`figure_jobs`): ``roi_layout``, ``displacement_magnitude``,
    ``displacement_dx``, ``displacement_dy``, ``quiver`` (at ``point``, default the scan's
    centre), ``peak_height``, ``status``; when the file holds strain, ``strain`` and
    ``rotation``; when it holds grains, ``grain_map`` (and ``grain_strain_statistics`` with
    strain); when it holds GND density, ``gnd_density``.
    Existing files are kept unless ``overwrite``: ``FileExistsError`` names the first one.
    Returns the paths written, figure by figure.

    ``workers``: processes drawing at once. Default: one per core (at most 4) on Linux, where
    a forked process shares the matplotlib already imported, when this process runs no other
    thread; else 1 (this process draws them all). Each figure is drawn and written by one
    process; its errors are raised here.
    """
    formats = tuple(formats)
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ValueError(f"figure formats must be among {', '.join(FORMATS)}, got {', '.join(bad) or 'none'}")
    jobs = figure_jobs(results, point=point, max_points=max_points)
    targets = [os.path.join(out_dir, f"{name}.{fmt}") for name, *_ in jobs for fmt in formats]
    if not overwrite:
        for t in targets:
            if os.path.exists(t):
                raise FileExistsError(errno.EEXIST, "figure already exists (overwrite=True replaces it)", t)
    os.makedirs(out_dir, exist_ok=True)
    n = _workers(workers, len(jobs))
    if n == 1:
        return [p for job in jobs for p in _draw_and_save(job, out_dir, formats, dpi)]
    # imported here: only drawing in several processes needs them
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # the longest figures first, so that no process is left drawing a long one at the end
    order = sorted(range(len(jobs)), key=lambda i: -COST.get(jobs[i][0], 1.0))
    # The forked processes share what is imported; frozen, it is left out of their collections
    # (and its memory pages are not copied by them).
    gc.freeze()
    # a process that dies (killed for memory) fails its figure with BrokenProcessPool, never hangs
    pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"))
    try:
        pending = {i: pool.submit(_draw_and_save, jobs[i], out_dir, formats, dpi) for i in order}
        done = {i: f.result() for i, f in pending.items()}
    finally:  # a figure failed: the ones not started yet are not drawn
        pool.shutdown(wait=True, cancel_futures=True)
        gc.unfreeze()
    return [p for i in range(len(jobs)) for p in done[i]]
