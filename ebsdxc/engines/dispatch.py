"""Which engine and kernel to run, chosen from times measured on the GPU in use.

A calibration table holds, for a grid of cases (form, matrix size, counts, mode,
window, maps or peaks), the time of every candidate: each registered engine
(:data:`ebsdxc.engines.ENGINES`) with each of its tunable variants
(``CorrelationEngine.candidates``: e.g. the definition-based kernels of
:mod:`ebsdxc.engines.definition` with their blocking factors). ``ebsdxc bench
--calibrate`` measures one on the local GPU and keeps it in the user cache, one file
per GPU model; a table measured on an H200 ships with the package and serves GPUs
that have none.

:func:`choose` takes the measured cell nearest to the query (distance in log2 of the
matrix area, the counts and the window width, within the same form, mode and output)
and returns its fastest candidate that applies to the query. Without any table it
falls back to fixed rules (:func:`fallback`, each engine's ``fallback_rank``).

What applies where, and which variants exist, the engine classes say
(:class:`~ebsdxc.engines.base.CorrelationEngine`); this module knows no engine by name.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from .base import FORMS
from .definition import Pairing
from .registry import ENGINES

__all__ = ["Case", "Choice", "CalibrationTable", "choose", "choose_variant", "direct_kernel", "fallback", "gpu_model",
           "gpu_slug", "cache_path", "load_table", "FORMS"]

SCHEMA = 1


@dataclass(frozen=True)
class Case:
    """One correlation problem.

    ``n_left`` left matrices; ``n_right`` right matrices per left matrix for one-to-many and
    n-to-mn (m), all right matrices for n-to-m; ``max_shift`` None in full mode.
    """

    form: str
    n_left: int
    n_right: int
    h: int
    w: int
    mode: str = "full"
    max_shift: int | None = None
    peaks: bool = False
    dtype: str = "float32"

    def __post_init__(self):
        if self.form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {self.form!r}")
        if self.mode not in ("full", "window"):
            raise ValueError(f"mode must be full or window, got {self.mode!r}")
        if self.mode == "window" and not self.max_shift:
            raise ValueError("window mode needs max_shift")

    @property
    def max_lag(self):
        if self.mode == "full":
            return self.h - 1, self.w - 1
        return min(self.max_shift, self.h - 1), min(self.max_shift, self.w - 1)

    @property
    def pairing(self):
        if self.form == "n_to_m":
            return Pairing.n_to_m(self.n_left, self.n_right)
        return Pairing.n_to_mn(self.n_left, self.n_right)

    @property
    def small(self):
        """Window mode or tiles of at most 16 x 16: the definition's cost stays low (fixed rules)."""
        return self.mode == "window" or self.h * self.w <= 256

    def key(self):
        return (self.form, self.mode, self.peaks)

    def coords(self):
        r = self.max_lag
        return (math.log2(self.h * self.w), math.log2(self.n_left), math.log2(self.n_right),
                math.log2((2 * r[0] + 1) * (2 * r[1] + 1)))


@dataclass(frozen=True)
class Choice:
    """A registered engine's name and its tunable variant (``kernel``: e.g. the direct
    engine's :class:`~ebsdxc.engines.definition.KernelChoice`), or None."""

    engine: str
    kernel: object = None

    @property
    def label(self):
        return self.engine if self.kernel is None else f"{self.engine}/{self.kernel.label}"

    @classmethod
    def from_label(cls, text):
        engine, _, variant = text.partition("/")
        return cls.parse(engine, variant)

    @classmethod
    def parse(cls, engine, variant=None):
        """The choice of engine ``engine`` with the variant its label ``variant`` names."""
        if not variant:
            return cls(engine)
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r} with variant {variant!r}")
        return cls(engine, ENGINES[engine].parse_variant(variant))


def _names(engines):
    return tuple(ENGINES) if engines is None else tuple(engines)


def applies(choice, case):
    """Whether ``choice`` can run ``case`` (the engine class decides)."""
    cls = ENGINES.get(choice.engine)
    return cls is not None and cls.applies(case, choice.kernel)


def fallback(case, engines=None):
    """Fixed rules where no measurement exists: the engines (default: all registered) in
    the order of their ``fallback_rank`` for ``case`` (the definition-based kernels first for
    window mode and tiles up to 16x16, FFT engines first otherwise), each with its
    ``default_variant``; the first that applies."""
    names = _names(engines)
    ranked = sorted((cls for name, cls in ENGINES.items() if name in names), key=lambda c: c.fallback_rank(case))
    for cls in ranked:
        c = Choice(cls.info.name, cls.default_variant(case))
        if applies(c, case):
            return c
    raise ValueError(f"no engine among {names} applies to {case}")


@dataclass
class CalibrationTable:
    """Measured times: rows of case fields + ``engine``, ``kernel``, ``ms``."""

    gpu: str
    rows: list
    meta: dict

    @classmethod
    def load(cls, path):
        with open(path) as f:
            doc = json.load(f)
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"{path}: calibration schema {doc.get('schema')!r}, expected {SCHEMA}")
        return cls(doc["gpu"], doc["rows"], doc.get("meta", {}))

    def save(self, path):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"schema": SCHEMA, "gpu": self.gpu, "meta": self.meta, "rows": self.rows}, f, indent=0)
        os.replace(tmp, path)  # never a half-written table

    @staticmethod
    def row(case, choice, ms):
        d = asdict(case)
        d.update(engine=choice.engine, kernel=choice.kernel.label if choice.kernel is not None else None,
                 ms=None if ms is None else float(ms))
        return d

    def cells(self):
        """{Case: [(Choice, ms), ...]} over the measured rows."""
        out = {}
        fields = Case.__dataclass_fields__
        for r in self.rows:
            if r.get("ms") is None:
                continue
            if r["engine"] not in ENGINES:  # measured with an engine this installation lacks
                continue
            case = Case(**{k: r[k] for k in fields if k in r})
            out.setdefault(case, []).append((Choice.parse(r["engine"], r.get("kernel")), r["ms"]))
        return out

    def best(self, case, engines=None):
        """Fastest applicable choice of the nearest measured cell, or None."""
        engines = _names(engines)
        cells = [(c, v) for c, v in self._by_case.items() if c.key() == case.key()]
        if not cells:
            return None
        q = case.coords()
        cells.sort(key=lambda cv: sum((a - b) ** 2 for a, b in zip(cv[0].coords(), q)))
        for _, measured in cells[:3]:  # the nearest cell whose winners apply here
            for choice, _ in sorted(measured, key=lambda t: t[1]):
                if choice.engine in engines and applies(choice, case):
                    return choice
        return None

    @functools.cached_property
    def _by_case(self):
        return self.cells()


def gpu_slug(name):
    """File-name form of a GPU model name: "NVIDIA H200" -> "nvidia-h200"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def gpu_model(device=None):
    """Name of the current (or given) CUDA device, e.g. ``NVIDIA H200``."""
    import cupy as cp

    dev = cp.cuda.Device(device) if device is not None else cp.cuda.Device()
    name = cp.cuda.runtime.getDeviceProperties(dev.id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def cache_path(gpu):
    """User calibration file for GPU model ``gpu`` (``$EBSDXC_CACHE_DIR`` or ~/.cache/ebsdxc)."""
    root = os.environ.get("EBSDXC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "ebsdxc")
    return Path(root) / "calibration" / f"{gpu_slug(gpu)}.json"


def _shipped():
    try:
        root = resources.files("ebsdxc.calibration")
    except ModuleNotFoundError:  # pragma: no cover - source checkout without install
        root = Path(__file__).resolve().parents[1] / "calibration"
    return {p.name[:-5]: p for p in root.iterdir() if p.name.endswith(".json")}


@functools.cache
def load_table(gpu):
    """The table for ``gpu``: the user's own calibration, else the shipped one for the same
    model, else the shipped H200 table (or None when there is none)."""
    path = cache_path(gpu)
    if path.is_file():
        return CalibrationTable.load(path)
    shipped = _shipped()
    slug = gpu_slug(gpu)
    for name, p in sorted(shipped.items()):
        if name and name in slug:  # "nvidia-h100" matches "nvidia-h100-80gb-hbm3"
            return CalibrationTable.load(p)
    for name in ("nvidia-h200", *sorted(shipped)):
        if name in shipped:
            return CalibrationTable.load(shipped[name])
    return None


def choose(case, *, engines=None, gpu=None):
    """The measured-fastest :class:`Choice` for ``case`` on ``gpu`` (default: current GPU)
    among ``engines`` (names; default: every registered engine)."""
    engines = _names(engines)
    if gpu is None:
        try:
            gpu = gpu_model()
        except Exception:  # no CUDA here: rules only
            return fallback(case, engines)
    return _choose(case, engines, gpu)


def choose_variant(engine, pairing, tile_shape, mode, max_shift=None, *, gpu=None):
    """The measured-fastest variant of engine ``engine`` (a registered name) for ``pairing``
    of ``tile_shape`` matrices (n-to-m when the right matrices do not depend on the left)."""
    form = "n_to_m" if pairing.rs_a == 0 else "n_to_mn"
    h, w = tile_shape
    case = Case(form, pairing.na, pairing.nb, h, w, mode, max_shift if mode == "window" else None)
    return choose(case, engines=(engine,), gpu=gpu).kernel


def direct_kernel(pairing, tile_shape, mode, max_shift=None, *, gpu=None):
    """The measured-fastest definition-based :class:`~ebsdxc.engines.definition.KernelChoice`
    of the direct engine (:func:`choose_variant`)."""
    return choose_variant("direct", pairing, tile_shape, mode, max_shift, gpu=gpu)


@functools.lru_cache(maxsize=4096)
def _choose(case, engines, gpu):
    table = load_table(gpu)
    choice = table.best(case, engines) if table is not None else None
    return choice or fallback(case, engines)
