"""The paper's definition-based correlation kernels (``kernels/definition.cu``), as array calls.

Seven algorithms, each for every form and for full and window mode:

``overlap_wise``
    one thread per (pair, lag), looping over the overlap; the reference point.
``warp_per_overlap``
    one warp per (pair, lag); the lanes share the overlap and reduce by shuffles. For
    very small matrices.
``warp_shuffle``
    a warp computes 32 neighbouring lags of one row: right rows are broadcast from
    registers by shuffles, left rows sit in a 64-item warp-wide register ring.
``multi_matrix_right``
    warp-shuffle where each thread serves ``kr`` right matrices of the same left matrix
    (one-to-many, n-to-mn, n-to-m): every left value fetched feeds ``kr`` sums.
``multi_matrix_both``
    ``kl`` left and ``kr`` right matrices per thread (n-to-m only).
``grouped_overlap``
    ``g`` lag rows per thread with their left rows cached in registers, optionally with
    ``kr``/``kl`` matrices per thread as well.
``split_row``
    the overlap rows are split among ``splits`` warps that add their partial sums
    atomically: parallelism for few, large matrices (one-to-one).

The warp-shuffle family takes a segment ``width`` of 32, 16 or 8 lanes; narrow segments
waste fewer lanes on the (2 max_shift + 1)-wide rows of window mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..kernel_loader import get_function
from .roi_tiles import RoiTiles

__all__ = ["ALGORITHMS", "KernelChoice", "Pairing", "check_operands", "correlate_maps", "overlap_fmas", "precompile",
           "parse_kernel", "segment_width"]

ALGORITHMS = ("overlap_wise", "warp_per_overlap", "warp_shuffle", "multi_matrix_right",
              "multi_matrix_both", "grouped_overlap", "split_row")
_SHUFFLE = ALGORITHMS[2:]
_BLOCK = 128
_WIDTHS = (8, 16, 32)
_FACTORS = (1, 2, 4, 8)


@dataclass(frozen=True)
class KernelChoice:
    """One definition-based kernel with its blocking factors.

    Attributes
    ----------
    algorithm : str
        One of :data:`ALGORITHMS`.
    width : int
        Lanes per segment (warp-shuffle family): 32, 16 or 8.
    kl, kr : int
        Left / right matrices per thread (1, 2, 4 or 8).
    g : int
        Lag rows per thread (grouped-overlap): 1, 2, 4 or 8.
    splits : int
        Pieces the overlap rows are split into (split-row), >= 1.
    """

    algorithm: str = "warp_shuffle"
    width: int = 32
    kl: int = 1
    kr: int = 1
    g: int = 1
    splits: int = 1

    def __post_init__(self):
        a = self.algorithm
        if a not in ALGORITHMS:
            raise ValueError(f"unknown definition-based kernel {a!r}; choose one of {', '.join(ALGORITHMS)}")
        if a in ("overlap_wise", "warp_per_overlap"):
            if (self.width, self.kl, self.kr, self.g, self.splits) != (32, 1, 1, 1, 1):
                raise ValueError(f"{a} takes no blocking factors")
            return
        if self.width not in _WIDTHS:
            raise ValueError(f"width must be one of {_WIDTHS}, got {self.width}")
        for k in ("kl", "kr", "g"):
            if getattr(self, k) not in _FACTORS:
                raise ValueError(f"{k} must be one of {_FACTORS}, got {getattr(self, k)}")
        if self.kl * self.kr * self.g > 64:
            raise ValueError(f"kl * kr * g = {self.kl * self.kr * self.g} sums per thread is more than "
                             "the 64 that fit in registers")
        if not 1 <= self.splits <= 4096:
            raise ValueError(f"splits must be between 1 and 4096, got {self.splits}")
        rules = {
            "warp_shuffle": self.kl == self.kr == self.g == self.splits == 1,
            "multi_matrix_right": self.kr > 1 and self.kl == self.g == self.splits == 1,
            "multi_matrix_both": self.kl > 1 and self.g == self.splits == 1,
            "grouped_overlap": self.g > 1 and self.splits == 1,
            "split_row": self.splits > 1,
        }
        if not rules[a]:
            raise ValueError(f"{self.label} is not a valid {a} kernel: warp_shuffle has no factors, "
                             "multi_matrix_right needs kr > 1, multi_matrix_both kl > 1, grouped_overlap "
                             "g > 1, split_row splits > 1")

    @property
    def label(self):
        """``algorithm`` or ``algorithm:width=..,kl=..,...`` (non-default factors only)."""
        d = KernelChoice.__dataclass_fields__
        extra = [f"{k}={getattr(self, k)}" for k in ("width", "kl", "kr", "g", "splits")
                 if getattr(self, k) != d[k].default]
        return self.algorithm + (":" + ",".join(extra) if extra else "")

    @property
    def name_expression(self):
        if self.algorithm == "overlap_wise":
            return "xc_overlap_wise"
        if self.algorithm == "warp_per_overlap":
            return "xc_warp_per_overlap"
        return f"xc_shuffle<{self.width}, {self.kl}, {self.kr}, {self.g}>"

    def fits(self, pairing):
        """Whether this kernel applies to ``pairing`` (several lefts per thread need n-to-m)."""
        return self.kl == 1 or pairing.rs_a == 0


def parse_kernel(text):
    """:class:`KernelChoice` from ``"grouped_overlap:g=4,kr=8"`` (the form of ``label``)."""
    name, _, rest = str(text).partition(":")
    kw = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        k, eq, v = item.partition("=")
        if not eq or k not in ("width", "kl", "kr", "g", "splits"):
            raise ValueError(f"kernel option {item!r} in {text!r}: expected width=, kl=, kr=, g= or splits=")
        try:
            kw[k] = int(v)
        except ValueError:
            raise ValueError(f"kernel option {item!r} in {text!r} needs an integer") from None
    return KernelChoice(name.strip(), **kw)


@dataclass(frozen=True)
class Pairing:
    """Which left matrix meets which right matrix, and where the map goes.

    Pair (a, b), ``a < na``, ``b < nb``, correlates left ``a`` with right
    ``a * rs_a + b * rs_b`` into output map ``a * os_a + b * os_b``.
    """

    na: int
    nb: int
    rs_a: int
    rs_b: int
    os_a: int
    os_b: int

    @classmethod
    def n_to_mn(cls, n, m):
        """Lefts (n, h, w); rights (m, n, h, w) flattened; maps (m, n, ...)."""
        return cls(n, m, 1, n, 1, n)

    @classmethod
    def n_to_m(cls, n, m):
        """Lefts (n, h, w); rights (m, h, w); maps (n, m, ...)."""
        return cls(n, m, 0, 1, m, 1)

    @property
    def n_pairs(self):
        return self.na * self.nb

    @property
    def n_rights(self):
        return (self.na - 1) * self.rs_a + (self.nb - 1) * self.rs_b + 1

    def as_struct(self):
        return np.array([self.na, self.nb, self.rs_a, self.rs_b, self.os_a, self.os_b], dtype=np.int32)


def overlap_fmas(tile_shape, max_lag, n_pairs=1):
    """Multiply-adds of the definition: the overlap areas summed over the lags searched."""
    h, w = tile_shape
    ry, rx = max_lag
    sy = sum(h - abs(d) for d in range(-ry, ry + 1))
    sx = sum(w - abs(d) for d in range(-rx, rx + 1))
    return sy * sx * n_pairs


def precompile(choices):
    """Compile every kernel of ``choices`` now (each as :func:`correlate_maps` will load it)."""
    for n in sorted({c.name_expression for c in choices}):
        get_function("definition.cu", n)


def check_operands(lefts, rights, pairing, max_lag, out=None):
    """The operands of a window-map kernel checked against ``pairing`` and ``max_lag``:
    (lefts, rights) as contiguous float32 CuPy arrays (rights may also be a
    :class:`~ebsdxc.engines.roi_tiles.RoiTiles`, for the kernels that read one), (ry, rx) as
    ints, and ``out`` (a new ``(n_pairs, 2 ry + 1, 2 rx + 1)`` float32 array when None);
    ValueError naming what does not fit."""
    import cupy as cp

    lefts = cp.ascontiguousarray(lefts, dtype=cp.float32)
    if isinstance(rights, RoiTiles):
        right_shape = (rights.n_matrices, *rights.tile_shape)
    else:
        rights = cp.ascontiguousarray(rights, dtype=cp.float32)
        right_shape = tuple(rights.shape)
    na, h, w = lefts.shape
    if na != pairing.na:
        raise ValueError(f"pairing expects {pairing.na} left matrices, got {na}")
    if right_shape[1:] != (h, w) or right_shape[0] < pairing.n_rights:
        raise ValueError(f"right matrices must be ({pairing.n_rights}, {h}, {w}), got {right_shape}")
    ry, rx = (int(v) for v in max_lag)
    if not (0 <= ry < h and 0 <= rx < w):
        raise ValueError(f"lags up to ({ry}, {rx}) do not fit {h}x{w} matrices")
    shape = (pairing.n_pairs, 2 * ry + 1, 2 * rx + 1)
    if out is None:
        out = cp.empty(shape, dtype=cp.float32)
    elif out.shape != shape or out.dtype != cp.float32 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a contiguous float32 array of shape {shape}")
    return lefts, rights, (ry, rx), out


def correlate_maps(lefts, rights, pairing, max_lag, choice=KernelChoice(), *, out=None):
    """Definition-based correlation maps on the GPU.

    Parameters
    ----------
    lefts : (na, h, w) float32 CuPy array
    rights : (n_rights, h, w) float32 CuPy array, indexed as :class:`Pairing` says
    pairing : Pairing
    max_lag : (ry, rx)
        Largest |dy|, |dx|; ``(h - 1, w - 1)`` is full mode.
    choice : KernelChoice
    out : CuPy array, optional
        ``(na * nb, 2 ry + 1, 2 rx + 1)`` float32 to write into.

    Returns
    -------
    (na * nb, 2 ry + 1, 2 rx + 1) float32 maps, lag (dy, dx) at (dy mod My, dx mod Mx).
    """
    if not choice.fits(pairing):
        raise ValueError(f"{choice.label}: several left matrices per thread need the n-to-m form")
    lefts, rights, (ry, rx), out = check_operands(lefts, rights, pairing, max_lag, out)
    h, w = lefts.shape[1:]
    My, Mx = 2 * ry + 1, 2 * rx + 1
    if pairing.n_pairs == 0:
        return out
    fn = get_function("definition.cu", choice.name_expression)
    nlags = My * Mx
    if choice.algorithm == "overlap_wise":
        threads = nlags * pairing.n_pairs
    elif choice.algorithm == "warp_per_overlap":
        threads = 32 * nlags * pairing.n_pairs
    else:
        c = choice
        segments = (math.ceil(Mx / c.width) * math.ceil(My / c.g) * c.splits
                    * math.ceil(pairing.nb / c.kr) * math.ceil(pairing.na / c.kl))
        threads = segments * c.width
        if c.splits > 1:
            out.fill(0)
    args = [lefts, rights, out, np.int32(h), np.int32(w), np.int32(ry), np.int32(rx), *pairing.as_struct()]
    if choice.algorithm in _SHUFFLE:
        args.append(np.int32(choice.splits))
    fn((math.ceil(threads / _BLOCK),), (_BLOCK,), tuple(args))
    return out


def segment_width(max_lag):
    """The narrowest segment width (32, 16 or 8 lanes) that covers a row of ``2 rx + 1`` lags."""
    mx = 2 * max_lag[1] + 1
    return 32 if mx > 16 else (16 if mx > 8 else 8)


def default_choice(pairing, tile_shape, max_lag):
    """A reasonable kernel without measurements (the dispatcher's fallback)."""
    h, w = tile_shape
    ry, rx = max_lag
    width = segment_width(max_lag)
    if h * w <= 64:
        return KernelChoice("warp_per_overlap")
    kr = 8 if pairing.nb >= 8 else (4 if pairing.nb >= 4 else (2 if pairing.nb >= 2 else 1))
    g = 4 if 2 * ry + 1 >= 8 else 1
    if g > 1:
        return KernelChoice("grouped_overlap", width=width, kr=kr, g=g)
    if kr > 1:
        return KernelChoice("multi_matrix_right", width=width, kr=kr)
    return replace(KernelChoice(), width=width)
