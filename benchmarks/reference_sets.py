"""Window-mode engines with K reference sets (a reference per grain): time per batch against K.

B uint16 patterns of 256x256 on the device, the paper's 86 ROIs of 96x96, +-r, ``quadratic``;
``match_rois`` (engines without it: ``match`` on the batch's tiles, prepared beforehand) with
every pattern against set 0 (K = 1) and with each pattern's set drawn at random from K (the
worst mixing a batch of a polycrystal scan can have: grains cut into runs of points leave
fewer sets per batch). For each K the tensor engine's path (one launch, set by
set, or pairs of gathered lefts: :meth:`ebsdxc.engines.pairing.PairingEngine._launches`) and
the fused engine for comparison (its cost does not depend on K).

Usage::

    python benchmarks/reference_sets.py [--patterns 2048] [--max-shift 16] [--sets 1,4,16,64,256] [--fused-sets 256]
        [--engines tensor,fused] [--paths auto|auto,sets,pairs]

``--paths sets,pairs`` times the pairing engines' two paths for every K > 1 (set by set with
any number of patterns a set, and pairs of gathered lefts): where they cross is what
:data:`ebsdxc.engines.pairing.GROUP_MIN` should be.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import median_ms, paper_layout_patterns  # noqa: E402


def main(argv=None):
    import cupy as cp

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, make_engine
    from ebsdxc.engines.gpu_ops import PaddedTileBuffer, prepare_tiles_padded
    from ebsdxc.preprocess import window_1d, window_2d

    ap = argparse.ArgumentParser()
    ap.add_argument("--patterns", type=int, default=2048)
    ap.add_argument("--max-shift", type=int, default=16)
    ap.add_argument("--sets", default="1,4,16,64,256")
    ap.add_argument("--engines", default="tensor,fused")
    ap.add_argument("--fused-sets", type=int, default=256, help="most sets the fused engine is timed with")
    ap.add_argument("--paths", default="auto", help="auto, sets, pairs: the pairing engines' paths to time")
    a = ap.parse_args(argv)
    B, r = a.patterns, a.max_shift
    be = select_backend("cuda")
    h = w = 96
    rng = np.random.default_rng(1)
    pats, origins = paper_layout_patterns(B, rng)
    n = int(origins.shape[0])
    win = window_2d((h, w), xp=cp)
    sets = [int(k) for k in a.sets.split(",")]
    print(f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}: {B} uint16 patterns of 256x256, {n} ROIs "
          f"of 96x96, +-{r}, quadratic, match_rois, median of 10 (CUDA events)", flush=True)
    for engine in a.engines.split(","):
        cfg = EngineConfig(mode="window", max_shift=r, subpixel="quadratic")
        eng = make_engine(engine, be, (h, w), cfg, window_1d=(window_1d(h), window_1d(w)))
        ref = PaddedTileBuffer(eng.input_shape).get(n * max(sets))
        e = cp.empty(n * max(sets), cp.float32)
        s = cp.empty(n * max(sets), cp.uint8)
        for k in range(max(sets)):  # set k: the ROIs of pattern k % 16
            sl = slice(k * n, (k + 1) * n)
            e[sl], s[sl] = prepare_tiles_padded(pats[k % 16:k % 16 + 1], origins, (h, w), win, ref[sl])
        tiles = cp.ascontiguousarray(ref[:, :h, :w])
        scan = None
        if not hasattr(eng, "match_rois"):  # an engine that takes prepared tiles: the batch's, once
            buf = PaddedTileBuffer(eng.input_shape).get(n * B)
            se, ss = prepare_tiles_padded(pats, origins, (h, w), win, buf)
            scan = (buf.reshape(B, n, *eng.input_shape), se.reshape(B, n), ss.reshape(B, n))
        for K in sets:
            if K > a.fused_sets and engine == "fused":  # its references are spectra: 23 GB at 2048 sets
                continue
            refs = eng.prepare_references(tiles[:K * n].reshape(K, n, h, w), e[:K * n].reshape(K, n),
                                          s[:K * n].reshape(K, n))
            index = None if K == 1 else cp.asarray(rng.integers(0, K, B).astype(np.int32))
            for path in a.paths.split(",") if hasattr(eng, "_launches") and index is not None else ["auto"]:
                _time(eng, refs, index, pats, origins, win, B, K, n, (h, w), r, path, engine, scan)
            del refs
            cp.get_default_memory_pool().free_all_blocks()


def _time(eng, refs, index, pats, origins, win, B, K, n, tile, r, path, engine, scan):
    import cupy as cp

    from ebsdxc.engines.pairing import matched_set_by_set

    label = "one launch"
    if hasattr(eng, "_launches") and index is not None:
        eng.group_min = {"auto": type(eng).group_min, "sets": 1, "pairs": 1 << 30}[path]
        per_set = B // len(np.unique(cp.asnumpy(index)))
        grouped = matched_set_by_set(tile, (r, r), n, per_set, group_min=eng.group_min)
        if path == "sets" and not grouped:  # too little work a launch for GROUP_FMAS
            return
        label = f"set by set ({per_set} a set)" if grouped else "pairs of gathered lefts"
    if scan is None:
        ms = median_ms(lambda: eng.match_rois(pats, origins, win, references=refs, index=index), reps=10)
    else:
        ms = median_ms(lambda: eng.match(*scan, references=refs, index=index), reps=10)
    if hasattr(eng, "_launches"):
        eng.group_min = type(eng).group_min
    print(f"  {engine:6s} K = {K:4d}: {ms:8.3f} ms  {B / ms * 1e3:10,.0f} patterns/s  ({label})", flush=True)


if __name__ == "__main__":
    main()
