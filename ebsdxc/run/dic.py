"""DIC mode of the run (``--mode dic``): frames against a reference image, subsets on a grid.

The frames are the scan's patterns (a folder, glob or multi-page TIFF, an HDF5 dataset: any
source :func:`ebsdxc.io.open_scan` reads) and the subsets its ROIs, so the planning, streaming,
task, executor and results-file machinery of ``process`` runs unchanged: a frame is a scan
point, done when all its subsets are. :class:`DicPipeline` is the per-batch stage
(:func:`ebsdxc.dic.match_subsets` per frame); after the frames, the strain pass fits the
displacement gradient (:mod:`ebsdxc.dic_strain`) and writes ``/ebsdxc/dic/strain``.

Frames with a side longer than ``dic.tile`` are never read whole: the pipeline says
``reads_frames``, the streaming hands it the frames' indices only, and :mod:`ebsdxc.dic_tiles`
reads windows of the frame (and of frame t - 1 in incremental mode) through the source's
``read_window``; the reference stays raw in host memory.

Incremental mode (``dic.incremental``): frame t is correlated against frame t - 1 (frame 0
against the reference) on the same grid of image points, each frame independently (in any
order, on any worker: it reads frame t - 1 again where it is not in its batch), and the run
datasets hold these increments (``/ebsdxc/dic/increment``). A sequential pass afterwards
accumulates them (:func:`accumulate_increments`): ``u_t(X) = u_{t-1}(X) + du_t(X + u_{t-1}(X))``,
``du_t`` read between grid points by bilinear interpolation (exact for increments that are
affine over a grid cell); a point whose path meets an invalid increment, or leaves the grid,
is NaN with that increment's status (``OUTSIDE_MASK`` off the grid). Only then is
``/ebsdxc/dic/displacement`` written and ``displacement_complete`` set.
"""

from __future__ import annotations

import os

import numpy as np

from .. import dic as dic_stage
from .. import dic_tiles
from .. import status as st
from ..backend import Backend
from ..engines import PeakResult
from ..errors import InputError
from ..preprocess import PatternPreprocessor
from ..references import ReferenceSet
from ..rois import RoiLayout

__all__ = ["DicPipeline", "dic_layout", "dic_strain_pass", "dic_accumulate_pass", "accumulate_increments",
           "load_distortion", "point_datasets", "measured_region"]


def _read_mask(path, shape):
    """A mask image (TIFF or PNG, any bit depth, grey or colour) as (H, W) bool: nonzero = measure."""
    import tifffile
    from PIL import Image, UnidentifiedImageError

    from ..io.image import is_tiff_file

    if not os.path.isfile(path):
        raise InputError("the DIC mask file is not there", path)
    try:
        if is_tiff_file(path):
            m = np.asarray(tifffile.imread(path))
        else:
            with Image.open(path) as im:
                m = np.asarray(im.convert("L") if im.mode not in ("L", "I", "I;16", "F", "1") else im)
    except (OSError, ValueError, UnidentifiedImageError) as e:
        raise InputError(f"cannot read the DIC mask ({e})", path) from None
    if m.ndim == 3 and m.shape[-1] in (3, 4):
        m = m[..., :3].max(axis=-1)  # a colour drawing: any channel
    if m.shape != tuple(shape):
        dims = f"{m.shape[1]}x{m.shape[0]} px" if m.ndim == 2 else f"of shape {m.shape}"
        raise InputError(f"the DIC mask is {dims}; the reference is {shape[1]}x{shape[0]} px", path)
    return m != 0


def measured_region(config, shape):
    """(H, W) bool: the pixels a DIC run measures (``dic.mask`` and ``dic.polygon``), or None."""
    c = config.dic
    region = None
    if c.mask is not None:
        region = _read_mask(c.mask, shape)
    if c.polygon is not None:
        poly = dic_stage.polygon_mask(shape, c.polygon)
        region = poly if region is None else region & poly
    if region is not None and not region.any():
        raise InputError("the DIC mask and polygon leave no pixel to measure")
    return region


def dic_layout(config, shape):
    """The subsets of a DIC run as an ROI layout (row-major over the point grid) and the grid
    ``points`` (ny, nx, 2)."""
    c = config.dic
    region = measured_region(config, shape)
    try:
        points, inside = dic_stage.subset_grid(shape, subset=c.subset, step=c.step, mask=region)
    except ValueError as e:
        raise InputError(str(e)) from None
    if not inside.any():
        raise InputError(f"no subset of {c.subset} px lies wholly inside the DIC mask/polygon")
    return RoiLayout(points.reshape(-1, 2), (c.subset, c.subset)), points


class DicPipeline:
    """Frames -> subset displacements against one resident reference image.

    The interface :func:`ebsdxc.run.streaming.stream_chunks` and
    :func:`ebsdxc.run.tasks.run_task` use (``match``, ``streams``, ``transfer_plan``,
    ``release_memory``, ``close``, ``bytes_per_pattern``), as :class:`~ebsdxc.run.pipeline.Pipeline` has it.
    """

    simulated = None
    refiner = None
    flat_index = True  # match() takes the frames' flat indices (incremental mode reads frame t - 1)
    frames = None  # the scan source, set by the task that runs the pipeline (incremental mode)

    class engine:  # noqa: N801 - what the results file's 'engine' attribute names
        name = "dic: whole-image and subset cross-correlation start, subset IC-GN"

    def __init__(self, backend: Backend, config, layout: RoiLayout, references, *, static_background=None,
                 batch=None, simulated=None):
        if not isinstance(references, ReferenceSet):
            references = ReferenceSet.single(np.asarray(references))
        if references.count != 1:
            raise InputError("DIC correlates every frame with one reference image")
        self.backend = backend
        self.config = config
        self.layout = layout
        self.reference_set = references
        xp = backend.xp
        self.preprocessor = PatternPreprocessor(config.preprocess, backend, static_background=static_background)
        if self.preprocessor.halo_rows:
            raise InputError("DIC does not average neighbouring frames (preprocess.average_neighbours)")
        shape = self.preprocessor.output_shape(references.pattern_shape)
        # A frame larger than a tile is never read whole: the frames' source hands windows
        # to dic_tiles (the streaming reads nothing), the reference stays raw on the host.
        self.reads_frames = 0 < config.dic.tile < max(shape)
        if self.reads_frames:
            if not self.preprocessor.is_identity:
                raise InputError(f"frames larger than dic.tile ({config.dic.tile} px) are read window by window; "
                                 "preprocessing applies to whole images: turn it off, or raise dic.tile")
            self.reference = None
            self.reference_raw = np.asarray(references.patterns[0])
        else:
            self.reference = self.preprocessor(xp.asarray(references.patterns))[0]
        self.points = layout.centres
        self.shape = shape
        grid, inside = dic_stage.subset_grid(shape, subset=config.dic.subset, step=config.dic.step,
                                             mask=measured_region(config, shape))
        self.grid = grid
        self.grid_shape = grid.shape[:2]
        self.valid = inside.reshape(-1)
        self._streams = None

    @property
    def reference_image(self):
        return self.reference

    def _prepare(self, window):
        return self.preprocessor(self.backend.xp.asarray(window)[None])[0]

    def _match_tiled(self, index):
        """Frames ``index`` (flat), each read window by window from :attr:`frames`."""
        present = None if self.frames.present is None else self.frames.present.reshape(-1)
        out = []
        for f in np.asarray(index, dtype=np.int64).reshape(-1):
            if present is not None and not present[f]:
                out.append(None)
                continue

            def read_frame(rows, cols, f=int(f)):
                return self.frames.read_window(f, rows, cols)

            if self.config.dic.incremental and f > 0:
                if present is not None and not present[f - 1]:
                    out.append(None)  # the frame before is missing: no increment to measure
                    continue

                def read_ref(rows, cols, f=int(f)):
                    return self.frames.read_window(f - 1, rows, cols)
            else:
                def read_ref(rows, cols):
                    return self.reference_raw[rows[0]:rows[1], cols[0]:cols[1]]
            out.append(dic_tiles.match_tiled(read_ref, read_frame, self.shape, self.grid, config=self.config.dic,
                                             valid=self.valid, prepare=self._prepare))
        return self._peak_result(out)

    def _peak_result(self, matches) -> PeakResult:
        """:class:`PeakResult` (B, n_subsets) on the backend of B frames' :class:`SubsetMatch`
        (None: no frame, or no frame before it in incremental mode: ``MISSING_PATTERN``)."""
        xp = self.backend.xp
        B, n = len(matches), self.layout.n
        disp = np.full((B, n, 2), np.nan, np.float32)
        zncc = np.full((B, n), np.nan, np.float32)
        status = np.full((B, n), st.MISSING_PATTERN, np.uint8)
        iterations = np.full((B, n), -1, np.int16)
        for b, m in enumerate(matches):
            if m is not None:
                disp[b], zncc[b], status[b], iterations[b] = m.displacement, m.zncc, m.status, m.iterations
        return PeakResult(xp.asarray(disp), xp.asarray(zncc), xp.asarray(status),
                          extra={"dic/subset_iterations": xp.asarray(iterations)})

    def match(self, patterns, *, index=None, crop=None, cols=None, present=None) -> PeakResult:
        """(B, H, W) raw frames -> :class:`PeakResult` (B, n_subsets) on the backend. With
        :attr:`reads_frames` (frames larger than a tile) ``patterns`` is None and the frames
        ``index`` are read window by window."""
        if self.reads_frames:
            if index is None or self.frames is None:
                raise RuntimeError("tiled DIC needs the frames' flat indices and the source")
            return self._match_tiled(index)
        xp = self.backend.xp
        frames = xp.asarray(patterns)
        B = frames.shape[0]
        out = [None] * B
        x = self.preprocessor(frames)
        flat = None if index is None else np.asarray(index, dtype=np.int64).reshape(-1)
        incremental = self.config.dic.incremental
        if incremental and (flat is None or self.frames is None):
            raise RuntimeError("incremental DIC needs the frames' flat indices and the source")
        for b in range(B):
            if not bool((frames[b] != 0).any()):
                continue  # no frame: a placeholder of zeros
            ref = self.reference
            if incremental and flat[b] > 0:
                if b > 0 and flat[b - 1] == flat[b] - 1:
                    if not bool((frames[b - 1] != 0).any()):
                        continue  # the frame before is missing: no increment to measure
                    ref = x[b - 1]
                else:
                    prev = xp.asarray(self.frames.read(int(flat[b]) - 1, int(flat[b])))
                    if not bool((prev != 0).any()):
                        continue
                    ref = self.preprocessor(prev)[0]
            out[b] = dic_stage.match_subsets(ref, x[b], self.points, config=self.config.dic, valid=self.valid,
                                             grid_shape=self.grid_shape)
        return self._peak_result(out)

    def streams(self):
        if self._streams is None:
            cp = self.backend.xp
            self._streams = tuple(cp.cuda.Stream(non_blocking=True) for _ in range(3))
        return self._streams

    def transfer_plan(self, pattern_shape, itemsize):
        """None: whole images travel (subsets cover most of an image, and the deformed subsets
        of IC-GN reach beyond them)."""
        return None

    def release_memory(self):
        if not self.backend.is_gpu:
            return
        cp = self.backend.xp
        with self.backend.use():
            cp.cuda.Device().synchronize()
            cp.fft.config.get_plan_cache().clear()
            cp.get_default_memory_pool().free_all_blocks()

    def close(self):
        pass

    def bytes_per_pattern(self) -> int:
        """Device memory per frame in a batch: the frame, its spline coefficients and filter
        temporaries (whole images), the subsets' templates and search windows are batched
        inside a frame."""
        h, w = self.reference_set.pattern_shape
        if self.reads_frames:  # windows of a tile, not frames, are in memory
            h = w = self.config.dic.tile + 2 * (self.config.dic.tile_margin + self.config.dic.subset)
        return int(h * w * 8 * 6)


def point_datasets(n_points: int) -> dict:
    """Per-frame datasets a DIC run adds (as :data:`ebsdxc.refine.POINT_DATASETS`)."""
    return {"dic/subset_iterations": ((n_points,), np.int16, -1,
                                      "IC-GN iterations of each subset (-1: not refined), row-major over the grid")}


def accumulate_increments(increments, status, points):
    """Total displacements (n_frames, ny, nx, 2) and statuses from per-frame increments on a
    fixed grid (module docstring): frame t's increment is read at each point's position in
    frame t - 1 by bilinear interpolation of the grid; NaN (with a status) where that needs an
    invalid increment or leaves the grid."""
    inc = np.asarray(increments, dtype=np.float64)
    stat = np.asarray(status)
    pts = np.asarray(points, dtype=np.float64)
    n, ny, nx = inc.shape[:3]
    x0, y0 = pts[0, 0]
    hx = pts[0, 1, 0] - x0 if nx > 1 else 1.0
    hy = pts[1, 0, 1] - y0 if ny > 1 else 1.0
    total = np.full(inc.shape, np.nan)
    out_status = np.full(stat.shape, st.OUTSIDE_MASK, np.uint8)
    pos = pts.copy()
    alive = np.ones((ny, nx), bool)
    for t in range(n):
        # grid coordinates of every point's position in frame t - 1
        gx, gy = (pos[..., 0] - x0) / hx, (pos[..., 1] - y0) / hy
        on = alive & np.isfinite(gx) & np.isfinite(gy) & (gx >= 0) & (gx <= nx - 1) & (gy >= 0) & (gy <= ny - 1)
        ix = np.clip(np.floor(np.where(on, gx, 0)).astype(np.int64), 0, max(nx - 2, 0))
        iy = np.clip(np.floor(np.where(on, gy, 0)).astype(np.int64), 0, max(ny - 2, 0))
        fx, fy = np.where(on, gx, 0) - ix, np.where(on, gy, 0) - iy
        ix1, iy1 = np.minimum(ix + 1, nx - 1), np.minimum(iy + 1, ny - 1)
        corners = [(iy, ix, (1 - fy) * (1 - fx)), (iy, ix1, (1 - fy) * fx), (iy1, ix, fy * (1 - fx)),
                   (iy1, ix1, fy * fx)]
        d = np.zeros((ny, nx, 2))
        bad = np.zeros((ny, nx), np.uint8)
        for r, c, wgt in corners:
            used = wgt > 0
            s = stat[t][r, c]
            d += np.where(used[..., None], inc[t][r, c] * wgt[..., None], 0.0)
            bad = np.where(used & (s != st.OK) & (bad == 0), s, bad)
        good = on & (bad == 0)
        here = np.where(good, st.OK, np.where(on, bad, st.OUTSIDE_MASK))
        out_status[t] = np.where(alive, here, out_status[t - 1]) if t else here  # a lost point keeps its cause
        pos = np.where(good[..., None], pos + d, np.nan)
        alive = good
        total[t] = np.where(good[..., None], pos - pts, np.nan)
    return total, out_status


def load_distortion(config, shape, n_frames):
    """The SEM distortion model of a DIC run (``dic.distortion``), checked against the run: the
    image size it was calibrated on, frame times where it has drift. None without one."""
    from ..sem_distortion import DistortionModel

    c = config.dic
    if c.distortion is None:
        return None
    path = os.fspath(c.distortion)
    if not os.path.isfile(path):
        raise InputError("the distortion model file is not there", path)
    try:
        with open(path) as f:
            model = DistortionModel.from_json(f.read())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"cannot read the distortion model ({e})", path) from None
    if tuple(model.shape) != tuple(int(v) for v in shape):
        raise InputError(f"the distortion model was calibrated on {model.shape[1]}x{model.shape[0]} px images; "
                         f"the frames are {shape[1]}x{shape[0]} px", path)
    if model.drift_degree and (c.frame_times is None or len(c.frame_times) != n_frames):
        got = "none" if c.frame_times is None else f"{len(c.frame_times)}"
        raise InputError(f"the distortion model has drift: give the start time of each of the {n_frames} frames "
                         f"(dic.frame_times, --frame-times; got {got})", path)
    return model


def dic_accumulate_pass(out, config, points, shape) -> dict:
    """The contract's displacement of a run whose fields are made after the frames: the
    increments accumulated (incremental mode), then the SEM distortion removed (``dic.distortion``);
    written to ``/ebsdxc/dic/displacement`` and ``status``, the model to ``dic/distortion``."""
    import h5py

    from ..io.results import write_dic_displacement

    c = config.dic
    with h5py.File(out, "r") as f:
        d = f["ebsdxc/dic"]
        raw = "increment" if c.incremental else "measured"
        disp, stat = d[raw][()].astype(np.float64), d[f"{raw}_status"][()]
    attrs = {"frames": int(disp.shape[0])}
    if c.incremental:
        disp, stat = accumulate_increments(disp, stat, points)
        attrs["accumulation"] = "u_t(X) = u_(t-1)(X) + du_t(X + u_(t-1)(X)), du_t bilinear between grid points"
    model = load_distortion(config, shape, disp.shape[0])
    if model is not None:
        disp = model.correct(points, disp, frame_starts=c.frame_times, reference_start=c.reference_time)
        attrs["distortion"] = ("u - P(X + u) + P(X) with P the true position of an image position (spatial "
                               "distortion), minus the drift between the two pixels' acquisition times")
        stat = np.where(np.isfinite(disp).all(axis=-1) | (stat != st.OK), stat, st.OUTSIDE_MASK).astype(np.uint8)
    disp = np.where((stat == st.OK)[..., None], disp, np.nan)
    write_dic_displacement(out, disp, stat, attrs=attrs, distortion=None if model is None else model.to_dict())
    return attrs


def dic_strain_pass(out, config, points) -> dict:
    """Fit the displacement gradient of every frame and write the Green-Lagrange strain."""
    import h5py

    from .. import dic_strain
    from ..io.results import write_dic_strain

    c = config.dic
    with h5py.File(out, "r") as f:
        d = f["ebsdxc/dic/displacement"][()].astype(np.float64)
    grad = dic_strain.fit_gradients(d, step=c.step, window=c.strain_window)
    strain = dic_strain.green_lagrange(grad)
    attrs = {"method": "least-squares plane of u and v over a window of strain_window x strain_window points, "
                       "then E = (F^T F - I) / 2 with F = I + grad u",
             "strain_window": c.strain_window, "step": c.step, "subset": c.subset,
             "gauge_length_px": float(dic_strain.gauge_length(c.step, c.strain_window, c.subset))}
    write_dic_strain(out, strain, attrs=attrs)
    return attrs

