"""Processing options in one place, read from TOML recipes and overridden by the CLI.

A recipe (see ``pipelines/*.toml``) has up to five tables::

    [roi]          layout = "grid" | "ring" | "file", grid = [R, C], size = N, margin,
                   drop_corners, n, radius, include_centre, centres = "file.csv"
    [preprocess]   static_background = "mean" | "file.tif", static_operation,
                   dynamic_background_sigma, bandpass = [low_sigma, high_sigma], window,
                   bandpass_kind = "gaussian" | "erf", bandpass_cutoffs = [low, high] (cycles/px),
                   bandpass_width, binning, mask = "circle" | "none", mask_centre = [x, y],
                   mask_radius, average_neighbours, average_kernel, average_sigma
                   (see :class:`ebsdxc.preprocess.PreprocessConfig`)
    [correlation]  engine, mode = "full" | "window", max_shift, subpixel, upsample, compensate,
                   circular, kernel (direct engine: "auto" or e.g. "grouped_overlap:g=4,kr=8")
    [strain]       material, pc, pc_ref, pc_convention, pc_map, pixel_size, binning, orientation,
                   sample_tilt, detector_tilt, remap_threshold_deg, min_peak_height, outlier_sigma,
                   residual_floor_px, min_rois (see :class:`ebsdxc.hrebsd.StrainConfig`)
    [run]          batch, device
    [cluster]      address = "local" | "slurm" | "pbs" | "tcp://host:port", workers, retries,
                   rows_per_task; sub-table [cluster.job]: dask-jobqueue keyword arguments
                   (queue, account, walltime, cores, memory, processes, job_extra_directives, ...)

Shipped recipes can be named without their folder: ``--pipeline paper-86roi-96``.

The ``[cluster]`` table says where a run goes, not what it computes: :func:`load_recipe` skips
it (it never enters :meth:`ProcessConfig.parameters`, so the results file does not depend on
it) and :func:`load_cluster_config` reads it into an :class:`ebsdxc.cluster.ClusterConfig`.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from ._resources import data_dir
from .cluster import CLUSTER_KINDS, ClusterConfig
from .engines.base import EngineConfig
from .errors import InputError
from .hrebsd import StrainConfig
from .preprocess import PreprocessConfig

__all__ = ["RoiConfig", "ProcessConfig", "load_recipe", "load_cluster_config", "shipped_recipes"]


@dataclass(frozen=True)
class RoiConfig:
    layout: str = "grid"
    grid: tuple[int, int] = (5, 5)
    size: int | None = None
    margin: int = 0
    drop_corners: bool = False
    n: int = 8
    radius: float | None = None
    include_centre: bool = True
    centres: str | None = None


@dataclass(frozen=True)
class ProcessConfig:
    """Everything that determines the results (``run`` options excepted)."""

    roi: RoiConfig = field(default_factory=RoiConfig)
    preprocess: PreprocessConfig = field(default_factory=PreprocessConfig)
    static_background: str | None = None
    correlation: EngineConfig = field(default_factory=EngineConfig)
    strain: StrainConfig = field(default_factory=StrainConfig)
    engine: str = "auto"
    batch: int | None = None
    device: str = "auto"

    def parameters(self) -> dict:
        """JSON-able parameters stored in the results file (``batch``/``device`` left out:
        they change speed, not results)."""
        d = dataclasses.asdict(self)
        d.pop("batch")
        d.pop("device")
        d.pop("engine")
        d.pop("strain")  # the strain pass keeps its own parameters; it does not change the shifts
        return _jsonable(d)

    @classmethod
    def from_parameters(cls, params: dict) -> "ProcessConfig":
        """The configuration a results file's ``parameters`` record (for re-correlating points)."""
        roi = dict(params["roi"])
        if roi.get("grid") is not None:
            roi["grid"] = tuple(roi["grid"])
        pre = dict(params["preprocess"])
        for k in ("bandpass", "bandpass_cutoffs", "mask_centre"):
            if pre.get(k) is not None:
                pre[k] = tuple(pre[k])
        return cls(roi=RoiConfig(**roi), preprocess=PreprocessConfig(**pre),
                   static_background=params.get("static_background"),
                   correlation=EngineConfig(**params["correlation"]))

    def replace(self, **kw) -> "ProcessConfig":
        return dataclasses.replace(self, **kw)


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def shipped_recipes() -> dict:
    """Name -> path of the recipes shipped in ``pipelines/``."""
    out = {}
    for p in data_dir("pipelines").iterdir():
        if p.name.endswith(".toml"):
            out[p.name[:-5]] = str(p)
    return out


_KEYS = {
    "roi": {f.name for f in dataclasses.fields(RoiConfig)},
    "preprocess": {"static_background", "static_operation", "dynamic_background_sigma",
                   "bandpass", "window", "bandpass_kind", "bandpass_cutoffs", "bandpass_width", "binning",
                   "mask", "mask_centre", "mask_radius", "average_neighbours", "average_kernel",
                   "average_sigma"},
    "correlation": {"engine", "mode", "max_shift", "subpixel", "upsample", "compensate", "circular", "kernel"},
    "strain": {f.name for f in dataclasses.fields(StrainConfig)},
    "run": {"batch", "device"},
}


def _preprocess_extras(pre: dict) -> dict:
    """PreprocessConfig fields of the band-pass kind, binning, mask and averaging keys."""
    out = {}
    for key in ("bandpass_kind", "bandpass_width", "binning", "mask_radius", "average_neighbours",
                "average_kernel", "average_sigma"):
        if key in pre:
            out[key] = pre[key]
    for key in ("bandpass_cutoffs", "mask_centre"):
        if key in pre:
            v = pre[key]
            if not isinstance(v, list):
                raise ValueError(f"{key} must be a list of two numbers, got {v!r}")
            out[key] = tuple(v)
    if "mask" in pre:  # TOML has no null: "none" switches the mask off
        mask = pre["mask"]
        out["mask"] = None if isinstance(mask, str) and mask.lower() == "none" else mask
        if out["mask"] is None:
            out.setdefault("mask_centre", None)
            out.setdefault("mask_radius", None)
    kind = out.get("bandpass_kind")
    if kind == "erf" and "bandpass" not in pre:
        out["bandpass"] = None  # a Gaussian band-pass of the base gives way to the recipe's erf one
    if kind == "gaussian" and "bandpass_cutoffs" not in pre:
        out["bandpass_cutoffs"] = None
    return out


def _read_recipe(name_or_path) -> tuple[str, dict]:
    """(path, parsed TOML) of a recipe file or of the shipped recipe of that name."""
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
    return path, doc


def load_recipe(name_or_path, base: ProcessConfig | None = None) -> ProcessConfig:
    """Read a TOML recipe (a path, or the name of a shipped one) over ``base``.

    A ``[cluster]`` table is skipped here (see :func:`load_cluster_config`).
    """
    path, doc = _read_recipe(name_or_path)
    doc = {k: v for k, v in doc.items() if k != "cluster"}
    for table, values in doc.items():
        if table not in _KEYS or not isinstance(values, dict):
            raise InputError(f"unknown recipe table [{table}] (known: {', '.join([*_KEYS, 'cluster'])})",
                             path)
        unknown = set(values) - _KEYS[table]
        if unknown:
            raise InputError(f"unknown key(s) in [{table}]: {', '.join(sorted(unknown))}", path)
    cfg = base or ProcessConfig()
    try:
        roi = doc.get("roi", {})
        if "centres" in roi:  # relative to the recipe file
            roi = {**roi, "centres": os.path.join(os.path.dirname(os.path.abspath(path)), roi["centres"])}
        if "grid" in roi:
            roi = {**roi, "grid": tuple(roi["grid"])}
        pre = doc.get("preprocess", {})
        corr = doc.get("correlation", {})
        run = doc.get("run", {})
        strain = dataclasses.replace(cfg.strain, **doc.get("strain", {}))
        pp = cfg.preprocess
        pp = dataclasses.replace(pp, **{
            "static_operation": pre.get("static_operation", pp.static_operation),
            "dynamic_sigma": pre.get("dynamic_background_sigma", pp.dynamic_sigma),
            "bandpass": tuple(pre["bandpass"]) if pre.get("bandpass") else pp.bandpass,
            "window": pre.get("window", pp.window),
            **_preprocess_extras(pre)})
        sb = pre.get("static_background", cfg.static_background)
        if sb not in (None, "mean") and not os.path.isabs(sb):
            sb = os.path.join(os.path.dirname(os.path.abspath(path)), sb)
        ec = dataclasses.replace(cfg.correlation, **{k: v for k, v in corr.items() if k != "engine"})
        batch = run.get("batch", cfg.batch)
        return cfg.replace(roi=dataclasses.replace(cfg.roi, **roi), preprocess=pp, static_background=sb,
                           correlation=ec, strain=strain, engine=corr.get("engine", cfg.engine),
                           batch=None if batch == "auto" else batch, device=run.get("device", cfg.device))
    except (TypeError, ValueError) as e:
        raise InputError(f"invalid recipe value ({e})", path) from None


# --------------------------------------------------------------------------- [cluster]

_CLUSTER_KEYS = ("address", "workers", "retries", "rows_per_task", "job")

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


def load_cluster_config(name_or_path) -> ClusterConfig | None:
    """The recipe's ``[cluster]`` table as a :class:`~ebsdxc.cluster.ClusterConfig`, or ``None``
    when it has none.

    ``name_or_path`` is a recipe file or a shipped recipe's name, as for :func:`load_recipe`.
    ``[cluster.job]`` holds keyword arguments of dask-jobqueue's ``SLURMCluster``/``PBSCluster``
    (checked against them where dask-jobqueue is installed); it is for ``address = "slurm"``
    or ``"pbs"``, or for a recipe without an address that ``--cluster slurm|pbs`` completes.
    """
    path, doc = _read_recipe(name_or_path)
    if "cluster" not in doc:
        return None
    table = doc["cluster"]
    if not isinstance(table, dict):
        raise InputError("[cluster] must be a table", path)
    unknown = set(table) - set(_CLUSTER_KEYS)
    if unknown:
        raise InputError(f"unknown key(s) in [cluster]: {', '.join(sorted(unknown))} "
                         f"(known: {', '.join(_CLUSTER_KEYS)}; dask-jobqueue settings go in [cluster.job])",
                         path)
    address = table.get("address", "local")
    if not isinstance(address, str) or not (address in CLUSTER_KINDS or "://" in address):
        raise InputError(f"[cluster] address must be {', '.join(CLUSTER_KINDS)} or a scheduler address "
                         f"such as tcp://host:8786, got {address!r}", path)
    for key in ("workers", "retries", "rows_per_task"):
        v = table.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise InputError(f"[cluster] {key} must be a whole number, got {v!r}", path)
    job = table.get("job", {})
    if not isinstance(job, dict):
        raise InputError("[cluster] job must be a table: [cluster.job] with dask-jobqueue settings", path)
    if job:
        if "address" in table and address not in ("slurm", "pbs"):
            raise InputError(f"[cluster.job] settings are for address = \"slurm\" or \"pbs\", "
                             f"not {address!r}: remove the table or change the address", path)
        _check_job_keys(job, address, path)
    try:
        return ClusterConfig(address=address, workers=table.get("workers"), retries=table.get("retries", 2),
                             rows_per_task=table.get("rows_per_task"), job=dict(job))
    except (TypeError, ValueError) as e:
        raise InputError(f"invalid [cluster] value ({e})", path) from None


def _check_job_keys(job: dict, address: str, path: str) -> None:
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
        classes = " / ".join({"slurm": "SLURMCluster", "pbs": "PBSCluster"}[k] for k in kinds)
        raise InputError(f"unknown key in [cluster.job]: {key}{hint}; dask-jobqueue's {classes} takes: "
                         f"{', '.join(sorted(accepted))}", path)
