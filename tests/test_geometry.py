"""Tests of ebsdxc.geometry: PC conventions and detector geometry against kikuchipy."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from ebsdxc import geometry as geo

SHAPES = [(80, 80), (60, 80), (80, 60)]
CONVENTIONS = ["bruker", "tsl", "oxford", "emsoft", "emsoft4"]
PIXEL_SIZE = 59.2


def bruker_pcs(n=5, seed=0):
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.uniform(0.3, 0.7, n), rng.uniform(0.2, 0.5, n),
                            rng.uniform(0.45, 0.75, n)])


def kp_detector(shape, pc, *, binning=1, convention="bruker", sample_tilt=70.0, tilt=0.0):
    kp = pytest.importorskip("kikuchipy")
    return kp.detectors.EBSDDetector(shape=shape, pc=pc, px_size=PIXEL_SIZE, binning=binning,
                                     convention=convention, sample_tilt=sample_tilt, tilt=tilt)


def kp_pc_as(det, convention):
    return {"bruker": det.pc_bruker, "tsl": det.pc_tsl, "oxford": det.pc_oxford,
            "emsoft": lambda: det.pc_emsoft(5), "emsoft4": lambda: det.pc_emsoft(4)}[convention]()


# --------------------------------------------------------------------------- PC conventions


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("binning", [1, 2])
@pytest.mark.parametrize("convention", CONVENTIONS)
def test_convert_pc_matches_kikuchipy(shape, binning, convention):
    pc = bruker_pcs()
    kw = {"shape": shape, "pixel_size": PIXEL_SIZE, "binning": binning}
    theirs = kp_pc_as(kp_detector(shape, pc, binning=binning), convention)
    ours = geo.convert_pc(pc, from_convention="bruker", to_convention=convention, **kw)
    np.testing.assert_allclose(ours, theirs, rtol=1e-13, atol=1e-13)
    # and back: kikuchipy's EBSDDetector(pc, convention=...) stores Bruker PCs
    back = kp_detector(shape, theirs, binning=binning, convention=convention).pc
    ours_back = geo.convert_pc(theirs, from_convention=convention, to_convention="bruker", **kw)
    np.testing.assert_allclose(ours_back, back, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(ours_back, pc, rtol=1e-12, atol=1e-12)


def test_conversions_differ_where_they_should():
    # a non-square detector separates TSL (min(H, W)) from Oxford (W); EMsoft 4 from 5 by xpc
    pc = np.array([0.4, 0.2, 0.6])
    kw = {"from_convention": "bruker", "shape": (60, 80), "pixel_size": PIXEL_SIZE, "binning": 8}
    np.testing.assert_allclose(geo.convert_pc(pc, to_convention="tsl", **kw), [0.4, 0.8, 0.6])
    np.testing.assert_allclose(geo.convert_pc(pc, to_convention="oxford", **kw),
                               [0.4, 0.6, 0.45])
    # kikuchipy's documented example (pc_emsoft docstring)
    np.testing.assert_allclose(geo.convert_pc(pc, to_convention="emsoft", **kw),
                               [64.0, 144.0, 17049.6])
    np.testing.assert_allclose(geo.convert_pc(pc, to_convention="emsoft4", **kw),
                               [-64.0, 144.0, 17049.6])
    tall = geo.convert_pc(pc, to_convention="tsl", **{**kw, "shape": (80, 60)})
    np.testing.assert_allclose(tall, [0.4, 0.8, 0.6 * 80 / 60])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("binning", [1, 2])
def test_convert_pc_round_trips(shape, binning):
    pc = bruker_pcs(12).reshape(3, 4, 3)
    kw = {"shape": shape, "pixel_size": PIXEL_SIZE, "binning": binning}
    for a, b in itertools.permutations(CONVENTIONS, 2):
        pa = geo.convert_pc(pc, from_convention="bruker", to_convention=a, **kw)
        pb = geo.convert_pc(pa, from_convention=a, to_convention=b, **kw)
        np.testing.assert_allclose(geo.convert_pc(pb, from_convention=b, to_convention=a, **kw),
                                   pa, rtol=1e-12, atol=1e-12)
        assert pb.shape == pc.shape and pb.dtype == np.float64


def test_convention_aliases_and_errors():
    pc = bruker_pcs(3)
    kw = {"from_convention": "bruker", "shape": (60, 80), "pixel_size": PIXEL_SIZE}
    tsl = geo.convert_pc(pc, to_convention="tsl", **kw)
    for alias in ("EDAX", "amatek", "Tsl"):
        np.testing.assert_array_equal(geo.convert_pc(pc, to_convention=alias, **kw), tsl)
    np.testing.assert_array_equal(geo.convert_pc(pc, to_convention="AZtec", **kw),
                                  geo.convert_pc(pc, to_convention="oxford", **kw))
    np.testing.assert_array_equal(geo.convert_pc(pc, to_convention="emsoft5", **kw),
                                  geo.convert_pc(pc, to_convention="emsoft", **kw))
    with pytest.raises(ValueError, match="pixel_size"):
        geo.convert_pc(pc, from_convention="emsoft", to_convention="bruker", shape=(60, 80))
    with pytest.raises(ValueError, match="unknown PC convention 'hkl'"):
        geo.convert_pc(pc, to_convention="hkl", **kw)
    with pytest.raises(ValueError, match="binning"):
        geo.convert_pc(pc, to_convention="emsoft", binning=0, **kw)


def test_check_pc():
    shape = (60, 80)
    np.testing.assert_array_equal(geo.check_pc([0.5, 0.4, 0.6], shape), [0.5, 0.4, 0.6])
    with pytest.raises(ValueError, match=r"PCx = 1.2 is outside \[0, 1\].*right.*95.5 px"):
        geo.check_pc([1.2, 0.4, 0.6], shape)
    with pytest.raises(ValueError, match="PCz = -0.1 must be positive"):
        geo.check_pc([0.5, 0.4, -0.1], shape)
    with pytest.raises(ValueError, match="not finite"):
        geo.check_pc([0.5, np.nan, 0.6], shape)
    with pytest.raises(ValueError, match="PCy = -0.05 .*above"):
        geo.check_pc([0.5, -0.05, 0.6], shape)
    scan = np.tile([0.5, 0.4, 0.6], (3, 4, 1))
    scan[2, 1, 1] = 1.5
    with pytest.raises(ValueError, match=r"^scan PC at index \(2, 1\): PCy = 1.5 .*below"):
        geo.check_pc(scan, shape, what="scan PC")


# --------------------------------------------------------------------------- directions


@pytest.mark.parametrize("sample_tilt, detector_tilt", [(70.0, 0.0), (65.0, 10.0)])
@pytest.mark.parametrize("shape", [(60, 80), (50, 50)])
def test_pixel_directions_match_kikuchipy(shape, sample_tilt, detector_tilt):
    pytest.importorskip("kikuchipy")
    from kikuchipy.signals.util._master_pattern import (
        _get_direction_cosines_from_detector,
    )

    pc = bruker_pcs(4)
    det = kp_detector(shape, pc, sample_tilt=sample_tilt, tilt=detector_tilt)
    np.testing.assert_allclose(geo.detector_axes(sample_tilt, detector_tilt),
                               det.sample_to_detector.to_matrix()[0].T, atol=1e-12)
    theirs = _get_direction_cosines_from_detector(det)  # (n PCs, H W, 3)
    yy, xx = np.indices(shape)
    xy = np.broadcast_to(np.column_stack([xx.ravel(), yy.ravel()]), (len(pc),) + (xx.size, 2))
    tilts = {"sample_tilt": sample_tilt, "detector_tilt": detector_tilt}
    ours = geo.pixel_directions(xy, shape, pc[:, None, :], **tilts)  # the strain fitter's use
    np.testing.assert_allclose(ours, theirs, atol=1e-12)
    one = kp_detector(shape, pc[0], sample_tilt=sample_tilt, tilt=detector_tilt)
    single = _get_direction_cosines_from_detector(one)
    np.testing.assert_allclose(geo.pixel_directions(xy[0], shape, pc[0], **tilts), single,
                               atol=1e-12)


@pytest.mark.parametrize("sample_tilt, detector_tilt", [(70.0, 0.0), (65.0, 10.0)])
def test_project_inverts_pixel_directions(sample_tilt, detector_tilt):
    rng = np.random.default_rng(1)
    shape, pc = (60, 80), bruker_pcs(6)[:, None, :]
    xy = rng.uniform(-20, 100, size=(6, 50, 2))  # sub-pixel, partly off the detector
    tilts = {"sample_tilt": sample_tilt, "detector_tilt": detector_tilt}
    r = geo.pixel_directions(xy, shape, pc, **tilts)
    np.testing.assert_allclose(np.linalg.norm(r, axis=-1), 1.0, atol=1e-14)
    np.testing.assert_allclose(geo.project(r, shape, pc, **tilts), xy, atol=1e-9)
    np.testing.assert_allclose(geo.project(7 * r, shape, pc, **tilts), xy, atol=1e-9)
    assert np.isnan(geo.project(-r, shape, pc, **tilts)).all()
    # the PC pixel looks straight along the detector normal
    x_pc, y_pc = pc[0, 0, 0] * 80 - 0.5, pc[0, 0, 1] * 60 - 0.5
    zd = geo.detector_axes(sample_tilt, detector_tilt)[:, 2]
    np.testing.assert_allclose(geo.pixel_directions([x_pc, y_pc], shape, pc[0, 0], **tilts), zd,
                               atol=1e-14)


def test_direction_errors():
    with pytest.raises(ValueError, match=r"xy must have shape \(..., 2\)"):
        geo.pixel_directions(np.zeros((4, 3)), (60, 80), [0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="PCz > 0"):
        geo.pixel_directions(np.zeros((4, 2)), (60, 80), [0.5, 0.5, 0.0])
    with pytest.raises(ValueError, match="shape"):
        geo.project(np.zeros((4, 3)), (60,), [0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="sample_tilt"):
        geo.detector_axes(np.nan, 0.0)


def test_no_cupy_import_for_numpy_arrays():
    code = ("import sys; from ebsdxc import geometry as g; "
            "g.project(g.pixel_directions([[1.0, 2.0]], (60, 80), [0.5, 0.5, 0.6]), (60, 80), "
            "[0.5, 0.5, 0.6]); assert not {'cupy', 'kikuchipy'} & set(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.gpu
def test_cupy_arrays_in_cupy_arrays_out():
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(2)
    shape, pc, xy = (60, 80), bruker_pcs(3)[:, None, :], rng.uniform(0, 60, size=(3, 40, 2))
    r = geo.pixel_directions(cp.asarray(xy), shape, cp.asarray(pc), sample_tilt=65.0,
                             detector_tilt=10.0)
    assert isinstance(r, cp.ndarray)
    want = geo.pixel_directions(xy, shape, pc, sample_tilt=65.0, detector_tilt=10.0)
    np.testing.assert_allclose(cp.asnumpy(r), want, atol=1e-14)
    back = geo.project(r, shape, pc, sample_tilt=65.0, detector_tilt=10.0)  # NumPy PC is fine
    assert isinstance(back, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(back), xy, atol=1e-9)


# --------------------------------------------------------------------------- PC over a scan


def test_fit_pc_plane_exact_and_masked():
    coef = np.array([[0.5, 1e-3, -2e-4], [0.4, 3e-5, 8e-4], [0.6, -1e-5, 4e-4]])
    row, col = np.indices((9, 13), dtype=float)
    plane = coef[:, 0] + col[..., None] * coef[:, 1] + row[..., None] * coef[:, 2]
    spoiled = plane.copy()
    spoiled[2, 3] = [5.0, 5.0, 5.0]
    spoiled[4, 4, 1] = np.nan
    mask = np.ones((9, 13), bool)
    mask[2, 3] = False
    fitted, c = geo.fit_pc_plane(spoiled, mask=mask)
    np.testing.assert_allclose(c, coef, atol=1e-13)
    np.testing.assert_allclose(fitted, plane, atol=1e-13)
    # without the mask the outlier pulls the plane away
    assert np.abs(geo.fit_pc_plane(spoiled)[0] - plane).max() > 1e-3


def test_fit_pc_plane_noisy():
    rng = np.random.default_rng(3)
    row, col = np.indices((20, 30), dtype=float)
    plane = np.stack([0.5 + 2e-4 * col, 0.4 - 1e-4 * row, 0.6 + 5e-5 * row + 1e-5 * col], -1)
    sigma = 1e-3
    fitted, _ = geo.fit_pc_plane(plane + rng.normal(0, sigma, plane.shape))
    # 600 points, 3 parameters: the plane is known to about sigma sqrt(3 / 600) ~ 0.07 sigma
    assert np.abs(fitted - plane).max() < 0.3 * sigma


def test_fit_pc_plane_errors():
    pc = np.full((4, 5, 3), 0.5)
    mask = np.zeros((4, 5), bool)
    mask[0, :2] = True
    with pytest.raises(ValueError, match="at least 3 usable points, got 2"):
        geo.fit_pc_plane(pc, mask=mask)
    mask[0, :] = True
    with pytest.raises(ValueError, match="one line"):
        geo.fit_pc_plane(pc, mask=mask)
    with pytest.raises(ValueError, match="mask must have shape"):
        geo.fit_pc_plane(pc, mask=mask.T)


@pytest.mark.parametrize("sample_tilt, detector_tilt, binning", [(70.0, 0.0, 1), (65.0, 10.0, 2)])
@pytest.mark.parametrize("point", [(2, 8), (-3, 14)])
def test_extrapolate_pc_matches_kikuchipy(sample_tilt, detector_tilt, binning, point):
    shape, grid, step, pc0 = (60, 80), (7, 11), (1.5, 2.5), np.array([0.45, 0.3, 0.62])
    det = kp_detector(shape, pc0, binning=binning, sample_tilt=sample_tilt, tilt=detector_tilt)
    theirs = det.extrapolate_pc(pc_indices=list(point), navigation_shape=grid, step_sizes=step)
    ours = geo.extrapolate_pc(pc0, grid_shape=grid, step=step, pixel_size=PIXEL_SIZE,
                              binning=binning, sample_tilt=sample_tilt,
                              detector_tilt=detector_tilt, point=point, shape=shape)
    assert ours.shape == grid + (3,)
    np.testing.assert_allclose(ours, theirs.pc, rtol=1e-13, atol=1e-15)
    if 0 <= point[0] < grid[0] and 0 <= point[1] < grid[1]:
        np.testing.assert_allclose(ours[point], pc0, atol=1e-15)
    # the PC moves by a fraction of a pixel per step: it really varies
    assert np.ptp(ours[..., 0]) > 1e-4 and np.ptp(ours[..., 2]) > 1e-5


def test_extrapolate_pc_default_point_is_map_centre():
    shape, step, pc0 = (60, 80), (1.0, 1.0), np.array([0.5, 0.4, 0.6])
    kw = {"step": step, "pixel_size": PIXEL_SIZE, "shape": shape}
    odd = geo.extrapolate_pc(pc0, grid_shape=(5, 9), **kw)
    np.testing.assert_allclose(odd[2, 4], pc0, atol=1e-15)
    np.testing.assert_allclose(odd, geo.extrapolate_pc(pc0, grid_shape=(5, 9), point=(2, 4), **kw))
    even = geo.extrapolate_pc(pc0, grid_shape=(4, 6), **kw)
    np.testing.assert_allclose(even[1:3, 2:4].mean(axis=(0, 1)), pc0, atol=1e-15)
    with pytest.raises(ValueError, match="pixel_size"):
        geo.extrapolate_pc(pc0, grid_shape=(4, 6), step=step, pixel_size=-1, shape=shape)
    with pytest.raises(ValueError, match=r"point must be a scan position \(row, col\)"):
        geo.extrapolate_pc(pc0, grid_shape=(4, 6), point=(1, 2, 3), **kw)


# --------------------------------------------------------------------------- Detector


def test_detector_conventions_and_dict():
    shape, pc = (60, 80), bruker_pcs(6).reshape(2, 3, 3)
    emsoft = geo.convert_pc(pc, from_convention="bruker", to_convention="emsoft4", shape=shape,
                            pixel_size=PIXEL_SIZE, binning=2)
    det = geo.Detector.from_convention(emsoft, "EMsoft4", shape, sample_tilt=65.0,
                                       detector_tilt=10.0, pixel_size=PIXEL_SIZE, binning=2)
    np.testing.assert_allclose(det.pc, pc, atol=1e-14)
    np.testing.assert_allclose(det.pc_as("emsoft4"), emsoft, atol=1e-9)
    np.testing.assert_allclose(det.pc_as("tsl"), geo.convert_pc(
        pc, from_convention="bruker", to_convention="tsl", shape=shape), atol=1e-15)
    d = json.loads(json.dumps(det.to_dict()))
    assert d["pc_convention"] == "bruker" and d["binning"] == 2 and d["shape"] == [60, 80]
    again = geo.Detector.from_dict(d)
    np.testing.assert_array_equal(again.pc, det.pc)
    assert (again.shape, again.sample_tilt, again.detector_tilt, again.pixel_size,
            again.binning) == (shape, 65.0, 10.0, PIXEL_SIZE, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        det.sample_tilt = 70.0
    with pytest.raises(ValueError):
        det.pc[0, 0, 0] = 0.1
    with pytest.raises(ValueError, match=r"unknown keys \['tilt'\]"):
        geo.Detector.from_dict({**d, "tilt": 5.0})
    with pytest.raises(ValueError, match="pixel_size"):
        geo.Detector((60, 80), [0.5, 0.5, 0.5]).pc_as("emsoft")


def test_detector_directions_per_scan_point():
    shape, pc = (60, 80), bruker_pcs(6).reshape(2, 3, 3)
    det = geo.Detector(shape, pc, sample_tilt=65.0, detector_tilt=10.0)
    xy = np.random.default_rng(4).uniform(0, 60, size=(7, 2))
    r = det.directions(xy)
    assert r.shape == (2, 3, 7, 3)
    want = geo.pixel_directions(xy, shape, pc[1, 2], sample_tilt=65.0, detector_tilt=10.0)
    np.testing.assert_allclose(r[1, 2], want, atol=1e-15)
    back = det.project(r)  # every PC against every direction
    assert back.shape == (2, 3, 2, 3, 7, 2)
    np.testing.assert_allclose(back[1, 2, 1, 2], xy, atol=1e-9)
    assert np.abs(back[0, 0, 1, 2] - xy).max() > 1.0
    one = det.directions(xy, pc=pc[0, 1])
    np.testing.assert_allclose(one, r[0, 1], atol=1e-15)
    np.testing.assert_allclose(det.project(one, pc=pc[0, 1]), xy, atol=1e-9)
