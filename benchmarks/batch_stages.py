"""Where one batch of a recipe's pipeline spends its device time: the whole ``Pipeline.match``,
the tile preparation and the engine, timed with CUDA events (the rest: empty-pattern check,
flags, launches). For an engine that reads the ROIs from the patterns itself (the fused one,
``match_rois``), also its two steps: the tiles' statistics and the engine on the patterns; the
pipeline then runs those instead of preparation + ``engine.match``.

Usage::

    python benchmarks/batch_stages.py benchmarks/recipes/hrebsd-49roi-w24-quadratic.toml 512 512
    (recipe, pattern side, batch)
"""
import os
import sys

import cupy as cp
import numpy as np

from ebsdxc.backend import select_backend
from ebsdxc.config import load_config
from ebsdxc.engines.gpu_ops import PaddedTileBuffer, prepare_tiles_padded, tile_statistics
from ebsdxc.references import ReferenceSet
from ebsdxc.rois import layout_for
from ebsdxc.run.bench_pipeline import SyntheticScan
from ebsdxc.run.pipeline import Pipeline

sys.path.insert(0, os.path.dirname(__file__))
from common import cuda_time  # noqa: E402

recipe, size, B = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = load_config(recipe)[0]
src = SyntheticScan(B, (size, size))
pats = np.empty((B, size, size), np.uint16)
src.read_into(0, B, pats)
be = select_backend("cuda")
lay = layout_for(cfg.roi, (size, size))
pipe = Pipeline(be, cfg, lay, ReferenceSet.single(pats[0]), batch=B)
dev = cp.asarray(pats)

def t(fn):
    return cuda_time(fn, reps=10)

n = lay.n
frames = PaddedTileBuffer(pipe.engine.input_shape).get(B * n)
origins = cp.asarray(lay.origins, dtype=cp.int32)
full = t(lambda: pipe.match(dev))
prep = t(lambda: prepare_tiles_padded(dev, origins, pipe.tile_shape, pipe.window, frames))
e, s = prepare_tiles_padded(dev, origins, pipe.tile_shape, pipe.window, frames)
eng = t(lambda: pipe.engine.match(frames.reshape(B, n, *frames.shape[1:]), e.reshape(B, n), s.reshape(B, n),
                                  references=pipe.references))
print(f"{recipe} {size}px B={B} engine={type(pipe.engine).__name__} frame={frames.shape[1:]}: "
      f"match {full:.2f} ms ({B/full*1e3:,.0f}/s), tile prep {prep:.2f} ms, engine.match {eng:.2f} ms, "
      f"prepared tiles + engine.match {prep + eng:.2f} ms ({B/(prep + eng)*1e3:,.0f}/s)")
if pipe.engine.reads_rois:
    stats = t(lambda: tile_statistics(dev, origins, pipe.tile_shape, pipe.window))
    rois = t(lambda: pipe.engine.match_rois(dev, origins, pipe.window, references=pipe.references))
    print(f"   from the patterns: tile statistics {stats:.2f} ms, engine.match_rois (with them) {rois:.2f} ms "
          f"({B/rois*1e3:,.0f}/s); the rest of match {full-rois:.2f} ms")
