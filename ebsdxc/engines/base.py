"""The interface every correlation engine implements, and how an engine describes itself.

An engine correlates batches of scan subregions with reference subregions in the n-to-mn
form: tile ``[b, k]`` of a batch is matched with tile ``k`` of the reference set that
pattern ``b`` uses. Reference sets are inputs of their own (:class:`PreparedReferences`):
K sets of n tiles, prepared once (spectra, padded tiles: whatever the engine needs) and
kept on the device; :meth:`CorrelationEngine.match` takes, per pattern, the index of its
set. :meth:`CorrelationEngine.set_reference` keeps one set as the engine's own (K = 1).

Each engine class describes itself: :attr:`CorrelationEngine.info` (an
:class:`EngineInfo`: devices, modes, subpixel methods, forms, ...) and classmethods for
size limits (:meth:`~CorrelationEngine.refusal`, :meth:`~CorrelationEngine.supports`),
its tunable variants (:meth:`~CorrelationEngine.candidates`) and how ``ebsdxc bench``
times it (:meth:`~CorrelationEngine.benchmark`). A new engine subclasses
:class:`CorrelationEngine` in a module of its own and registers there
(:func:`ebsdxc.engines.registry.register`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from .. import status as st
from ..errors import InputError
from ..peaks import SUBPIXEL_METHODS

__all__ = ["CorrelationEngine", "EngineConfig", "EngineInfo", "PeakResult", "PreparedReferences"]

MODES = ("full", "window")
#: Input precisions of the correlation products (``EngineConfig.precision``), most exact first.
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
#: Precisions of the re-evaluated peak neighbourhood (``EngineConfig.peak_precision``).
PEAK_PRECISIONS = ("fp32", "fp64")
FORMS = ("one_to_one", "one_to_many", "n_to_mn", "n_to_m")  # the correlation forms (ebsdxc.xcorr)


@dataclass(frozen=True)
class EngineConfig:
    """What to correlate, how to find the peak, and which engine does it.

    Attributes
    ----------
    mode : {"full", "window"}
        ``full``: zero-padded linear correlation, every shift with any overlap;
        ``window``: only ``|dx|, |dy| <= max_shift``.
    max_shift : int or None
        Required for ``window`` mode.
    subpixel : str
        One of :data:`ebsdxc.peaks.SUBPIXEL_METHODS`.
    upsample : int
        Grid refinement of the ``upsampled`` method.
    compensate : bool
        Divide the correlation by the window autocorrelation before the subpixel fit
        (removes the pull of the window towards zero shift; see :mod:`ebsdxc.peaks`).
    circular : bool
        Window mode only: correlate circularly at the tile size instead of zero-padding
        to ``w + max_shift``. Faster (smaller FFTs); the wrapped products involve only
        the tapered tile edges, so with a Hann window and ``max_shift <= w/4`` they stay
        negligible (measured in ``BENCHMARKS.md``); without a window it is an error.
    kernel : str
        Definition-based kernel of the ``direct`` engine: ``"auto"`` (the dispatcher's
        measured choice) or a label such as ``"grouped_overlap:g=4,kr=8"``
        (:mod:`ebsdxc.engines.definition`).
    engine : str
        ``"auto"`` (the dispatcher's choice, :func:`ebsdxc.engines.make_engine`) or the
        name of a registered engine (:data:`ebsdxc.engines.ENGINES`). It changes speed,
        not results (beyond rounding).
    precision : str
        Inputs of the correlation products: ``"auto"`` (each engine's own: fp32, and bf16 on
        the tensor engine) or one of :data:`PRECISIONS`; below fp32 only the ``tensor``
        engine serves. The tensor engine finds the integer peak in this precision and
        re-evaluates its 3x3 neighbourhood exactly, so it only decides near-ties between
        lags (``BENCHMARKS.md`` measures how often).
    peak_precision : str
        Sums of that re-evaluated neighbourhood (tensor engine): ``"fp32"`` (per-thread
        float sums added in double) or ``"fp64"`` (double throughout).
    """

    mode: str = "full"
    max_shift: int | None = None
    subpixel: str = "dft"
    upsample: int = 16
    compensate: bool = True
    circular: bool = False
    kernel: str = "auto"
    engine: str = "auto"
    precision: str = "auto"
    peak_precision: str = "fp32"

    def __post_init__(self):
        # Messages name the settings by their path (correlation.max_shift), as recipes do.
        if self.mode not in MODES:
            raise ValueError(f"correlation.mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.mode == "window" and (self.max_shift is None or self.max_shift < 1):
            raise ValueError("window mode needs correlation.max_shift >= 1 px")
        if self.subpixel not in SUBPIXEL_METHODS:
            raise ValueError(f"correlation.subpixel must be one of {', '.join(SUBPIXEL_METHODS)}, "
                             f"got {self.subpixel!r}")
        if self.circular and self.mode != "window":
            raise ValueError("correlation.circular needs window mode (a correlation.max_shift)")
        if self.upsample < 2:
            raise ValueError(f"correlation.upsample must be >= 2, got {self.upsample}")
        if self.precision not in ("auto", *PRECISIONS):
            raise ValueError(f"correlation.precision must be one of auto, {', '.join(PRECISIONS)}, "
                             f"got {self.precision!r}")
        if self.peak_precision not in PEAK_PRECISIONS:
            raise ValueError(f"correlation.peak_precision must be one of {', '.join(PEAK_PRECISIONS)}, "
                             f"got {self.peak_precision!r}")
        if self.kernel != "auto":
            from .definition import parse_kernel

            try:
                parse_kernel(self.kernel)
            except ValueError as e:
                raise ValueError(f"correlation.kernel: {e}") from None
        if self.engine != "auto":
            from .registry import engine_class

            engine_class(self.engine)

    def shift_refusal(self, roi_size):
        """Why the shift window does not fit ROIs of side ``roi_size`` px, in plain words naming
        both settings; None where it fits (or in full mode, which has no window).

        The rule is ``2 * max_shift <= roi_size``. Beyond half an ROI less than half of it
        overlaps its match, and through the Hann window a perfect match keeps under 15 % of
        its correlation (W(w/2) = 0.15, W(0.6 w) = 0.06): a peak out there is noise, not a
        measurement, and the engines would silently search no further than ``roi_size - 1``.
        """
        if self.mode != "window" or self.max_shift is None:
            return None
        if 2 * self.max_shift > roi_size:
            return (f"correlation.max_shift ({self.max_shift} px) must be at most half of roi.size "
                    f"({roi_size} px): a shift of more than half an ROI leaves less than half of it "
                    f"overlapping, and its peak is not a measurement (use a smaller correlation.max_shift "
                    f"or a roi.size of at least {2 * self.max_shift} px)")
        return None

    def max_lag(self, tile_shape):
        """(ry, rx): the largest |dy|, |dx| searched for tiles of (h, w)."""
        h, w = tile_shape
        if self.mode == "full":
            return h - 1, w - 1
        return min(self.max_shift, h - 1), min(self.max_shift, w - 1)


@dataclass(frozen=True)
class EngineInfo:
    """What an engine is and what it serves; read by :func:`ebsdxc.engines.make_engine`,
    the dispatcher (:mod:`ebsdxc.engines.dispatch`), ``ebsdxc bench`` and :mod:`ebsdxc.xcorr`.

    Attributes
    ----------
    name : str
        Registered name (the value of ``EngineConfig.engine``).
    devices : tuple of {"cpu", "gpu"}
        Where it runs.
    summary : str
        One line for help texts.
    modes : tuple
        ``EngineConfig.mode`` values it correlates.
    subpixel : tuple
        ``EngineConfig.subpixel`` methods it serves.
    circular : bool
        Whether it serves ``EngineConfig.circular``.
    forms : tuple
        Correlation forms (``one_to_one``, ``one_to_many``, ``n_to_mn``, ``n_to_m``) it can
        be timed and chosen for.
    method : {"fft", "definition", "tensor"}
        How it correlates. Definition-based candidates cost the overlap's multiply-adds:
        ``ebsdxc bench`` times them after the FFT-based ones and skips those that cannot
        come near the best time even at the GPU's peak FP32 rate (tensor-core engines, which
        run faster than that, are never skipped).
    pairings : bool
        It correlates any pairing of left and right matrices natively
        (:meth:`CorrelationEngine.pairing_maps`): :mod:`ebsdxc.xcorr` then builds n-to-m
        maps without copying the right matrices.
    baseline : bool
        The engine ``ebsdxc bench`` tables compare the others with.
    precisions : tuple
        ``EngineConfig.precision`` values it computes in (besides ``"auto"``).
    peak_precisions : tuple
        ``EngineConfig.peak_precision`` values it serves.
    """

    name: str
    devices: tuple = ("cpu", "gpu")
    summary: str = ""
    modes: tuple = MODES
    subpixel: tuple = SUBPIXEL_METHODS
    circular: bool = False
    forms: tuple = FORMS
    method: str = "fft"
    pairings: bool = False
    baseline: bool = False
    precisions: tuple = ("fp32",)
    peak_precisions: tuple = ("fp32",)

    def refusal(self, config: EngineConfig, *, gpu: bool):
        """Why this engine cannot serve ``config`` on this kind of device (plain words
        naming the parameters), or None. Sizes are the engine class's to check."""
        name = self.name
        if ("gpu" if gpu else "cpu") not in self.devices:
            where = "the CPU" if gpu else "a CUDA GPU"
            others = _others(lambda c: ("gpu" if gpu else "cpu") in c.info.devices)
            return (f"the {name} engine (correlation.engine {name!r}) runs on {where} only"
                    + (f"; use correlation.engine {others} on the {'GPU' if gpu else 'CPU'}" if others else ""))
        if config.mode not in self.modes:
            return f"the {name} engine (correlation.engine) does not correlate in correlation.mode {config.mode!r}"
        if config.subpixel not in self.subpixel:
            others = _others(lambda c: config.subpixel in c.info.subpixel)
            return (f"correlation.subpixel {config.subpixel!r} needs the {others or 'another'} engine "
                    f"(correlation.engine); the {name} engine offers {', '.join(self.subpixel)}")
        if config.precision != "auto" and config.precision not in self.precisions:
            others = _others(lambda c: config.precision in c.info.precisions)
            return (f"correlation.precision {config.precision!r} needs the {others or 'another'} engine "
                    f"(correlation.engine); the {name} engine computes in {', '.join(self.precisions)}")
        if config.peak_precision not in self.peak_precisions:
            others = _others(lambda c: config.peak_precision in c.info.peak_precisions)
            return (f"correlation.peak_precision {config.peak_precision!r} needs the {others or 'another'} "
                    f"engine (correlation.engine), which re-evaluates the peak neighbourhood")
        if config.circular and not self.circular:
            others = _others(lambda c: c.info.circular)
            return (f"correlation.circular: the {name} engine does not correlate circularly"
                    + (f"; use correlation.engine {others}" if others else ""))
        return None


def _others(pred):
    """``'fft' or 'direct'``: the registered engines for which ``pred(cls)`` holds ("" for none)."""
    from .registry import ENGINES

    return " or ".join(repr(n) for n, c in ENGINES.items() if pred(c))


@dataclass
class PeakResult:
    """Per-tile match results, arrays on the engine's backend.

    displacement : (B, n, 2) float32 [dx, dy] px; NaN where status != OK (``SUBPIXEL_FAILED``
        where the peak was found but no subpixel maximum near it)
    peak_height : (B, n) float32 normalised cross-correlation at the peak, in [-1, 1]
    status : (B, n) uint8 codes of :mod:`ebsdxc.status`
    extra : dict or None
        Per-point arrays (B, ...) a later stage adds (whole-pattern refinement's record),
        named as the results file's datasets.
    """

    displacement: object
    peak_height: object
    status: object
    extra: dict | None = None


@dataclass(frozen=True, eq=False)
class PreparedReferences:
    """K reference sets of n prepared tiles each, resident on the engine's device.

    Made by :meth:`CorrelationEngine.prepare_references` and usable with the engine that
    made them (or one of the same class, tiles and options).

    Attributes
    ----------
    payload : array
        Engine-specific, one entry per tile in (K * n) order: conjugate spectra (FFT
        engines), the tiles themselves (definition-based engine).
    energy : (K, n) float32
        The tiles' sums of squares.
    status : (K, n) uint8
        Their status from preparation.
    key : tuple
        What the payload was made for (engine, tile shape, FFT size, ...).
    """

    payload: object
    energy: object
    status: object
    key: tuple

    @property
    def count(self) -> int:
        """K, the number of reference sets."""
        return int(self.energy.shape[0])

    @property
    def n(self) -> int:
        """Tiles per set."""
        return int(self.energy.shape[1])

    @classmethod
    def joined(cls, parts, xp=np) -> PreparedReferences:
        """The sets of ``parts`` (PreparedReferences of one engine, e.g. parts of a batch
        prepared on several threads) as one, in order."""
        keys = {p.key for p in parts}
        if len(keys) != 1:
            raise ValueError(f"parts must all be prepared for one engine and tile shape, got {len(keys)} kinds: "
                             f"{sorted(map(str, keys))}")
        return cls(xp.concatenate([p.payload for p in parts]), xp.concatenate([p.energy for p in parts]),
                   xp.concatenate([p.status for p in parts]), parts[0].key)


class CorrelationEngine(ABC):
    """n-to-mn correlation of prepared (zero-mean, windowed, float32) subregions."""

    #: What the engine serves (set by every engine class).
    info: EngineInfo = EngineInfo("?")
    #: ``info.name``, on the class and its instances.
    name = "?"
    #: True where the engine also takes whole patterns and cuts and prepares their ROIs itself
    #: (``match_rois(patterns, origins, window, references=, index=)``, the fused and tensor engines), so
    #: that a caller need not write prepared tiles to device memory first.
    reads_rois = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.name = cls.info.name

    def __init__(self, backend, tile_shape, config: EngineConfig):
        reason = self.info.refusal(config, gpu=backend.is_gpu)
        if reason is not None:
            raise InputError(reason)
        self.backend = backend
        self.xp = backend.xp
        self.tile_shape = (int(tile_shape[0]), int(tile_shape[1]))
        self.config = config
        self.max_lag = config.max_lag(self.tile_shape)
        self._references = None

    # ------------------------------------------------------------------ self-description

    @classmethod
    def refusal(cls, tile_shape, config: EngineConfig, *, gpu: bool = True):
        """Why this engine cannot run ``config`` on tiles of ``tile_shape`` on a GPU
        (``gpu=True``) or the CPU, in plain words naming the parameters; None where it can.

        Device, mode, subpixel method and circular correlation come from :attr:`info`; size
        limits from :meth:`size_refusal`.
        """
        return cls.info.refusal(config, gpu=gpu) or cls.size_refusal(tile_shape, config)

    @classmethod
    def supports(cls, tile_shape, config: EngineConfig, *, gpu: bool = True) -> bool:
        """Whether this engine can run ``config`` on tiles of ``tile_shape`` (:meth:`refusal`)."""
        return cls.refusal(tile_shape, config, gpu=gpu) is None

    @classmethod
    def size_refusal(cls, tile_shape, config: EngineConfig):
        """Why tiles of ``tile_shape`` are beyond this engine's limits, or None (no limits)."""
        return None

    @classmethod
    def case_config(cls, case, variant=None) -> EngineConfig:
        """The :class:`EngineConfig` that runs a dispatcher :class:`~ebsdxc.engines.dispatch.Case`
        (peaks with this engine's first 3x3 method, no window compensation) with ``variant``."""
        sub = "quadratic" if "quadratic" in cls.info.subpixel else cls.info.subpixel[-1]
        return EngineConfig(mode=case.mode, max_shift=case.max_shift if case.mode == "window" else None,
                            subpixel=sub, compensate=False, engine=cls.info.name)

    @classmethod
    def applies(cls, case, variant=None) -> bool:
        """Whether this engine (with ``variant``) can run ``case`` on a GPU."""
        if case.form not in cls.info.forms or "gpu" not in cls.info.devices:
            return False
        if not cls.variant_applies(variant, case):
            return False
        return cls.supports((case.h, case.w), cls.case_config(case, variant), gpu=True)

    @classmethod
    def variant_applies(cls, variant, case) -> bool:
        """Whether ``variant`` (a tunable choice of this engine, or None) fits ``case``."""
        return variant is None

    @classmethod
    def candidates(cls, case) -> list:
        """The variants of this engine worth timing for ``case`` (``[None]``: the engine as
        it is; ``[]``: it does not apply)."""
        return [None] if cls.applies(case) else []

    @classmethod
    def default_variant(cls, case):
        """The variant to run without measurements (the dispatcher's fixed rules)."""
        return None

    @classmethod
    def fallback_rank(cls, case) -> int:
        """Place among the engines in the dispatcher's fixed rules, used where nothing is
        measured (lower first). ``case.small``: window mode or tiles of at most 16 x 16."""
        return 1

    @classmethod
    def parse_variant(cls, text):
        """The variant a label (``Choice.label`` after the ``/``) names."""
        raise ValueError(f"the {cls.info.name} engine has no variants, got {text!r}")

    @classmethod
    def family(cls, variant) -> str:
        """Family of a variant in ``ebsdxc bench`` plots (the engine, or e.g. its kernel's algorithm)."""
        return cls.info.name

    @classmethod
    def families(cls) -> tuple:
        """Every :meth:`family` this engine's variants fall in, in plotting order."""
        return (cls.info.name,)

    @classmethod
    def pairing_maps(cls, lefts, rights, pairing, config: EngineConfig):
        """Maps of any :class:`~ebsdxc.engines.definition.Pairing` on the device, for engines
        with ``info.pairings``: (n_pairs, 2 ry + 1, 2 rx + 1) float32, circular lag layout."""
        raise NotImplementedError(f"the {cls.info.name} engine correlates the n-to-mn form only")

    @classmethod
    def precompile(cls, variants):
        """Compile what ``variants`` need before they are timed (default: nothing to do)."""
        return None

    @classmethod
    def benchmark(cls, case, lefts, rights, variant=None):
        """A callable that runs ``case`` once, for ``ebsdxc bench`` to time.

        ``lefts`` (na, h, w) and ``rights`` (n_rights, h, w) are float32 CuPy arrays indexed
        as ``case.pairing`` says. This default goes through the engine interface (n-to-mn
        forms only): references prepared beforehand, tiles in the engine's input frames,
        then :meth:`locate` (``case.peaks``) or :meth:`correlation_maps`.
        """
        from ..backend import select_backend

        if case.form == "n_to_m":
            raise ValueError("engines run the n-to-mn form")
        eng = cls(select_backend("cuda"), (case.h, case.w), cls.case_config(case, variant))
        xp = eng.xp
        e = (lefts.astype(xp.float64) ** 2).sum(axis=(1, 2)).astype(xp.float32)
        eng.set_reference(lefts, e, xp.zeros(case.n_left, dtype=xp.uint8))
        B, n = case.n_right, case.n_left
        Ny, Nx = eng.input_shape
        tiles = xp.zeros((B, n, Ny, Nx), dtype=xp.float32)
        tiles[..., :case.h, :case.w] = rights.reshape(B, n, case.h, case.w)
        if case.peaks:
            return lambda: eng.locate(tiles)
        return lambda: eng.correlation_maps(tiles)

    # ------------------------------------------------------------------ references

    @property
    def input_shape(self):
        """(Ny, Nx) frame the engine wants prepared tiles in (tile at the top-left, zeros
        around it); tiles of ``tile_shape`` are accepted too."""
        return self.tile_shape

    def _key(self):
        return (self.info.name, self.tile_shape, self.max_lag, self.config.mode, self.config.circular)

    def prepare_references(self, tiles, energy, status) -> PreparedReferences:
        """Prepare K reference sets once and keep them on the device.

        Parameters
        ----------
        tiles : (K, n, h, w) float32 prepared reference subregions
        energy : (K, n) their sums of squares
        status : (K, n) uint8 their status from preparation

        Returns
        -------
        PreparedReferences, for ``match(..., references=...)`` and :meth:`correlation_maps`.
        """
        xp = self.xp
        tiles = xp.asarray(tiles, dtype=xp.float32)
        h, w = self.tile_shape
        if tiles.ndim != 4 or tuple(tiles.shape[2:]) != (h, w):
            raise ValueError(f"reference tiles must be (K, n, {h}, {w}), got shape {tuple(tiles.shape)}")
        K, n = (int(v) for v in tiles.shape[:2])
        energy = xp.asarray(energy, dtype=xp.float32)
        status = xp.asarray(status, dtype=xp.uint8)
        for a, what in ((energy, "energy"), (status, "status")):
            if tuple(a.shape) != (K, n):
                raise ValueError(f"reference {what} must be ({K}, {n}) for {K} sets of {n} tiles, "
                                 f"got shape {tuple(a.shape)}")
        payload = self._prepare(tiles.reshape(K * n, h, w))
        return PreparedReferences(payload, energy, status, self._key())

    def set_reference(self, tiles, energy, status) -> None:
        """Keep the n prepared reference tiles ((n, h, w)) resident as the engine's own
        references (one set: K = 1)."""
        xp = self.xp
        self._references = self.prepare_references(xp.asarray(tiles)[None], xp.asarray(energy)[None],
                                                    xp.asarray(status)[None])

    def release_memory(self) -> None:  # noqa: B027 - a hook engines with buffers override, not abstract
        """Drop the device buffers the engine keeps between calls (after a batch ran out of
        memory, before smaller ones); the prepared references stay. None by default."""

    def device_bytes_per_tile(self, *, own_references: bool = False) -> int | None:
        """Device memory one tile of a batch takes while the engine matches it (its buffers, maps
        and results), which the runner sizes its batches by; None (the default): the runner's
        estimate from FFT buffers of ``fft_shape``, right for the FFT engines.

        ``own_references``: the batch's patterns may each use another reference set (K > 1),
        so an engine that gathers each tile's reference holds that copy per tile too."""
        return None

    @property
    def references(self):
        """The engine's own :class:`PreparedReferences` (:meth:`set_reference`), or None."""
        return self._references

    def _resolve(self, tiles, references, index):
        """(references, index): the set to use and a (B,) device index, or None where every
        pattern uses set 0 (one broadcast reference set: the K = 1 code path)."""
        refs = self._checked_references(references)
        if tiles.ndim != 4 or tiles.shape[1] != refs.n:
            raise ValueError(f"tiles must be (B, {refs.n}, h, w) for {refs.n} reference tiles per set, "
                             f"got shape {tuple(tiles.shape)}")
        return refs, self._pattern_index(index, refs.count, int(tiles.shape[0]))

    def _resolve_shape(self, B, n, references, index):
        """:meth:`_resolve` for B patterns of n ROIs each that are not cut into tiles yet."""
        refs = self._checked_references(references)
        if n != refs.n:
            raise ValueError(f"origins must give {refs.n} ROIs, one per reference tile of a set, got {n}")
        return refs, self._pattern_index(index, refs.count, B)

    def _checked_references(self, references):
        refs = self._references if references is None else references
        if refs is None:
            raise ValueError("no references: call set_reference first, or pass references=")
        if not isinstance(refs, PreparedReferences) or refs.key != self._key():
            raise ValueError("references were prepared by an engine of another kind, tile size or options")
        return refs

    def _pattern_index(self, index, K, B):
        if index is None:
            return None
        if isinstance(index, np.ndarray) or np.isscalar(index) or isinstance(index, (list, tuple)):
            host = np.asarray(index)
            if host.shape != (B,) or host.dtype.kind not in "iu":
                raise ValueError(f"index must be {B} integers (one per pattern), got {host.dtype} of shape "
                                 f"{host.shape}")
            if B and (host.min() < 0 or host.max() >= K):
                raise ValueError(f"index must pick reference sets 0 to {K - 1}, got {host.min()} to {host.max()}")
            if K == 1:
                return None
            return self.xp.asarray(host.astype(np.int32 if self.backend.is_gpu else np.intp))
        # A device array: checked for shape only (its values would cost a synchronisation).
        if tuple(index.shape) != (B,) or index.dtype.kind not in "iu":
            raise ValueError(f"index must be {B} integers (one per pattern), got {index.dtype} of shape "
                             f"{tuple(index.shape)}")
        if K == 1:
            return None
        xp = self.xp
        return xp.ascontiguousarray(xp.asarray(index), dtype=xp.int32 if self.backend.is_gpu else xp.intp)

    @staticmethod
    def _set_payload(refs, index):
        """The payload per tile: set 0's (n, ...) when ``index`` is None, else (B, n, ...) gathered."""
        if index is None:
            return refs.payload[:refs.n]
        p = refs.payload
        return p.reshape(refs.count, refs.n, *p.shape[1:])[index]

    # ------------------------------------------------------------------ correlation

    @abstractmethod
    def _prepare(self, tiles):
        """Engine payload of (K * n, h, w) float32 reference tiles, one entry per tile."""

    @abstractmethod
    def _maps(self, tiles, refs, index):
        """Correlation maps (B, n, Ny, Nx) of tiles against resolved references."""

    @abstractmethod
    def _locate(self, tiles, refs, index):
        """Peak (y, x, value, on_border) arrays of shape (B*n,) against resolved references."""

    def correlation_maps(self, tiles, *, references=None, index=None):
        """(B, n, Ny, Nx) circular lag maps of prepared tiles (B, n, h, w) (see :mod:`ebsdxc.peaks`).

        ``references`` and ``index`` as :meth:`match`.
        """
        refs, idx = self._resolve(tiles, references, index)
        return self._maps(tiles, refs, idx)

    def locate(self, tiles, *, references=None, index=None):
        """Peak (y, x, value, on_border) arrays of shape (B*n,), before statuses are applied
        (:meth:`match` = :meth:`locate` + :meth:`assemble`)."""
        refs, idx = self._resolve(tiles, references, index)
        return self._locate(tiles, refs, idx)

    def match(self, tiles, energy, status, *, references=None, index=None) -> PeakResult:
        """Correlate a batch of prepared tiles and locate every peak.

        Parameters
        ----------
        tiles : (B, n, h, w) or (B, n, *input_shape) float32 prepared scan subregions
        energy : (B, n) float32 their sums of squares
        status : (B, n) uint8 their status from preparation
        references : PreparedReferences, optional
            K reference sets (:meth:`prepare_references`); default: the engine's own
            (:meth:`set_reference`).
        index : (B,) integer array (host or device), optional
            The reference set of each pattern; default: set 0 for every pattern.
        """
        refs, idx = self._resolve(tiles, references, index)
        B, n = tiles.shape[:2]
        y, x, value, border = self._locate(tiles, refs, idx)
        return self._assemble(y.reshape(B, n), x.reshape(B, n), value.reshape(B, n), border.reshape(B, n),
                              energy, status, refs, idx)

    def assemble(self, y, x, value, border, energy, status, *, references=None, index=None) -> PeakResult:
        """Combine (B, n) peak positions with tile statuses into a :class:`PeakResult`; each
        point's own reference set (``index``) gives the reference energy and status."""
        refs = self._references if references is None else references
        if refs is None:
            raise ValueError("no references: call set_reference first, or pass references=")
        return self._assemble(y, x, value, border, energy, status, refs,
                              self._pattern_index(index, refs.count, int(y.shape[0])))

    def _assemble(self, y, x, value, border, energy, status, refs, index) -> PeakResult:
        xp = self.xp
        if xp is not np and energy.dtype == np.float32 and refs.energy.dtype == np.float32:
            from .gpu_results import assemble_results

            return PeakResult(*assemble_results(y, x, value, border, energy, status, refs.energy, refs.status,
                                                index))
        return self._assemble_arrays(y, x, value, border, energy, status, refs, index)

    def _assemble_arrays(self, y, x, value, border, energy, status, refs, index) -> PeakResult:
        """:meth:`_assemble` in array operations: the CPU's, and the GPU kernel's oracle."""
        xp = self.xp
        if index is None:
            ref_status, ref_energy = refs.status[0][None, :], refs.energy[0][None, :]
        else:
            ref_status, ref_energy = refs.status[index], refs.energy[index]
        # A peak the subpixel fit could not place comes back as NaN (ebsdxc.peaks).
        fitted = xp.isfinite(x) & xp.isfinite(y)
        code = xp.where(status != st.OK, status,
                        xp.where(ref_status != st.OK, ref_status,
                                 xp.where(border, np.uint8(st.PEAK_ON_BORDER),
                                          xp.where(fitted, np.uint8(st.OK), np.uint8(st.SUBPIXEL_FAILED)))))
        code = code.astype(xp.uint8)
        ok = code == st.OK
        with np.errstate(divide="ignore", invalid="ignore"):
            denom = xp.sqrt(energy.astype(xp.float64) * ref_energy.astype(xp.float64))
            height = xp.clip(value / denom, -1.0, 1.0)
        height = xp.where((status == st.OK) & (ref_status == st.OK), height, xp.nan).astype(xp.float32)
        disp = xp.stack([x, y], axis=-1).astype(xp.float32)
        disp = xp.where(ok[..., None], disp, xp.float32(np.nan))
        return PeakResult(disp, height, code)
