"""Several references in one run: K = 3 scan points as references, each scan point assigned one
in a pattern, against three one-reference runs (the same points, the same results)."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest

from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
from ebsdxc.engines.base import EngineConfig
from ebsdxc.errors import InputError
from ebsdxc.hrebsd import StrainConfig
from ebsdxc.io.results import read_results
from ebsdxc.references import ReferenceSet
from ebsdxc.run import process

POINTS = [0, (4, 7), 93]
CASES = {
    "dft": ProcessConfig(roi=RoiConfig(grid=(3, 3), size=40)),
    "window-quadratic": ProcessConfig(roi=RoiConfig(grid=(3, 3), size=40),
                                      correlation=EngineConfig(mode="window", max_shift=12, subpixel="quadratic")),
}


def _pattern(rows, cols):
    """Each point's reference: stripes and a block, so neighbours in a batch differ."""
    r, c = np.mgrid[:rows, :cols]
    index = (r + 2 * c) % 3
    index[6:, :4] = 1
    return index.astype(np.int32)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_three_references_equal_three_single_runs(tmp_path, sample_dir, device, case):
    scan = os.path.join(sample_dir, "scan.h5")
    cfg, run = CASES[case], RunConfig(device=device, batch=7)
    index = _pattern(10, 10)
    got = read_results(process(scan, ref_index=POINTS, reference_index=index, config=cfg, run=run,
                               output=tmp_path / "k3.h5"))
    singles = [read_results(process(scan, ref_index=p, config=cfg, run=run, output=tmp_path / f"k1-{k}.h5"))
               for k, p in enumerate(POINTS)]
    for a, b in ((0, 1), (1, 2)):  # the references differ: a wrong pick cannot pass
        assert not np.allclose(singles[a]["displacement"], singles[b]["displacement"], equal_nan=True)
    expect = {name: np.choose(index[..., None, None] if got[name].ndim == 4 else index[..., None],
                              [s[name] for s in singles]) if got[name].ndim > 2 else None
              for name in ("displacement", "peak_height", "status")}
    if device == "cpu":  # the same arithmetic, point by point
        np.testing.assert_array_equal(got["status"], expect["status"])
        np.testing.assert_array_equal(got["displacement"], expect["displacement"])
        np.testing.assert_array_equal(got["peak_height"], expect["peak_height"])
    else:  # batches mix references on the device: same to float32 rounding
        np.testing.assert_array_equal(got["status"], expect["status"])
        np.testing.assert_allclose(got["displacement"], expect["displacement"], atol=2e-3, equal_nan=True)
        np.testing.assert_allclose(got["peak_height"], expect["peak_height"], atol=1e-5, equal_nan=True)
    assert got["done"].all() and got["attrs"]["complete"]
    # each reference point matches itself exactly
    for k, p in enumerate(POINTS):
        r, c = divmod(p, 10) if np.ndim(p) == 0 else p
        if index[r, c] == k:
            assert np.all(np.abs(got["displacement"][r, c]) < 1e-3)
    with h5py.File(tmp_path / "k3.h5", "r") as f:
        d = f["ebsdxc/point_reference"]
        np.testing.assert_array_equal(d[...], index)
        assert json.loads(d.attrs["references"]) == [{"point": 0}, {"point": [4, 7]}, {"point": 93}]
        params = json.loads(f["ebsdxc"].attrs["parameters"])
        assert params["reference_index"] == [0, [4, 7], 93]
    with h5py.File(tmp_path / "k1-0.h5", "r") as f:
        assert "point_reference" not in f["ebsdxc"]  # a one-reference file is as before


def test_resume_with_another_reference_map_is_refused(tmp_path, sample_dir):
    scan = os.path.join(sample_dir, "scan.h5")
    cfg, run = CASES["dft"], RunConfig(device="cpu")
    index = _pattern(10, 10)
    out = tmp_path / "k3.h5"
    process(scan, ref_index=POINTS, reference_index=index, config=cfg, run=run, output=out)
    with pytest.raises(InputError, match="reference_map"):
        process(scan, ref_index=POINTS, reference_index=index[::-1], config=cfg, run=run, output=out, resume=True)


def test_bad_reference_sets_are_plain_errors(tmp_path, sample_dir):
    scan = os.path.join(sample_dir, "scan.h5")
    cfg, run = CASES["dft"], RunConfig(device="cpu")
    with pytest.raises(InputError, match="index"):
        process(scan, ref_index=POINTS, config=cfg, run=run, output=tmp_path / "a.h5")
    with pytest.raises(InputError, match="covers 12 points"):
        process(scan, ref_index=POINTS, reference_index=np.zeros(12, int), config=cfg, run=run,
                output=tmp_path / "b.h5")
    with pytest.raises(InputError, match=r"0\.\.2"):
        process(scan, ref_index=POINTS, reference_index=np.full((10, 10), 3), config=cfg, run=run,
                output=tmp_path / "c.h5")
    with pytest.raises(InputError, match="strain against several references"):
        process(scan, ref_index=POINTS, reference_index=_pattern(10, 10), run=run, output=tmp_path / "d.h5",
                config=ProcessConfig(roi=RoiConfig(grid=(3, 3), size=40), strain=StrainConfig(material="Ni")))
    for name in "abcd":
        assert not (tmp_path / f"{name}.h5").exists()


def test_reference_set_rules():
    p = np.zeros((2, 8, 8), np.uint16)
    assert ReferenceSet(p).count == 2 and ReferenceSet(p).of(0, 5) is None
    rs = ReferenceSet(p, np.array([0, 1, 1, 0]), ({"point": 1}, {"point": 2}))
    np.testing.assert_array_equal(rs.of(1, 3), [1, 1])
    with pytest.raises(ValueError, match="index must lie in 0..1"):
        ReferenceSet(p, np.array([0, 2]))
    with pytest.raises(ValueError, match="labels"):
        ReferenceSet(p, None, ({},))
    assert ReferenceSet.single(np.ones((4, 4), ">u2")).patterns.dtype == np.dtype("=u2")
