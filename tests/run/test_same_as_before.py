"""One reference is the case K = 1: results equal those of the runner before it was split.

``data/results_before_split.npz`` holds the results of commit 9bfc495 (``ebsdxc.runner``) on the
sample scan for five configurations (default dft, window + quadratic with a scan-point reference,
neighbour averaging + binning + detector mask, mean static background + upsampled, strain with
remapping). On the machine that made them the new run gives them bit for bit; across NumPy/SciPy
builds the FFTs round differently (NumPy 2.4.6 with SciPy 1.17.1 move dft and upsampled peaks by up
to 4.8e-5 px against the builds that made the file), hence the tolerance of 1e-4 px: a change of
the runner moves peaks by far more.
"""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from ebsdxc import status as st
from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
from ebsdxc.engines.base import EngineConfig
from ebsdxc.hrebsd import StrainConfig
from ebsdxc.preprocess import PreprocessConfig
from ebsdxc.run import process

BEFORE = os.path.join(os.path.dirname(__file__), "data", "results_before_split.npz")

CASES = {
    "dft": (ProcessConfig(roi=RoiConfig(grid=(4, 4), size=40)), 13, {"ref": "ref.tif"}),
    "quad_win": (ProcessConfig(roi=RoiConfig(grid=(3, 3), size=48),
                               correlation=EngineConfig(mode="window", max_shift=8, subpixel="quadratic")),
                 None, {"ref_index": (2, 3)}),
    "avg": (ProcessConfig(roi=RoiConfig(grid=(3, 3), size=32),
                          preprocess=PreprocessConfig(average_neighbours=3, binning=2, mask="circle")),
            20, {"ref_index": 5}),
    "ups_bg": (ProcessConfig(roi=RoiConfig(grid=(3, 3), size=32), preprocess=PreprocessConfig(static_background="mean"),
                             correlation=EngineConfig(subpixel="upsampled")), None, {"ref": "ref.tif"}),
    "strain": (ProcessConfig(roi=RoiConfig(layout="ring", n=12, size=40), strain=StrainConfig(material="Ni")),
               None, {"ref": "ref.tif"}),
}


@pytest.mark.filterwarnings("ignore:8 of 9 ROIs reach outside")
@pytest.mark.parametrize("case", sorted(CASES))
def test_results_as_before_the_split(tmp_path, sample_dir, case):
    cfg, batch, ref = CASES[case]
    ref = {k: os.path.join(sample_dir, v) if k == "ref" else v for k, v in ref.items()}
    out = process(os.path.join(sample_dir, "scan.h5"), config=cfg, run=RunConfig(device="cpu", batch=batch),
                  output=tmp_path / "r.h5", **ref)
    before = np.load(BEFORE)
    names = [k.split("/")[1] for k in before.files if k.startswith(case + "/")]
    assert {"displacement", "peak_height", "status"} <= set(names)
    with h5py.File(out, "r") as f:
        g = f["ebsdxc"]
        # Since issue 20 a subpixel fit that runs away from its integer peak is flagged
        # SUBPIXEL_FAILED instead of reported: the before-split runner reported 4 such matches
        # (ROI 5 of ups_bg, about 3 px where its other points sit near 0); and a fit of a barely
        # concave compensated peak more than 0.5 px from its integer peak (peaks.barely_concave):
        # 8 more of ups_bg (0.5 to 0.95 px off; this set-up is 0.8 px off the truth at the median
        # anyway). Those, and only those, differ.
        flagged = g["status"][...] == st.SUBPIXEL_FAILED
        assert flagged.sum() <= (12 if case == "ups_bg" else 0)
        assert (before[f"{case}/status"][flagged] == st.OK).all()
        for name in names:
            old, new = before[f"{case}/{name}"], g[name][...]
            if name in ("displacement", "peak_height", "status"):
                keep = ~flagged if name != "displacement" else ~flagged[..., None].repeat(2, -1)
                old, new = old[keep], new[keep]
            if old.dtype.kind == "f":
                # strain's second pass correlates against references remapped by the first
                # pass's rotations, ups_bg subtracts a mean over the scan before it: the builds'
                # rounding passes through twice (1.8e-4 px at most with NumPy 2.4.6, SciPy 1.17.1)
                tol = 5e-4 if case in ("strain", "ups_bg") and name == "displacement" else 1e-4
                np.testing.assert_allclose(new, old, rtol=0, atol=tol, equal_nan=True, err_msg=name)
            else:
                np.testing.assert_array_equal(new, old, err_msg=name)
    assert np.isfinite(before[f"{case}/displacement"]).any()
