"""GB/s of strided pinned-to-device copies (``TransferPlan.copy``: cudaMemcpy3DAsync of w x w
boxes, and of one w x 512 box) against a contiguous copy of the whole batch: the measurements
behind ``ebsdxc.run.transfer.copy_efficiency``.

Usage::

    python benchmarks/strided_copy.py
"""
import time

import cupy as cp
import cupyx
import numpy as np

from ebsdxc.rois import RoiLayout
from ebsdxc.run.transfer import TransferPlan

B, H, W = 256, 512, 512
host = cupyx.empty_pinned((B, H, W), dtype=np.uint16)
host[...] = 3
s = cp.cuda.Stream(non_blocking=True)

def rate(fn, nbytes, reps=10):
    fn()
    s.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    s.synchronize()
    return reps * nbytes / (time.perf_counter() - t) / 1e9

dev = cp.empty((B, H, W), np.uint16)
print(f"whole batch {B}x{H}x{W} uint16: {rate(lambda: dev.set(host, stream=s), host.nbytes):.1f} GB/s")
for w in (32, 64, 128, 256, 512):
    n = max(1, min(16, (H * W) // (w * w) // 2))
    xs = (np.arange(n) * 37) % (W - w + 1)
    ys = (np.arange(n) * 53) % (H - w + 1)
    lay = RoiLayout(np.column_stack([xs + (w - 1) / 2, ys + (w - 1) / 2]), (w, w))
    boxes = np.column_stack([lay.origins, np.full(n, w), np.full(n, w)])
    targets = np.column_stack([np.zeros(n), np.arange(n) * w]).astype(np.int64)
    plan = TransferPlan(boxes, targets, (n * w, w), lay)
    d2 = cp.empty((B, n * w, w), np.uint16)
    nbytes = B * n * w * w * 2
    r = rate(lambda plan=plan, d2=d2: plan.copy(host, d2, s), nbytes)
    print(f"{n} boxes of {w}x{w} ({w*2} B rows): {r:.1f} GB/s")
    box = TransferPlan(np.array([[0, 0, w, H]]), np.zeros((1, 2), np.int64), (H, w), lay)
    d3 = cp.empty((B, H, w), np.uint16)
    r = rate(lambda box=box, d3=d3: box.copy(host, d3, s), B * H * w * 2)
    print(f"  one box {w}x{H}: {r:.1f} GB/s")
