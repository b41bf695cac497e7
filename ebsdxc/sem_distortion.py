"""SEM imaging distortions: spatial distortion and drift, calibrated from image series and
removed from DIC displacement fields (after Sutton et al. 2006, 2007).

A scanning electron microscope does not image a point where it is. Sutton, Li, Joy, Reynolds
& Li (Exp. Mech. 47, 2007; Meas. Sci. Technol. 17, 2006) split the error into two parts that
DIC of SEM images must remove, each calibrated from a series of images:

- **spatial distortion** ``S(p)``, time-independent (lens and scan-coil non-linearity): the
  point at true position ``p`` is imaged at ``p + S(p)``. Calibrated from images of a rigid
  specimen translated between them (a stage move, unknown amounts): the displacement DIC
  measures between image 0 and image j is ``u_j(x) = T_j + S(x + T_j) - S(x)`` (to first
  order in the distortion's gradient), linear in ``S`` once the rigid translations ``T_j`` are
  known, which are solved for with it (Gauss-Newton, a few rounds). Translations alone cannot
  see a constant or a linear part of ``S`` (a shift, a magnification or skew error: they move
  every image alike), so ``S`` is a 2-D polynomial of degree 2 to ``degree`` in coordinates
  normalised to the image (Sutton uses tensor B-splines; a polynomial needs no knot choice
  and is enough for the smooth distortion of a scan: its residual is reported).
- **drift** ``D(t)``, time-dependent (stage and beam drift, charging): a pixel acquired at
  time ``t`` shows the point ``D(t)`` away. A raster scan acquires pixel (row, col) of a frame
  started at ``t_k`` at ``t_k + row * line_time + col * dwell_time``, so drift bends each image
  as well as shifting frames against each other. Calibrated from images of a static specimen
  at known start times: ``u_k(x) = D(t_k + tau(x)) - D(t_0 + tau(x))`` (``tau`` the time within a
  frame), with ``D`` a polynomial of ``degree`` in time, ``D(0) = 0``, fitted by linear least
  squares to every grid point of every image.

Correcting a DIC field: a subset at ``X`` in the reference image (frame started at ``t_r``)
found at ``X + u`` in a frame (started at ``t_f``) moved, in truth, by
``P(X + u) - P(X) - [D(t_f + tau(X + u)) - D(t_r + tau(X))]``, ``P(x)`` the true position imaged at
``x`` (``P + S(P) = x``, solved exactly: the first-order ``x - S(x)`` leaves strain errors of
about the distortion's gradient times its size) (Maraghechi et al., Exp.
Mech. 59, 2019, apply the same model inside their DIC; here it is applied to the fields).
Coordinates are ebsdxc's: px, x = column, y = row, origin at the centre of pixel (0, 0).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

__all__ = ["DistortionModel", "spatial_terms", "fit_spatial_distortion", "fit_drift", "measure_series",
           "acquisition_time"]


def _exponents(degree):
    return [(a, n - a) for n in range(2, degree + 1) for a in range(n, -1, -1)]


def spatial_terms(xy, *, degree, centre, scale):
    """(N, K) monomials ``x^a y^b`` (2 <= a + b <= degree) of normalised coordinates."""
    q = (np.asarray(xy, dtype=np.float64) - np.asarray(centre)) / scale
    return np.stack([q[:, 0] ** a * q[:, 1] ** b for a, b in _exponents(degree)], -1)


def acquisition_time(xy, frame_start, *, line_time, dwell_time):
    """Time (s) a raster scan acquires image position ``xy`` (N, 2) of a frame started at
    ``frame_start``: rows one ``line_time`` apart, columns one ``dwell_time``."""
    xy = np.asarray(xy, dtype=np.float64)
    return frame_start + xy[..., 1] * line_time + xy[..., 0] * dwell_time


@dataclass(frozen=True)
class DistortionModel:
    """A calibrated spatial distortion and drift (either may be absent).

    Attributes
    ----------
    shape : (int, int)
        (H, W) of the images it was calibrated on.
    spatial_degree : int
        Highest degree of ``S`` (0: no spatial distortion).
    spatial : (2, K) float64
        Coefficients of ``S``'s x and y parts on :func:`spatial_terms`.
    drift_degree : int
        Degree of ``D(t)`` (0: no drift).
    drift : (2, drift_degree) float64
        ``D(t) = sum_j drift[:, j - 1] t^j``.
    line_time, dwell_time : float
        Seconds per scan line and per pixel.
    residual_px : dict
        RMS residuals of the calibration fits (``spatial``, ``drift``).
    """

    shape: tuple
    spatial_degree: int = 0
    spatial: np.ndarray = field(default_factory=lambda: np.zeros((2, 0)))
    drift_degree: int = 0
    drift: np.ndarray = field(default_factory=lambda: np.zeros((2, 0)))
    line_time: float = 0.0
    dwell_time: float = 0.0
    residual_px: dict = field(default_factory=dict)

    @property
    def centre(self):
        return np.array([(self.shape[1] - 1) / 2.0, (self.shape[0] - 1) / 2.0])

    @property
    def scale(self) -> float:
        return max(self.shape) / 2.0

    def spatial_at(self, xy):
        """``S`` at image positions ``xy`` (..., 2) px."""
        xy = np.asarray(xy, dtype=np.float64)
        if self.spatial_degree < 2:
            return np.zeros_like(xy)
        flat = xy.reshape(-1, 2)
        out = spatial_terms(np.nan_to_num(flat), degree=self.spatial_degree, centre=self.centre,
                            scale=self.scale) @ self.spatial.T
        out[~np.isfinite(flat).all(axis=1)] = np.nan
        return out.reshape(xy.shape)

    def true_position(self, xy, *, iterations: int = 50):
        """The true position ``p`` imaged at ``xy`` (``p + S(p) = xy``), by fixed-point iteration
        (it contracts while S's gradient is below 1; a few px of distortion take a handful)."""
        xy = np.asarray(xy, dtype=np.float64)
        p = xy.copy()
        for _ in range(iterations):
            q = xy - self.spatial_at(p)
            done = np.nanmax(np.abs(q - p)) < 1e-9 if np.isfinite(q).any() else True
            p = q
            if done:
                break
        return p

    def drift_at(self, t):
        """``D`` at times ``t`` (...,) s -> (..., 2) px."""
        t = np.asarray(t, dtype=np.float64)
        out = np.zeros(t.shape + (2,))
        for j in range(1, self.drift_degree + 1):
            out += t[..., None] ** j * self.drift[:, j - 1]
        return out

    def correct(self, points, displacement, *, frame_starts=None, reference_start=0.0):
        """True displacements of DIC fields (module docstring).

        Parameters
        ----------
        points : (..., 2) px
            Subset centres in the reference image.
        displacement : (n_frames, ..., 2) px
            Measured displacements (NaN stays NaN).
        frame_starts : (n_frames,) s, optional
            Start time of each frame's scan (needed when the model has drift).
        reference_start : float
            Start time of the reference image's scan.
        """
        X = np.asarray(points, dtype=np.float64)
        u = np.asarray(displacement, dtype=np.float64)
        out = (self.true_position(X + u) - self.true_position(X)[None]) if self.spatial_degree >= 2 else u.copy()
        if self.drift_degree:
            if frame_starts is None or len(frame_starts) != len(u):
                raise ValueError(f"frame_starts must give the start time of each of the {len(u)} frames "
                                 "when the model has drift")
            tr = acquisition_time(X, reference_start, line_time=self.line_time, dwell_time=self.dwell_time)
            for k, t0 in enumerate(frame_starts):
                tf = acquisition_time(X + u[k], float(t0), line_time=self.line_time, dwell_time=self.dwell_time)
                out[k] -= self.drift_at(tf) - self.drift_at(tr)
        return out

    def to_dict(self) -> dict:
        return {"model": "SEM spatial distortion S (2-D polynomial of degrees 2..spatial_degree in coordinates "
                         "(x - centre) / scale) and drift D(t) = sum_j c_j t^j (after Sutton et al. 2007)",
                "shape": list(self.shape), "centre": self.centre.tolist(), "scale": self.scale,
                "spatial_degree": self.spatial_degree, "spatial_exponents": _exponents(self.spatial_degree),
                "spatial": np.asarray(self.spatial).tolist(), "drift_degree": self.drift_degree,
                "drift": np.asarray(self.drift).tolist(), "line_time": self.line_time, "dwell_time": self.dwell_time,
                "residual_px": self.residual_px}

    @classmethod
    def from_dict(cls, d: dict) -> DistortionModel:
        try:
            sd, dd = int(d.get("spatial_degree", 0)), int(d.get("drift_degree", 0))
            spatial = np.asarray(d.get("spatial", []), dtype=np.float64).reshape(2, -1)
            drift = np.asarray(d.get("drift", []), dtype=np.float64).reshape(2, -1)
            model = cls(tuple(int(v) for v in d["shape"]), sd, spatial, dd, drift, float(d.get("line_time", 0.0)),
                        float(d.get("dwell_time", 0.0)), dict(d.get("residual_px", {})))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a distortion model ({e})") from None
        if spatial.shape[1] != (len(_exponents(sd)) if sd >= 2 else 0) or drift.shape[1] != dd:
            raise ValueError("not a distortion model: its coefficients do not match its degrees")
        return model

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_json(cls, text: str) -> DistortionModel:
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as e:
            raise ValueError(f"not a distortion model (not JSON: {e})") from None


def fit_spatial_distortion(points, displacements, *, shape, degree: int = 3, rounds: int = 6):
    """``S`` and the rigid translations from fields measured between translated images.

    Parameters
    ----------
    points : (..., 2) px
        Where the fields were measured in image 0.
    displacements : (n_images, ..., 2) px
        Image 0 to image j, for a rigid specimen translated between them (NaN: not measured).
    shape : (int, int)
        (H, W) of the images.
    degree : int
        Highest degree of the polynomial (>= 2).

    Returns
    -------
    model : DistortionModel
    translations : (n_images, 2) px
    """
    if not (isinstance(degree, (int, np.integer)) and degree >= 2):
        raise ValueError(f"degree must be a whole number >= 2, got {degree!r}")
    X = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    U = np.asarray(displacements, dtype=np.float64)
    n = U.shape[0]
    U = U.reshape(n, -1, 2)
    if U.shape[1] != len(X):
        raise ValueError(f"displacements hold {U.shape[1]} points per image; points has {len(X)}")
    if n < 2:
        raise ValueError("the spatial distortion needs fields of at least 2 translated images")
    model = DistortionModel(tuple(int(v) for v in shape), degree, np.zeros((2, len(_exponents(degree)))))
    ok = np.isfinite(U).all(axis=-1)
    T = np.array([np.median(U[j][ok[j]], axis=0) if ok[j].any() else np.zeros(2) for j in range(n)])
    K = len(_exponents(degree))
    for _ in range(rounds):
        rows, rhs = [], []
        base = spatial_terms(X, degree=degree, centre=model.centre, scale=model.scale)
        for j in range(n):
            m = ok[j]
            if not m.any():
                continue
            # u = T + S(x + T) - S(x), linearised in T about the current estimate
            moved = spatial_terms(X[m] + T[j], degree=degree, centre=model.centre, scale=model.scale)
            A = np.zeros((m.sum(), 2, 2 * K + 2 * n))
            diff = moved - base[m]
            A[:, 0, :K] = diff
            A[:, 1, K:2 * K] = diff
            # d/dT of S(x + T): the Jacobian of S at x + T (and the identity of T itself)
            J = _spatial_jacobian(model, X[m] + T[j])
            A[:, :, 2 * K + 2 * j:2 * K + 2 * j + 2] = np.eye(2) + J
            r = U[j][m] - (T[j] + model.spatial_at(X[m] + T[j]) - model.spatial_at(X[m]))
            # unknowns: the coefficients themselves (not a step) and a step in T
            r = r + np.einsum("nij,j->ni", A[:, :, :2 * K], model.spatial.reshape(-1))
            rows.append(A.reshape(-1, A.shape[-1]))
            rhs.append(r.reshape(-1))
        A, b = np.concatenate(rows), np.concatenate(rhs)
        sol, *_ = np.linalg.lstsq(A, b, rcond=None)
        model = DistortionModel(model.shape, degree, sol[:2 * K].reshape(2, K))
        T = T + sol[2 * K:].reshape(n, 2)
    res = np.concatenate([(U[j] - (T[j] + model.spatial_at(X + T[j]) - model.spatial_at(X)))[ok[j]]
                          for j in range(n)])
    rms = float(np.sqrt((res ** 2).sum(axis=1).mean())) if res.size else float("nan")
    model = DistortionModel(model.shape, degree, model.spatial, residual_px={"spatial": rms})
    return model, T


def _spatial_jacobian(model, xy):
    """(N, 2, 2) d S / d xy."""
    q = (np.asarray(xy, dtype=np.float64) - model.centre) / model.scale
    dx, dy = [], []
    for a, b in _exponents(model.spatial_degree):
        dx.append(a * q[:, 0] ** max(a - 1, 0) * q[:, 1] ** b if a else np.zeros(len(q)))
        dy.append(b * q[:, 0] ** a * q[:, 1] ** max(b - 1, 0) if b else np.zeros(len(q)))
    dx, dy = np.stack(dx, -1) / model.scale, np.stack(dy, -1) / model.scale
    J = np.empty((len(q), 2, 2))
    J[:, :, 0] = dx @ model.spatial.T
    J[:, :, 1] = dy @ model.spatial.T
    return J


def fit_drift(points, displacements, *, shape, starts, reference_start=0.0, line_time, dwell_time,
              degree: int = 2, base: DistortionModel | None = None):
    """``D(t)`` from fields measured between images of a static specimen.

    Parameters
    ----------
    points : (..., 2) px
    displacements : (n_images, ..., 2) px
        Reference image to image k (NaN: not measured).
    shape : (int, int)
        (H, W) of the images.
    starts : (n_images,) s
        Start time of each image's scan; ``reference_start`` the reference's.
    line_time, dwell_time : float
        Seconds per scan line and per pixel.
    degree : int
        Degree of the polynomial (>= 1).
    base : DistortionModel, optional
        A spatial calibration to keep (the drift is added to it).
    """
    if not (isinstance(degree, (int, np.integer)) and degree >= 1):
        raise ValueError(f"degree must be a whole number >= 1, got {degree!r}")
    for name, v in (("line_time", line_time), ("dwell_time", dwell_time)):
        if not (np.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a non-negative number of seconds, got {v!r}")
    X = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    U = np.asarray(displacements, dtype=np.float64)
    n = U.shape[0]
    U = U.reshape(n, -1, 2)
    starts = np.asarray(starts, dtype=np.float64).reshape(-1)
    if len(starts) != n:
        raise ValueError(f"starts must give the start time of each of the {n} images, got {len(starts)}")
    tr = acquisition_time(X, reference_start, line_time=line_time, dwell_time=dwell_time)
    rows, rhs = [], []
    for k in range(n):
        m = np.isfinite(U[k]).all(axis=1)
        tk = acquisition_time(X[m] + U[k][m], starts[k], line_time=line_time, dwell_time=dwell_time)
        A = np.stack([tk ** j - tr[m] ** j for j in range(1, degree + 1)], -1)
        rows.append(A)
        rhs.append(U[k][m])
    A, b = np.concatenate(rows), np.concatenate(rhs)
    if len(A) < degree:
        raise ValueError("too few measured points to fit the drift")
    # scale the columns: t^j spans many orders of magnitude
    norm = np.abs(A).max(axis=0)
    norm[norm == 0] = 1.0
    coef, *_ = np.linalg.lstsq(A / norm, b, rcond=None)
    coef = (coef / norm[:, None]).T  # (2, degree)
    rms = float(np.sqrt(((A @ coef.T - b) ** 2).sum(axis=1).mean()))
    base = base or DistortionModel(tuple(int(v) for v in shape))
    residual = {**base.residual_px, "drift": rms}
    return DistortionModel(base.shape, base.spatial_degree, base.spatial, degree, coef, float(line_time),
                           float(dwell_time), residual)


def measure_series(reference, images, *, config):
    """DIC of every image of a calibration series against ``reference`` on the grid of
    ``config`` (:class:`ebsdxc.dic.DicConfig`): points (ny, nx, 2) and displacements
    (n_images, ny, nx, 2) for :func:`fit_spatial_distortion` and :func:`fit_drift`."""
    from .dic import match_subsets, subset_grid

    ref = np.asarray(reference, dtype=np.float32)
    points, inside = subset_grid(ref.shape, subset=config.subset, step=config.step)
    out = []
    for img in images:
        m = match_subsets(ref, np.asarray(img, dtype=np.float32), points, config=config, valid=inside.reshape(-1))
        out.append(m.displacement.reshape(points.shape))
    return points, np.stack(out)
