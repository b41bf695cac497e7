"""Stacks of single images, one pattern per file: TIFF or PNG (DIC frames, exported patterns).

A stack is given as

a folder
    every ``*.tif``, ``*.tiff`` and ``*.png`` in it (extension in any case; not in
    sub-folders; other files, and hidden ones such as macOS's ``._name.tif``, are
    ignored), in natural order: ``p2.tif`` before ``p10.tif``;
a glob pattern
    ``"frames/*.tif"`` (``**`` recurses); the TIFF and PNG files it matches, in natural
    order of their paths;
a list or tuple of files
    in the order given; each must be a TIFF or PNG.

Each file holds one greyscale image; which of TIFF or PNG it is comes from its content.
TIFFs are read with tifffile (any integer or float dtype), PNGs with Pillow (8- or 16-bit
greyscale; the dtype is kept). All images must share shape and dtype; multi-page TIFFs,
colour or grey+alpha images, and 1/2/4-bit PNGs are refused, naming the file. Opening
the stack reads every file's header (not its pixels) so that these problems show at once,
not in the middle of a run.

Grid: the files form one row unless ``grid_shape`` is given (``--grid``); a grid with
more points than files is an interrupted scan whose missing points are flagged.
``dataset=`` does not apply.
"""

from __future__ import annotations

import builtins
import glob
import os
import re
import struct

import numpy as np

from ..errors import InputError
from .image import TIFF_MAGIC, check_page, open_tiff, read_page_window, tiff_checked
from .source import PatternSource, choose_grid

NAME = "image_stack"
DESCRIPTION = "a folder, glob or list of greyscale TIFF/PNG images, one pattern per file"

#: Extensions a folder's or a glob's images are chosen by (compared in lower case).
IMAGE_EXTENSIONS = (".tif", ".tiff", ".png")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_PNG_COLOUR = {0: "greyscale", 2: "RGB colour", 3: "palette colour", 4: "greyscale with alpha",
               6: "RGBA colour"}


def natural_key(text: str) -> list:
    """Sort key that orders digit runs by value: ``p2`` before ``p10``; case-insensitive."""
    parts = re.split(r"(\d+)", text)
    # re.split with a group alternates text and digits, so positions keep their type.
    return [int(p) if i % 2 else p.casefold() for i, p in enumerate(parts)]


def _is_image_name(name: str) -> bool:
    return not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def _sniff(path) -> str | None:
    """``"tiff"``, ``"png"`` or ``None`` from the first bytes of ``path``."""
    try:
        with builtins.open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return None
    if head[:4] in TIFF_MAGIC:
        return "tiff"
    if head == PNG_MAGIC:
        return "png"
    return None


def _list_files(path) -> tuple[list[str], str, str]:
    """(files, the stack's path, how it was given)."""
    if isinstance(path, (list, tuple)):
        files = [os.fspath(p) for p in path]
        if not files:
            raise InputError("an image stack needs at least one image; the list is empty")
        for f in files:
            if not os.path.isfile(f):
                raise InputError("no such image file" if not os.path.exists(f)
                                 else "is not a file", f)
        return files, os.path.dirname(files[0]) or ".", "list"
    text = os.fspath(path)
    if os.path.isdir(text):
        with os.scandir(text) as it:
            names = [e.name for e in it if _is_image_name(e.name) and e.is_file()]
        if not names:
            raise InputError("holds no TIFF or PNG images (*.tif, *.tiff, *.png)", text)
        names.sort(key=lambda n: (natural_key(n), n))
        return [os.path.join(text, n) for n in names], text, "folder"
    if any(ch in text for ch in "*?["):
        files = [f for f in glob.glob(text, recursive=True)
                 if _is_image_name(os.path.basename(f)) and os.path.isfile(f)]
        if not files:
            raise InputError("matches no TIFF or PNG images (*.tif, *.tiff, *.png)", text)
        files.sort(key=lambda f: (natural_key(f), f))
        return files, text, "glob"
    if os.path.isfile(text):
        raise InputError("is a single file; an image stack is a folder of images, a glob "
                         "pattern (e.g. 'frames/*.tif') or a list of files", text)
    raise InputError("no such folder", text)


def detect(path) -> bool:
    """Whether ``path`` is an image stack: a folder holding TIFF/PNG images, a glob
    pattern matching some, or a list of files. A single file is not a stack."""
    try:
        _list_files(path)
    except (InputError, OSError):
        return False
    return True


# --------------------------------------------------------------------------- headers


def _tiff_info(path) -> tuple[tuple[int, int], np.dtype]:
    import tifffile  # only when a stack is actually opened

    try:
        with tiff_checked(path), tifffile.TiffFile(path) as tif:
            n_pages = len(tif.pages)
            page = tif.pages[0]
            check_page(page, path)
            shape, dtype = tuple(page.shape), page.dtype
            spp = getattr(page, "samplesperpixel", 1)
    except InputError:
        raise
    except Exception as exc:  # tifffile raises many kinds for damaged files
        raise InputError(f"could not be read as a TIFF image ({exc})", path) from exc
    if n_pages != 1:
        raise InputError(f"holds {n_pages} images (a multi-page TIFF); a stack needs one "
                         "image per file", path)
    if spp > 1 or len(shape) != 2:
        raise InputError(f"is a colour or multi-channel image (shape {shape}); patterns must "
                         "be greyscale", path)
    if dtype is None or dtype.kind not in "uif" or dtype == np.bool_:
        raise InputError(f"holds {dtype} pixels; patterns must be integer or floating-point "
                         "grey values", path)
    return shape, dtype.newbyteorder("=")


def _png_info(path) -> tuple[tuple[int, int], np.dtype]:
    # The IHDR chunk follows the signature: length, "IHDR", width, height, bit depth,
    # colour type. Reading it directly costs one small read and no decoding.
    with builtins.open(path, "rb") as fh:
        raw = fh.read(26)
    if len(raw) < 26 or raw[12:16] != b"IHDR":
        raise InputError("is not a valid PNG image (no IHDR header)", path)
    width, height, depth, colour = struct.unpack(">IIBB", raw[16:26])
    if colour != 0:
        kind = _PNG_COLOUR.get(colour, f"colour type {colour}")
        raise InputError(f"is a {kind} PNG; patterns must be greyscale", path)
    if depth not in (8, 16):
        raise InputError(f"is a {depth}-bit greyscale PNG; ebsdxc reads 8- and 16-bit PNGs",
                         path)
    return (height, width), np.dtype(np.uint8 if depth == 8 else np.uint16)


def image_info(path) -> tuple[tuple[int, int], np.dtype, str]:
    """(shape, dtype, ``"tiff"`` or ``"png"``) of one image file, from its header only."""
    kind = _sniff(path)
    if kind == "tiff":
        return (*_tiff_info(path), kind)
    if kind == "png":
        return (*_png_info(path), kind)
    raise InputError("is neither a TIFF nor a PNG image", path)


def read_image(path, kind: str) -> np.ndarray:
    """The pixels of one image file (``kind`` from :func:`image_info`)."""
    if kind == "tiff":
        # The page directly: a third faster than imread, which looks for series.
        with open_tiff(path) as tif:
            check_page(tif.pages[0], path)
            return tif.pages[0].asarray()
    try:
        from PIL import Image
    except ImportError:
        raise InputError("reading PNG images needs Pillow (pip install pillow)", path) from None
    try:
        with Image.open(path) as im:
            bits16 = im.mode.startswith("I")
            arr = np.asarray(im)
    except Exception as exc:
        raise InputError(f"could not be read as a PNG image ({exc})", path) from exc
    # Older Pillow opens 16-bit greyscale as 32-bit mode "I"; the file holds 16 bits.
    return arr.astype(np.uint16, copy=False) if bits16 and arr.dtype != np.uint16 else arr


# --------------------------------------------------------------------------- source


class ImageStackSource(PatternSource):
    """One pattern per image file, read lazily in the order of :attr:`files`.

    Parameters
    ----------
    path : str
        The folder, the glob pattern, or the first file's folder for a list.
    files : list of str
    kinds : list of str
        ``"tiff"`` or ``"png"`` per file.
    grid : ScanGrid
    pattern_shape : (int, int)
    dtype : numpy.dtype
    metadata : dict, optional

    Notes
    -----
    Holds no open file between reads, so it pickles as it is.
    """

    format = NAME

    def __init__(self, path, files, kinds, *, grid, pattern_shape, dtype, metadata=None):
        super().__init__(path, grid=grid, pattern_shape=pattern_shape, dtype=dtype,
                         metadata=metadata)
        self.files = list(files)
        self._kinds = list(kinds)
        self.use_records(len(self.files))

    def read_records(self, start: int, stop: int, out: np.ndarray) -> None:
        """Images ``start:stop`` (one file each) into ``out``."""
        for i in range(start, stop):
            arr = read_image(self.files[i], self._kinds[i])
            if arr.shape != self.pattern_shape:
                raise InputError(f"is now {arr.shape[0]} x {arr.shape[1]} px, not the "
                                 f"{self.pattern_shape[0]} x {self.pattern_shape[1]} px it had "
                                 "when the stack was opened", self.files[i])
            out[i - start] = arr

    def read_window(self, index, rows, cols) -> np.ndarray:
        """A window of one image: of a TIFF only the strips or tiles that hold it are read; a
        PNG (no random access) is decoded whole and cut."""
        r0, r1, c0, c1 = self._check_window(index, rows, cols)
        rec = self._record_of(index)
        if rec < 0:
            return np.zeros((r1 - r0, c1 - c0), self.dtype)
        path = self.files[rec]
        if self._kinds[rec] != "tiff":
            return np.ascontiguousarray(read_image(path, self._kinds[rec])[r0:r1, c0:c1])
        with open_tiff(path) as tif:
            page = tif.pages[0]
            if tuple(page.shape) != self.pattern_shape:
                raise InputError(f"is now {page.shape[0]} x {page.shape[1]} px, not the {self.pattern_shape[0]} "
                                 f"x {self.pattern_shape[1]} px it had when the stack was opened", path)
            return read_page_window(tif, page, path, (r0, r1), (c0, c1))


# --------------------------------------------------------------------------- open


def _shape_text(shape, dtype) -> str:
    return f"{shape[0]} x {shape[1]} px {np.dtype(dtype).name}"


def open(path, *, dataset=None, grid_shape=None) -> ImageStackSource:  # noqa: A001 - registry
    """Open a stack of TIFF/PNG images (see module notes for the accepted forms).

    Parameters
    ----------
    path : str or os.PathLike or list of them
        A folder, a glob pattern, or a list/tuple of image files.
    dataset : None
        Does not apply; giving one is an error.
    grid_shape : (int, int) or str, optional
        (rows, cols) of the scan (``--grid``); default one row of all images.

    Returns
    -------
    ImageStackSource

    Raises
    ------
    InputError
        No images, a file that is not a greyscale single-image TIFF or 8/16-bit greyscale
        PNG, images of different shapes or dtypes (naming the file and both), or a grid
        with fewer points than images.
    """
    files, where, how = _list_files(path)
    if dataset is not None:
        raise InputError(f"an image stack has no datasets; --dataset {dataset!r} does not "
                         "apply", where)
    shape0, dtype0, kind0 = image_info(files[0])
    kinds = [kind0]
    for f in files[1:]:
        shape, dtype, kind = image_info(f)
        if shape != shape0 or dtype != dtype0:
            raise InputError(f"is a {_shape_text(shape, dtype)} image but the stack's first "
                             f"image {files[0]} is {_shape_text(shape0, dtype0)}; all images "
                             "of a stack must share shape and dtype", f)
        kinds.append(kind)
    grid = choose_grid(None, grid_shape, len(files), where)

    def name(f):
        return os.path.basename(f) if how == "folder" else f

    meta = {"stack": how, "n_files": len(files), "first_file": name(files[0]),
            "last_file": name(files[-1]),
            "image_format": " and ".join(sorted({k.upper() for k in kinds}, reverse=True))}
    if len(files) < grid.n_points:
        meta["n_stored"] = len(files)
    return ImageStackSource(where, files, kinds, grid=grid, pattern_shape=shape0, dtype=dtype0,
                            metadata=meta)
