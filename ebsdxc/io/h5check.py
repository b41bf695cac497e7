"""Structural checks of HDF5 files against damage that would change data without an error.

HDF5 files in the old layout (h5py's default, kikuchipy's and the vendors' files) carry no
checksum of their metadata. One damaged byte in an object header, a group's name heap or a
chunk index can then point a dataset at other bytes, hide an entry (a reader takes it as
absent and goes on without the static background or the grid), or move a chunk so that
its patterns read as zeros. What such damage leaves behind is checked here, once per open,
never per read:

- :func:`check_file` (when a reader opens a file): every group in the file lists its
  members, every name is printable text, every object opens, and in files of a known EBSD
  layout no unknown name sits one byte away from a name the format uses that is missing
  (``manufactXrer`` next to no ``manufacturer``); every dataset passes
  :func:`check_dataset`, and no two datasets' bytes overlap.
- :func:`check_dataset`: a contiguous dataset's bytes lie inside the file and its storage
  size is its shape times its item size; it cannot have been resized, so its shape is its
  maximum shape; a chunked dataset's chunks fit its maximum shape.
- :func:`chunk_table` (the first read of a chunked pattern dataset, where the fast reader
  needs the chunk index anyway): every chunk starts on the chunk grid inside the dataset,
  no two start at the same place, every chunk's bytes lie inside the file without
  overlapping another's, its filter mask names only the dataset's filters, and its stored
  size is plausible (the raw size when nothing compresses it, at most the raw size plus the
  compressor's overhead when deflate does, never zero).

Each failure is one :class:`~ebsdxc.errors.InputError` naming the file and what is wrong.
Damage these checks cannot see (a flipped bit in stored values, a datatype's byte order
changed in place) is listed in ``benchmarks/fuzz_readers.py`` (``UNDETECTABLE``).
"""

from __future__ import annotations

import itertools
import os

import h5py
import numpy as np

from ..errors import InputError

__all__ = ["ChunkTable", "MAX_CHECKED_OBJECTS", "check_dataset", "check_file", "check_pattern_axes",
           "chunk_table"]

#: Objects :func:`check_file` visits at most; EBSD files hold tens to a few hundred, and a
#: file with many more (one dataset per point, say) is checked that far only.
MAX_CHECKED_OBJECTS = 20000

# Chunked datasets of at most this many chunks have their chunk index checked with the file;
# larger ones (pattern datasets) when they are first read.
_SMALL_CHUNK_COUNT = 4096

_FILTER_DEFLATE = 1
_FILTER_SHUFFLE = 2
_FILTER_FLETCHER32 = 3

# Names in the root group of a vendor's or kikuchipy's EBSD file: their presence says the
# file has a known layout, and one of them damaged into another name is caught at the root
# of any HDF5 file.
_ROOT_MARKERS = frozenset({
    "manufacturer", "Manufacturer", " Manufacturer", "version", "Version", " Version",
    "Format Version", "EMheader", "EMData", "NMLparameters", "NMLfiles"})

# Names the EBSD readers look up, by the name of the group holding them (a top group
# ``Scan N`` or ``N`` by "scan"). In a file of a known layout, an unknown name one byte away
# from one of these that is missing is damage.
_DATA_NAMES = frozenset({
    "patterns", "x_sample", "y_sample",  # kikuchipy
    "Pattern", "Phi1", "Phi", "Phi2", "CI", "IQ", "Fit", "SEM Signal", "Valid", "X Position",
    "Y Position",  # EDAX
    "RawPatterns", "PCX", "PCY", "phi1", "PHI", "phi2", "MAD", "MADPhase", "NIndexedBands",
    "RadonBandCount", "RadonQuality", "X BEAM", "Y BEAM", "X SAMPLE", "Y SAMPLE",
    "Z SAMPLE",  # Bruker
    "Processed Patterns", "Unprocessed Patterns", "Pattern Center X", "Pattern Center Y",
    "Detector Distance", "Euler", "Band Contrast", "Band Slope", "Bands",
    "Mean Angular Deviation", "Beam Position X", "Beam Position Y",  # Oxford
    "Phase"})
_HEADER_NAMES = frozenset({
    "static_background", "n_rows", "n_columns", "step_x", "step_y", "pattern_height",
    "pattern_width", "grid_type", "pcx", "pcy", "pcz", "xpc", "ypc", "zpc", "sample_tilt",
    "azimuth_angle", "elevation_angle", "binning", "detector_pixel_size", "detector",
    "exposure_time", "gain", "beam_energy", "working_distance", "magnification", "microscope",
    "Phases",  # kikuchipy
    "nRows", "nColumns", "Step X", "Step Y", "Grid Type", "Pattern Height", "Pattern Width",
    "Sample Tilt", "Camera Azimuthal Angle", "Camera Elevation Angle", "Working Distance",
    "Pattern Center Calibration", "Phase",  # EDAX
    "StaticBackground", "NROWS", "NCOLS", "XSTEP", "YSTEP", "PatternHeight", "PatternWidth",
    "CameraTilt", "SampleTilt",  # Bruker
    "Processed Static Background", "Unprocessed Static Background", "X Cells", "Y Cells",
    "X Step", "Y Step", "Camera Mode", "Tilt Angle"})  # Oxford
_VOCABULARY = {
    "scan": frozenset({"EBSD", "SEM", "SEM-PRIAS Images"}),
    "EBSD": frozenset({"Data", "Header"}),
    "/EMData/EBSD": frozenset({"EBSDPatterns", "EulerAngles"}),  # EMsoft's, by full name
    "/EMheader/EBSD": frozenset({"ProgramName", "Version"}),
    "/EMData": frozenset({"EBSD"}), "/EMheader": frozenset({"EBSD"}),
    "Data": _DATA_NAMES, "Header": _HEADER_NAMES,
    "Pattern Center Calibration": frozenset({"x-star", "y-star", "z-star"}),
    # a phase group (``Phases/1``, ``Phase/1``)
    "phase": frozenset({"LatticeConstants", "SpaceGroup", "Formula", "Name", "IT",
                        "Symmetry", "Point Group", "MaterialName", "Lattice Constant a",
                        "Lattice Constant b", "Lattice Constant c", "Lattice Constant alpha",
                        "Lattice Constant beta", "Lattice Constant gamma", "Laue Group",
                        "Space Group", "Lattice Dimensions", "Lattice Angles", "Phase Name",
                        "lattice_constants", "space_group", "point_group", "material_name",
                        "formula", "setting", "symmetry"}),
}
# Datasets up to this size are read whole by check_file: a damaged datatype that still
# opens fails there, where a reader would take the entry as absent.
_READ_BYTES = 4096
# Shorter names are too alike to tell damage from another vendor's spelling ("WD", "DD").
_MIN_NAME = 3


class ChunkTable:
    """The checked chunk index of a chunked dataset (see :func:`chunk_table`).

    Attributes
    ----------
    origins : numpy.ndarray
        (n, ndim) int64, the first element of each stored chunk.
    offsets, sizes, masks : numpy.ndarray
        (n,) int64: each chunk's byte offset in the file, stored size, filter mask.
    """

    def __init__(self, origins, offsets, sizes, masks):
        self.origins = origins
        self.offsets = offsets
        self.sizes = sizes
        self.masks = masks

    def __len__(self) -> int:
        return int(self.offsets.size)

    def as_dict(self, axes=None) -> dict:
        """``{origin tuple (first ``axes`` axes, all by default): (offset, size, mask)}``."""
        origins = self.origins if axes is None else self.origins[:, :axes]
        return {tuple(o): (int(a), int(s), int(m)) for o, a, s, m in
                zip(origins.tolist(), self.offsets.tolist(), self.sizes.tolist(),
                    self.masks.tolist())}


# --------------------------------------------------------------------------- names


def _printable(raw: bytes) -> str | None:
    """``raw`` as text when it is a plausible HDF5 name (UTF-8, printable), else ``None``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text and text.isprintable() else None


def _one_byte_away(name: str, known: str) -> bool:
    """Whether ``name`` is ``known`` with one character changed, added or dropped, or cut.

    Names that differ in the case of their first letter are different names (vendors spell
    the same entry ``magnification`` and ``Magnification``), not damage.
    """
    if name[:1].lower() == known[:1].lower() and name[1:] == known[1:] or \
            min(len(name), len(known)) < _MIN_NAME:
        return False
    n, k = len(name), len(known)
    if n == k:
        return sum(a != b for a, b in zip(name, known)) == 1
    if n < k and known.startswith(name):
        return True  # a name cut short (a damaged length or heap)
    if abs(n - k) != 1:
        return False
    short, long_ = (name, known) if n < k else (known, name)
    i = next((j for j, (a, b) in enumerate(zip(short, long_)) if a != b), len(short))
    return short[i:] == long_[i + 1:]


def _near_miss(names, vocabulary) -> tuple[str, str] | None:
    """(unknown name, the known name it looks like) for a damaged name, else ``None``."""
    missing = [k for k in vocabulary if k not in names]
    for name in names:
        if name in vocabulary:
            continue
        for known in missing:
            if _one_byte_away(name, known):
                return name, known
    return None


# --------------------------------------------------------------------------- datasets


def _fail(path, what) -> InputError:
    return InputError(f"is damaged: {what}", path)


def check_dataset(ds, path, *, file_size=None) -> tuple[int, int] | None:
    """Check the storage of dataset ``ds`` of file ``path`` (see the module notes).

    Returns
    -------
    (int, int) or None
        (byte offset, size) of a contiguous dataset's data, for overlap checks; ``None``
        for other layouts and unwritten data.

    Raises
    ------
    InputError
        When the storage cannot be the dataset's.
    """
    if file_size is None:
        file_size = os.path.getsize(path)
    name = ds.name
    dsid = ds.id
    plist = dsid.get_create_plist()
    layout = plist.get_layout()
    shape = tuple(int(n) for n in ds.shape) if ds.shape is not None else ()
    maxshape = ds.maxshape or ()
    nbytes = int(np.prod(shape, dtype=np.int64)) * ds.dtype.itemsize if shape else ds.dtype.itemsize
    if layout == h5py.h5d.CONTIGUOUS and not ds.is_virtual and not ds.external and \
            ds.dtype.kind != "O":  # variable-length data live in a heap, not in the dataset
        if tuple(maxshape) != shape:
            raise _fail(path, f"dataset {name!r} is stored contiguously (it cannot grow) yet its "
                              f"shape {shape} is not its maximum shape {tuple(maxshape)}")
        offset = dsid.get_offset()
        stored = int(dsid.get_storage_size())
        if offset is None:
            return None  # never written: it reads as its fill value
        if stored != nbytes:
            raise _fail(path, f"dataset {name!r} holds {stored} bytes but its shape {shape} of "
                              f"{ds.dtype} needs {nbytes}")
        if offset < 0 or offset + stored > file_size:
            raise _fail(path, f"the data of dataset {name!r} (bytes {offset} to "
                              f"{offset + stored}) lie outside the file of {file_size} bytes")
        return int(offset), stored
    if layout == h5py.h5d.CHUNKED:
        chunks = tuple(int(c) for c in ds.chunks)
        for axis, (c, m) in enumerate(zip(chunks, maxshape)):
            if m is not None and c > m:
                raise _fail(path, f"dataset {name!r} has chunks of {chunks} but at most "
                                  f"{tuple(maxshape)} values (axis {axis})")
        n_chunks = int(np.prod([-(-s // c) for s, c in zip(shape, chunks)], dtype=np.int64))
        if n_chunks <= _SMALL_CHUNK_COUNT:
            chunk_table(ds, path, file_size=file_size)
    return None


def _zlib_bound(n: int) -> int:
    # zlib's deflateBound for the default settings, plus room for a stored header
    return n + (n >> 12) + (n >> 14) + (n >> 25) + 13 + 64


def chunk_table(ds, path, *, file_size=None) -> ChunkTable | None:
    """The chunk index of ``ds``, checked (see the module notes); ``None`` when not chunked.

    One pass over HDF5's chunk index, as the fast reader needs it anyway; about 2 s per
    million chunks.
    """
    if ds.chunks is None:
        return None
    if file_size is None:
        file_size = os.path.getsize(path)
    name = ds.name
    shape = np.array(ds.shape, dtype=np.int64)
    chunks = np.array(ds.chunks, dtype=np.int64)
    rows = []

    def visit(info):
        rows.append((*info.chunk_offset, info.byte_offset, info.size, info.filter_mask))

    dsid = ds.id
    if hasattr(dsid, "chunk_iter"):  # HDF5 >= 1.12.3: one pass over the chunk index
        dsid.chunk_iter(visit)
    else:
        for i in range(dsid.get_num_chunks()):
            visit(dsid.get_chunk_info(i))
    ndim = len(shape)
    table = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.uint64,
                        count=len(rows) * (ndim + 3)).reshape(-1, ndim + 3)
    # uint64 first: a damaged key may not fit int64; such values are out of range anyway
    too_big = (table > np.uint64(np.iinfo(np.int64).max)).any(axis=1)
    if too_big.any():
        i = int(np.flatnonzero(too_big)[0])
        raise _fail(path, f"the chunk index of dataset {name!r} holds a chunk at "
                          f"{tuple(int(v) for v in table[i, :ndim])}, byte {int(table[i, ndim])}: "
                          "outside the dataset or the file")
    table = table.astype(np.int64)
    origins, offsets = table[:, :ndim], table[:, ndim]
    sizes, masks = table[:, ndim + 1], table[:, ndim + 2]
    if len(table):
        bad = ((origins % chunks) != 0).any(axis=1) | (origins >= shape).any(axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise _fail(path, f"the chunk index of dataset {name!r} {tuple(ds.shape)} in chunks of "
                              f"{tuple(ds.chunks)} holds a chunk at {tuple(origins[i].tolist())}, "
                              "off the chunk grid or outside the dataset")
        grid = -(-shape // chunks)  # chunks per axis
        flat = np.sort(np.ravel_multi_index(tuple((origins // chunks).T), tuple(grid)))
        if (np.diff(flat) == 0).any():
            raise _fail(path, f"the chunk index of dataset {name!r} holds two chunks at the same "
                              "place")
        _check_chunk_bytes(ds, path, offsets, sizes, masks, file_size)
    return ChunkTable(origins, offsets, sizes, masks)


def _check_chunk_bytes(ds, path, offsets, sizes, masks, file_size):
    name = ds.name
    plist = ds.id.get_create_plist()
    filters = [int(plist.get_filter(i)[0]) for i in range(plist.get_nfilters())]
    outside = (offsets + sizes > file_size) | (sizes <= 0)
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise _fail(path, f"a chunk of dataset {name!r} (byte {int(offsets[i])}, {int(sizes[i])} "
                          f"bytes) is empty or lies outside the file of {file_size} bytes")
    if (masks >> len(filters)).any():
        raise _fail(path, f"a chunk of dataset {name!r} skips filters the dataset does not have "
                          f"(filter mask {int(masks[np.flatnonzero(masks >> len(filters))[0]])})")
    order = np.argsort(offsets, kind="stable")
    ends = offsets[order] + sizes[order]
    overlap = ends[:-1] > offsets[order][1:]
    if overlap.any():
        i = int(order[np.flatnonzero(overlap)[0]])
        raise _fail(path, f"chunks of dataset {name!r} overlap at byte {int(offsets[i])}")
    raw = int(np.prod(ds.chunks, dtype=np.int64)) * ds.dtype.itemsize
    # which filters ran on each chunk: bit i of the mask set means filter i was skipped
    extra = 4 if _FILTER_FLETCHER32 in filters else 0
    ran_deflate = np.zeros(len(masks), dtype=bool)
    ran_other = np.zeros(len(masks), dtype=bool)
    for i, code in enumerate(filters):
        ran = (masks & (1 << i)) == 0
        if code == _FILTER_DEFLATE:
            ran_deflate |= ran
        elif code not in (_FILTER_SHUFFLE, _FILTER_FLETCHER32):
            ran_other |= ran
    uncompressed = ~ran_deflate & ~ran_other
    wrong = uncompressed & (sizes != raw + extra)
    wrong |= ran_deflate & ~ran_other & (sizes > _zlib_bound(raw) + extra)
    wrong |= ran_other & (sizes > 2 * raw + 4096)  # unknown compressors: a generous bound
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        raise _fail(path, f"a chunk of dataset {name!r} at byte {int(offsets[i])} holds "
                          f"{int(sizes[i])} bytes, which its {raw} raw bytes cannot be stored in "
                          "with its filters")


# --------------------------------------------------------------------------- the file


def check_file(f, path) -> None:
    """Check the structure of open HDF5 file ``f`` (see the module notes).

    Groups, names and objects are visited once each (hard links shared by several groups
    too), at most :data:`MAX_CHECKED_OBJECTS` of them; soft and external links are not
    followed.

    Raises
    ------
    InputError
        One line naming the file and the first damage found.
    """
    file_size = os.path.getsize(path)
    seen = set()
    extents = []
    known_layout = False
    budget = [MAX_CHECKED_OBJECTS]

    def walk(group, where):
        nonlocal known_layout
        try:
            raw_names = list(group.id.__iter__())
        except (RuntimeError, OSError, KeyError, ValueError) as exc:
            raise _fail(path, f"group {where!r} cannot be listed ({_words(exc)})") from None
        names = []
        for raw in raw_names:
            text = _printable(raw)
            if text is None:
                raise _fail(path, f"group {where!r} holds an entry named {raw!r}, which is no "
                                  "name (a damaged name)")
            names.append(text)
        if group.name == "/":
            known_layout = any(n in _ROOT_MARKERS for n in names)
            vocabulary = _ROOT_MARKERS
            if known_layout:  # a marker cut short beside the others ("M" for "Manufacturer")
                cut = next(((n, k) for n in names if n not in _ROOT_MARKERS
                            for k in _ROOT_MARKERS if k not in names and k.startswith(n)), None)
                if cut is not None:
                    raise _fail(path, f"group '/' holds {cut[0]!r} where {cut[1]!r} is expected "
                                      "(a damaged name)")
        elif not known_layout:
            vocabulary = ()
        elif where in _VOCABULARY:
            vocabulary = _VOCABULARY[where]
        elif where.count("/") == 1:
            vocabulary = _VOCABULARY["scan"]
        elif where.rsplit("/", 2)[-2:-1] in (["Phases"], ["Phase"]):
            vocabulary = _VOCABULARY["phase"]
        else:
            vocabulary = _VOCABULARY.get(where.rsplit("/", 1)[-1], ())
        if vocabulary:
            near = _near_miss(names, vocabulary)
            if near is not None:
                raise _fail(path, f"group {where!r} holds {near[0]!r} where {near[1]!r} is "
                                  "expected (a damaged name)")
        for name, raw in zip(names, raw_names):
            if budget[0] <= 0:
                return
            try:
                link = group.id.links.get_info(raw)
                kind = link.type
            except (RuntimeError, OSError, KeyError, ValueError) as exc:
                raise _fail(path, f"entry {_join(where, name)!r} cannot be read "
                                  f"({_words(exc)})") from None
            if kind != h5py.h5l.TYPE_HARD:
                continue  # soft and external links may dangle by design
            try:
                obj = group[raw]
                addr = link.u  # the object's address (h5o.get_info would walk chunk indexes)
            except (RuntimeError, OSError, KeyError, ValueError, TypeError) as exc:
                raise _fail(path, f"entry {_join(where, name)!r} cannot be opened "
                                  f"({_words(exc)})") from None
            if addr in seen:
                continue
            seen.add(addr)
            budget[0] -= 1
            if isinstance(obj, h5py.Datatype) and (known_layout or name in _ROOT_MARKERS):
                # no EBSD format stores named datatypes; a damaged dataset header reads as one
                raise _fail(path, f"entry {_join(where, name)!r} is a datatype, not data (a "
                                  "damaged object header)")
            if isinstance(obj, h5py.Group):
                walk(obj, _join(where, name))
            elif isinstance(obj, h5py.Dataset):
                try:
                    extent = check_dataset(obj, path, file_size=file_size)
                except InputError:
                    raise
                except (RuntimeError, OSError, KeyError, ValueError, TypeError) as exc:
                    raise _fail(path, f"dataset {_join(where, name)!r} cannot be inspected "
                                      f"({_words(exc)})") from None
                if extent is not None and extent[1] > 0:
                    extents.append((*extent, _join(where, name)))
                _read_small(obj, path, _join(where, name))

    walk(f, "/")
    extents.sort()
    for (a, n, first), (b, _, second) in zip(extents, extents[1:]):
        if a + n > b:
            raise _fail(path, f"the data of datasets {first!r} and {second!r} overlap (bytes "
                              f"{a} to {a + n} and from {b})")


def _read_small(ds, path, where) -> None:
    """Read dataset ``ds`` whole when it is small, so that a damaged datatype fails here."""
    try:
        if ds.id.get_type().get_class() == h5py.h5t.VLEN or ds.is_virtual or ds.external:
            return  # variable-length sequences crash HDF5 when damaged; see hdf5.read_entry
        if ds.size * ds.dtype.itemsize > _READ_BYTES or ds.id.get_storage_size() > _READ_BYTES:
            return  # the shape first: the storage size of a chunked dataset walks its index
        ds[()]
    except (RuntimeError, OSError, KeyError, ValueError, TypeError) as exc:
        raise _fail(path, f"dataset {where!r} cannot be read ({_words(exc)})") from None


def check_pattern_axes(ds, path) -> None:
    """Refuse a pattern dataset whose pattern axes (the last two) are not their maximum size:
    patterns never grow, while a damaged dataspace shrinks them and HDF5 reads the rest of
    each chunk as other pixels."""
    maxshape = ds.maxshape or ()
    for axis in (-2, -1):
        m = maxshape[axis] if len(maxshape) >= 2 else None
        if m is not None and m != ds.shape[axis]:
            raise _fail(path, f"dataset {ds.name!r} holds patterns of {ds.shape[-2]} x "
                              f"{ds.shape[-1]} px in room for {maxshape[-2]} x {maxshape[-1]} "
                              "(a damaged dataspace)")


def _join(where: str, name: str) -> str:
    return f"{where.rstrip('/')}/{name}"


def _words(exc) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]
