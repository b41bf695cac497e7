"""The per-batch stage pipeline: preprocess -> cut ROIs -> prepare -> correlate -> peaks
[-> whole-pattern refinement].

A :class:`Pipeline` holds what stays on the device for a whole run: the preprocessor, the
correlation engine and the prepared tiles of every reference of a
:class:`~ebsdxc.references.ReferenceSet`. It turns a batch of raw patterns (and the
reference index of each) into a :class:`~ebsdxc.engines.PeakResult`; it knows nothing of
files, tasks or executors.
"""

from __future__ import annotations

import dataclasses
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import status as st
from .. import timing
from ..backend import Backend, is_out_of_memory
from ..engines import PeakResult, PreparedReferences, choose_engine, make_engine
from ..engines.fft import fft_shape
from ..errors import InputError
from ..preprocess import PatternPreprocessor, prepare_tiles, rois_inside_mask, window_1d, window_2d
from ..references import ReferenceSet
from ..refine import WholePatternRefiner
from ..rois import RoiLayout, extract_tiles
from .transfer import plan_transfer

__all__ = ["Pipeline", "CPU_TILES_PER_TASK"]

CPU_TILES_PER_TASK = 256  # tiles per CPU thread task: a few MB, so a task's arrays stay in cache


class Pipeline:
    """Preprocess -> cut ROIs -> prepare -> correlate -> peaks, for batches on one backend.

    Parameters
    ----------
    backend : Backend
    config : ProcessConfig
        The settings that define the result (``roi``, ``preprocess``, ``correlation``).
    layout : RoiLayout
    references : ReferenceSet or (H, W) array
        The reference patterns (raw, as scan patterns arrive); one array is K = 1.
    static_background : (H, W) array or None
    batch : int, optional
        Patterns per batch, when known: informs the engine's automatic choice.
    simulated : SimulatedReferences, optional
        Each point's reference is simulated (``--ref simulated``): :meth:`match` takes the
        batch's flat scan indices as ``index``; ``references`` then only sets the engine up.
    """

    def __init__(self, backend: Backend, config, layout: RoiLayout, references, *, static_background=None,
                 batch=None, simulated=None):
        if not isinstance(references, ReferenceSet):
            references = ReferenceSet.single(np.asarray(references))
        self.backend = backend
        self.config = config
        self.layout = layout
        self.reference_set = references
        xp = backend.xp
        w, h = layout.size
        self.tile_shape = (h, w)
        self._pool = None
        self._streams = None
        self._transfer_origins = None
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
        self._window_1d = (window_1d(h, config.preprocess.window), window_1d(w, config.preprocess.window))
        corr = config.correlation
        why = corr.shift_refusal(min(self.tile_shape)) if hasattr(corr, "shift_refusal") else None
        if why and getattr(config.roi, "size", None) is None:
            # an explicit roi.size is refused by the configuration; a size derived from the
            # pattern size is only known here, and a shipped recipe meets it on small patterns
            why = why.replace("must be at most half of", "is more than half of")
            warnings.warn(f"{why}; the ROI size follows from the {references.pattern_shape[1]} px patterns",
                          UserWarning, stacklevel=2)
        self._stage_backend = stage_backend
        self.engine = make_engine(getattr(corr, "engine", "auto"), stage_backend, self.tile_shape, corr,
                                  window_1d=self._window_1d, n_tiles=layout.n,
                                  batch=_patterns_per_set(references, batch))
        self._pairs = None  # pairs_engine()
        self._pairs_frames = None
        #: (n_roi,) bool ROIs that reach off the detector mask (their results are flagged), or None.
        self.outside = None
        screen = self.preprocessor.screen_mask(references.pattern_shape)
        if screen is not None:
            inside = rois_inside_mask(screen, layout.origins, layout.size)
            if not inside.any():
                raise InputError("every ROI reaches outside the detector mask: move the ROIs (roi.size, "
                                 "roi.grid) or enlarge the mask (preprocess.mask_radius)")
            if not inside.all():
                warnings.warn(f"{int((~inside).sum())} of {layout.n} ROIs reach outside the detector "
                              "mask; they are flagged OUTSIDE_MASK, not measured", stacklevel=2)
                self.outside = xp.asarray(~inside) if backend.is_gpu else ~inside
        self._fused = backend.is_gpu
        if self._fused:
            from ..engines.gpu_ops import PaddedTileBuffer

            self._frames = PaddedTileBuffer(self.engine.input_shape)
            self._origins = xp.asarray(layout.origins, dtype=xp.int32)
        #: The preprocessed reference patterns (K, H, W) on the device: what remapping rotates.
        try:
            self.reference_images = self.preprocessor(xp.asarray(references.patterns))
            t, e, s = self._prepared_tiles(self.reference_images)
            #: The K references' prepared tiles, resident on the device for the whole run.
            self.references = self.engine.prepare_references(t, e, s)
        except Exception as err:  # out of memory (CuPy's, cuFFT's): no batch size helps here
            if not is_out_of_memory(err):
                raise
            where = "the GPU's" if backend.is_gpu else "host"
            raise InputError(f"{references.count} reference patterns of {layout.n} ROIs each do not fit in {where} "
                             f"memory with the {self.engine.info.name} engine ({err}): use fewer references (a larger "
                             "--grain-tolerance), fewer or smaller ROIs, or another engine") from None
        self.reference_status = backend.asnumpy(s)
        #: Whole-pattern IC-GN over the ROI matches (``refine.method = "icgn"``), or None.
        self.refiner = None
        refine = getattr(config, "refine", None)
        if refine is not None and refine.enabled:
            strain = getattr(config, "strain", None)
            self.refiner = WholePatternRefiner(self.reference_images, layout.centres, refine, mask=screen,
                                               min_peak_height=getattr(strain, "min_peak_height", 0.3),
                                               roi_size=layout.size)
        self.simulated = simulated
        if simulated is not None:
            self._master = xp.asarray(simulated.master, dtype=xp.float32)
            # a simulation has no detector background: only the per-pattern processing, at its shape
            self._alike = PatternPreprocessor(dataclasses.replace(config.preprocess, static_background=None,
                                                                  average_neighbours=0, binning=1), stage_backend)

    @property
    def reference_image(self):
        """The first preprocessed reference (H, W): the one reference of a K = 1 run."""
        return self.reference_images[0]

    def match(self, patterns, *, index=None, crop=None, cols=None, present=None, transferred=None) -> PeakResult:
        """(B, H, W) raw patterns (host or device) -> :class:`PeakResult` on the device.

        ``transferred``: the :class:`~ebsdxc.run.transfer.TransferPlan` (from
        :meth:`transfer_plan`) that cut ``patterns`` to their ROIs on the way to the device.

        ``index`` (B,) gives each pattern's reference (``None``: reference 0). With neighbour
        averaging, ``patterns`` is a block of whole scan rows of ``cols`` points with halo
        rows around the chunk, ``crop = (offset, n)`` the chunk within it, ``present`` (B,)
        the block's points that hold a pattern, and ``index`` the chunk's; the result is the
        chunk's.

        A pattern that is all zeros is no measurement (a vendor's placeholder for a point
        it did not record, or a hole in a damaged file): its ROIs get ``MISSING_PATTERN``,
        and ROIs reaching outside the detector mask get ``OUTSIDE_MASK``.
        """
        xp = self.backend.xp if self._fused else np
        patterns = xp.asarray(patterns)
        has_data = _has_data(patterns)
        if transferred is not None:
            if crop is not None or self.simulated is not None or not self.rois_only:
                raise ValueError("transferred: this pipeline needs whole patterns")
            res = self._match(patterns, index, layout=transferred.layout)
        elif crop is None:
            res = self._match(patterns, index) if self.simulated is None else self._match_simulated(patterns, index)
        else:
            off, n = crop
            ok = has_data if present is None else has_data & xp.asarray(present, dtype=bool)
            pp = self.preprocessor
            x = pp.average_neighbours(pp.convert(patterns), cols=cols, present=ok)
            if self.simulated is None:
                res = self._match(x[off:off + n], index, converted=True)
            else:
                res = self._match_simulated(x[off:off + n], index, converted=True)
            has_data = has_data[off:off + n]
        return self._flag(res, ~has_data, xp)

    def _match_simulated(self, patterns, flat, converted=False) -> PeakResult:
        """Match each pattern with the reference simulated for its point, re-simulating at the
        orientation the fit finds (:mod:`ebsdxc.run.simulated_references`)."""
        be = self.backend
        xp = be.xp
        sim = self.simulated
        x = xp.asarray(patterns)
        x = self.preprocessor.correct(x) if converted else self.preprocessor(x)
        flat = np.asarray(be.asnumpy(flat) if not isinstance(flat, np.ndarray) else flat, dtype=np.int64)
        B = len(flat)
        g = sim.orientation[flat].copy()
        pc = sim.pc[flat].copy()
        if sim.pc_refine:
            # a missing pattern (all zeros) or an unindexed point has nothing to refine from
            spread = x.reshape(B, -1).std(axis=1)
            usable = np.asarray(be.asnumpy(xp.isfinite(spread) & (spread > 0)), dtype=bool) & np.isfinite(g).all(
                axis=(1, 2))
            if usable.any():
                u = np.flatnonzero(usable)
                pc[u], g[u], _ = sim.refine_pc(xp, self._master, x[xp.asarray(u)], pc[u], g[u], self._alike.correct)
        count = np.zeros(B, np.int8)
        left = np.full(B, np.nan, np.float32)
        quality = np.full(B, -np.inf)
        final = None
        todo = np.arange(B)
        tried = g
        for it in range(sim.iterations):
            refs = self._alike.correct(sim.simulate(xp, self._master, pc[todo], tried[todo]))
            res = self._match_prepared_pairs(refs, x[xp.asarray(todo)] if len(todo) < B else x)
            count[todo] += 1
            q = sim.match_quality(xp, res)
            better = q >= quality[todo]  # a re-simulation that matches worse is dropped
            keep = todo[better]
            if final is None:
                final = res
            elif keep.size:
                _assign(final, _rows(res, xp.asarray(np.flatnonzero(better))), xp.asarray(keep))
            quality[keep] = q[better]
            g[keep] = tried[keep]
            R, angle, holds = sim.rotation_left(xp, res, pc[todo], g[todo])
            left[keep] = angle[better]
            more = better & holds & (angle > sim.tolerance_deg)
            if it == sim.iterations - 1 or not more.any():
                break
            todo = todo[more]
            tried = g.copy()
            tried[todo] = g[todo] @ np.swapaxes(R[more], -1, -2)  # the deformed crystal's orientation g R^T
        extra = dict(final.extra or {})
        extra["simulated_reference/orientation"] = xp.asarray(g)
        extra["simulated_reference/simulations"] = xp.asarray(count)
        extra["simulated_reference/rotation_left_deg"] = xp.asarray(left)
        extra["simulated_reference/pattern_centre"] = xp.asarray(pc)
        return PeakResult(final.displacement, final.peak_height, final.status, extra=extra)

    def _match_prepared_pairs(self, references, x) -> PeakResult:
        """Pattern b of preprocessed ``x`` against preprocessed reference b (and refined)."""
        b = len(x)
        engine, pairs = self._pair_references(references)
        res = self._match(x, np.arange(b, dtype=np.int32), references=pairs, preprocessed=True, engine=engine)
        if self.refiner is None:
            return res
        d, h, s, record = self.refiner.refine_pairs(references, x, res.displacement, res.peak_height, res.status)
        return PeakResult(d, h, s, extra=record.arrays)

    def _flag(self, res, empty, xp):
        if xp is not np and res.displacement.dtype == np.float32 and res.peak_height.dtype == np.float32:
            from ..engines.gpu_results import flag_results

            outside = None if self.outside is None else xp.asarray(self.outside)
            return PeakResult(*flag_results(res.displacement, res.peak_height, res.status, empty, outside),
                              extra=res.extra)
        return _flag_arrays(res, empty, self.outside, xp)

    def _match(self, patterns, index, converted=False, references=None, preprocessed=False,
               layout=None, engine=None) -> PeakResult:
        """``references`` other than the pipeline's own (remapped ones) are matched without
        refinement: the refiner's templates are the pipeline's references. ``preprocessed``:
        ``patterns`` went through the preprocessor already. ``layout``: where the ROIs are in
        ``patterns`` when they are not whole patterns (:meth:`transfer_plan`). ``engine``: one
        other than the pipeline's (:meth:`pairs_engine`), for such ``references`` only."""
        xp = self.backend.xp
        engine = self.engine if engine is None else engine
        refs = self.references if references is None else references
        refine = self.refiner is not None and references is None
        if not self._fused:
            B = patterns.shape[0]
            correct = self.preprocessor.correct if converted else self.preprocessor

            def prep(a):
                if preprocessed:
                    return a
                with timing.stage("preprocess"):
                    return correct(a)
            parts = self._in_parts(lambda p: self._match_host(prep(patterns[p]), None if index is None else index[p],
                                                              refs, refine, layout, engine), B)
            if len(parts) == 1:
                return parts[0]
            extra = None
            if refine:
                extra = {k: np.concatenate([p.extra[k] for p in parts]) for k in parts[0].extra}
            return PeakResult(*(np.concatenate([getattr(p, f) for p in parts])
                                for f in ("displacement", "peak_height", "status")), extra=extra)
        from ..engines.gpu_ops import prepare_tiles_padded

        # An engine that cuts and prepares the ROIs as it loads them (the fused one) is given the
        # patterns: no tile is written to device memory and read back.
        direct = engine.reads_rois
        with timing.stage("preprocess", xp=xp):
            x = xp.asarray(patterns)
            if preprocessed:
                pass
            elif converted:
                x = self.preprocessor.correct(x)
            elif not self.preprocessor.is_identity:  # else the tile kernel converts raw values itself
                x = self.preprocessor(x)
            B, n = x.shape[0], self.layout.n
            origins = self._origins if layout is None else self._device_origins(layout)
            if not direct:
                frames = self._frame_buffer(engine).get(B * n)
                e, s = prepare_tiles_padded(x, origins, self.tile_shape, self.window, frames)
        with timing.stage("correlate", xp=xp):  # the engines mark their own peak stage inside
            idx = None if index is None else xp.asarray(index)
            if direct:
                res = engine.match_rois(x, origins, self.window, references=refs, index=idx)
            else:
                res = engine.match(frames.reshape(B, n, *frames.shape[1:]), e.reshape(B, n), s.reshape(B, n),
                                   references=refs, index=idx)
        if refine:
            with timing.stage("refine", xp=xp):
                res = self._refine(self.preprocessor.convert(x) if x.dtype.kind in "ui" else x, res, index)
        return res

    def _frame_buffer(self, engine):
        """The padded tile buffer of ``engine``'s input shape (the run's engine's, or one for the
        pairs engine, made on first use)."""
        if engine is self.engine:
            return self._frames
        from ..engines.gpu_ops import PaddedTileBuffer

        if self._pairs_frames is None:
            self._pairs_frames = PaddedTileBuffer(engine.input_shape)
        return self._pairs_frames

    def _match_host(self, x, index, refs, refine, layout, engine) -> PeakResult:
        with timing.stage("preprocess"):
            tiles = extract_tiles(x, self.layout if layout is None else layout, np, dtype=np.float32)
            t, e, s = prepare_tiles(tiles, self.window, np, overwrite=True)
        with timing.stage("correlate"):
            res = engine.match(t, e, s, references=refs, index=index)
        if refine:
            with timing.stage("refine"):
                res = self._refine(x, res, index)
        return res

    def _refine(self, x, res: PeakResult, index) -> PeakResult:
        d, h, s, record = self.refiner.refine(x, res.displacement, res.peak_height, res.status, index)
        return PeakResult(d, h, s, extra=record.arrays)

    def match_pairs(self, references, patterns) -> PeakResult:
        """Match each pattern with its own reference: (B, H, W) preprocessed references (e.g.
        remapped ones) and (B, H, W) raw patterns -> :class:`PeakResult` of shape (B, n).

        The B references are prepared as a temporary reference set and pattern b is matched
        with reference b, with this pipeline's preprocessing, ROIs and options, so the shifts
        are measured as :meth:`match` measures them; by :meth:`pairs_engine`.
        """
        xp = self.backend.xp
        B = len(patterns)
        engine, pairs = self._pair_references(references)
        index = np.arange(B, dtype=np.int32)
        patterns = xp.asarray(patterns)
        res = self._match(patterns, index, references=pairs, engine=engine)
        return self._flag(res, ~_has_data(patterns), xp)

    def _pair_references(self, references):
        """(engine, prepared): (B, H, W) preprocessed references, one a pattern, prepared as B
        reference sets of :meth:`pairs_engine`, which matches them."""
        engine = self.pairs_engine()
        refs = self.backend.xp.asarray(references)
        # The CPU's threads prepare parts, as they match parts of a batch: the references'
        # spectra were a third of a CPU remapping pass, on one thread (BENCHMARKS.md,
        # twenty-seventh session).
        parts = self._in_parts(lambda p: engine.prepare_references(*self._prepared_tiles(refs[p])), len(refs))
        return engine, parts[0] if len(parts) == 1 else PreparedReferences.joined(parts)

    def _in_parts(self, work, count):
        """``[work(part)]`` for slices ``part`` covering ``count`` items: one slice of all, or
        on the CPU's threads, parts of ``_sub_batch`` items in order."""
        step = self._sub_batch
        if self._pool is None or count <= step:
            return [work(slice(0, count))]
        return list(self._pool.map(lambda i: work(slice(i, i + step)), range(0, count, step)))

    def _prepared_tiles(self, images):
        """(tiles (K, n, h, w) float32, energy (K, n), status (K, n)): the ROIs of (K, H, W)
        preprocessed reference images, prepared as the patterns are. On the GPU by the tile
        kernel that prepares the patterns' ROIs, one launch: the array code it replaces made
        about ten passes over the tiles and waited for the device twice (H100, 256 remapped
        references of 86 ROIs of 96x96: 5.4 ms; BENCHMARKS.md, twenty-seventh session)."""
        xp = self.backend.xp
        if not self._fused:
            return prepare_tiles(extract_tiles(images, self.layout, xp), self.window, xp)
        from ..engines.gpu_ops import prepare_tiles_padded

        K, n = images.shape[0], self.layout.n
        tiles = xp.empty((K * n, *self.tile_shape), dtype=xp.float32)
        e, s = prepare_tiles_padded(images, self._origins, self.tile_shape, self.window, tiles)
        return tiles.reshape(K, n, *self.tile_shape), e.reshape(K, n), s.reshape(K, n)

    def pairs_engine(self):
        """The engine that matches each pattern with its own reference (:meth:`match_pairs`, a
        simulated reference each): the run's own, unless its engine is ``"auto"`` and the
        automatic choice for one pattern a reference set differs. The tensor engine matches
        such a batch as one launch of gathered pairs, the fused engine gathers each pattern's
        reference spectra (H100, 86 ROIs of 96x96 at +-16, 32 patterns: 1.25 ms against 0.44
        ms; BENCHMARKS.md, twenty-sixth session). Made on first use."""
        if self._pairs is None:
            corr = self.config.correlation
            self._pairs = self.engine
            if getattr(corr, "engine", "auto") == "auto" and self.backend.is_gpu:
                name = choose_engine(self._stage_backend, self.tile_shape, corr, n_tiles=self.layout.n, batch=1)
                if name != self.engine.info.name:
                    self._pairs = make_engine(name, self._stage_backend, self.tile_shape, corr,
                                              window_1d=self._window_1d, n_tiles=self.layout.n, batch=1)
        return self._pairs

    @property
    def rois_only(self) -> bool:
        """True when nothing before the ROI cut needs the whole pattern, so that only the ROIs'
        pixels need to reach the device (:meth:`transfer_plan`)."""
        pp = self.preprocessor
        return (pp.is_identity and pp.halo_rows == 0 and self.refiner is None and self.simulated is None)

    def transfer_plan(self, pattern_shape, itemsize):
        """The :class:`~ebsdxc.run.transfer.TransferPlan` that sends only the ROIs of (H, W)
        patterns of ``itemsize`` bytes per pixel to the device, or None: whole patterns travel
        (a pipeline that needs them, the CPU, or no crop that copies fast enough)."""
        if not self._fused or not self.rois_only:
            return None
        return plan_transfer(self.layout, pattern_shape, itemsize=itemsize)

    def _device_origins(self, layout):
        if self._transfer_origins is None or self._transfer_origins[0] is not layout:
            self._transfer_origins = (layout, self.backend.xp.asarray(layout.origins, dtype=self.backend.xp.int32))
        return self._transfer_origins[1]

    def streams(self):
        """The (compute, copy-back, transfer) CUDA streams of this pipeline, made on first use.

        Made once, not per streaming call: CuPy's memory pool keeps freed blocks per stream,
        so a fresh stream for each call (a Dask worker makes one call per task) strands the
        blocks cached for the old ones. The device then fills with unusable cache,
        allocations fall back to freeing it all, and tasks grew from 0.08 s to 2.7 s.
        """
        if self._streams is None:
            cp = self.backend.xp
            self._streams = tuple(cp.cuda.Stream(non_blocking=True) for _ in range(3))
        return self._streams

    def release_memory(self):
        """Give back what the device keeps between batches: the padded tile buffer, the
        engine's own buffers, cuFFT plans and their work areas, the memory pool's unused blocks
        (after a batch ran out of memory, before smaller ones). The prepared references stay;
        nothing on the CPU (NumPy frees arrays as they go)."""
        if not self.backend.is_gpu:
            return
        cp = self.backend.xp
        with self.backend.use():
            cp.cuda.Device().synchronize()  # a failed batch may have queued work on the blocks
            if self._fused:
                from ..engines.gpu_ops import PaddedTileBuffer

                self._frames = PaddedTileBuffer(self.engine.input_shape)
                self._pairs_frames = None
            self.engine.release_memory()
            if self._pairs is not None and self._pairs is not self.engine:
                self._pairs.release_memory()
            cp.fft.config.get_plan_cache().clear()
            cp.get_default_memory_pool().free_all_blocks()

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def bytes_per_pattern(self) -> int:
        """Rough device working memory per pattern in a batch."""
        h, w = self.reference_set.pattern_shape
        extra = 0
        if self.refiner is not None or self.simulated is not None:
            # whole patterns: float64 spline coefficients and their filter's temporaries, a simulated
            # reference and its processing (measured on an H100: at this size the whole run is
            # 3x faster than with a batch sized for the correlation alone)
            extra = 4 * h * w * 8
        refs = self.reference_set  # gathered references: as _patterns_per_set tells several sets apart
        own = self.engine.device_bytes_per_tile(own_references=refs.index is not None and refs.count > 1)
        if own is not None:
            # An engine that says what it takes (the tensor engine's 96x96 tiles at +-16: 29 kB,
            # where the FFT estimate below says 556 kB) gets batches that large, whose fixed
            # costs on the host (results written, kernels launched: about 3 ms a batch) the
            # device then hides (H100, paper layout at +-16: 57k-89k -> 122k-142k patterns/s end
            # to end, BENCHMARKS.md). Whole patterns count too: the readers' three device
            # buffers and a float32 copy, as a bound.
            tiles = 0 if self.engine.reads_rois else int(np.prod(self.engine.input_shape)) * 4
            return self.layout.n * (own + tiles) + 4 * h * w * 4 + extra
        ny, nx = getattr(self.engine, "fft_shape", fft_shape(self.tile_shape, self.engine.max_lag, "full"))
        per_tile = ny * nx * 4 + ny * (nx // 2 + 1) * 8 * 2 + self.tile_shape[0] * self.tile_shape[1] * 12
        if self.config.correlation.subpixel == "upsampled":
            per_tile += ny * (nx // 2 + 1) * 8
        return self.layout.n * per_tile + extra


def _patterns_per_set(references: ReferenceSet, batch: int | None) -> int | None:
    """Patterns of one batch that share a reference set, on average over the scan's batches of
    ``batch`` points; ``batch`` itself with one set. ``batch`` None: 256, the automatic
    choice's own guess, low where batches are larger, so that the choice errs towards the
    engines whose speed does not depend on it.

    With several sets this, not the batch, is what the automatic engine choice must weigh:
    the engines that correlate pairings (tensor, direct) match a batch set by set, or as
    pairs, so each launch gets this many patterns; the FFT engines gather each pattern's
    reference spectra and do not care. Tensor engine, 86 ROIs of 96x96 at +-16, 2048
    patterns, H100: 179k patterns/s with one set, 49k with 64 (32 patterns a set), 12k with
    256, where the fused engine keeps 100k (BENCHMARKS.md, twenty-fifth session)."""
    index = references.index
    if index is None or references.count == 1 or not index.size:
        return batch
    batch = int(batch or 256)
    launches = sum(len(np.unique(index[s:s + batch])) for s in range(0, index.size, batch))
    return max(1, round(index.size / launches))


def _has_data(patterns):
    """(B,) bool: which of (B, ...) patterns hold any non-zero value (an all-zero pattern is a
    vendor's placeholder for a point it did not record)."""
    flat = patterns.reshape(patterns.shape[0], -1)
    if flat.dtype.kind == "u" and flat.shape[1]:  # one reduction, without a boolean copy of the batch
        return flat.max(axis=1) > 0
    return (flat != 0).any(axis=1)


def _rows(res: PeakResult, rows) -> PeakResult:
    """The rows ``rows`` of a result."""
    extra = None if res.extra is None else {k: v[rows] for k, v in res.extra.items()}
    return PeakResult(res.displacement[rows], res.peak_height[rows], res.status[rows], extra=extra)


def _assign(into: PeakResult, part: PeakResult, where) -> None:
    """Put ``part``'s rows at ``where`` of ``into`` (arrays of one module)."""
    into.displacement[where] = part.displacement
    into.peak_height[where] = part.peak_height
    into.status[where] = part.status
    for k, v in (part.extra or {}).items():
        into.extra[k][where] = v


def _flag_arrays(res: PeakResult, empty, outside, xp) -> PeakResult:
    """:meth:`Pipeline._flag` in array operations: the CPU's, and the GPU kernel's oracle."""
    status, disp, height = res.status, res.displacement, res.peak_height
    bad = empty[:, None]
    status = xp.where(bad, xp.asarray(np.uint8(st.MISSING_PATTERN)), status)
    if outside is not None:
        outside = xp.asarray(outside)[None, :]
        status = xp.where(outside & ~bad, xp.asarray(np.uint8(st.OUTSIDE_MASK)), status)
        bad = bad | outside
    nan = xp.float32(np.nan)
    return PeakResult(xp.where(bad[..., None], nan, disp), xp.where(bad, nan, height),
                      status.astype(xp.uint8, copy=False), extra=res.extra)
