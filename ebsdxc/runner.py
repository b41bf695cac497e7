"""The streaming runner: the one place that composes reader, stages and writer.

A reader thread fills the next batch of patterns (into pinned host buffers on the
GPU) while the device correlates the current one on its own CUDA stream; results
of a batch are copied back and written while the next batch computes. Host memory
is bounded by ``N_BUFFERS`` batches of raw patterns, whatever the scan size.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from . import io as scan_io
from . import status as st
from .backend import Backend, select_backend
from .engines import PeakResult, make_engine
from .engines.fft import fft_shape
from .errors import InputError
from .hrebsd import compute_strain, resolve_geometry, scan_metadata
from .io.results import ResultsWriter, input_record
from .preprocess import PatternPreprocessor, prepare_tiles, rois_inside_mask, window_1d, window_2d
from .progress import NullProgress, Progress
from .recipes import ProcessConfig
from .rois import (
    RoiLayout,
    extract_tiles,
    grid_layout,
    layout_from_centres,
    read_centres,
    ring_layout,
)

__all__ = ["Pipeline", "build_layout", "process", "strain", "default_output", "N_BUFFERS", "auto_batch"]

N_BUFFERS = 3  # raw-pattern batches in host memory at once: one being read, one queued, one in transfer
CPU_TILES_PER_TASK = 256  # tiles per CPU thread task: a few MB, so a task's arrays stay in cache


def build_layout(roi, pattern_shape, *, path=None) -> RoiLayout:
    """The ROI layout a :class:`~ebsdxc.recipes.RoiConfig` describes, checked against the pattern.

    Problems are reported against ``path`` (the scan whose patterns the ROIs must fit).
    """
    try:
        if roi.layout == "grid":
            layout = grid_layout(pattern_shape, grid=roi.grid, size=roi.size, margin=roi.margin,
                                 drop_corners=roi.drop_corners)
        elif roi.layout == "ring":
            layout = ring_layout(pattern_shape, n=roi.n, radius=roi.radius, size=roi.size,
                                 include_centre=roi.include_centre)
        elif roi.layout == "file":
            if not roi.centres:
                raise InputError("ROI layout 'file' needs a centres file (--roi-centres)")
            size = roi.size or grid_layout(pattern_shape, grid=(1, 1)).size
            layout = layout_from_centres(read_centres(roi.centres), size=size)
        else:
            raise InputError(f"unknown ROI layout {roi.layout!r} (grid, ring or file)")
        layout.check_inside(pattern_shape, path=path)
    except InputError as e:
        if e.path is None and path is not None:
            raise InputError(e.problem, path) from None
        raise
    except ValueError as e:
        raise InputError(str(e), path) from None
    return layout


class Pipeline:
    """Preprocess -> cut ROIs -> prepare -> correlate -> peaks, for batches on one backend.

    Parameters
    ----------
    backend : Backend
    config : ProcessConfig
    layout : RoiLayout
    reference : (H, W) array, the reference pattern
    static_background : (H, W) array or None
    """

    def __init__(self, backend: Backend, config: ProcessConfig, layout: RoiLayout, reference,
                 *, static_background=None):
        self.backend = backend
        self.config = config
        self.layout = layout
        xp = backend.xp
        w, h = layout.size
        self.tile_shape = (h, w)
        self._pool = None
        self._streams = None
        stage_backend = backend
        if not backend.is_gpu and backend.workers > 1:
            # Threads over sub-batches parallelise every stage (NumPy and pocketfft release
            # the GIL) and keep each sub-batch's working set in cache; stages run single-threaded.
            stage_backend = dataclasses.replace(backend, workers=1)
            self._pool = ThreadPoolExecutor(backend.workers, thread_name_prefix="ebsdxc-cpu")
        self._sub_batch = max(1, CPU_TILES_PER_TASK // layout.n)
        self.preprocessor = PatternPreprocessor(config.preprocess, stage_backend,
                                                static_background=static_background)
        self.window = window_2d(self.tile_shape, config.preprocess.window, xp)
        self._stage_backend = stage_backend
        self._window_1d = (window_1d(h, config.preprocess.window), window_1d(w, config.preprocess.window))
        self.engine = make_engine(config.engine, stage_backend, self.tile_shape, config.correlation,
                                  window_1d=self._window_1d, n_tiles=layout.n, batch=config.batch)
        #: (n_roi,) bool ROIs that reach off the detector mask (their results are flagged), or None.
        self.outside = None
        screen = self.preprocessor.screen_mask(np.shape(reference))
        if screen is not None:
            inside = rois_inside_mask(screen, layout.origins, layout.size)
            if not inside.any():
                raise InputError("every ROI reaches outside the detector mask: move the ROIs "
                                 "(--roi-size, --roi-grid) or enlarge the mask (--mask-radius)")
            if not inside.all():
                warnings.warn(f"{int((~inside).sum())} of {layout.n} ROIs reach outside the detector "
                              "mask; they are flagged OUTSIDE_MASK, not measured", stacklevel=2)
                self.outside = xp.asarray(~inside) if backend.is_gpu else ~inside
        #: The preprocessed reference pattern (H, W) on the device: what remapping rotates.
        self.reference_image = self.preprocessor(xp.asarray(reference)[None])[0]
        t, e, s = prepare_tiles(extract_tiles(self.reference_image[None], layout, xp)[0], self.window, xp)
        self.engine.set_reference(t, e, s)
        self.reference_status = backend.asnumpy(s)
        self._fused = backend.is_gpu
        if self._fused:
            from .engines.gpu_ops import PaddedTileBuffer

            self._frames = PaddedTileBuffer(self.engine.input_shape)
            self._origins = xp.asarray(layout.origins, dtype=xp.int32)

    def match(self, patterns, *, crop=None, cols=None, present=None) -> PeakResult:
        """(B, H, W) raw patterns (host or device) -> :class:`PeakResult` on the device.

        With neighbour averaging, ``patterns`` is a block of whole scan rows of ``cols``
        points with halo rows around the chunk, ``crop = (offset, n)`` the chunk within it
        and ``present`` (B,) the block's points that hold a pattern; the result is the
        chunk's.

        A pattern that is all zeros is no measurement (a vendor's placeholder for a point
        it did not record, or a hole in a damaged file): its ROIs get ``MISSING_PATTERN``,
        and ROIs reaching outside the detector mask get ``OUTSIDE_MASK``.
        """
        xp = self.backend.xp if self._fused else np
        patterns = xp.asarray(patterns)
        has_data = (patterns.reshape(patterns.shape[0], -1) != 0).any(axis=1)
        if crop is None:
            res = self._match(patterns)
        else:
            off, n = crop
            ok = has_data if present is None else has_data & xp.asarray(present, dtype=bool)
            pp = self.preprocessor
            x = pp.average_neighbours(pp.convert(patterns), cols=cols, present=ok)
            res = self._match(x[off:off + n], converted=True)
            has_data = has_data[off:off + n]
        return self._flag(res, ~has_data, xp)

    def _flag(self, res, empty, xp):
        status, disp, height = res.status, res.displacement, res.peak_height
        bad = empty[:, None]
        status = xp.where(bad, xp.asarray(np.uint8(st.MISSING_PATTERN)), status)
        if self.outside is not None:
            outside = xp.asarray(self.outside)[None, :]
            status = xp.where(outside & ~bad, xp.asarray(np.uint8(st.OUTSIDE_MASK)), status)
            bad = bad | outside
        nan = xp.float32(np.nan)
        return PeakResult(xp.where(bad[..., None], nan, disp), xp.where(bad, nan, height),
                          status.astype(xp.uint8, copy=False))

    def _match(self, patterns, converted=False) -> PeakResult:
        xp = self.backend.xp
        if not self._fused:
            B = patterns.shape[0]
            host = self._match_converted if converted else self._match_host
            if self._pool is None or B <= self._sub_batch:
                return host(patterns)
            parts = list(self._pool.map(host, [patterns[i:i + self._sub_batch]
                                               for i in range(0, B, self._sub_batch)]))
            return PeakResult(*(np.concatenate([getattr(p, f) for p in parts])
                                for f in ("displacement", "peak_height", "status")))
        from .engines.gpu_ops import prepare_tiles_padded

        x = xp.asarray(patterns)
        if converted:
            x = self.preprocessor.correct(x)
        elif not self.preprocessor.is_identity:  # else the tile kernel converts raw values itself
            x = self.preprocessor(x)
        B, n = x.shape[0], self.layout.n
        frames = self._frames.get(B * n)
        e, s = prepare_tiles_padded(x, self._origins, self.tile_shape, self.window, frames)
        return self.engine.match(frames.reshape(B, n, *frames.shape[1:]), e.reshape(B, n), s.reshape(B, n))

    def _match_converted(self, patterns) -> PeakResult:
        return self._match_prepared(self.preprocessor.correct(patterns))

    def _match_host(self, patterns) -> PeakResult:
        return self._match_prepared(self.preprocessor(patterns))

    def _match_prepared(self, x) -> PeakResult:
        tiles = extract_tiles(x, self.layout, np, dtype=np.float32)
        t, e, s = prepare_tiles(tiles, self.window, np, overwrite=True)
        return self.engine.match(t, e, s)

    def match_pairs(self, references, patterns) -> PeakResult:
        """Match each pattern with its own reference: (B, H, W) preprocessed references (e.g.
        remapped ones) and (B, H, W) raw patterns -> :class:`PeakResult` of shape (B, n).

        The B x n ROI pairs go through a second engine of the same kind and options, as one
        n-to-mn call with n = B x n references and one right-hand set, so the shifts are
        measured exactly as :meth:`match` measures them.
        """
        xp = self.backend.xp
        B, n, (h, w) = len(patterns), self.layout.n, self.tile_shape
        refs = extract_tiles(xp.asarray(references, dtype=xp.float32), self.layout, xp)
        t, e, s = prepare_tiles(refs.reshape(B * n, h, w), self.window, xp)
        engine = make_engine(self.config.engine, self._stage_backend, self.tile_shape, self.config.correlation,
                             window_1d=self._window_1d, n_tiles=B * n, batch=1)
        engine.set_reference(t, e, s)
        x = self.preprocessor(xp.asarray(patterns))
        t2, e2, s2 = prepare_tiles(extract_tiles(x, self.layout, xp, dtype=xp.float32).reshape(1, B * n, h, w),
                                   self.window, xp, overwrite=True)
        r = engine.match(t2, e2, s2)
        res = PeakResult(r.displacement.reshape(B, n, 2), r.peak_height.reshape(B, n), r.status.reshape(B, n))
        empty = ~(xp.asarray(patterns).reshape(B, -1) != 0).any(axis=1)
        return self._flag(res, empty, xp)

    def read_points(self, source, flat) -> np.ndarray:
        """Patterns at flat scan indices ``flat`` (k, H, W) as :meth:`match_pairs` takes them:
        as stored, or neighbour-averaged when this pipeline averages."""
        if self.preprocessor.halo_rows:
            return averaged_points(source, self.config, flat)
        return np.stack([source.read(int(i), int(i) + 1)[0] for i in flat])

    def streams(self):
        """The (compute, copy-back) CUDA streams of this pipeline, made on first use.

        Made once, not per :func:`run_stream` call: CuPy's memory pool keeps freed blocks per
        stream, so a fresh stream for each call (a Dask worker makes one call per task)
        strands the blocks cached for the old ones. The device then fills with unusable
        cache, allocations fall back to freeing it all, and tasks grew from 0.08 s to 2.7 s.
        """
        if self._streams is None:
            cp = self.backend.xp
            self._streams = (cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True))
        return self._streams

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def bytes_per_pattern(self) -> int:
        """Rough device working memory per pattern in a batch."""
        ny, nx = getattr(self.engine, "fft_shape", fft_shape(self.tile_shape, self.engine.max_lag, "full"))
        per_tile = ny * nx * 4 + ny * (nx // 2 + 1) * 8 * 2 + self.tile_shape[0] * self.tile_shape[1] * 12
        if self.config.correlation.subpixel == "upsampled":
            per_tile += ny * (nx // 2 + 1) * 8
        return self.layout.n * per_tile


def auto_batch(pipeline: Pipeline, n_patterns: int) -> int:
    """A batch that keeps device working memory near 1 GiB (CPU) or a fifth of free GPU memory."""
    be = pipeline.backend
    if be.is_gpu:
        free, _ = be.xp.cuda.runtime.memGetInfo()
        budget = min(free // 5, 16 << 30)
    else:
        budget = 1 << 30
    b = int(max(1, min(budget // max(pipeline.bytes_per_pattern(), 1), 4096)))
    return max(1, min(b, n_patterns))


def _on_disk(scan_path) -> str:
    """The file or folder behind a scan path; for a glob of images (``frames/*.tif``), its folder."""
    path = os.path.abspath(scan_path)
    while not os.path.exists(path) and any(ch in path for ch in "*?["):
        path = os.path.dirname(path)
    return path


def default_output(scan_path) -> str:
    """``SCAN_STEM.ebsdxc.h5`` beside the scan (a folder of images, or a glob's folder, is the scan)."""
    path = _on_disk(scan_path)
    d, name = os.path.split(path.rstrip(os.sep))
    stem = name if os.path.isdir(path) else os.path.splitext(name)[0]
    return os.path.join(d, f"{stem}.ebsdxc.h5")


def _todo_chunks(done_flat: np.ndarray, batch: int, *, cols=None, halo=0):
    """Contiguous runs of not-done points, split into chunks of at most ``batch``.

    With neighbour averaging (``halo`` rows, ``cols`` points per row) a chunk is whole scan
    rows, ``(start, stop, read_start, read_stop)``: every row holding an undone point is
    redone, and the halo rows around the chunk are read with it.
    """
    if halo:
        rows = done_flat.size // cols
        todo_rows = np.flatnonzero(~done_flat.reshape(rows, cols).all(axis=1))
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
        a, b = int(run[0]), int(run[-1]) + 1
        out.extend((s, min(s + batch, b)) for s in range(a, b, batch))
    return out


def _native(a: np.ndarray) -> np.ndarray:
    return a.astype(a.dtype.newbyteorder("="), copy=False)


def _mean_pattern(source, backend, batch) -> np.ndarray:
    """Mean of the scan's patterns; points without a pattern (not present, all zeros) left out."""
    xp = backend.xp
    acc = xp.zeros(source.pattern_shape, dtype=xp.float64)
    count = 0
    present = None if source.present is None else source.present.reshape(-1)
    for a in range(0, source.n_patterns, batch):
        b = min(a + batch, source.n_patterns)
        x = xp.asarray(_native(source.read(a, b)))
        keep = (x.reshape(b - a, -1) != 0).any(axis=1)
        if present is not None:
            keep &= xp.asarray(present[a:b])
        acc += x[keep].astype(xp.float64).sum(axis=0)
        count += int(keep.sum())
    if count == 0:
        raise InputError("holds no patterns to average for a static background", source.path)
    return backend.asnumpy(acc / count)


def _static_background(spec, source, backend=None):
    """The static background ``spec`` names, (H, W) or None: ``None``; ``"mean"`` (of the scan's
    patterns; needs ``backend``); ``"file"`` (the one the vendor stored in the scan); a TIFF."""
    if spec is None:
        return None
    if spec == "mean":
        return _mean_pattern(source, backend, 64)
    if spec == "file":
        bg = source.static_background()
        if bg is None:
            raise InputError(f"--static-background file: this {source.format} scan stores no static "
                             "background (use 'mean' or a TIFF)", source.path)
        where = source.path
    else:
        bg, where = scan_io.read_reference(spec), spec
    bg = _native(np.asarray(bg))
    if bg.shape != source.pattern_shape:
        raise InputError(f"static background is {bg.shape[1]}x{bg.shape[0]} px but the scan's patterns "
                         f"are {source.pattern_shape[1]}x{source.pattern_shape[0]} px", where)
    return bg


@dataclass
class _Batch:
    start: int
    stop: int
    buffer: np.ndarray
    view: np.ndarray
    offset: int = 0  # where the chunk starts in `view` (halo rows before it)


class _Reader(threading.Thread):
    """Reads chunks ahead into a small ring of (pinned) host buffers."""

    def __init__(self, source, chunks, buffers):
        super().__init__(daemon=True, name="ebsdxc-reader")
        self.source = source
        self.chunks = chunks
        self.free = queue.Queue()
        for b in buffers:
            self.free.put((b, None))
        self.ready = queue.Queue()
        self._halt = threading.Event()

    def run(self):
        try:
            for chunk in self.chunks:
                start, stop = chunk[:2]
                a, b = chunk[2:] if len(chunk) == 4 else chunk
                buf, event = self.free.get()
                if self._halt.is_set():
                    break
                if event is not None:
                    event.synchronize()  # the previous transfer out of this buffer has finished
                view = buf[: b - a]
                try:
                    self.source.read_into(a, b, view)
                except (OSError, ValueError) as e:  # a damaged or truncated file, read back mid-run
                    raise InputError(f"cannot read patterns {a} to {b - 1} ({e})", self.source.path) from e
                self.ready.put(_Batch(start, stop, buf, view, start - a))
            self.ready.put(None)
        except BaseException as e:  # handed to the main thread, which raises it
            self.ready.put(e)

    def release(self, buf, event=None):
        self.free.put((buf, event))

    def stop(self):
        self._halt.set()
        self.free.put((None, None))


def _host_buffers(backend, n, shape, dtype):
    # Native byte order: the reader converts big-endian files while reading, and CuPy
    # takes native arrays only.
    dtype = np.dtype(dtype).newbyteorder("=")
    if backend.is_gpu:
        import cupyx

        return [cupyx.empty_pinned(shape, dtype=dtype) for _ in range(n)]
    return [np.empty(shape, dtype=dtype) for _ in range(n)]


def _to_host(backend, res: PeakResult, stream=None):
    if backend.is_gpu:
        return tuple(a.get(stream=stream) for a in (res.displacement, res.peak_height, res.status))
    return res.displacement, res.peak_height, res.status


def run_stream(pipeline: Pipeline, source, chunks, *, write, progress: Progress, buffers=None):
    """Correlate ``chunks`` [(start, stop), ...] of ``source`` and hand results to ``write``.

    ``write(start, displacement, peak_height, status)`` receives host arrays, in order.
    ``buffers`` are host buffers from an earlier call to use again when they fit (pinning host
    memory is slow); the ones used are returned.
    """
    be = pipeline.backend
    if not chunks:
        return buffers
    batch = max(c[-1] - c[-2] for c in chunks)  # the read range: halo rows included
    halo = len(chunks[0]) == 4
    cols = source.grid.cols
    present = None if source.present is None else source.present.reshape(-1)

    def match(item, patterns):
        if not halo:
            return pipeline.match(patterns)
        a = item.start - item.offset
        return pipeline.match(patterns, crop=(item.offset, item.stop - item.start), cols=cols,
                              present=None if present is None else present[a:a + len(item.view)])

    want = np.dtype(source.dtype).newbyteorder("=")
    if (buffers is None or buffers[0].shape[0] < batch or buffers[0].shape[1:] != tuple(source.pattern_shape)
            or buffers[0].dtype != want):
        buffers = _host_buffers(be, N_BUFFERS, (batch, *source.pattern_shape), source.dtype)
    reader = _Reader(source, chunks, buffers)
    reader.start()
    pending = None
    try:
        if be.is_gpu:
            cp = be.xp
            compute, copy_back = pipeline.streams()
        while True:
            item = reader.ready.get()
            if item is None:
                break
            if isinstance(item, BaseException):
                if pending is not None:  # keep what was computed before the failed read
                    _flush(be, pending, write, progress, copy_back if be.is_gpu else None)
                    pending = None
                raise item
            if be.is_gpu:
                with compute:
                    dev = cp.empty(item.view.shape, dtype=item.view.dtype)
                    dev.set(item.view, stream=compute)
                    reader.release(item.buffer, compute.record())
                    res = match(item, dev)
                    done_event = compute.record()
            else:
                res = match(item, item.view)
                reader.release(item.buffer)
                done_event = None
            if pending is not None:
                _flush(be, pending, write, progress, copy_back if be.is_gpu else None)
            pending = (item.start, item.stop, res, done_event)
        if pending is not None:
            _flush(be, pending, write, progress, copy_back if be.is_gpu else None)
            pending = None
    finally:
        reader.stop()
        reader.join(timeout=10)
    return buffers


def _flush(be, pending, write, progress, stream):
    start, stop, res, event = pending
    if event is not None:
        stream.wait_event(event)
    disp, height, status = _to_host(be, res, stream)
    write(start, disp, height, status)
    progress.update(stop - start)


def process(scan, *, ref=None, ref_index=None, output=None, config: ProcessConfig | None = None,
            dataset=None, format=None, grid_shape=None, resume=False, overwrite=False,  # noqa: A002
            progress: Progress | None = None, command_line: str = "", client=None, cluster=None) -> str:
    """Correlate every pattern of ``scan`` with the reference and write a results file.

    Parameters
    ----------
    scan : str or PatternSource
        Scan file (any format :func:`ebsdxc.io.open_scan` reads: also a folder or glob of
        images) or an open source.
    ref : str, optional
        Reference pattern image (TIFF). Exactly one of ``ref`` and ``ref_index``.
    ref_index : int or (int, int), optional
        Scan point to use as the reference.
    output : str, optional
        Results file; default ``SCAN_STEM.ebsdxc.h5`` beside the scan.
    config : ProcessConfig
    dataset, format, grid_shape
        Passed to :func:`ebsdxc.io.open_scan`: which patterns of a file holding several, a
        reader to force, and (rows, cols) for files that do not record their grid.
    client : distributed.Client, optional
        Run the correlation on this Dask cluster (see :mod:`ebsdxc.cluster`); the results file
        is written here, task by task. The strain pass, when asked for, runs here too.
    cluster : ebsdxc.cluster.ClusterConfig, optional
        Retries and task size for ``client``.
    resume, overwrite : bool
        Continue an interrupted run / replace an existing results file.
    progress : Progress

    Returns
    -------
    str
        Path of the results file.
    """
    config = config or ProcessConfig()
    progress = progress or NullProgress()
    if (ref is None) == (ref_index is None):
        raise InputError("give a reference: --ref FILE or --ref-index N (one of them)")
    if resume and overwrite:
        raise InputError("--resume and --overwrite exclude each other")
    source = (scan if isinstance(scan, scan_io.PatternSource)
              else scan_io.open_scan(scan, dataset=dataset, format=format, grid_shape=grid_shape))
    try:
        dist = None
        if client is not None:
            from .cluster import ClusterConfig

            dist = (client, cluster or ClusterConfig(), {"dataset": dataset, "format": format})
        return _process(source, ref, ref_index, output, config, resume, overwrite, progress, command_line,
                        dist)
    finally:
        if not isinstance(scan, scan_io.PatternSource):
            source.close()


def processed_shape(config: ProcessConfig, raw_shape, path=None) -> tuple[int, int]:
    """(H, W) of the patterns after preprocessing (binning), for ROI layouts and the strain fit."""
    b = config.preprocess.binning
    h, w = int(raw_shape[0]), int(raw_shape[1])
    if h % b or w % b:
        raise InputError(f"--pattern-binning {b} does not divide the {w}x{h} px patterns", path)
    return h // b, w // b


def _binned_geometry(config: ProcessConfig, scfg, meta: dict):
    """The strain options and scan metadata as the binned patterns see them: each pattern
    pixel is ``binning`` detector pixels more (EMsoft PCs and pixel sizes depend on it)."""
    b = config.preprocess.binning
    if b == 1:
        return scfg, meta
    meta = {**meta, "binning": (meta.get("binning") or 1) * b}
    return dataclasses.replace(scfg, binning=scfg.binning * b), meta


def _check_averaging(config: ProcessConfig, source) -> None:
    if config.preprocess.average_neighbours and source.grid.kind != "square":
        raise InputError(f"neighbour averaging needs a square scan grid; this scan's grid is "
                         f"{source.grid.kind}", source.path)


def averaged_points(source, config: ProcessConfig, flat) -> np.ndarray:
    """Patterns at flat scan indices ``flat`` (k, H, W) float32, neighbour-averaged as the
    correlation pass averages them (each point with the rows around it read again)."""
    from .preprocess import average_neighbours

    pp = config.preprocess
    rows, cols = source.grid.rows, source.grid.cols
    h = pp.average_neighbours // 2
    present = None if source.present is None else source.present.reshape(-1)
    out = []
    for i in (int(v) for v in flat):
        a, b = max(0, i // cols - h) * cols, min(rows, i // cols + h + 1) * cols
        block = _native(source.read(a, b)).astype(np.float32)
        ok = (block.reshape(b - a, -1) != 0).any(axis=1)
        if present is not None:
            ok &= present[a:b]
        out.append(average_neighbours(block, cols=cols, kernel=pp.average_kernel, size=pp.average_neighbours,
                                      sigma=pp.average_sigma, present=ok, xp=np)[i - a])
    return np.stack(out)


def _scan_reference(source, ref_index, config: ProcessConfig) -> np.ndarray:
    """The reference pattern taken from the scan, averaged with its neighbours as every point is."""
    if not config.preprocess.average_neighbours:
        return scan_io.reference_from_scan(source, ref_index)
    return averaged_points(source, config, [scan_io.flat_index(source, ref_index)])[0]


def _process(source, ref, ref_index, output, config, resume, overwrite, progress, command_line, dist=None):
    if ref is not None:
        reference = scan_io.read_reference(ref)
        # Parameters are compared across resumes: keep what identifies the reference.
        ref_param = {"reference": os.path.basename(ref)}
        if reference.shape != source.pattern_shape:
            raise InputError(f"reference is {reference.shape[1]}x{reference.shape[0]} px but the scan's "
                             f"patterns are {source.pattern_shape[1]}x{source.pattern_shape[0]} px", ref)
    else:
        _check_averaging(config, source)
        reference = _scan_reference(source, ref_index, config)
        ref_param = {"reference_index": ref_index if np.ndim(ref_index) == 0 else list(ref_index)}
    _check_averaging(config, source)
    reference = _native(reference)
    shape = processed_shape(config, source.pattern_shape, source.path)
    layout = build_layout(config.roi, shape, path=source.path)
    static_bg = None
    if config.static_background != "mean":  # checked before anything is written
        static_bg = _static_background(config.static_background, source)
    out = os.path.abspath(output or default_output(source.path))
    for p in (source.path, ref, config.static_background):
        if p not in (None, "mean", "file") and os.path.abspath(p) == out:
            raise InputError("output would overwrite an input file", out)
    if os.path.exists(out) and not (resume or overwrite):
        raise InputError("output already exists; pass --overwrite to replace it "
                         "or --resume to continue it", out)
    geom = None
    if config.strain.enabled:  # before the long correlation pass: bad geometry fails at once
        scfg, meta = _binned_geometry(config, config.strain, scan_metadata(source))
        geom = resolve_geometry(scfg, shape=shape, grid=source.grid, scan_meta=meta, scan_path=source.path,
                                ref_index=ref_index, ref_path=ref,
                                ref_meta=scan_io.read_reference_metadata(ref) if ref else None)
    backend = select_backend(config.device)
    with backend.use():
        if config.static_background == "mean":
            static_bg = _static_background("mean", source, backend)
        pipeline = Pipeline(backend, config, layout, reference, static_background=static_bg)
        try:
            out = _run(pipeline, source, ref, ref_param, out, config, resume, overwrite, progress,
                       command_line, dist=dist, reference=reference, static_bg=static_bg)
            if geom is not None:
                compute_strain(out, config.strain, geom, backend=backend, pipeline=pipeline, source=source,
                               overwrite=True, progress=progress)
            return out
        finally:
            pipeline.close()


def strain(results, *, config=None, scan=None, ref=None, device="auto", overwrite=False,
           progress: Progress | None = None) -> dict:
    """Add strain and rotation to an existing displacement results file (``ebsdxc strain``).

    Parameters
    ----------
    results : str
        A results file written by :func:`process`.
    config : hrebsd.StrainConfig
        Material, pattern centre, orientation and fit options.
    scan, ref : str, optional
        The scan and reference image, when they are no longer where the results file
        recorded them. The scan is needed for remapping (``remap_threshold_deg > 0``) and
        for pattern centres, tilts or orientation stored in it.
    device : str
    overwrite : bool
        Replace strain results already in the file.

    Returns
    -------
    dict
        Counts of points fitted, remapped and flagged.
    """
    import h5py

    from .hrebsd import StrainConfig
    from .io.results import GROUP, is_results_file

    cfg = config or StrainConfig()
    progress = progress or NullProgress()
    results = os.fspath(results)
    if not os.path.isfile(results):
        raise InputError("no such file", results)
    if not is_results_file(results):
        raise InputError("not an ebsdxc results file (run 'ebsdxc process' first)", results)
    with h5py.File(results, "r") as f:
        g = f[GROUP]
        a = g.attrs
        try:
            params = json.loads(a["parameters"])
            inputs = {i["name"]: i for i in json.loads(a["inputs"])}
            rows, cols = g["done"].shape
            centres = g["roi/centers"][...]
        except (KeyError, ValueError, TypeError) as e:
            raise InputError(f"lacks the metadata the strain fit needs ({e})", results) from None
        step = tuple(a["step"]) if "step" in a else None
        kind = str(a.get("grid_kind", "square"))
        scan_format = str(a.get("scan_format", ""))
        scan_format = scan_format if scan_format in scan_io.SCAN_FORMATS else None
        pattern_shape = tuple(int(v) for v in a.get("pattern_shape", ()))
        if not g["done"][...].any():
            raise InputError("holds no processed points", results)
    remap = cfg.remap_threshold_deg > 0
    scan_path = scan or (inputs.get(params.get("scan")) or {}).get("path")
    source = None
    if scan_path and os.path.exists(_on_disk(scan_path)):
        _check_unchanged(_on_disk(scan_path), inputs.get(os.path.basename(_on_disk(scan_path))), scan is not None,
                         results)
        # The results' grid: the scan's own when it records one (a contradiction is an error),
        # else what --grid gave when it was processed; and the reader that read it then.
        source = scan_io.open_scan(scan_path, dataset=params.get("dataset"), grid_shape=(rows, cols),
                                   format=scan_format)
    elif remap:
        raise InputError(f"remapping needs the scan file {scan_path or '(not recorded)'}, which is not there: "
                         "give --scan FILE, or --no-remap", results)
    try:
        ref_index = params.get("reference_index")
        ref_index = tuple(ref_index) if isinstance(ref_index, list) else ref_index
        ref_path = None
        if ref_index is None:
            ref_path = ref or (inputs.get(params.get("reference")) or {}).get("path")
            if ref_path and not os.path.isfile(ref_path):
                if remap:
                    raise InputError("remapping needs the reference pattern, which is not there: give --ref "
                                     "FILE, or --no-remap", ref_path)
                ref_path = None
        if source is not None:
            shape, grid = source.pattern_shape, source.grid
            meta = scan_metadata(source)
        else:
            shape = pattern_shape
            if len(shape) != 2:
                raise InputError("the pattern size is not recorded and the scan is not there: give --scan",
                                 results)
            grid, meta = scan_io.ScanGrid(rows, cols, step=step, kind=kind), {}
        if (grid.rows, grid.cols) != (rows, cols):
            raise InputError(f"scan grid {grid.rows} x {grid.cols} differs from the results' {rows} x {cols}",
                             source.path)
        pconf = ProcessConfig.from_parameters(params)
        binned = processed_shape(pconf, shape, scan_path or results)
        gcfg, meta = _binned_geometry(pconf, cfg, meta)
        geom = resolve_geometry(gcfg, shape=binned, grid=grid, scan_meta=meta, scan_path=scan_path or results,
                                ref_index=ref_index, ref_path=ref_path,
                                ref_meta=scan_io.read_reference_metadata(ref_path) if ref_path else None)
        backend = select_backend(device)
        with backend.use():
            if not remap:
                return compute_strain(results, cfg, geom, backend=backend, overwrite=overwrite, progress=progress)
            layout = build_layout(pconf.roi, binned, path=source.path)
            if not np.allclose(layout.centres, centres):
                raise InputError("the recorded ROI layout cannot be rebuilt (ROI file changed?): use --no-remap",
                                 results)
            reference = (_scan_reference(source, ref_index, pconf) if ref_index is not None
                         else scan_io.read_reference(ref_path))
            static_bg = _static_background(pconf.static_background, source, backend)
            pipeline = Pipeline(backend, pconf.replace(device=device), layout, _native(reference),
                                static_background=static_bg)
            try:
                return compute_strain(results, cfg, geom, backend=backend, pipeline=pipeline, source=source,
                                      overwrite=overwrite, progress=progress)
            finally:
                pipeline.close()
    finally:
        if source is not None:
            source.close()


def _check_unchanged(path, record, given, results):
    if record is None or given and os.path.basename(path) != record["name"]:
        return
    now = input_record(path)
    if (now["size"], now["mtime"]) != (record["size"], record["mtime"]):
        raise InputError(f"changed since {os.path.basename(results)} was made; remapping would mix "
                         "two versions of the data (process it again, or --no-remap)", path)


def _run(pipeline, source, ref, ref_param, out, config, resume, overwrite, progress, command_line, *,
         dist=None, reference=None, static_bg=None):
    layout, backend = pipeline.layout, pipeline.backend
    batch = config.batch or auto_batch(pipeline, source.n_patterns)
    scan_on_disk = _on_disk(source.path)
    inputs = [input_record(scan_on_disk)] if os.path.exists(scan_on_disk) else []
    if ref is not None:
        inputs.append(input_record(ref))
    params = {**config.parameters(), "scan": os.path.basename(source.path),
              "dataset": source.metadata.get("dataset"), **ref_param}
    if resume:
        writer = ResultsWriter.resume(out, grid=source.grid, parameters=params, inputs=inputs)
    else:
        writer = ResultsWriter.create(out, grid=source.grid, centres=layout.centres,
                                      roi_size=layout.size, parameters=params, inputs=inputs,
                                      command_line=command_line, overwrite=overwrite)
    with writer:
        writer.set_attr("device", backend.name)
        writer.set_attr("engine", pipeline.engine.name)
        writer.set_attr("pattern_shape", np.asarray(source.pattern_shape, dtype=np.int64))
        writer.set_attr("scan_format", source.format)
        if not resume and source.present is not None:
            writer.mark_missing(~source.present)
        done = writer.done.reshape(-1)
        chunks = _todo_chunks(done, batch, cols=source.grid.cols, halo=pipeline.preprocessor.halo_rows)
        progress.start(source.n_patterns, done=int(done.sum()), desc=os.path.basename(source.path))
        try:
            if dist is None:
                run_stream(pipeline, source, chunks, write=writer.write, progress=progress)
            else:
                from .cluster import run_on_cluster

                client, ccfg, where = dist
                writer.set_attr("cluster", str(client.scheduler.address))
                run_on_cluster(client, ccfg, source, writer, config, reference, static_bg, progress=progress,
                               dataset=where["dataset"], format=where["format"])
            writer.finish()
        finally:
            progress.close()
    return out

