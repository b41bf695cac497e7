"""What every engine that reads the ROIs of whole patterns (``reads_rois``: the fused and tensor
engines) refuses, in plain words naming the argument (GPU)."""

import numpy as np
import pytest

from ebsdxc.engines import ENGINES, EngineConfig


@pytest.mark.gpu
@pytest.mark.parametrize("name", [n for n, c in ENGINES.items() if c.reads_rois])
def test_match_rois_refuses_bad_arguments(rng, name):
    import cupy as cp
    from roi_patterns import with_reference

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import make_engine
    from ebsdxc.preprocess import window_1d

    tile = (16, 16)
    cfg = EngineConfig(mode="window", max_shift=4, subpixel="quadratic")
    eng = make_engine(name, select_backend("cuda"), tile, cfg, window_1d=(window_1d(16), window_1d(16)))
    pats, origins, window = with_reference(eng, rng, 2, 3, tile, np.uint16, side=40)
    dev = cp.asarray(pats)
    with pytest.raises(ValueError, match="patterns must be"):
        eng.match_rois(dev[0], origins, window)
    with pytest.raises(ValueError, match="origins must be"):
        eng.match_rois(dev, origins[:, :1], window)
    bad = origins.copy()
    bad[1] = (40 - 15, 0)
    with pytest.raises(ValueError, match="inside the 40x40"):
        eng.match_rois(dev, bad, window)
    with pytest.raises(ValueError, match="window must be"):
        eng.match_rois(dev, origins, window[:8])
    with pytest.raises(ValueError, match="give 3 ROIs"):
        eng.match_rois(dev, origins[:2], window)
