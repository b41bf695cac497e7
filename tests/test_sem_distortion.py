"""SEM spatial distortion and drift (ebsdxc.sem_distortion): calibrated from synthetic image
series with a known distortion and drift (an analytic texture imaged exactly through them),
then removed from DIC fields of a strained, moved specimen."""

from __future__ import annotations

import numpy as np
import pytest
from exact_warps import texture

from ebsdxc import dic
from ebsdxc.dic_strain import fit_gradients
from ebsdxc.sem_distortion import DistortionModel, acquisition_time, fit_drift, fit_spatial_distortion, measure_series

SHAPE = (200, 240)
TRUE = DistortionModel(SHAPE, 3, np.array([[2.0, -1.0, 0.5, 1.0, 0.0, -0.6, 0.3],
                                           [-0.8, 1.5, 1.2, 0.0, 0.7, 0.4, -0.5]]))
CFG = dic.DicConfig(subset=31, step=12, search=8)


def _image(f, material_of):
    """The image of the texture: pixel x shows the material point material_of(x)."""
    yy, xx = np.mgrid[0:SHAPE[0], 0:SHAPE[1]].astype(float)
    m = material_of(np.stack([xx, yy], -1).reshape(-1, 2))
    return f(m[:, 0], m[:, 1]).reshape(SHAPE)


def _through(S, x):
    """The true position p imaged at x (p + S(p) = x), by fixed-point iteration."""
    p = x.copy()
    for _ in range(60):
        p = x - S.spatial_at(p)
    return p


def _translated(f, T):
    """A rigid specimen translated by T, imaged through the distortion."""
    return _image(f, lambda x: _through(TRUE, x) - np.asarray(T))


def test_spatial_distortion_is_recovered_from_translated_images():
    f = texture(1)
    ref = _translated(f, (0.0, 0.0))
    moves = [(11.3, -4.2), (-7.5, 9.1), (3.2, 13.7), (-12.4, -8.8)]
    pts, disp = measure_series(ref, [_translated(f, T) for T in moves], config=CFG)
    model, T = fit_spatial_distortion(pts, disp, shape=SHAPE, degree=3)
    np.testing.assert_allclose(T, moves, atol=0.05)
    grid = pts.reshape(-1, 2)
    # the truth has no constant or linear part (translations cannot see those), so S itself is compared
    err = np.abs(model.spatial_at(grid) - TRUE.spatial_at(grid)).max()
    scale = np.abs(TRUE.spatial_at(grid)).max()
    assert scale > 2.0 and err < 0.05, (err, scale)
    assert model.residual_px["spatial"] < 0.02


def test_correction_removes_the_strain_error_of_a_moved_specimen():
    """1e-3 uniform strain plus a 15 px move between reference and frame: the distortion's
    change over 15 px reads as strain of order 1e-2; corrected, the strain is within 1e-4."""
    f = texture(2)
    G = np.array([[1e-3, 0.0], [0.0, -3e-4]])
    T = np.array([15.0, -6.0])
    ref = _image(f, lambda x: _through(TRUE, x))
    frame = _image(f, lambda x: (_through(TRUE, x) - T) @ np.linalg.inv(np.eye(2) + G).T)
    pts, inside = dic.subset_grid(SHAPE, subset=31, step=12)
    m = dic.match_subsets(ref, frame, pts, config=CFG, valid=inside.reshape(-1))
    d = m.displacement.reshape(pts.shape)[None]
    raw = fit_gradients(d, step=12, window=5)[0]
    fixed = fit_gradients(TRUE.correct(pts, d), step=12, window=5)[0]
    ok = np.isfinite(raw).all(axis=(-2, -1)) & np.isfinite(fixed).all(axis=(-2, -1))
    assert ok.sum() > 30
    err_raw = np.abs(raw[ok] - G).max()
    err_fixed = np.abs(fixed[ok] - G).max()
    assert err_raw > 2e-3, err_raw
    assert err_fixed < 1e-4, err_fixed


def test_drift_is_recovered_from_a_static_series():
    f = texture(4)
    line, dwell = 2e-3, 1e-5  # s per line and per pixel: 0.4 s per frame
    true = DistortionModel(SHAPE, drift_degree=2, drift=np.array([[3.0, -0.8], [-1.5, 0.5]]), line_time=line,
                           dwell_time=dwell)
    starts = [1.0, 2.0, 3.0]

    def at(t0):
        # a pixel acquired at time t shows the material point D(t) behind it
        return _image(f, lambda x: x - true.drift_at(acquisition_time(x, t0, line_time=line, dwell_time=dwell)))

    pts, disp = measure_series(at(0.0), [at(t) for t in starts], config=CFG)
    model = fit_drift(pts, disp, shape=SHAPE, starts=starts, line_time=line, dwell_time=dwell, degree=2)
    np.testing.assert_allclose(model.drift, true.drift, rtol=0.02, atol=0.02)
    assert model.residual_px["drift"] < 0.01
    # and it corrects a frame of the static specimen to zero displacement
    fixed = model.correct(pts, disp, frame_starts=starts)
    assert np.nanmax(np.abs(fixed)) < 0.02 and np.nanmax(np.abs(disp)) > 2.0


def test_serialisation_round_trip_and_bad_input():
    m = DistortionModel(SHAPE, 3, TRUE.spatial, 2, np.array([[1.0, 2.0], [3.0, 4.0]]), 1e-3, 1e-6, {"spatial": 0.01})
    back = DistortionModel.from_json(m.to_json())
    xy = np.array([[10.0, 20.0], [200.0, 150.0]])
    np.testing.assert_allclose(back.spatial_at(xy), m.spatial_at(xy))
    np.testing.assert_allclose(back.drift_at(np.array([0.5, 2.0])), m.drift_at(np.array([0.5, 2.0])))
    assert back.line_time == 1e-3 and back.residual_px == {"spatial": 0.01}
    with pytest.raises(ValueError, match="not a distortion model"):
        DistortionModel.from_json("{}")
    with pytest.raises(ValueError, match="not a distortion model"):
        DistortionModel.from_json("nonsense")
    with pytest.raises(ValueError, match="degree"):
        fit_spatial_distortion(np.zeros((3, 2)), np.zeros((2, 3, 2)), shape=SHAPE, degree=1)
    with pytest.raises(ValueError, match="starts"):
        fit_drift(np.zeros((3, 2)), np.zeros((2, 3, 2)), shape=SHAPE, starts=[1.0], line_time=1e-3, dwell_time=0.0)
    with pytest.raises(ValueError, match="frame_starts"):
        m.correct(np.zeros((3, 2)), np.zeros((2, 3, 2)))
