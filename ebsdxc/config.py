"""The configuration: what a run computes and how it runs, read from TOML recipes.

One dataclass per recipe table, and **the TOML keys are the field names**::

    [roi]          RoiConfig         layout = "grid" | "ring" | "file", grid = [R, C], size, margin,
                                     drop_corners, n, radius, include_centre, centres = "file.csv"
    [preprocess]   PreprocessConfig  static_background = "mean" | "file" | "image.tif", static_operation,
                                     dynamic_background_sigma, bandpass = [low_sigma, high_sigma], window,
                                     bandpass_kind = "gaussian" | "erf", bandpass_cutoffs = [low, high],
                                     bandpass_width, binning, mask = "circle" | "none", mask_centre = [x, y],
                                     mask_radius, average_neighbours, average_kernel, average_sigma
                                     (:class:`ebsdxc.preprocess.PreprocessConfig`)
    [correlation]  EngineConfig      engine, mode = "full" | "window", max_shift, subpixel, upsample,
                                     compensate, circular, kernel (:class:`ebsdxc.engines.base.EngineConfig`)
    [strain]       StrainConfig      material, pc, pc_ref, pc_convention, pc_map, pixel_size, binning,
                                     orientation, sample_tilt, detector_tilt, remap_threshold_deg,
                                     min_peak_height, outlier_sigma, residual_floor_px, min_rois, step,
                                     gnd, slip_systems, master_pattern, pc_calibrate,
                                     pc_calibration_points, pc_model (:class:`ebsdxc.hrebsd.StrainConfig`)
    [grains]       GrainsConfig      per_grain, tolerance_deg, min_size, rule = "kam" | "quality" | "centre",
                                     min_boundary_distance, similarity_threshold
    [dic]          DicConfig         enabled, subset, step, search, coarse_size, shape_function,
                                     max_iterations, tolerance_px, min_zncc, strain_window,
                                     guess = "propagate" | "search", seed_spacing, mask, polygon,
                                     incremental, distortion, frame_times, reference_time, tile,
                                     tile_margin (:class:`ebsdxc.dic.DicConfig`)
    [refine]       RefineConfig      method = "none" | "icgn", max_iterations, tolerance_px, margin,
                                     max_outside, min_zncc, region = "pattern" | "rois"
                                     (:class:`ebsdxc.refine.RefineConfig`)
    [run]          RunConfig         device, batch, threads, executor = "inline" | "threads" | "dask"
    [cluster]      ClusterConfig     address = "local" | "slurm" | "pbs" | "tcp://host:port", workers,
                                     retries, rows_per_task; sub-table [cluster.job]: dask-jobqueue
                                     keyword arguments (queue, account, walltime, cores, memory, ...)

The first seven tables form a :class:`ProcessConfig`: the settings that define the result,
stored in the results file (:meth:`ProcessConfig.parameters`) and compared on resume. ``[run]``
and ``[cluster]`` form a :class:`RunConfig`: where and how fast it runs, never stored.

:func:`load_config` reads the defaults, then a recipe (a path, or the name of a shipped one:
``paper-86roi-96``), then overrides in the same nested shape (what the command line gives),
and validates the result once. Each rule lives in the dataclass it is about; errors name the
setting by its path in the recipe (``preprocess.bandpass_cutoffs``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import os
import re
from dataclasses import dataclass, field

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from ._resources import data_dir
from .dic import DicConfig
from .engines.base import EngineConfig
from .errors import InputError
from .hrebsd import StrainConfig
from .preprocess import PreprocessConfig
from .refine import RefineConfig
from .rois import MIN_ROI_SIZE

__all__ = ["RoiConfig", "ProcessConfig", "ClusterConfig", "RunConfig", "load_config", "read_recipe",
           "shipped_recipes", "jobqueue_keys", "GrainsConfig", "REF_RULES", "TABLES", "ROI_LAYOUTS", "EXECUTORS",
           "CLUSTER_KINDS"]

ROI_LAYOUTS = ("grid", "ring", "file")
EXECUTORS = ("inline", "threads", "dask")
CLUSTER_KINDS = ("local", "slurm", "pbs")  # or a scheduler address tcp://host:port


def _whole(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def _path(name, v):
    if v is None:
        return None
    if not isinstance(v, (str, os.PathLike)) or not os.fspath(v):
        raise ValueError(f"{name} must be a file path, got {v!r}")
    return os.fspath(v)


# --------------------------------------------------------------------------- what is computed


@dataclass(frozen=True)
class RoiConfig:
    """Where the regions of interest (ROIs) sit on the pattern (a recipe's ``[roi]`` table).

    Attributes
    ----------
    layout : {"grid", "ring", "file"}
        A regular grid, a ring about the pattern centre, or centres read from a file.
    grid : (int, int)
        Grid layout: ROI rows and columns.
    size : int or None
        ROI side in px (of the patterns after binning); default: the largest multiple of 8
        not above a quarter of the smaller pattern side.
    margin : int
        Grid layout: pixels kept free between the outermost ROIs and the pattern edge.
    drop_corners : bool
        Grid layout: leave out the four corner ROIs.
    n, radius, include_centre
        Ring layout: ``n`` ROIs on a ring of ``radius`` px (default: as far out as they fit),
        plus one at the centre.
    centres : str or None
        File layout: a text file of ROI centres, one ``x y`` per line.
    """

    layout: str = "grid"
    grid: tuple[int, int] = (5, 5)
    size: int | None = None
    margin: int = 0
    drop_corners: bool = False
    n: int = 8
    radius: float | None = None
    include_centre: bool = True
    centres: str | None = None

    def __post_init__(self):
        if self.layout not in ROI_LAYOUTS:
            raise ValueError(f"roi.layout must be grid, ring or file, got {self.layout!r}")
        try:
            grid = tuple(self.grid)
        except TypeError:
            grid = ()
        if len(grid) != 2 or not all(_whole(g) and g >= 1 for g in grid):
            raise ValueError(f"roi.grid must be two whole numbers >= 1 (rows, columns), got {self.grid!r}")
        object.__setattr__(self, "grid", (int(grid[0]), int(grid[1])))
        if self.size is not None and not (_whole(self.size) and self.size >= MIN_ROI_SIZE):
            raise ValueError(f"roi.size must be a whole number of px >= {MIN_ROI_SIZE} (smaller ROIs hold no "
                             f"correlation peak), got {self.size!r}")
        if not (_whole(self.margin) and self.margin >= 0):
            raise ValueError(f"roi.margin must be a whole number of px >= 0, got {self.margin!r}")
        if not (_whole(self.n) and self.n >= 1):
            raise ValueError(f"roi.n (ROIs on the ring) must be a whole number >= 1, got {self.n!r}")
        if self.radius is not None and not (_real(self.radius) and self.radius > 0):
            raise ValueError(f"roi.radius must be a number of px > 0, got {self.radius!r}")
        for name in ("drop_corners", "include_centre"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"roi.{name} must be true or false, got {getattr(self, name)!r}")
        object.__setattr__(self, "centres", _path("roi.centres", self.centres))
        if self.layout == "file" and self.centres is None:
            raise ValueError("roi.layout file needs roi.centres (a file of ROI centres)")


def _fits_rois(corr: EngineConfig, roi: RoiConfig) -> EngineConfig:
    """``corr``, checked against the ROI size where the recipe gives one (a default size is
    known only with the patterns: the run checks it then, :meth:`EngineConfig.shift_refusal`)."""
    why = corr.shift_refusal(roi.size) if roi.size is not None else None
    if why is not None:
        raise ValueError(why)
    return corr


REF_RULES = ("kam", "quality", "centre")


@dataclass(frozen=True)
class GrainsConfig:
    """A reference per grain (a recipe's ``[grains]`` table).

    Attributes
    ----------
    per_grain : bool
        Correlate each point against a reference point of its own grain.
    tolerance_deg : float
        Neighbours misoriented by less than this (degrees, crystal symmetry included) are one
        grain.
    min_size : int
        Grains of fewer points get no reference: their points are flagged, not correlated.
    rule : {"kam", "quality", "centre"}
        How each grain's reference point is chosen: the lowest kernel average misorientation
        among points of good pattern quality away from the boundary; the best pattern quality
        away from the boundary; the in-grain point nearest the grain's centroid.
    min_boundary_distance : int
        Scan steps a reference keeps from the grain boundary where the grain allows it.
    similarity_threshold : float or None
        Scans without orientations: neighbours whose preprocessed patterns correlate (NCC)
        below this are in different grains (``None``: a rule from the scan's own similarities).
    """

    per_grain: bool = False
    tolerance_deg: float = 5.0
    min_size: int = 5
    rule: str = "kam"
    min_boundary_distance: int = 2
    similarity_threshold: float | None = None

    def __post_init__(self):
        if not isinstance(self.per_grain, bool):
            raise ValueError(f"grains.per_grain must be true or false, got {self.per_grain!r}")
        if not (_real(self.tolerance_deg) and 0 < self.tolerance_deg < 60):
            raise ValueError(f"grains.tolerance_deg must be a number of degrees in (0, 60), got {self.tolerance_deg!r}")
        for name in ("min_size", "min_boundary_distance"):
            v = getattr(self, name)
            if not (_whole(v) and v >= (1 if name == "min_size" else 0)):
                raise ValueError(f"grains.{name} must be a whole number >= {1 if name == 'min_size' else 0}, "
                                 f"got {v!r}")
        if self.rule not in REF_RULES:
            raise ValueError(f"grains.rule must be one of {', '.join(REF_RULES)}, got {self.rule!r}")
        t = self.similarity_threshold
        if t is not None and not (_real(t) and -1 < t < 1):
            raise ValueError(f"grains.similarity_threshold must be a correlation coefficient in (-1, 1), got {t!r}")


@dataclass(frozen=True)
class ProcessConfig:
    """The settings that define the result: ``[roi]``, ``[preprocess]``, ``[correlation]``, ``[strain]``.

    :meth:`parameters` is what the results file records (and what ``resume`` compares); the
    run's own settings are in :class:`RunConfig`.
    """

    roi: RoiConfig = field(default_factory=RoiConfig)
    preprocess: PreprocessConfig = field(default_factory=PreprocessConfig)
    correlation: EngineConfig = field(default_factory=EngineConfig)
    strain: StrainConfig = field(default_factory=StrainConfig)
    grains: GrainsConfig = field(default_factory=GrainsConfig)
    refine: RefineConfig = field(default_factory=RefineConfig)
    dic: DicConfig = field(default_factory=DicConfig)

    def parameters(self) -> dict:
        """JSON-able parameters stored in the results file.

        Left out: ``strain`` (the strain pass records its own; it does not change the shifts)
        and ``correlation.engine`` (every engine gives the same shifts; it changes speed).
        """
        d = dataclasses.asdict(self)
        d.pop("strain")
        if not self.grains.per_grain:
            d.pop("grains")  # one reference: the record stays what it was before grains existed
        if not self.refine.enabled:
            d.pop("refine")  # likewise without refinement
        if not self.dic.enabled:
            d.pop("dic")
        d["correlation"].pop("engine", None)
        return _jsonable(d)

    @classmethod
    def from_parameters(cls, params: dict) -> ProcessConfig:
        """The configuration a results file's ``parameters`` record (for re-correlating points).

        Also reads records of earlier versions: ``static_background`` at the top level,
        ``preprocess.dynamic_sigma``, and tables without the keys added since (defaults).
        """
        pre = dict(params.get("preprocess") or {})
        if "dynamic_sigma" in pre:
            pre.setdefault("dynamic_background_sigma", pre.pop("dynamic_sigma"))
        if "static_background" in params:
            pre.setdefault("static_background", params["static_background"])
        tables = {"roi": dict(params.get("roi") or {}), "preprocess": pre,
                  "correlation": dict(params.get("correlation") or {}), "grains": dict(params.get("grains") or {}),
                  "refine": dict(params.get("refine") or {}), "dic": dict(params.get("dic") or {})}
        for name, table in tables.items():
            unknown = set(table) - _KEYS[name]
            if unknown:
                raise ValueError(f"unknown parameter(s) {', '.join(f'{name}.{k}' for k in sorted(unknown))} "
                                 "(results of a newer ebsdxc?)")
        return cls(roi=RoiConfig(**tables["roi"]), preprocess=PreprocessConfig(**tables["preprocess"]),
                   correlation=EngineConfig(**tables["correlation"]), grains=GrainsConfig(**tables["grains"]),
                   refine=RefineConfig(**tables["refine"]), dic=DicConfig(**tables["dic"]))

    def replace(self, **kw) -> ProcessConfig:
        return dataclasses.replace(self, **kw)


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


# --------------------------------------------------------------------------- how it runs


@dataclass(frozen=True)
class ClusterConfig:
    """How to reach or start a Dask cluster (a recipe's ``[cluster]`` table).

    Attributes
    ----------
    address : str
        ``local``, ``slurm``, ``pbs`` or a scheduler address ``tcp://host:port``.
    workers : int or None
        Local: worker processes (default: one per GPU, else one per two cores).
        Job queues: number of jobs to start.
    retries : int
        How often a failing task is tried again before the run stops.
    rows_per_task : int or None
        Scan rows per task (default: about 2048 patterns).
    job : dict
        dask-jobqueue settings for ``slurm``/``pbs`` (``queue``, ``account``, ``walltime``,
        ``cores``, ``memory``, ``processes``, ``job_extra_directives``, ...): the
        ``[cluster.job]`` table, checked against dask-jobqueue by :func:`load_config`.
    """

    address: str = "local"
    workers: int | None = None
    retries: int = 2
    rows_per_task: int | None = None
    job: dict = field(default_factory=dict)

    def __post_init__(self):
        a = self.address
        if not isinstance(a, str) or not (a in CLUSTER_KINDS or "://" in a):
            raise ValueError(f"cluster.address must be local, slurm, pbs or a scheduler address such as "
                             f"tcp://host:8786, got {a!r}")
        for name, low, what in (("workers", 1, "local workers, or jobs for slurm/pbs"),
                                ("retries", 0, "times a failed task is tried again"),
                                ("rows_per_task", 1, "scan rows per task")):
            v = getattr(self, name)
            if v is None and name != "retries":
                continue
            if not (_whole(v) and v >= low):
                raise ValueError(f"cluster.{name} ({what}) must be a whole number >= {low}, got {v!r}")
        if not isinstance(self.job, dict):
            raise ValueError(f"cluster.job must be a table: [cluster.job] with dask-jobqueue settings, "
                             f"got {self.job!r}")


@dataclass(frozen=True)
class RunConfig:
    """The settings that only define the run (a recipe's ``[run]`` and ``[cluster]`` tables).

    They change where and how fast the work runs, never the results: they are not stored in
    the results file and not compared on resume.

    Attributes
    ----------
    device : str
        ``auto`` (a GPU when there is one), ``cpu``, ``cuda`` or ``cuda:N``.
    batch : int or None
        Patterns per batch; ``None`` (``"auto"`` in a recipe): sized from the memory.
    threads : int or None
        CPU worker threads (backend workers); ``None`` (``"auto"``): all cores.
    executor : {"inline", "threads", "dask"}
        What runs the tasks: this thread, a thread pool, or the Dask cluster of ``cluster``.
    cluster : ClusterConfig
        The ``[cluster]`` table: where a ``dask`` run goes.
    """

    device: str = "auto"
    batch: int | None = None
    threads: int | None = None
    executor: str = "inline"
    cluster: ClusterConfig = field(default_factory=ClusterConfig)

    def __post_init__(self):
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(f"run.device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        for name in ("batch", "threads"):
            v = getattr(self, name)
            if v == "auto":
                object.__setattr__(self, name, None)
            elif v is not None and not (_whole(v) and v >= 1):
                raise ValueError(f"run.{name} must be a whole number >= 1 or auto, got {v!r}")
        if self.executor not in EXECUTORS:
            raise ValueError(f"run.executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        if isinstance(self.cluster, dict):
            object.__setattr__(self, "cluster", ClusterConfig(**self.cluster))
        elif not isinstance(self.cluster, ClusterConfig):
            raise ValueError(f"run.cluster must be a ClusterConfig, got {self.cluster!r}")
        a = self.cluster.address
        if self.executor == "dask" and a in ("slurm", "pbs") and not self.cluster.job:
            raise ValueError(f"cluster.address {a} needs job settings: a recipe with a [cluster.job] table "
                             f"(e.g. the shipped recipe cluster-{a})")


# --------------------------------------------------------------------------- recipes

TABLES = ("roi", "preprocess", "correlation", "strain", "grains", "refine", "dic", "run", "cluster")


def _fields(cls, *, without=()) -> set:
    return {f.name for f in dataclasses.fields(cls)} - set(without)


_KEYS = {"roi": _fields(RoiConfig), "preprocess": _fields(PreprocessConfig), "correlation": _fields(EngineConfig),
         "strain": _fields(StrainConfig), "grains": _fields(GrainsConfig), "refine": _fields(RefineConfig),
         "dic": _fields(DicConfig),
         "run": _fields(RunConfig, without=("cluster",)),
         "cluster": _fields(ClusterConfig)}
# Settings that name files: relative paths resolve against the recipe's folder.
_PATH_KEYS = {("roi", "centres"), ("preprocess", "static_background"), ("strain", "slip_systems"),
              ("strain", "master_pattern"), ("dic", "mask"),
              ("dic", "distortion")}
_NOT_PATHS = {"mean", "file"}


def shipped_recipes() -> dict:
    """Name -> path of the recipes shipped in ``pipelines/``."""
    out = {}
    for p in data_dir("pipelines").iterdir():
        if p.name.endswith(".toml"):
            out[p.name[:-5]] = str(p)
    return out


def read_recipe(name_or_path) -> tuple[str, dict]:
    """(path, parsed TOML) of a recipe file or of the shipped recipe of that name, unchecked
    (:func:`load_config` checks and reads it)."""
    path = os.fspath(name_or_path)
    if not os.path.exists(path):
        shipped = shipped_recipes()
        stem = os.path.basename(path)[:-5] if path.endswith(".toml") else path
        if stem in shipped and os.sep not in path:
            path = shipped[stem]
        else:
            raise InputError("no such recipe file (shipped recipes: " + ", ".join(sorted(shipped)) + ")",
                             path)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"not a valid TOML recipe ({e})", path) from None
    except OSError as e:
        raise InputError(f"cannot read the recipe ({e.strerror or e})", path) from None
    return path, doc


def _check_tables(doc, path) -> None:
    """Unknown tables and keys are errors naming the file (``path``; ``None`` for overrides)."""
    for table, values in doc.items():
        if table not in _KEYS:
            raise InputError(f"unknown table [{table}]{_close(table, _KEYS)} (known: {', '.join(TABLES)})", path)
        if not isinstance(values, dict):
            raise InputError(f"[{table}] must be a table", path)
        unknown = sorted(set(values) - _KEYS[table])
        if unknown:
            hint = _close(unknown[0], _KEYS[table]) if len(unknown) == 1 else ""
            extra = "; dask-jobqueue settings go in [cluster.job]" if table == "cluster" else ""
            raise InputError(f"unknown key(s) in [{table}]: {', '.join(unknown)}{hint} "
                             f"(known: {', '.join(sorted(_KEYS[table]))}{extra})", path)


def _close(word, options) -> str:
    match = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean {match[0]}?)" if match else ""


def _resolve_paths(doc: dict, folder: str) -> dict:
    """``doc`` with relative file paths joined to ``folder``."""
    out = {table: dict(values) for table, values in doc.items()}
    for table, key in _PATH_KEYS:
        v = out.get(table, {}).get(key)
        if isinstance(v, (str, os.PathLike)) and os.fspath(v) and os.fspath(v) not in _NOT_PATHS:
            out[table][key] = os.path.normpath(os.path.join(folder, os.fspath(v)))
    return out


def load_config(recipe=None, overrides: dict | None = None) -> tuple[ProcessConfig, RunConfig]:
    """The configuration of ``recipe`` with ``overrides`` over it.

    Parameters
    ----------
    recipe : str or path-like, optional
        A TOML recipe file, or the name of a shipped one (see :func:`shipped_recipes`).
        Relative file paths in it (``roi.centres``, ``preprocess.static_background``) are
        relative to its folder.
    overrides : dict, optional
        Settings over the recipe, in the recipe's shape, e.g.
        ``{"roi": {"size": 48}, "run": {"batch": 64}}``; relative paths are relative to the
        current folder. Keys a table gives replace those of the recipe; choices replace what
        they exclude (see :meth:`ebsdxc.preprocess.PreprocessConfig.from_tables`).

    Returns
    -------
    (ProcessConfig, RunConfig)

    Raises
    ------
    InputError
        Unknown tables or keys, or values that break a rule; naming the recipe file when
        the setting came from it, and the setting by its path (``preprocess.binning``).
    """
    layers = []  # (tables, recipe path or None)
    if recipe is not None:
        path, doc = read_recipe(recipe)
        _check_tables(doc, path)
        layers.append((_resolve_paths(doc, os.path.dirname(os.path.abspath(path))), path))
    if overrides:
        _check_tables(overrides, None)
        layers.append((_resolve_paths(overrides, os.getcwd()), None))
    for doc, path in layers:
        _check_job_table(doc.get("cluster", {}), path)

    def build(table, make):
        given = [doc[table] for doc, _ in layers if table in doc]
        try:
            return make(given)
        except (TypeError, ValueError) as e:
            raise _blame(e, table, layers) from None

    def merged(tables):
        out = {}
        for t in tables:
            out.update(t)
        return out

    roi = build("roi", lambda ts: RoiConfig(**merged(ts)))
    pre = build("preprocess", lambda ts: PreprocessConfig.from_tables(*ts))
    corr = build("correlation", lambda ts: _fits_rois(EngineConfig(**merged(ts)), roi))
    strain = build("strain", lambda ts: StrainConfig(**merged(ts)))
    grains = build("grains", lambda ts: GrainsConfig(**merged(ts)))
    refine = build("refine", lambda ts: RefineConfig(**merged(ts)))
    dic = build("dic", lambda ts: DicConfig(**merged(ts)))

    def cluster_table(ts):
        out = merged(ts)
        jobs = [t["job"] for t in ts if "job" in t]
        if jobs and all(isinstance(j, dict) for j in jobs):
            out["job"] = merged(jobs)
        return out

    cluster = build("cluster", lambda ts: ClusterConfig(**cluster_table(ts)))
    run = build("run", lambda ts: RunConfig(**merged(ts), cluster=cluster))
    if cluster.job:
        _check_job_keys(cluster.job, layers)
    return ProcessConfig(roi=roi, preprocess=pre, correlation=corr, strain=strain, grains=grains,
                         refine=refine, dic=dic), run


_SETTING = re.compile(r"\b(" + "|".join(TABLES) + r")\.(\w+)")


def _blame(error, table, layers) -> InputError:
    """The InputError for a value that broke a rule: against the recipe when the settings the
    message names came from it, else without a file (the overrides)."""
    if isinstance(error, InputError):
        return error
    text = str(error) if isinstance(error, ValueError) else f"invalid [{table}] value ({error})"
    named = [(t, k) for t, k in _SETTING.findall(text) if k in _KEYS[t]]
    for doc, path in reversed(layers):
        if any(k in doc.get(t, {}) for t, k in named):
            return InputError(text, path)
    for doc, path in reversed(layers):
        if table in doc:
            return InputError(text, path)
    return InputError(text)


# --------------------------------------------------------------------------- [cluster.job]

# Arguments of the dask-jobqueue classes that a recipe cannot or must not set: objects TOML
# cannot express, and what ebsdxc.cluster.connect sets itself ([cluster] workers = jobs).
_JOB_NOT_SETTABLE = {"self", "scheduler", "name", "n_workers", "job_cls", "loop", "security",
                     "asynchronous", "scheduler_cls"}

# Old names dask-jobqueue still takes (with a FutureWarning) -> their replacements.
_JOB_RENAMED = {"extra": "worker_extra_args", "job_extra": "job_extra_directives",
                "env_extra": "job_script_prologue", "header_skip": "job_directives_skip",
                "project": "account"}


def _init_params(cls, *, follow_kwargs: bool) -> set:
    """Named ``__init__`` arguments of ``cls`` (and of its base classes that ``**kwargs`` go to)."""
    import inspect

    names = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names |= {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        if not follow_kwargs or not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return names


def jobqueue_keys(kind: str) -> set | None:
    """The ``[cluster.job]`` keys dask-jobqueue accepts for ``kind`` ("slurm" or "pbs").

    ``None`` when dask-jobqueue is not installed here (the keys are then not checked: the
    recipe may be written on a machine without it).
    """
    try:
        import dask_jobqueue
    except ImportError:
        return None
    cluster_cls = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster}[kind]
    job_cls = getattr(cluster_cls, "job_cls", None)
    # The cluster's own arguments; its **job_kwargs go to the job class (SLURMJob, PBSJob), whose
    # **kwargs go on to dask_jobqueue.core.Job.
    keys = _init_params(cluster_cls, follow_kwargs=False)
    if job_cls is not None:
        keys |= _init_params(job_cls, follow_kwargs=True)
    keys -= _JOB_NOT_SETTABLE
    keys -= {old for old, new in _JOB_RENAMED.items() if new in keys}
    return keys


def _check_job_table(table: dict, path) -> None:
    """A ``[cluster.job]`` table goes with a job queue: refused beside another address of the same table."""
    job, address = table.get("job"), table.get("address")
    if isinstance(job, dict) and job and isinstance(address, str) and address not in ("slurm", "pbs"):
        raise InputError(f"[cluster.job] settings are for address = \"slurm\" or \"pbs\", not {address!r}: "
                         f"remove the table or change the address", path)


def _check_job_keys(job: dict, layers) -> None:
    """Every ``[cluster.job]`` key must be an argument of the job queue's dask-jobqueue class
    (of either class while no layer names the address)."""
    addresses = [doc["cluster"]["address"] for doc, _ in layers if "address" in doc.get("cluster", {})]
    address = addresses[-1] if addresses else None
    kinds = (address,) if address in ("slurm", "pbs") else ("slurm", "pbs")
    accepted = set()
    for kind in kinds:
        keys = jobqueue_keys(kind)
        if keys is None:  # no dask-jobqueue here: connect() reports bad keys where it runs
            return
        accepted |= keys
    for key in sorted(job):
        if key in accepted:
            continue
        if key == "n_workers":
            hint = " ([cluster] workers sets the number of jobs)"
        elif key in _JOB_NOT_SETTABLE:
            hint = " (set by ebsdxc, not by a recipe)"
        elif _JOB_RENAMED.get(key) in accepted:
            hint = f" (renamed to {_JOB_RENAMED[key]})"
        else:
            hint = ""
        path = next((p for doc, p in reversed(layers) if key in (doc.get("cluster", {}).get("job") or {})), None)
        classes = " / ".join({"slurm": "SLURMCluster", "pbs": "PBSCluster"}[k] for k in kinds)
        raise InputError(f"unknown key in [cluster.job]: {key}{hint}; dask-jobqueue's {classes} takes: "
                         f"{', '.join(sorted(accepted))}", path)
