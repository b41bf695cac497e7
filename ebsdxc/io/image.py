"""Single reference images from TIFF files (8-bit, 16-bit, float32/float64 greyscale).

The image is returned with its stored dtype; converting to float32 is preprocessing's
job. Multi-page files (stacks) and colour images are refused with a plain message, since
a reference pattern is exactly one greyscale image.
"""

from __future__ import annotations

import builtins

import numpy as np

from ..errors import InputError

NAME = "tiff"
DESCRIPTION = "one greyscale TIFF image"

#: Little- and big-endian TIFF and BigTIFF headers.
TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")


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
        with tifffile.TiffFile(path) as tif:
            n_pages = len(tif.pages)
            if n_pages != 1:
                raise InputError(
                    f"holds {n_pages} images (a multi-page TIFF); a reference must be one "
                    "image: save the one you want as its own file, or take it from the scan "
                    "with --ref-index", path)
            page = tif.pages[0]
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
