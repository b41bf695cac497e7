"""Single reference images from TIFF files (8-bit, 16-bit, float32/float64 greyscale).

The image is returned with its stored dtype; converting to float32 is preprocessing's
job. Multi-page files (stacks) and colour images are refused with a plain message, since
a reference pattern is exactly one greyscale image.
"""

from __future__ import annotations

import builtins
import contextlib
import logging

import numpy as np

from ..errors import InputError

NAME = "tiff"
DESCRIPTION = "one greyscale TIFF image"

#: Little- and big-endian TIFF and BigTIFF headers.
TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")


class _Complaints(logging.Handler):
    """Collects what tifffile logs while a file is read."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def tiff_checked(path):
    """Read a TIFF inside this block: a tag tifffile could not parse is an :class:`InputError`.

    tifffile logs a damaged tag (a width, a strip offset) and goes on without it, returning
    an image of another shape or other pixels; TIFF keeps no checksum, so that log line is
    the only sign of the damage.
    """
    logger = logging.getLogger("tifffile")
    complaints = _Complaints()
    logger.addHandler(complaints)

    def complaint():
        detail = " ".join(complaints.messages[0].split())[:200]
        return InputError(f"is damaged: a TIFF tag could not be read ({detail})", path)

    try:
        yield
    except InputError:
        if complaints.messages:  # the tag tifffile dropped says more than what followed
            raise complaint() from None
        raise
    finally:
        logger.removeHandler(complaints)
    if complaints.messages:
        raise complaint()


@contextlib.contextmanager
def open_tiff(path):
    """``tifffile.TiffFile(path)`` inside :func:`tiff_checked`: anything else tifffile raises for
    a damaged file (it raises many kinds) becomes one :class:`InputError` naming ``path``."""
    import tifffile

    try:
        with tiff_checked(path), tifffile.TiffFile(path) as tif:
            yield tif
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"could not be read as a TIFF image ({exc})", path) from exc


def check_page(page, path) -> None:
    """Refuse a TIFF page whose tags contradict each other: no pixel type (a damaged
    BitsPerSample), or uncompressed strips holding other than width x height pixels (a
    damaged width, length or byte count)."""
    if page.dtype is None:
        raise InputError(f"is damaged: its TIFF tags give no pixel type (BitsPerSample "
                         f"{page.bitspersample}, SampleFormat {int(page.sampleformat)})", path)
    if int(page.compression) == 1:  # uncompressed: the strips hold exactly the pixels
        need = int(np.prod(page.shape, dtype=np.int64)) * page.dtype.itemsize
        held = int(sum(page.databytecounts))
        if held != need:
            raise InputError(f"is damaged: its strips hold {held} bytes but {page.shape} "
                             f"{page.dtype} pixels need {need}", path)


def read_page_window(tif, page, path, rows, cols) -> np.ndarray:
    """Pixels ``rows`` = (r0, r1), ``cols`` = (c0, c1) of a greyscale TIFF ``page`` of the open
    ``tif``, native byte order, reading only what holds them: the rows' spans of an
    uncompressed page, else only the strips or tiles the window meets (decoded by tifffile,
    so every compression and predictor it knows works)."""
    import tifffile

    (r0, r1), (c0, c1) = rows, cols
    dtype = page.dtype.newbyteorder("=")
    if page.is_memmappable:
        m = tifffile.memmap(path, page=page.index, mode="r")
        return np.array(m[r0:r1, c0:c1], dtype=dtype)
    sh, sw = (int(v) for v in page.chunks[:2])
    per_row = int(page.chunked[1])
    out = np.zeros((r1 - r0, c1 - c0), dtype)
    fh = tif.filehandle
    for ty in range(r0 // sh, (r1 - 1) // sh + 1):
        for tx in range(c0 // sw, (c1 - 1) // sw + 1):
            i = ty * per_row + tx
            if not page.databytecounts[i]:
                continue  # a sparse file's empty segment: zeros
            fh.seek(page.dataoffsets[i])
            seg, _, _ = page.decode(fh.read(page.databytecounts[i]), i, jpegtables=page.jpegtables)
            seg = seg.reshape(seg.shape[-3], seg.shape[-2])
            y0, x0 = ty * sh, tx * sw
            a, b = max(r0, y0), min(r1, y0 + seg.shape[0])
            c, d = max(c0, x0), min(c1, x0 + seg.shape[1])
            if a < b and c < d:
                out[a - r0:b - r0, c - c0:d - c0] = seg[a - y0:b - y0, c - x0:d - x0]
    return out


def is_tiff_file(path) -> bool:
    """Whether ``path`` starts with a TIFF (or BigTIFF) header; ``False`` if unreadable."""
    try:
        with builtins.open(path, "rb") as fh:
            return fh.read(4) in TIFF_MAGIC
    except OSError:
        return False


def detect(path) -> bool:
    """Whether ``path`` is a TIFF file, judged from its first bytes."""
    return is_tiff_file(path)


def read_tiff(path) -> np.ndarray:
    """Read the single greyscale image of a TIFF file.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    numpy.ndarray
        ``(H, W)``, in the dtype stored in the file.

    Raises
    ------
    InputError
        Not a TIFF, unreadable, several pages, colour samples, or a non-numeric dtype.
    """
    import tifffile  # only when a TIFF is actually read

    if not is_tiff_file(path):
        raise InputError("not a TIFF image (reference images must be TIFF files)", path)
    try:
        with tiff_checked(path), tifffile.TiffFile(path) as tif:
            n_pages = len(tif.pages)
            if n_pages != 1:
                raise InputError(
                    f"holds {n_pages} images (a multi-page TIFF); a reference must be one "
                    "image: save the one you want as its own file, or take it from the scan "
                    "with --ref-index", path)
            page = tif.pages[0]
            check_page(page, path)
            if getattr(page, "samplesperpixel", 1) > 1 or len(page.shape) != 2:
                raise InputError(
                    f"is a colour or multi-channel image (shape {tuple(page.shape)}); "
                    "a reference must be one greyscale (single-channel) image", path)
            image = page.asarray()
    except InputError:
        raise
    except Exception as exc:  # tifffile raises many kinds for damaged files
        raise InputError(f"could not be read as a TIFF image ({exc})", path) from exc
    if image.dtype.kind not in "uif":
        raise InputError(f"holds {image.dtype} pixels; a reference must hold integer or "
                         "floating-point grey values", path)
    return image


def read_tiff_description(path) -> dict:
    """The JSON object in a TIFF's ImageDescription (e.g. a reference's pattern centre), or {}."""
    import json

    import tifffile

    try:
        with tifffile.TiffFile(path) as tif:
            text = tif.pages[0].description
        value = json.loads(text)
    except Exception:  # no description, not JSON, or not a TIFF: there is simply nothing to use
        return {}
    return value if isinstance(value, dict) else {}
