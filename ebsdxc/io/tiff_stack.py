"""Frames as the pages of one TIFF file: a multi-page TIFF (an SEM or camera series), or one
image (a single deformed frame for DIC).

Every page must be one greyscale image (integer or float) of the first page's shape and
dtype; opening the file reads every page's tags (not its pixels) so that a page that does
not fit shows at once, naming it. Pages are frames in file order, one row unless
``grid_shape`` is given. :meth:`TiffStackSource.read_window` reads a window of a page from
only the strips or tiles that hold it, so images larger than memory are read in pieces
(tiled DIC). ``dataset=`` does not apply.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import InputError
from .image import check_page, is_tiff_file, open_tiff, read_page_window
from .source import PatternSource, choose_grid

NAME = "tiff_stack"
DESCRIPTION = "the pages of one greyscale TIFF file (a multi-page TIFF or a single image), one frame per page"


def detect(path) -> bool:
    """Whether ``path`` is one TIFF file (judged from its first bytes)."""
    try:
        return os.path.isfile(path) and is_tiff_file(path)
    except TypeError:  # a list of files: an image stack
        return False


def _page_info(page, path, k):
    where = f"page {k}"
    try:
        check_page(page, path)
    except InputError as e:
        raise InputError(f"{where}: {e.problem}", path) from None
    shape, dtype = tuple(page.shape), page.dtype
    if getattr(page, "samplesperpixel", 1) > 1 or len(shape) != 2:
        raise InputError(f"{where} is a colour or multi-channel image (shape {shape}); frames must be greyscale",
                         path)
    if dtype.kind not in "uif":
        raise InputError(f"{where} holds {dtype} pixels; frames must be integer or floating-point grey values", path)
    return shape, dtype.newbyteorder("=")


class TiffStackSource(PatternSource):
    """The pages of one TIFF file, read lazily (one file handle per read: it pickles as it is)."""

    format = NAME

    def __init__(self, path, n_pages, *, grid, pattern_shape, dtype, metadata=None):
        super().__init__(path, grid=grid, pattern_shape=pattern_shape, dtype=dtype, metadata=metadata)
        self.use_records(n_pages)

    def _page(self, tif, i):
        page = tif.pages[i]
        check_page(page, self.path)
        if tuple(page.shape) != self.pattern_shape or page.dtype.newbyteorder("=") != self.dtype:
            raise InputError(f"page {i} is now {page.shape} {page.dtype}, not the {self.pattern_shape} "
                             f"{self.dtype} it had when the file was opened", self.path)
        return page

    def read_records(self, start: int, stop: int, out: np.ndarray) -> None:
        with open_tiff(self.path) as tif:
            for i in range(start, stop):
                out[i - start] = self._page(tif, i).asarray()

    def read_window(self, index, rows, cols) -> np.ndarray:
        r0, r1, c0, c1 = self._check_window(index, rows, cols)
        rec = self._record_of(index)
        if rec < 0:
            return np.zeros((r1 - r0, c1 - c0), self.dtype)
        with open_tiff(self.path) as tif:
            return read_page_window(tif, self._page(tif, rec), self.path, (r0, r1), (c0, c1))


def open(path, *, dataset=None, grid_shape=None) -> TiffStackSource:  # noqa: A001 - registry interface
    """Open the pages of one TIFF file as frames.

    Raises
    ------
    InputError
        Not a readable TIFF, a page that is colour, non-numeric or of another shape or dtype
        than the first (naming it), ``dataset`` given, or a grid with fewer points than pages.
    """
    path = os.fspath(path)
    if dataset is not None:
        raise InputError(f"a TIFF file has no datasets; --dataset {dataset!r} does not apply", path)
    with open_tiff(path) as tif:
        pages = list(tif.pages)
        if not pages:
            raise InputError("holds no image", path)
        shape0, dtype0 = _page_info(pages[0], path, 0)
        for k, page in enumerate(pages[1:], 1):
            shape, dtype = _page_info(page, path, k)
            if shape != shape0 or dtype != dtype0:
                raise InputError(f"page {k} is {shape[1]}x{shape[0]} px {dtype.name} but page 0 is "
                                 f"{shape0[1]}x{shape0[0]} px {dtype0.name}; all pages must share shape "
                                 "and dtype", path)
    grid = choose_grid(None, grid_shape, len(pages), path)
    meta = {"n_pages": len(pages)}
    if len(pages) < grid.n_points:
        meta["n_stored"] = len(pages)
    return TiffStackSource(path, len(pages), grid=grid, pattern_shape=shape0, dtype=dtype0, metadata=meta)
