"""The per-batch pipeline with the preprocessing HR-EBSD users set, and the preprocessor alone.

B uint16 patterns on the device (``ebsdxc.run.bench_pipeline.SyntheticScan``'s), a
recipe's ROIs and correlation, and for each preprocessing: none; a static background (the
batch's mean) subtracted or divided; the dynamic background (12 px, the shipped ``hrebsd``
recipe's); a Gaussian band-pass (1, 30) px; the three together; a round screen's mask with
the dynamic background. Printed: ``Pipeline.match`` per batch (preprocessing, tile pass,
correlation, peaks) and the preprocessor alone, the best of three rounds of ten calls between
CUDA events.

Usage::

    python benchmarks/preprocessing.py RECIPE SIZE BATCH
    python benchmarks/preprocessing.py pipelines/paper-86roi-96.toml 256 1024
    python benchmarks/preprocessing.py benchmarks/recipes/hrebsd-49roi-w24-dft.toml 512 512
"""

from __future__ import annotations

import os
import sys

import cupy as cp
import numpy as np
import tomllib

import ebsdxc
from ebsdxc.backend import select_backend
from ebsdxc.config import load_config
from ebsdxc.references import ReferenceSet
from ebsdxc.rois import layout_for
from ebsdxc.run.bench_pipeline import SyntheticScan
from ebsdxc.run.pipeline import Pipeline

sys.path.insert(0, os.path.dirname(__file__))
from common import cuda_time  # noqa: E402

VARIANTS = {
    "none": {},
    "static subtract": {"static_background": "mean"},
    "static divide": {"static_background": "mean", "static_operation": "divide"},
    "dynamic 12 px": {"dynamic_background_sigma": 12.0},
    "bandpass (1, 30) px": {"bandpass": [1.0, 30.0]},
    "divide + dynamic + bandpass": {"static_background": "mean", "static_operation": "divide",
                                    "dynamic_background_sigma": 12.0, "bandpass": [1.0, 30.0]},
    "circle mask + dynamic 12 px": {"mask": "circle", "dynamic_background_sigma": 12.0},
}


def timed(f):
    """Best of three rounds of ten calls, ms a call (CUDA events)."""
    return min(cuda_time(f, reps=10) for _ in range(3))


def main(recipe, size, batch):
    with open(recipe, "rb") as f:
        base = tomllib.load(f)
    be = select_backend("cuda")
    host = SyntheticScan(batch, (size, size)).read(0, batch)  # 16 shifted copies of one pattern, repeated
    bg = host.mean(axis=0).astype(np.float32)
    dev = cp.asarray(host)
    print(ebsdxc.__file__, be.name, recipe, size, batch, flush=True)
    for name, extra in VARIANTS.items():
        tables = {k: dict(v) for k, v in base.items()}
        tables.setdefault("preprocess", {}).update(extra)
        static = tables["preprocess"].pop("static_background", None)
        cfg, _ = load_config(None, tables)
        pipe = Pipeline(be, cfg, layout_for(cfg.roi, (size, size)), ReferenceSet.single(host[0]),
                        static_background=None if static is None else bg, batch=batch)
        ms = timed(lambda p=pipe: p.match(dev))
        pre = timed(lambda p=pipe: p.preprocessor(dev)) if not pipe.preprocessor.is_identity else 0.0
        finite = float(np.isfinite(cp.asnumpy(pipe.match(dev).displacement)).mean())
        print(f"{name:30s} engine {type(pipe.engine).__name__:14s} match {ms:8.3f} ms  {batch / ms * 1e3:9.0f} "
              f"patterns/s  preprocessor alone {pre:7.3f} ms  finite {finite:.3f}", flush=True)
        pipe.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
