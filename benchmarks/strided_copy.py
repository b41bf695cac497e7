"""GB/s of strided pinned-to-device copies (``TransferPlan.copy``: cudaMemcpy3DAsync of w x w
boxes, and of one w x 512 box) against a contiguous copy of the whole batch: the measurements
behind ``ebsdxc.run.transfer.copy_efficiency``. Each rate is
:func:`ebsdxc.run.bench_pipeline.transfer_rate`, the copy the run makes, in bytes.

Usage::

    python benchmarks/strided_copy.py
"""
import numpy as np

from ebsdxc.backend import select_backend
from ebsdxc.rois import RoiLayout
from ebsdxc.run.bench_pipeline import transfer_rate
from ebsdxc.run.transfer import TransferPlan

B, H, W = 256, 512, 512
be = select_backend("cuda")


def gbps(plan=None):
    pixels = H * W if plan is None else plan.pixels
    return transfer_rate(be, (H, W), np.uint16, B, plan=plan) * pixels * 2 / 1e9


print(f"whole batch {B}x{H}x{W} uint16: {gbps():.1f} GB/s")
for w in (32, 64, 128, 256, 512):
    n = max(1, min(16, (H * W) // (w * w) // 2))
    xs = (np.arange(n) * 37) % (W - w + 1)
    ys = (np.arange(n) * 53) % (H - w + 1)
    lay = RoiLayout(np.column_stack([xs + (w - 1) / 2, ys + (w - 1) / 2]), (w, w))
    boxes = np.column_stack([lay.origins, np.full(n, w), np.full(n, w)])
    targets = np.column_stack([np.zeros(n), np.arange(n) * w]).astype(np.int64)
    print(f"{n} boxes of {w}x{w} ({w*2} B rows): {gbps(TransferPlan(boxes, targets, (n * w, w), lay)):.1f} GB/s")
    box = TransferPlan(np.array([[0, 0, w, H]]), np.zeros((1, 2), np.int64), (H, w), lay)
    print(f"  one box {w}x{H}: {gbps(box):.1f} GB/s")
