"""``process``: a scan and its references in, a results file out.

Composes the run: opens the scan, gathers the references and the static background,
checks what would be written, builds the pipeline (so bad settings fail before any file
is touched), plans the tasks and hands them to an executor, writing results as they
arrive; then the strain pass when a material is given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os

import numpy as np

from .. import io as scan_io
from .. import timing
from ..backend import select_backend
from ..crystal import matrix_to_euler as euler_of
from ..errors import InputError
from ..hrebsd import binned_geometry, compute_strain, grain_geometry, resolve_geometry, scan_metadata
from ..icgn import ICGN_DESCRIPTIONS
from ..io.results import ResultsWriter, input_record, write_profile
from ..materials import stiffness_tensor
from ..progress import NullProgress, Progress
from ..references import ReferenceSet
from ..refine import POINT_DATASETS
from ..rois import layout_for
from ..status import NO_REFERENCE
from .dic import DicPipeline, dic_accumulate_pass, dic_layout, dic_strain_pass, load_distortion
from .dic import point_datasets as dic_point_datasets
from .executors import Executor, InlineExecutor
from .grain_references import grain_references
from .inputs import check_averaging, read_points, reference_set, static_background
from .output import check_output, default_output, on_disk
from .pc_calibration import calibrated_geometry
from .pipeline import Pipeline
from .planning import plan_tasks, processed_shape
from .simulated_references import POINT_DATASETS as SIMULATED_DATASETS
from .simulated_references import SimulatedReferences, point_geometry, simulated_geometry_maps, start_orientations
from .streaming import start_device_readers
from .tasks import Job
from .write_behind import WriteBehind

__all__ = ["process", "SIMULATED"]

#: ``ref`` that asks for a reference simulated per point.
SIMULATED = "simulated"


def process(scan, *, ref=None, ref_index=None, reference_index=None, output=None, config=None, run=None,
            executor: Executor | None = None, dataset=None, format=None, grid_shape=None,  # noqa: A002
            resume=False, overwrite=False, progress: Progress | None = None, command_line: str = "",
            orientations=None, grain_ids=None, grain_refs=None, profile: timing.StageProfile | None = None) -> str:
    """Correlate every pattern of ``scan`` with its reference and write a results file.

    Parameters
    ----------
    scan : str or PatternSource
        Scan file (any format :func:`ebsdxc.io.open_scan` reads: also a folder or glob of
        images) or an open source.
    ref : str, optional
        Reference pattern image (TIFF). Exactly one of ``ref`` and ``ref_index``. ``"simulated"``:
        each point's reference is simulated from ``config.strain.master_pattern`` at the
        point's orientation (``orientations``, else the scan's map, else the one orientation)
        and PC, giving absolute strain (:mod:`ebsdxc.run.simulated_references`).
    ref_index : int or (int, int) or list of them, optional
        Scan point(s) to use as references. Several points need ``reference_index``.
    reference_index : (rows, cols) int array, optional
        With several reference points: which of them (0 .. K-1) each scan point uses.
    output : str, optional
        Results file; default ``SCAN_STEM.ebsdxc.h5`` beside the scan.
    config : ProcessConfig
        The settings that define the result.
    run : RunConfig
        The settings that only define the run (device, batch, threads).
    executor : Executor, optional
        What runs the tasks (default: :class:`~ebsdxc.run.executors.InlineExecutor`, or a
        :class:`~ebsdxc.run.executors.ThreadExecutor` for ``run.executor == "threads"``;
        a Dask run passes :class:`ebsdxc.cluster.DaskExecutor`). Closed by the caller when
        passed in.
    dataset, format, grid_shape
        Passed to :func:`ebsdxc.io.open_scan`: which patterns of a file holding several, a
        reader to force, and (rows, cols) for files that do not record their grid.
    resume, overwrite : bool
        Continue an interrupted run / replace an existing results file.
    progress : Progress
    orientations : str, optional
        With a reference per grain (``config.grains.per_grain``) or simulated references: the orientation map
        (.ang, .ctf or a vendor h5 file); default: the one the scan file stores, else the
        grains are found from the patterns themselves.
    grain_ids : str, optional
        A file of grain ids (rows, cols) to use instead of a segmentation.
    grain_refs : str, optional
        A file of one ``row,col`` reference point per grain instead of ``config.grains.rule``.
    profile : ebsdxc.timing.StageProfile, optional
        Record busy time per stage (:data:`ebsdxc.timing.STAGES`) into it; its report
        (``profile.last_report``) is also stored in the results file (``/ebsdxc`` attribute
        ``profile``, JSON). Stages run in this process only: a Dask run's workers are not seen.

    Returns
    -------
    str
        Path of the results file.
    """
    from ..config import ProcessConfig, RunConfig

    config = config or ProcessConfig()
    run = run or RunConfig()
    progress = progress or NullProgress()
    if resume and overwrite:
        raise InputError("resume and overwrite exclude each other")
    source = (scan if isinstance(scan, scan_io.PatternSource)
              else scan_io.open_scan(scan, dataset=dataset, format=format, grid_shape=grid_shape))
    own = executor is None
    if own:
        executor = _local_executor(run)
    try:
        grain_inputs = {"orientations": orientations, "grain_ids": grain_ids, "grain_refs": grain_refs}
        with timing.activate(profile) if profile else contextlib.nullcontext(), timing.stage("other"):
            out = _process(source, ref, ref_index, reference_index, output, config, run, executor, resume,
                           overwrite, progress, command_line, grain_inputs)
        if profile is not None:
            profile.last_report = profile.report()
            write_profile(out, profile.last_report)
        return out
    finally:
        if own:
            executor.close()
        if not isinstance(scan, scan_io.PatternSource):
            source.close()


def _local_executor(run) -> Executor:
    from .executors import ThreadExecutor

    kind = getattr(run, "executor", "inline")
    if kind == "inline":
        return InlineExecutor()
    if kind == "threads":
        return ThreadExecutor(run.threads or 2)
    raise InputError(f"run.executor {kind!r} needs an executor object (a Dask run: ebsdxc.cluster.DaskExecutor)")


def _reference_params(references, ref, grains=None) -> dict:
    # Parameters are compared across resumes: keep what identifies the references.
    if grains is not None:
        return {"reference_per_grain": True, **grains.parameters()}
    if ref is not None:
        return {"reference": os.path.basename(os.fspath(ref))}
    points = [lab["point"] for lab in references.labels]
    if references.count == 1:
        return {"reference_index": points[0]}
    digest = hashlib.sha1(np.ascontiguousarray(references.index).tobytes()).hexdigest()
    return {"reference_index": points, "reference_map": digest}


def _calibration_preprocess(pre, source):
    """The run's preprocessing for the calibration's patterns, with a dynamic background
    division (by a Gaussian blur of a tenth of the pattern) when it has none: a simulation has
    no background to compare with."""
    if pre.dynamic_background_sigma is not None or pre.bandpass is not None:
        return pre
    return dataclasses.replace(pre, dynamic_background_sigma=max(source.pattern_shape) / 10.0)


def _check_dic_inputs(config, ref, reference_index, grain_inputs):
    if ref == SIMULATED or reference_index is not None or config.grains.per_grain or any(
            v is not None for v in grain_inputs.values()):
        raise InputError("DIC correlates every frame with one reference image: give --ref IMAGE or --ref-index N")
    if config.strain.enabled:
        raise InputError("DIC measures displacement and strain fields of images: strain.material (HR-EBSD) "
                         "does not apply")
    if config.refine.enabled:
        raise InputError("DIC refines every subset by IC-GN already: refine.method applies to EBSD patterns")


def _check_simulated_inputs(config, ref_index, reference_index, grain_inputs):
    strain = config.strain
    if ref_index is not None or reference_index is not None or config.grains.per_grain:
        raise InputError("simulated references are made for every point: give no reference points or grains with them")
    if grain_inputs.get("grain_ids") or grain_inputs.get("grain_refs"):
        raise InputError("simulated references are made for every point: grain files do not apply")
    if not strain.enabled:
        raise InputError("simulated references need the material (strain.material, e.g. Ni): the result is strain")
    if strain.master_pattern is None:
        raise InputError("simulated references need the master pattern (strain.master_pattern, an EMsoft file)")


def _first_finite(g) -> int:
    ok = np.isfinite(g).all(axis=(1, 2))
    if not ok.any():
        raise InputError("simulated references need orientations: the orientation map indexes no point")
    return int(np.flatnonzero(ok)[0])


def _simulated_references(config, source, geom, layout, shape, g) -> SimulatedReferences:
    from .. import materials
    from ..io.master_pattern import read_master_pattern

    scfg = config.strain
    try:
        mat = materials.material(scfg.material)
        mat = mat if mat.structure is not None and mat.a is not None else None
    except (TypeError, ValueError):
        mat = None
    master = read_master_pattern(scfg.master_pattern, material=mat)
    return SimulatedReferences(
        master=np.asarray(master.lambert, dtype=np.float32), orientation=g, pc=geom.pc.reshape(-1, 3).copy(),
        shape=tuple(shape), sample_tilt=geom.sample_tilt, detector_tilt=geom.detector_tilt,
        stiffness=stiffness_tensor(geom.stiffness), centres=np.asarray(layout.centres, dtype=np.float64),
        min_peak_height=scfg.min_peak_height, pc_refine=scfg.simulated_pc == "refine", label=master.to_dict())


def _check_grain_inputs(config, ref, ref_index, reference_index, grain_inputs) -> bool:
    per_grain = config.grains.per_grain
    given = [k for k, v in grain_inputs.items() if v is not None]
    if per_grain and (ref is not None or ref_index is not None or reference_index is not None):
        raise InputError("a reference per grain (grains.per_grain) excludes ref and ref_index: give one or the other")
    if given and not per_grain:
        raise InputError(f"{given[0]} is used with a reference per grain: set grains.per_grain")
    return per_grain


def _process(source, ref, ref_index, reference_index, output, config, run, executor, resume, overwrite, progress,
             command_line, grain_inputs):
    pre = config.preprocess
    check_averaging(pre, source)
    dic = config.dic.enabled
    if dic:
        _check_dic_inputs(config, ref, reference_index, grain_inputs)
    simulated = ref == SIMULATED
    if simulated:
        _check_simulated_inputs(config, ref_index, reference_index, grain_inputs)
        ref = None
    per_grain = False if simulated else _check_grain_inputs(config, ref, ref_index, reference_index, grain_inputs)
    references = None
    if not per_grain and not simulated:
        references = reference_set(source, pre, ref=ref, ref_index=ref_index, index=reference_index)
        if references.count > 1 and config.strain.enabled:
            raise InputError("strain against several references needs a reference per grain (grains.per_grain): "
                             "process without a material, or with one reference")
    shape = processed_shape(pre.binning, source.pattern_shape, source.path)
    dic_points = None
    if dic:
        layout, dic_points = dic_layout(config, shape)
        load_distortion(config, shape, source.grid.size)  # a bad model file stops the run before it starts
    else:
        layout = layout_for(config.roi, shape, path=source.path)
    static_bg = None
    if pre.static_background != "mean":  # checked before anything is written
        static_bg = static_background(pre.static_background, source)
    out = check_output(output or default_output(source.path), resume=resume, overwrite=overwrite,
                       inputs=[source.path, ref] + [v for v in grain_inputs.values() if v is not None]
                       + ([pre.static_background] if pre.static_background not in (None, "mean", "file") else []))
    backend = select_backend(run.device, threads=run.threads)
    with backend.use():
        if pre.static_background == "mean":
            static_bg = static_background("mean", source, backend)
        grains = None
        if per_grain:
            grains = grain_references(source, config, backend, static_background=static_bg, **grain_inputs)
            references = grains.references
        geom = calibration = sim = start = None
        gconfig = config
        if simulated:
            try:
                start = start_orientations(source, None, grain_inputs["orientations"])
            except ValueError as e:
                raise InputError(str(e), grain_inputs["orientations"] or source.path) from None
            if start is not None and config.strain.orientation is None:
                # the geometry's one orientation (the PC calibration's start): the map's first point
                first = start[_first_finite(start)]
                gconfig = config.replace(strain=dataclasses.replace(
                    config.strain, orientation=tuple(float(v) for v in euler_of(first))))
        if config.strain.enabled:  # before the long correlation pass: bad geometry fails at once
            geom, calibration = _strain_geometry(gconfig, source, shape, ref, 0 if simulated else ref_index, grains,
                                                 backend, orientations=start)
        if simulated:
            if start is None:
                start = np.broadcast_to(geom.orientation, (source.grid.size, 3, 3)).copy()
            if calibration is not None:  # refined with the PC at the calibration points: a better start there
                start = start.copy()
                flat = calibration.points[:, 0] * source.grid.cols + calibration.points[:, 1]
                start[flat[calibration.used]] = calibration.orientation[calibration.used]
            sim = _simulated_references(config, source, geom, layout, shape, start)
            first = _first_finite(sim.orientation)
            setup = sim.simulate(np, sim.master, sim.pc[first:first + 1], sim.orientation[first:first + 1])[0]
            references = ReferenceSet.single(setup, {"simulated": "the first point's, to set the pipeline up"})
        if dic:
            pipeline = DicPipeline(backend, config, layout, references, static_background=static_bg)
            pipeline.frames = source  # incremental mode reads the frame before a batch's first
        else:
            pipeline = Pipeline(backend, config, layout, references, static_background=static_bg, batch=run.batch,
                                simulated=sim)
            if isinstance(executor, InlineExecutor):  # it streams with this pipeline
                start_device_readers(pipeline, source)  # their start overlaps the set-up below
        try:
            job = Job(scan=source.path, dataset=source.metadata.get("dataset"), format=source.format,
                      grid=(source.grid.rows, source.grid.cols), config=config, layout=layout,
                      references=references, static_background=static_bg, device=run.device,
                      threads=run.threads, batch=run.batch, simulated=sim,
                      local={"source": source, "pipeline": pipeline})
            ref_params = ({"reference": sim.to_dict()} if simulated
                          else _reference_params(references, ref, grains))
            _run(job, executor, source, ref, ref_params, out, config, resume,
                 overwrite, progress, command_line, pipeline, grains, grain_inputs, calibration, sim, dic_points)
            with timing.stage("strain"):
                if dic:
                    if config.dic.incremental or config.dic.distortion is not None:
                        dic_accumulate_pass(out, config, dic_points, shape)
                    dic_strain_pass(out, config, dic_points)
                if simulated:
                    g_map, pc_map = simulated_geometry_maps(out)
                    compute_strain(out, config.strain, point_geometry(geom, config.strain, g_map, pc_map=pc_map,
                                                                      path=source.path),
                                   backend=backend, overwrite=True, progress=progress)
                elif geom is not None:
                    compute_strain(out, config.strain, geom, backend=backend, pipeline=pipeline,
                                   read_points=lambda flat, out=None: read_points(source, pre, flat, out),
                                   overwrite=True, progress=progress)
            return out
        finally:
            pipeline.close()


def _strain_geometry(config, source, shape, ref, ref_index, grains, backend, orientations=None):
    """The strain pass's geometry and, with ``strain.pc_calibrate``, the PC calibration it used
    (started from ``orientations`` (n_points, 3, 3) when given)."""
    pre = config.preprocess
    scfg, meta = binned_geometry(pre.binning, config.strain, scan_metadata(source))
    calibration = None
    pixel_size = scfg.pixel_size or meta.get("detector_pixel_size")
    if grains is None:
        geom = resolve_geometry(scfg, shape=shape, grid=source.grid, scan_meta=meta, scan_path=source.path,
                                ref_index=ref_index, ref_path=ref,
                                ref_meta=scan_io.read_reference_metadata(ref) if ref else None)
        if scfg.pc_calibrate:
            start = None if orientations is None else orientations.reshape(source.grid.rows, source.grid.cols, 3, 3)
            geom, calibration = calibrated_geometry(geom, scfg, source, ref_index=ref_index, backend=backend,
                                                    pixel_size=pixel_size, orientations=start,
                                                    preprocess=_calibration_preprocess(pre, source))
        return geom, calibration
    flat = grains.reference_flat()
    first = int(flat[flat >= 0][0])
    geom = resolve_geometry(scfg, shape=shape, grid=source.grid, scan_meta=meta, scan_path=source.path,
                            ref_index=first, per_grain=True)
    if scfg.pc_calibrate:
        geom, calibration = calibrated_geometry(geom, scfg, source, ref_index=first, backend=backend,
                                                orientations=grains.orientations, pixel_size=pixel_size,
                                                preprocess=_calibration_preprocess(pre, source))
    return grain_geometry(geom, scfg, reference_flat=flat, orientations=grains.orientations, phase=grains.phase,
                          phases=grains.phases,
                          path=grains.source if grains.source != "scan file" else source.path), calibration


def _as_recorded(out, params, config):
    """``params`` as the file records them when it records the same settings in an earlier
    layout of the parameters (files made before a setting was renamed or moved resume)."""
    import json

    from ..io.results import read_record

    try:
        stored = read_record(out).parameters
    except InputError:
        return params  # the writer says what is wrong with the file
    if stored == params:
        return params
    try:
        upgraded = {**{k: v for k, v in stored.items() if k not in ("static_background",)},
                    **type(config).from_parameters(stored).parameters()}
    except (KeyError, TypeError, ValueError):
        return params
    same = json.loads(json.dumps(upgraded, sort_keys=True)) == json.loads(json.dumps(params, sort_keys=True))
    return stored if same else params


def _run(job, executor, source, ref, ref_param, out, config, resume, overwrite, progress, command_line, pipeline,
         grains=None, grain_inputs=None, calibration=None, simulated=None, dic_points=None):
    scan_on_disk = on_disk(source.path)
    inputs = [input_record(scan_on_disk)] if os.path.exists(scan_on_disk) else []
    for path in [ref, *(grain_inputs or {}).values()]:
        if path is not None:
            inputs.append(input_record(path))
    params = {**config.parameters(), "scan": os.path.basename(source.path),
              "dataset": source.metadata.get("dataset"), **ref_param}
    # Written with the file (a resume rewrites only what changed): attributes added later may need
    # room a full disk no longer has.
    attrs = {"device": pipeline.backend.name, "engine": pipeline.engine.name,
             "pattern_shape": np.asarray(source.pattern_shape, dtype=np.int64), "scan_format": source.format}
    executor.describe(attrs.__setitem__)
    if resume:
        writer = ResultsWriter.resume(out, grid=source.grid, parameters=_as_recorded(out, params, config),
                                      inputs=inputs, command_line=command_line)
    else:
        refined = {"point_datasets": {}, "group_attrs": {}}
        if pipeline.refiner is not None:
            icgn_attrs = {k: json.dumps(v) if isinstance(v, (list, dict)) else v
                          for k, v in pipeline.refiner.to_dict().items()}
            icgn_attrs["codes"] = json.dumps({str(k): v for k, v in ICGN_DESCRIPTIONS.items()})
            refined["point_datasets"].update(POINT_DATASETS)
            refined["group_attrs"]["icgn"] = icgn_attrs
        if dic_points is not None:
            refined["point_datasets"].update(dic_point_datasets(job.layout.n))
            refined["dic_points"] = dic_points
        if simulated is not None:
            refined["point_datasets"].update(SIMULATED_DATASETS)
            refined["group_attrs"]["simulated_reference"] = {"record": json.dumps(simulated.to_dict())}
        writer = ResultsWriter.create(out, grid=source.grid, centres=job.layout.centres,
                                      roi_size=job.layout.size, parameters=params, inputs=inputs,
                                      command_line=command_line, overwrite=overwrite, attrs=attrs, **refined)
    with writer:
        for k, v in attrs.items():
            writer.set_attr(k, v)
        if calibration is not None:
            writer.write_record("pc_calibration", {
                "points": calibration.points, "pc": calibration.pc, "ncc": calibration.ncc,
                "used": calibration.used, "pc_map": calibration.pc_map,
                "orientation_euler": euler_of(calibration.orientation)},
                {"record": json.dumps(calibration.to_dict(), default=float), "pc_convention": "bruker",
                 "meaning": "pattern-centre calibration: refined PCs at 'points' (row, col), the fitted model "
                            "'pc_map' (rows, cols, 3) the strain pass uses; details in 'record'"})
        if not resume:
            if source.present is not None:
                writer.mark_missing(~source.present)
            if grains is not None:
                writer.write_grains(grains.grain_id, grains.reference_point, reference_euler=grains.reference_euler(),
                                    phase=grains.grain_phase(),
                                    kam=None if grains.kam is None else np.degrees(grains.kam), attrs=grains.attrs())
                writer.mark_status(grains.no_reference, NO_REFERENCE)
            if simulated is not None:
                no_orientation = ~np.isfinite(simulated.orientation).all(axis=(1, 2))
                if no_orientation.any():
                    writer.mark_status(no_orientation.reshape(source.grid.rows, source.grid.cols), NO_REFERENCE)
            elif job.references.count > 1:
                writer.write_references(job.references.index.reshape(source.grid.rows, source.grid.cols),
                                        job.references.labels)
        done = writer.done
        progress.start(source.n_patterns, done=int(done.sum()), desc=os.path.basename(source.path))
        try:
            tasks = plan_tasks(done, executor.plan_rows(source.grid.cols))

            def write(start, disp, height, status, extra=None):
                with timing.stage("write"):
                    writer.write(start, disp, height, status, extra)
                progress.update(len(disp))

            try:
                with WriteBehind(write) as behind:  # the device computes the next batch meanwhile
                    executor.run_tasks(job, tasks, behind.put)
            finally:
                sizes = executor.batch_sizes(job)
                if sizes:
                    writer.set_attr("batch_sizes", np.asarray(sizes, dtype=np.int64))
                reading = executor.readings(job)
                if reading:  # which readers fed the run decides how fast it could go
                    writer.set_attr("pattern_reading", ", ".join(reading))
            writer.finish()
        finally:
            progress.close()
    return out
