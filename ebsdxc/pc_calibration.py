"""Pattern-centre calibration: refine PC and orientation per pattern against a master pattern.

Each measured pattern is compared with patterns projected from a master pattern
(:func:`ebsdxc.simulate.simulate_patterns`); the PC ``(PCx, PCy, PCz)`` and the orientation
(three small rotation angles about the start orientation) that maximise the normalised
cross-correlation (NCC) are found by Nelder-Mead, as kikuchipy's
``refine_orientation_projection_center`` and IDIC-HREBSD do. The PCs of a grid of such points
are then fitted with a model of how the PC moves over the scan (:func:`fit_pc_model`: a plane,
or the beam-shift model of :func:`ebsdxc.geometry.extrapolate_pc`).

Conventions
-----------
PC
    Bruker, as everywhere in ebsdxc (:mod:`ebsdxc.geometry`).
Orientation
    ``g`` takes sample to crystal coordinates. The refined orientation is
    ``g = g0 @ R(w).T``, ``R(w)`` the rotation by the vector ``w`` (radians) in the SAMPLE
    frame: the crystal turned by ``w`` as seen from the sample.
NCC
    Zero-mean normalised cross-correlation over the pixels of ``mask`` (all by default), in
    [-1, 1]; the simulation is compared as projected (no background), so the measured patterns
    should have their background removed (static and/or dynamic) first.

Batching
--------
The Nelder-Mead searches of all patterns run in lock step (:func:`nelder_mead_batch`): each
round gathers the one to seven trial points every search asks for and simulates them in one
:func:`~ebsdxc.simulate.simulate_patterns` call on the array module of ``patterns`` (one GPU
kernel launch per round with CuPy), so B patterns cost about as many rounds as one.
The search itself is scipy's Nelder-Mead (same coefficients and termination test), written as
a generator so that the evaluations can be batched; it is checked against
``scipy.optimize.minimize(method="Nelder-Mead")`` in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .backend import array_module, to_host
from .crystal import rotation_from_vector
from .geometry import check_shape, extrapolate_pc, fit_pc_plane
from .simulate import simulate_patterns

__all__ = ["PC_MODELS", "PCModel", "PCRefinement", "fit_pc_model", "nelder_mead_batch", "pattern_ncc", "refine_pc"]


@dataclass(frozen=True, eq=False)
class PCRefinement:
    """Result of :func:`refine_pc`, one entry per pattern (NumPy arrays).

    Attributes
    ----------
    pc : (B, 3) float64 Bruker PCs
    orientation : (B, 3, 3) float64, sample -> crystal
    ncc : (B,) float64, NCC of the pattern and the simulation at ``pc``, ``orientation``
    ncc_start : (B,) float64, the same at the start values
    iterations : (B,) int, Nelder-Mead iterations
    evaluations : (B,) int, simulations
    converged : (B,) bool, the search met its tolerances (not the iteration limit)
    """

    pc: np.ndarray
    orientation: np.ndarray
    ncc: np.ndarray
    ncc_start: np.ndarray
    iterations: np.ndarray
    evaluations: np.ndarray
    converged: np.ndarray


def pattern_ncc(a, b, *, mask=None):
    """Zero-mean NCC of patterns ``a`` and ``b`` (``(..., H, W)``, broadcasting) over ``mask``.

    NumPy or CuPy as the inputs; float64 ``(...)``. NaN where a pattern is constant.
    """
    xp = array_module(a, b)
    a = xp.asarray(a, dtype=xp.float64)
    b = xp.asarray(b, dtype=xp.float64)
    if mask is not None:
        m = xp.asarray(mask, dtype=bool)
        a, b = a[..., m], b[..., m]
    else:
        a = a.reshape(a.shape[:-2] + (-1,))
        b = b.reshape(b.shape[:-2] + (-1,))
    a = a - a.mean(axis=-1, keepdims=True)
    b = b - b.mean(axis=-1, keepdims=True)
    den = xp.sqrt((a * a).sum(axis=-1) * (b * b).sum(axis=-1))
    num = (a * b).sum(axis=-1)
    return xp.where(den > 0, num / xp.where(den > 0, den, 1.0), xp.nan)


def _normalised(patterns, mask, xp):
    """(B, P) zero-mean unit-norm float32 vectors of the masked pixels (the NCC's left side)."""
    x = patterns[:, mask] if mask is not None else patterns.reshape(patterns.shape[0], -1)
    x = x.astype(xp.float64)
    x -= x.mean(axis=1, keepdims=True)
    norm = xp.sqrt((x * x).sum(axis=1, keepdims=True))
    return (x / xp.where(norm > 0, norm, 1.0)).astype(xp.float32), to_host(norm[:, 0] > 0)


# --------------------------------------------------------------------------- Nelder-Mead


def _nelder_mead(x0, step, *, xatol, fatol, max_iterations):
    """scipy's Nelder-Mead (non-adaptive coefficients, same termination) as a generator.

    Yields ``(k, n)`` arrays of points to evaluate and is sent their ``(k,)`` values; returns
    ``(x_best, f_best, iterations, converged)``.
    """
    rho, chi, psi, sigma = 1.0, 2.0, 0.5, 0.5
    sim = np.vstack([x0, x0 + np.diag(step)])
    fsim = np.asarray((yield sim.copy()), dtype=np.float64)
    iterations = 0
    converged = False
    while True:
        order = np.argsort(fsim, kind="stable")
        sim, fsim = sim[order], fsim[order]
        if (np.max(np.abs(sim[1:] - sim[0])) <= xatol and np.max(np.abs(fsim[0] - fsim[1:])) <= fatol):
            converged = True
            break
        if iterations >= max_iterations:
            break
        iterations += 1
        xbar = sim[:-1].mean(axis=0)
        xr = (1 + rho) * xbar - rho * sim[-1]
        fr = float((yield xr[None])[0])
        shrink = False
        if fr < fsim[0]:
            xe = (1 + rho * chi) * xbar - rho * chi * sim[-1]
            fe = float((yield xe[None])[0])
            sim[-1], fsim[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < fsim[-2]:
            sim[-1], fsim[-1] = xr, fr
        elif fr < fsim[-1]:
            xc = (1 + psi * rho) * xbar - psi * rho * sim[-1]
            fc = float((yield xc[None])[0])
            if fc <= fr:
                sim[-1], fsim[-1] = xc, fc
            else:
                shrink = True
        else:
            xcc = (1 - psi) * xbar + psi * sim[-1]
            fcc = float((yield xcc[None])[0])
            if fcc < fsim[-1]:
                sim[-1], fsim[-1] = xcc, fcc
            else:
                shrink = True
        if shrink:
            sim[1:] = sim[0] + sigma * (sim[1:] - sim[0])
            fsim[1:] = np.asarray((yield sim[1:].copy()), dtype=np.float64)
    best = int(np.argmin(fsim))
    return sim[best].copy(), float(fsim[best]), iterations, converged


def nelder_mead_batch(fun, x0, step, *, xatol=1e-4, fatol=1e-8, max_iterations=1000):
    """Minimise B functions of n variables by Nelder-Mead, evaluating them in batches.

    Parameters
    ----------
    fun : callable
        ``fun(owner, points)``: ``owner`` ``(k,)`` int, which problem each point belongs to,
        ``points`` ``(k, n)``; returns ``(k,)`` values. Called once per round with the
        points of every search still running.
    x0 : array_like
        ``(B, n)`` start points.
    step : array_like
        ``(n,)`` or ``(B, n)`` sides of the initial simplices (``x0 + step_i e_i``).
    xatol, fatol : float
        Termination, as scipy's: every simplex vertex within ``xatol`` of the best (each
        coordinate) and every value within ``fatol`` of the best.
    max_iterations : int

    Returns
    -------
    x : (B, n) float64
    f : (B,) float64
    iterations : (B,) int
    converged : (B,) bool
    evaluations : (B,) int
    """
    x0 = np.atleast_2d(np.asarray(x0, dtype=np.float64))
    B, n = x0.shape
    step = np.broadcast_to(np.asarray(step, dtype=np.float64), (B, n))
    searches = [_nelder_mead(x0[b], step[b], xatol=xatol, fatol=fatol, max_iterations=int(max_iterations))
                for b in range(B)]
    pending = {b: next(s) for b, s in enumerate(searches)}
    x = np.empty((B, n))
    f = np.empty(B)
    iterations = np.zeros(B, dtype=np.int64)
    converged = np.zeros(B, dtype=bool)
    evaluations = np.zeros(B, dtype=np.int64)
    while pending:
        owners = np.concatenate([np.full(len(p), b) for b, p in pending.items()])
        values = np.asarray(fun(owners, np.concatenate(list(pending.values()))), dtype=np.float64)
        at = 0
        for b in list(pending):
            k = len(pending[b])
            evaluations[b] += k
            try:
                pending[b] = searches[b].send(values[at:at + k])
            except StopIteration as done:
                x[b], f[b], iterations[b], converged[b] = done.value
                del pending[b]
            at += k
    return x, f, iterations, converged, evaluations


# --------------------------------------------------------------------------- refinement


def refine_pc(patterns, master, *, pc0, orientations0, sample_tilt: float = 70.0, detector_tilt: float = 0.0,
              mask=None, pc_step: float = 0.01, angle_step: float = 1.0, pc_tolerance: float = 2e-5,
              angle_tolerance: float = 2e-3, ncc_tolerance: float = 1e-7, max_iterations: int = 1000,
              refine_orientation: bool = True, prepare=None) -> PCRefinement:
    """Refine PC and orientation of each pattern by maximising its NCC with a simulation.

    Parameters
    ----------
    patterns : array_like
        ``(B, H, W)`` measured patterns, background removed, NumPy or CuPy (the simulations
        run where they live).
    master : MasterPattern or array_like
        The master pattern (:func:`ebsdxc.io.master_pattern.read_master_pattern`, or a
        ``(2, n, n)`` Lambert array); on a GPU pass it as a CuPy array to keep it resident.
    pc0 : array_like
        Start PCs (Bruker), ``(3,)`` or ``(B, 3)``.
    orientations0 : array_like
        Start orientations ``(B, 3, 3)`` (sample -> crystal), or ``(3, 3)`` for all.
    sample_tilt, detector_tilt : float
        Degrees.
    mask : array_like of bool, optional
        ``(H, W)`` pixels to compare (e.g. the phosphor screen); default all.
    pc_step, angle_step : float
        Initial simplex sides: PC fraction and degrees (the expected start error).
    pc_tolerance, angle_tolerance, ncc_tolerance : float
        Termination (PC fraction, degrees, NCC): every simplex vertex that close to the best.
    max_iterations : int
        Nelder-Mead iterations per pattern.
    refine_orientation : bool
        False: keep the orientations fixed and refine the PC only (3 parameters).
    prepare : callable, optional
        Applied to each batch of simulations ``(b, H, W)`` before the comparison: the per-pattern
        processing the measured patterns had (a dynamic background division, a band-pass), so
        both sides are compared as alike. Not a static background: that belongs to the detector.

    Returns
    -------
    PCRefinement
    """
    xp = array_module(patterns)
    patterns = xp.asarray(patterns)
    if patterns.ndim != 3:
        raise ValueError(f"patterns must have shape (B, H, W), got {patterns.shape}")
    B, H, W = patterns.shape
    shape = check_shape((H, W))
    pc0 = np.asarray(pc0, dtype=np.float64)
    pc0 = np.broadcast_to(pc0, (B, 3)).copy() if pc0.shape == (3,) else pc0
    if pc0.shape != (B, 3) or not np.all(np.isfinite(pc0)) or np.any(pc0[:, 2] <= 0):
        raise ValueError(f"pc0 must be finite Bruker PCs (3,) or ({B}, 3) with PCz > 0, got shape {pc0.shape}")
    g0 = np.asarray(to_host(orientations0), dtype=np.float64)
    g0 = np.broadcast_to(g0, (B, 3, 3)).copy() if g0.shape == (3, 3) else g0
    if g0.shape != (B, 3, 3) or not np.all(np.isfinite(g0)):
        raise ValueError(f"orientations0 must be finite (3, 3) or ({B}, 3, 3) rotation matrices, got shape {g0.shape}")
    for name, value in (("pc_step", pc_step), ("angle_step", angle_step), ("pc_tolerance", pc_tolerance),
                        ("angle_tolerance", angle_tolerance), ("ncc_tolerance", ncc_tolerance)):
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    if int(max_iterations) < 1:
        raise ValueError(f"max_iterations must be at least 1, got {max_iterations!r}")
    if mask is not None:
        mask = np.asarray(to_host(mask), dtype=bool)
        if mask.shape != shape or mask.sum() < 16:
            raise ValueError(f"mask must be a ({H}, {W}) boolean array with at least 16 pixels set")
    dmask = None if mask is None else xp.asarray(mask)
    # once, not per round: float64 on the CPU (simulate_patterns' own dtype), resident float32 on a GPU
    lam = xp.asarray(getattr(master, "lambert", master), dtype=np.float64 if xp is np else np.float32)
    left, usable = _normalised(patterns, dmask, xp)
    if not usable.all():
        raise ValueError(f"patterns[{int(np.flatnonzero(~usable)[0])}] is constant: nothing to correlate")

    # the search runs in units of the initial simplex: PC in pc_step, angles in angle_step
    n_par = 6 if refine_orientation else 3
    scale = np.array([pc_step] * 3 + [np.deg2rad(angle_step)] * 3)[:n_par]
    tol = np.array([pc_tolerance] * 3 + [np.deg2rad(angle_tolerance)] * 3)[:n_par]
    tilts = {"sample_tilt": sample_tilt, "detector_tilt": detector_tilt}

    def geometry(owner, z):
        p = z * scale
        pc = pc0[owner] + p[:, :3]
        g = g0[owner]
        if refine_orientation:
            g = g @ np.swapaxes(rotation_from_vector(p[:, 3:]), -1, -2)
        return pc, g

    def cost(owner, z):
        pc, g = geometry(owner, z)
        out = np.full(len(owner), 2.0)  # worse than any NCC: a PC behind the detector
        ok = pc[:, 2] > 0
        if ok.any():
            sims = simulate_patterns(lam, shape=shape, pc=xp.asarray(pc[ok]), orientations=xp.asarray(g[ok]),
                                     **tilts)
            if prepare is not None:
                sims = prepare(sims)
            right, _ = _normalised(sims, dmask, xp)
            ncc = (left[xp.asarray(owner[ok])] * right).sum(axis=1)
            out[ok] = 1.0 - to_host(ncc).astype(np.float64)
        return out

    start = cost(np.arange(B), np.zeros((B, n_par)))
    z, f, iterations, converged, evaluations = nelder_mead_batch(
        cost, np.zeros((B, n_par)), np.ones(n_par), xatol=float(np.min(tol / scale)), fatol=ncc_tolerance,
        max_iterations=max_iterations)
    pc, g = geometry(np.arange(B), z)
    return PCRefinement(pc=pc, orientation=g, ncc=1.0 - f, ncc_start=1.0 - start, iterations=iterations,
                        evaluations=evaluations, converged=converged)


# --------------------------------------------------------------------------- PC model


@dataclass(frozen=True, eq=False)
class PCModel:
    """A PC model fitted to calibration points (:func:`fit_pc_model`).

    Attributes
    ----------
    pc_map : (rows, cols, 3) float64 Bruker PC of every scan slot
    model : str, ``"plane"`` or ``"extrapolation"``
    parameters : dict, JSON-able: the plane's coefficients ``PC_k = a + b col + c row`` (rows
        ``k`` of ``coefficients``) or the extrapolation's ``pc0`` at ``point`` with its
        ``step``, ``pixel_size``, ``binning`` and tilts
    residual : (N, 3) float64, measured minus model PC at the points used
    used : (N,) bool, which of the given points the fit used
    """

    pc_map: np.ndarray
    model: str
    parameters: dict
    residual: np.ndarray
    used: np.ndarray

    def summary(self) -> dict:
        """Mean and largest residual length (PC fraction) of the points used."""
        r = np.linalg.norm(self.residual[self.used], axis=-1) if self.used.any() else np.zeros(0)
        return {"mean_residual": float(r.mean()) if r.size else None,
                "max_residual": float(r.max()) if r.size else None, "n_used": int(self.used.sum())}


#: The models :func:`fit_pc_model` fits.
PC_MODELS = ("plane", "extrapolation")


def fit_pc_model(rows_cols, pc, *, grid_shape, model: str = "plane", use=None, step=None, pixel_size=None,
                 binning: float = 1, shape=None, sample_tilt: float = 70.0, detector_tilt: float = 0.0,
                 point=None) -> PCModel:
    """Fit a model of the PC over the scan to PCs measured at some scan points.

    Parameters
    ----------
    rows_cols : array_like
        ``(N, 2)`` int scan positions (row, col) of the measured PCs, all different.
    pc : array_like
        ``(N, 3)`` Bruker PCs measured there.
    grid_shape : (int, int)
        Scan slots ``(rows, cols)``.
    model : {"plane", "extrapolation"}
        ``"plane"``: a least-squares plane per component over (col, row)
        (:func:`ebsdxc.geometry.fit_pc_plane`, at least 3 points not on one line).
        ``"extrapolation"``: the beam-shift model of :func:`ebsdxc.geometry.extrapolate_pc`
        with its known slopes; only the PC at ``point`` is fitted (the mean over the points
        of measured minus model offset), one point suffices.
    use : array_like of bool, optional
        ``(N,)`` points to fit; the others are left out (their residuals are still given).
    step, pixel_size, binning, shape : optional
        ``"extrapolation"`` only: scan steps ``(step_y, step_x)`` and unbinned detector
        pixel size (both microns), binning, detector shape ``(H, W)`` of the patterns.
    sample_tilt, detector_tilt : float
        Degrees (``"extrapolation"``).
    point : (float, float), optional
        ``"extrapolation"``: scan position of the fitted PC, default the map centre.

    Returns
    -------
    PCModel

    Notes
    -----
    Both models work in grid indices, as the geometry functions do; on a hexagonal grid the
    odd rows' half-step shift is not modelled (a PCx error of half a column's slope).
    """
    rows, cols = check_shape(grid_shape)
    rc = np.asarray(rows_cols)
    pc = np.asarray(pc, dtype=np.float64)
    if rc.ndim != 2 or rc.shape[1] != 2 or pc.shape != (rc.shape[0], 3):
        raise ValueError(f"rows_cols must be (N, 2) and pc (N, 3), got {rc.shape} and {pc.shape}")
    if not np.issubdtype(rc.dtype, np.integer):
        if not np.all(np.isfinite(rc)) or not np.all(rc == np.round(rc)):
            raise ValueError("rows_cols must be whole scan positions (row, col)")
        rc = rc.astype(np.int64)
    if np.any(rc < 0) or np.any(rc[:, 0] >= rows) or np.any(rc[:, 1] >= cols):
        raise ValueError(f"rows_cols must lie in the {rows} x {cols} grid")
    if len(np.unique(rc[:, 0] * cols + rc[:, 1])) != len(rc):
        raise ValueError("rows_cols lists a scan point twice")
    used = np.isfinite(pc).all(axis=1)
    if use is not None:
        use = np.asarray(use, dtype=bool)
        if use.shape != (len(rc),):
            raise ValueError(f"use must have shape ({len(rc)},), got {use.shape}")
        used &= use
    if model == "plane":
        grid = np.full((rows, cols, 3), np.nan)
        grid[rc[used, 0], rc[used, 1]] = pc[used]
        pc_map, coef = fit_pc_plane(grid)
        params = {"coefficients": coef.tolist(), "form": "PC_k = a + b col + c row (row k of coefficients: a, b, c)"}
    elif model == "extrapolation":
        if step is None or pixel_size is None or shape is None:
            raise ValueError("model 'extrapolation' needs step (step_y, step_x), pixel_size (microns) and the "
                             "detector shape")
        if not used.any():
            raise ValueError("model 'extrapolation' needs at least one usable point")
        kw = dict(grid_shape=(rows, cols), step=step, pixel_size=pixel_size, binning=binning,
                  sample_tilt=sample_tilt, detector_tilt=detector_tilt, point=point, shape=shape)
        probe = np.array([0.5, 0.5, 1.0])  # any PC: the model's offsets do not depend on it
        offsets = extrapolate_pc(probe, **kw) - probe
        pc0 = (pc[used] - offsets[rc[used, 0], rc[used, 1]]).mean(axis=0)
        pc_map = extrapolate_pc(pc0, **kw)
        ref = ((rows - 1) / 2, (cols - 1) / 2) if point is None else tuple(float(v) for v in point)
        params = {"pc0": pc0.tolist(), "point": list(ref), "step": [float(s) for s in step],
                  "pixel_size": float(pixel_size), "binning": float(binning), "sample_tilt": float(sample_tilt),
                  "detector_tilt": float(detector_tilt), "shape": list(check_shape(shape))}
    else:
        raise ValueError(f"model must be 'plane' or 'extrapolation', got {model!r}")
    residual = pc - pc_map[rc[:, 0], rc[:, 1]]
    return PCModel(pc_map=pc_map, model=model, parameters=params, residual=residual, used=used)
