"""A reference per grain: orientations in, grains segmented, one reference point chosen per grain.

Where the grains come from (first that applies): a grain-id file; the orientation map
(``--orientations FILE.ang|.ctf``, else the one the scan file stores) segmented by
misorientation with the crystal's symmetry; else the scan's own patterns, segmented by how well
neighbours correlate. Each grain's reference is a point from a file or the one
:func:`ebsdxc.grains.choose_references` picks by the configured rule. Points in no grain, or
in a grain without a usable reference, get no reference: the run flags them ``NO_REFERENCE``
and never correlates them against another grain's pattern.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np

from .. import crystal, grains
from .. import io as scan_io
from ..errors import InputError
from ..preprocess import PatternPreprocessor
from ..references import ReferenceSet
from .inputs import read_points

__all__ = ["GrainReferences", "grain_reference_set", "grain_references", "read_orientations", "reference_flat"]

SIMILARITY_BLOCK = 1024  # neighbour pairs whose patterns are correlated together


@dataclass(frozen=True)
class GrainReferences:
    """The grains of a scan and the reference set they give.

    Attributes
    ----------
    references : ReferenceSet
        One reference per grain that has one; ``index`` gives each point its grain's.
    grain_id : (rows, cols) int32
        0..n_grains-1, -1 = no grain.
    reference_point : (n_grains, 2) int64
        [row, col] of each grain's reference; (-1, -1) where a grain has none.
    reasons : tuple
        Per grain: why it has no reference, or None.
    no_reference : (rows, cols) bool
        Points to flag ``NO_REFERENCE`` (no grain, or a grain without a reference).
    method : str
        ``misorientation``, ``similarity`` or ``file``.
    orientations : (rows, cols, 3, 3) or None
        Per-point orientation matrices from the orientation map (sample -> crystal).
    phase : (rows, cols) int or None
        Per-point phase (index into ``phases``), -1 = not indexed.
    phases : tuple of dict
        ``{"name": ..., "laue": ...}`` of each phase of the orientation map.
    kam : (rows, cols) float radians or None
    source : str or None
        Where the orientations came from (a file path, or "scan file").
    """

    references: ReferenceSet
    grain_id: np.ndarray
    reference_point: np.ndarray
    reasons: tuple
    no_reference: np.ndarray
    method: str
    orientations: np.ndarray | None = None
    phase: np.ndarray | None = None
    phases: tuple = ()
    kam: np.ndarray | None = None
    source: str | None = None

    @property
    def n_grains(self) -> int:
        return int(self.reference_point.shape[0])

    def reference_flat(self) -> np.ndarray:
        """(rows, cols) flat scan index of each point's reference point, -1 where none."""
        return reference_flat(self.grain_id, self.reference_point)

    def reference_euler(self) -> np.ndarray | None:
        """(n_grains, 3) Bunge degrees of each grain's reference point, NaN without one."""
        if self.orientations is None:
            return None
        out = np.full((self.n_grains, 3), np.nan)
        ok = self.reference_point[:, 0] >= 0
        r, c = self.reference_point[ok].T
        out[ok] = crystal.matrix_to_euler(self.orientations[r, c])
        return out

    def grain_phase(self) -> np.ndarray | None:
        if self.phase is None:
            return None
        out = np.full(self.n_grains, -1, dtype=np.int16)
        ok = self.reference_point[:, 0] >= 0
        r, c = self.reference_point[ok].T
        out[ok] = self.phase[r, c]
        return out

    def parameters(self) -> dict:
        """What identifies the grains in the results' parameters (compared on resume)."""
        digest = hashlib.sha1(np.ascontiguousarray(self.grain_id).tobytes()
                              + np.ascontiguousarray(self.reference_point).tobytes()).hexdigest()
        return {"grains_method": self.method, "grain_map": digest,
                **({"orientations": os.path.basename(self.source)} if self.source not in (None, "scan file") else {})}

    def attrs(self) -> dict:
        """JSON-able description for the results' ``grains`` group."""
        return {"method": self.method, "orientation_source": self.source, "phases": list(self.phases),
                "no_reference_reasons": {str(i): r for i, r in enumerate(self.reasons) if r}}


def reference_flat(grain_id, reference_point) -> np.ndarray:
    """(rows, cols) flat scan index of each point's grain reference point, -1 where the point is
    in no grain or its grain has no reference (``reference_point`` (n_grains, 2), -1 rows)."""
    gid = np.asarray(grain_id)
    ref = np.asarray(reference_point, dtype=np.int64).reshape(-1, 2)
    flat = np.where(ref[:, 0] >= 0, ref[:, 0] * gid.shape[1] + ref[:, 1], -1)
    if not len(flat):
        return np.full(gid.shape, -1, dtype=np.int64)
    return np.where(gid >= 0, flat[np.clip(gid, 0, None)], -1).astype(np.int64)


def read_orientations(source, path=None):
    """The orientation map of a scan: from ``path`` (.ang, .ctf, vendor h5), else the one the scan
    file stores, else None. A map of another grid than the scan's is an InputError naming it."""
    if path is not None:
        omap = scan_io.read_orientation_map(path)
    else:
        getter = getattr(source, "orientation_map", None)
        omap = getter() if callable(getter) else None
        if omap is None:
            return None
    # ebsdxc's sample frame is kikuchipy's, the EDAX/TSL one: Oxford and Bruker angles are turned to it
    omap = omap.in_frame("tsl")
    g, sg = omap.grid, source.grid
    if (g.rows, g.cols, g.kind) != (sg.rows, sg.cols, sg.kind):
        raise InputError(f"holds a {g.rows} x {g.cols} {g.kind} grid of points; the scan "
                         f"{os.path.basename(source.path)} has {sg.rows} x {sg.cols} {sg.kind}",
                         path or source.path)
    return omap


def _phase_symmetry(omap, path) -> list[str]:
    out = []
    for ph in omap.phases:
        try:
            out.append(crystal.laue_group(ph.laue))
        except ValueError:
            raise InputError(f"phase {ph.name!r} (id {ph.id}) has a crystal symmetry ebsdxc does not know "
                             f"({ph.laue!r})", path) from None
    return out


def grain_references(source, config, backend, *, orientations=None, grain_ids=None, grain_refs=None,
                     static_background=None) -> GrainReferences:
    """Segment the scan into grains and choose a reference point per grain.

    Parameters
    ----------
    source : PatternSource
    config : ProcessConfig
        ``config.grains`` (tolerance, minimum size, rule) and ``config.preprocess`` (how the
        patterns are prepared for the similarity segmentation and the references).
    backend : Backend
        Where the similarity segmentation correlates neighbouring patterns.
    orientations : str, optional
        An orientation map file (.ang, .ctf, vendor h5); default: the scan file's own.
    grain_ids : str, optional
        A file of grain ids (rows, cols) instead of a segmentation.
    grain_refs : str, optional
        A file of one ``row,col`` reference point per grain instead of the rule.
    static_background : (H, W) array, optional
        As the run subtracts it (for the similarity segmentation).
    """
    gc = config.grains
    grid = source.grid
    rows, cols, kind = grid.rows, grid.cols, grid.kind
    in_grid = grid.in_grid()
    if source.present is not None:
        in_grid = in_grid & source.present.reshape(rows, cols)
    omap = read_orientations(source, orientations)
    g = phase = None
    laues: list[str] = []
    if omap is not None:
        where = orientations or source.path
        laues = _phase_symmetry(omap, where)
        phase = np.where(in_grid, omap.phase, -1).astype(np.int16)
        with np.errstate(invalid="ignore"):
            g = crystal.euler_to_matrix(np.nan_to_num(omap.euler_deg))
        valid = (phase >= 0) & np.isfinite(omap.euler_deg).all(axis=-1)
        phase = np.where(valid, phase, -1).astype(np.int16)
    similarity = None
    if grain_ids is not None:
        grain_id = grains.grain_ids_from_file(grain_ids, rows, cols)
        # points outside the scan leave no gaps in the ids
        grain_id = grains.remove_small_grains(np.where(in_grid, grain_id, -1), gc.min_size)[0]
        method = "file"
    elif omap is not None:
        grain_id = grains.segment(g, laue=laues, phase=phase, valid=phase >= 0, tolerance_deg=gc.tolerance_deg,
                                  min_grain_size=gc.min_size, kind=kind)
        method = "misorientation"
    else:
        similarity = neighbour_similarity(source, config.preprocess, backend, static_background=static_background)
        grain_id = grains.segment_by_similarity(similarity, rows=rows, cols=cols, kind=kind,
                                                min_similarity=gc.similarity_threshold, valid=in_grid,
                                                min_grain_size=gc.min_size)
        method = "similarity"
    kam = quality = None
    if omap is not None and (phase >= 0).any():
        kam = grains.kernel_average_misorientation(g, grain_id, laue=laues, phase=phase, kind=kind)
        quality = omap.pattern_quality()
    elif similarity is not None:
        # Unindexed scan: how well a point correlates with its in-grain neighbours stands in for
        # both its pattern quality and (1 - it) for its local misorientation.
        quality = grains.mean_neighbour_similarity(similarity, grain_id, kind=kind)
        kam = 1.0 - quality
    if grain_refs is not None:
        ref_points, reasons = grains.references_from_file(grain_refs, grain_id)
    else:
        ref_points, reasons = grains.choose_references(grain_id, rule=gc.rule, kam=kam, quality=quality, kind=kind,
                                                       min_boundary_distance=gc.min_boundary_distance,
                                                       min_grain_size=gc.min_size)
    ref_points = np.asarray(ref_points, dtype=np.int64).reshape(-1, 2)
    refs, no_reference = grain_reference_set(source, config.preprocess, grain_id, ref_points)
    return GrainReferences(refs, grain_id.astype(np.int32), ref_points, tuple(reasons), no_reference, method,
                           orientations=g, phase=phase,
                           phases=tuple({"name": p.name, "laue": laue} for p, laue in zip(omap.phases, laues))
                           if omap is not None else (),
                           kam=kam if omap is not None else None, source=orientations or (
                               "scan file" if omap is not None else None))


def grain_reference_set(source, preprocess, grain_id, reference_point) -> tuple[ReferenceSet, np.ndarray]:
    """The references of the grains that have one, each point's index into them, and the
    (rows, cols) points that have none (in no grain, or in a grain without a reference)."""
    grid = source.grid
    in_grid = grid.in_grid()
    if source.present is not None:
        in_grid = in_grid & source.present.reshape(grid.rows, grid.cols)
    has = reference_point[:, 0] >= 0
    if not has.any():
        raise InputError("no grain has a usable reference point (grains too small, or no point of good pattern "
                         "quality): lower grains.min_size, or give the reference points in a file", source.path)
    slot = np.full(len(reference_point), -1, dtype=np.int64)
    slot[has] = np.arange(int(has.sum()))
    point_slot = np.where(grain_id >= 0, slot[np.clip(grain_id, 0, None)], -1)
    no_reference = in_grid & (point_slot < 0)
    patterns = read_points(source, preprocess, [scan_io.flat_index(source, (int(r), int(c)))
                                                for r, c in reference_point[has]])
    labels = tuple({"point": [int(r), int(c)], "grain": int(k)}
                   for k, (r, c) in zip(np.flatnonzero(has), reference_point[has]))
    index = np.where(point_slot >= 0, point_slot, 0).reshape(-1).astype(np.int32)
    return ReferenceSet(patterns, index, labels), no_reference


def neighbour_similarity(source, preprocess, backend, *, static_background=None) -> np.ndarray:
    """(P,) zero-mean normalised cross-correlation of the preprocessed patterns of each pair of
    neighbouring scan points (:func:`ebsdxc.grains.neighbour_pairs` order); NaN where a point
    has no pattern."""
    grid = source.grid
    pairs = grains.neighbour_pairs(grid.rows, grid.cols, kind=grid.kind)
    xp = backend.xp
    prep = PatternPreprocessor(preprocess, backend, static_background=static_background)
    present = None if source.present is None else source.present.reshape(-1)
    out = np.full(len(pairs), np.nan)
    order = np.argsort(pairs[:, 0], kind="stable")
    cache: dict[int, object] = {}
    for k0 in range(0, len(order), SIMILARITY_BLOCK):
        idx = order[k0:k0 + SIMILARITY_BLOCK]
        need = np.unique(pairs[idx])
        if present is not None:
            need = need[present[need]]
        missing = [int(p) for p in need if p not in cache]
        if missing:
            pats = prep(xp.asarray(read_points(source, preprocess, np.asarray(missing))))
            for p, a in zip(missing, pats):
                cache[p] = a
        ok = np.array([int(a) in cache and int(b) in cache for a, b in pairs[idx]], dtype=bool)
        if ok.any():
            a = xp.stack([cache[int(p)] for p in pairs[idx[ok], 0]])
            b = xp.stack([cache[int(p)] for p in pairs[idx[ok], 1]])
            out[idx[ok]] = backend.asnumpy(grains.pattern_similarity(a, b, xp=xp))
        # pairs are ordered by their first point: points before it are never needed again
        first = int(pairs[idx[-1], 0])
        for p in [p for p in cache if p < first - grid.cols - 1]:
            del cache[p]
    return out
