"""Binary vendor readers: EDAX .up1/.up2 and Oxford .ebsp.

Against the sample files that ship with kikuchipy (compared with ``kikuchipy.load``) and
against files written here byte by byte with :mod:`struct`.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import shutil
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import tifffile

from ebsdxc import status as st
from ebsdxc.errors import InputError
from ebsdxc.io import edax_binary, image_stack, open_scan, oxford_binary
from ebsdxc.io import hdf5 as hdf5_reader

ROOT = Path(__file__).resolve().parents[2]


def _kp_data() -> Path | None:
    spec = importlib.util.find_spec("kikuchipy")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "data"


KP_DATA = _kp_data()
UP1 = None if KP_DATA is None else KP_DATA / "edax_binary" / "edax_binary.up1"
UP2 = None if KP_DATA is None else KP_DATA / "edax_binary" / "edax_binary.up2"
EBSP = None if KP_DATA is None else KP_DATA / "oxford_binary" / "patterns.ebsp"


@pytest.fixture(scope="module")
def kp():
    """kikuchipy, imported once (its import is slow)."""
    return pytest.importorskip("kikuchipy")


def kp_load(kp, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kikuchipy warns that it reads hex grids as one row
        return kp.load(path)


def open_quiet(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return open_scan(path, **kw)


def assert_names(exc_info, path):
    assert os.fspath(path) in str(exc_info.value), str(exc_info.value)


def assert_reads_like(src, expected):
    """Every sub-range read (all starts, all stops) equals ``expected[start:stop]``."""
    n = src.n_patterns
    assert expected.shape == (n, *src.pattern_shape)
    np.testing.assert_array_equal(src.read(0, n), expected)
    for a in range(n):
        for b in range(a, n + 1):
            np.testing.assert_array_equal(src.read(a, b), expected[a:b])
    # a strided (non-contiguous) buffer is filled in place too
    base = np.full((n, src.pattern_shape[0], 2 * src.pattern_shape[1]), 7, dtype=src.dtype)
    out = base[:, :, ::2]
    src.read_into(0, n, out)
    np.testing.assert_array_equal(out, expected)


def patterns(n, shape=(12, 10), dtype=np.uint16, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(1, np.iinfo(dtype).max, size=(n, *shape), dtype=dtype)


# ----------------------------------------------------------------------------- writers


def write_up(path, data, *, version=3, rows=1, cols=None, hexflag=0, extra=0,
             step=(2.0, 1.5), tail=b""):
    """An EDAX .up1/.up2 file of ``data`` (records in file order)."""
    n, h, w = data.shape
    dtype = "<u1" if str(path).endswith(".up1") else "<u2"
    if version == 1:
        head = struct.pack("<4I", 1, w, h, 16)
    else:
        cols = n if cols is None else cols
        head = struct.pack("<4IB2IB2d", version, w, h, 42, extra, cols, rows, hexflag,
                           step[0], step[1])
    with open(path, "wb") as f:
        f.write(head + data.astype(dtype).tobytes() + tail)
    return path


def write_ebsp(path, data, *, version=2, order=None, missing=(), step=1.5, beam=True,
               compressed=0):
    """An Oxford .ebsp file of map ``data`` (rows, cols, H, W), records in ``order``."""
    rows, cols, h, w = data.shape
    n = rows * cols
    flat = data.reshape(n, h, w)
    order = [p for p in (range(n) if order is None else order) if p not in set(missing)]
    nbytes = h * w * data.dtype.itemsize

    def record(p):
        r, c = divmod(p, cols)
        x, y = c * step, r * step
        head = struct.pack("<4i", compressed, h, w, nbytes)
        if version >= 5:
            head = struct.pack("<2i", c, r) + head
        if version == 0:
            foot = b""
        elif version == 1:
            foot = struct.pack("<2d", x, y)
        else:
            foot = struct.pack("<?d?d", True, x, True, y) if beam else b"\x00\x00"
        return head + flat[p].astype(data.dtype.newbyteorder("<")).tobytes() + foot

    start = 0 if version == 0 else (8 if version <= 3 else 9)
    first = start + 8 * n
    offsets = np.zeros(n, dtype="<i8")
    blobs, pos = [], first
    for p in order:
        offsets[p] = pos
        blob = record(p)
        blobs.append(blob)
        pos += len(blob)
    with open(path, "wb") as f:
        if version:
            f.write(struct.pack("<q", -version))
        if version >= 4:
            f.write(b"\x00")
        f.write(offsets.tobytes())
        f.write(b"".join(blobs))
    return path


def patch(path, offset, fmt, *values):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack(fmt, *values))


# ----------------------------------------------------------------------------- kikuchipy samples


needs_samples = pytest.mark.skipif(KP_DATA is None, reason="kikuchipy not installed")


@needs_samples
def test_up1_sample_matches_kikuchipy(kp):
    src = open_scan(UP1)
    assert src.format == "edax_binary"
    s = kp_load(kp, UP1)
    expected = np.asarray(s.data)
    assert src.dtype == expected.dtype == np.uint8
    # version 1 stores no grid: one row, as kikuchipy reads it
    assert (src.grid.rows, src.grid.cols) == (1, s.axes_manager.navigation_shape[0])
    assert src.grid.step is None and src.present is None
    assert_reads_like(src, expected.reshape(-1, *src.pattern_shape))


@needs_samples
def test_up1_sample_with_grid_shape(kp):
    expected = np.asarray(kp_load(kp, UP1).data)
    src = open_scan(UP1, grid_shape="3x3")
    assert (src.grid.rows, src.grid.cols) == (3, 3)
    assert_reads_like(src, expected)
    # more points than patterns: the rest are missing
    src = open_scan(UP1, grid_shape=(2, 5))
    assert src.present.reshape(-1).tolist() == [True] * 9 + [False]
    assert src.metadata["n_stored"] == 9
    np.testing.assert_array_equal(src.read(8, 10)[1], 0)
    with pytest.raises(InputError) as e:
        open_scan(UP1, grid_shape="2x4")
    assert_names(e, UP1)


@needs_samples
def test_up2_sample_hexagonal_grid(kp):
    """kikuchipy's .up2 says version 3, a 3 x 3 hexagonal grid with padded rows, and holds
    10 records: 9 for the grid (the odd row's last one a dummy) and one more."""
    with pytest.warns(UserWarning, match="1 pattern more") as rec:
        src = open_scan(UP2)
    assert str(UP2) in str(rec[0].message)
    assert src.format == "edax_binary" and src.dtype == np.uint16
    g = src.grid
    assert (g.rows, g.cols, g.kind) == (3, 3, "hexagonal")
    assert g.n_points == 8
    assert g.step == pytest.approx((np.pi / 2, np.pi))  # (step y, step x) of the header
    s = kp_load(kp, UP2)
    records = np.asarray(s.data)  # kikuchipy: one row of all 10 stored records
    assert records.shape[0] == 10
    # kikuchipy keeps the header's steps on its axes too (its x axis gets step y)
    assert s.axes_manager[0].scale == pytest.approx(np.pi / 2)
    present = src.present.reshape(-1)
    assert present.tolist() == [True] * 5 + [False] + [True] * 3
    expected = records[:9].copy()
    expected[5] = 0
    assert_reads_like(src, expected)
    assert src.metadata["hex_rows_padded"] is True


@needs_samples
def test_ebsp_sample_matches_kikuchipy(kp):
    src = open_scan(EBSP)
    assert src.format == "oxford_binary"
    s = kp_load(kp, EBSP)
    expected = np.asarray(s.data)
    assert expected.shape[:2] == (src.grid.rows, src.grid.cols) == (3, 3)
    assert src.grid.step == pytest.approx((s.axes_manager["y"].scale, s.axes_manager["x"].scale))
    assert src.dtype == expected.dtype == np.uint8
    assert src.present is None
    # the sample's records are stored out of map order: point 0 is last in the file
    assert_reads_like(src, expected.reshape(-1, *src.pattern_shape))


@needs_samples
def test_ebsp_without_preadv_reads_the_same(kp, monkeypatch):
    expected = np.asarray(kp_load(kp, EBSP).data).reshape(9, 60, 60)
    monkeypatch.setattr(oxford_binary, "_PREADV", False)
    monkeypatch.setattr(oxford_binary, "_COPY_BUFFER_BYTES", 2 * 3634)  # 2 records a buffer
    src = open_scan(EBSP)
    assert_reads_like(src, expected)


@needs_samples
@pytest.mark.parametrize("which", ["UP1", "UP2", "EBSP"])
def test_samples_pickle_and_describe(which):
    path = {"UP1": UP1, "UP2": UP2, "EBSP": EBSP}[which]
    src = open_quiet(path)
    first = src.read(0, src.n_patterns)  # opens the file descriptor
    clone = pickle.loads(pickle.dumps(src))
    np.testing.assert_array_equal(clone.read(0, clone.n_patterns), first)
    assert clone.grid == src.grid and clone.metadata == src.metadata
    src.close()
    np.testing.assert_array_equal(src.read(1, 3), first[1:3])  # reopens after close
    d = src.describe()
    assert d["format"] == src.format and d["grid"]["rows"] == src.grid.rows
    assert d["pattern_shape"] == [60, 60]


@needs_samples
@pytest.mark.parametrize("which, words", [
    ("UP1", ["edax_binary", "rows: 1", "cols: 9", "uint8"]),
    ("UP2", ["edax_binary", "rows: 3", "hexagonal", "uint16"]),
    ("EBSP", ["oxford_binary", "rows: 3", "cols: 3", "beam positions"]),
])
def test_cli_info(which, words):
    path = {"UP1": UP1, "UP2": UP2, "EBSP": EBSP}[which]
    res = subprocess.run([sys.executable, "-m", "ebsdxc", "info", str(path)],
                         check=False, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    for w in words:
        assert w in res.stdout, res.stdout


@needs_samples
@pytest.mark.parametrize("which", ["UP2", "EBSP"])
def test_cli_process_end_to_end(tmp_path, which):
    path = {"UP2": UP2, "EBSP": EBSP}[which]
    out = tmp_path / "OUT.h5"
    res = subprocess.run([sys.executable, "-m", "ebsdxc", "process", str(path), "--ref-index",
                          "0", "-o", str(out), "--device", "cpu", "-q"],
                         check=False, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    present = open_quiet(path).present
    with h5py.File(out, "r") as f:
        g = f["ebsdxc"]
        done, status = g["done"][...], g["status"][...]
        assert g.attrs["scan_format"] == {"UP2": "edax_binary", "EBSP": "oxford_binary"}[which]
    assert done.all()
    if present is not None:
        assert (status[~present] == st.MISSING_PATTERN).all()
        assert (status[present] != st.MISSING_PATTERN).all()


# ----------------------------------------------------------------------------- EDAX, hand-written


@pytest.mark.parametrize("ext", [".up1", ".up2"])
def test_up_version3_square_roundtrip(tmp_path, ext):
    dtype = np.uint8 if ext == ".up1" else np.uint16
    data = patterns(6, dtype=dtype)
    path = write_up(tmp_path / f"scan{ext}", data, rows=2, cols=3, step=(1.5, 2.5))
    assert edax_binary.detect(path)
    src = open_scan(path)
    assert (src.grid.rows, src.grid.cols, src.grid.kind) == (2, 3, "square")
    assert src.grid.step == (2.5, 1.5)  # (y, x)
    assert src.dtype == dtype and src.pattern_shape == (12, 10)
    assert src.present is None
    assert_reads_like(src, data)
    with pytest.raises(InputError) as e:
        open_scan(path, grid_shape="3x2")
    assert_names(e, path)
    assert "contradicts" in str(e.value)


def _hex_expected(rows, cols, values):
    """(rows*cols, H, W) slots of a hexagonal grid filled from per-point ``values``."""
    out = np.zeros((rows * cols, 12, 10), dtype=values.dtype)
    k = 0
    for r in range(rows):
        for c in range(cols - (r % 2)):
            out[r * cols + c] = values[k]
            k += 1
    return out


@pytest.mark.parametrize("ext", [".up1", ".up2"])
def test_up_hexagonal_packed(tmp_path, ext):
    """Extra-patterns byte 0: only the scan points are stored, 4 + 3 + 4 + 3 of them."""
    dtype = np.uint8 if ext == ".up1" else np.uint16
    rows, cols = 4, 4
    n = 4 + 3 + 4 + 3
    values = np.broadcast_to((np.arange(n) + 1).astype(dtype)[:, None, None], (n, 12, 10)).copy()
    values[:, 0, 0] = 200  # not uniform, so a transposed read would show
    path = write_up(tmp_path / f"hex{ext}", values, rows=rows, cols=cols, hexflag=1, extra=0)
    src = open_scan(path)
    g = src.grid
    assert (g.rows, g.cols, g.kind, g.n_points) == (rows, cols, "hexagonal", n)
    expected = _hex_expected(rows, cols, values)
    assert_reads_like(src, expected)
    assert src.present.tolist() == [[True] * 4, [True] * 3 + [False]] * 2
    assert src.metadata["hex_rows_padded"] is False
    assert "missing_points" not in src.describe() or src.describe()["missing_points"] == 0
    # one (row, col) point per slot, each in the right place
    for r in range(rows):
        for c in range(cols - r % 2):
            k = sum(cols - (q % 2) for q in range(r)) + c
            assert src.read(r * cols + c, r * cols + c + 1)[0, 1, 1] == k + 1


def test_up_hexagonal_padded_rows(tmp_path):
    """Extra-patterns byte 1: each odd row ends with a dummy record, never read."""
    rows, cols = 3, 4
    values = patterns(8 + 3)
    records = []
    k = 0
    for r in range(rows):
        for c in range(cols):
            if r % 2 and c == cols - 1:
                records.append(np.full((12, 10), 999, np.uint16))
            else:
                records.append(values[k])
                k += 1
    path = write_up(tmp_path / "hex.up2", np.array(records), rows=rows, cols=cols, hexflag=1,
                    extra=1)
    src = open_scan(path)
    assert src.metadata["hex_rows_padded"] is True
    expected = _hex_expected(rows, cols, values)
    assert_reads_like(src, expected)
    assert not (src.read(0, src.n_patterns) == 999).all(axis=(1, 2)).any()


def test_up_hexagonal_layout_follows_exact_file_size(tmp_path):
    """The byte says padded rows but the file holds exactly the packed points."""
    values = patterns(4 + 3 + 4)
    path = write_up(tmp_path / "hex.up2", values, rows=3, cols=4, hexflag=1, extra=1)
    src = open_scan(path)
    assert src.metadata["hex_rows_padded"] is False
    assert_reads_like(src, _hex_expected(3, 4, values))


def test_up_hexagonal_truncated(tmp_path):
    values = patterns(4 + 3 + 4)
    path = write_up(tmp_path / "hex.up2", values[:6], rows=3, cols=4, hexflag=1, extra=0,
                    tail=b"\x01" * 17)
    with pytest.warns(UserWarning, match="interrupted") as rec:
        src = open_scan(path)
    assert str(path) in str(rec[0].message)
    expected = _hex_expected(3, 4, values)
    expected[6:] = 0  # row 1 holds points 4, 5 (stored) then 6 (not)
    assert_reads_like(src, expected)
    assert src.present.tolist() == [[True] * 4, [True, True, False, False], [False] * 4]
    assert src.metadata["n_stored"] == 6
    assert src.describe()["missing_points"] == 5


def test_up_truncated_square(tmp_path):
    data = patterns(6)
    # 4 whole patterns and half of the 5th: the partial one is not data
    path = write_up(tmp_path / "cut.up2", data[:4], rows=2, cols=3,
                    tail=data[4].tobytes()[:120])
    with pytest.warns(UserWarning, match="holds 4 whole patterns of the 6") as rec:
        src = open_scan(path)
    assert str(path) in str(rec[0].message)
    assert src.present.reshape(-1).tolist() == [True] * 4 + [False] * 2
    expected = data.copy()
    expected[4:] = 0
    assert_reads_like(src, expected)


def test_up_surplus_bytes(tmp_path):
    data = patterns(6)
    path = write_up(tmp_path / "odd.up2", data, rows=2, cols=3, tail=b"\x00" * 7)
    with pytest.raises(InputError) as e:
        open_scan(path)
    assert_names(e, path)
    assert "not a whole number of patterns" in str(e.value) and "1440" in str(e.value)
    path = write_up(tmp_path / "more.up2", data, rows=2, cols=3, tail=data[:2].tobytes())
    with pytest.warns(UserWarning, match="2 patterns more"):
        src = open_scan(path)
    assert_reads_like(src, data)


def test_up_wrong_bit_depth_for_extension(tmp_path):
    data16 = patterns(6)
    path = write_up(tmp_path / "really16.up2", data16, rows=2, cols=3)
    renamed = tmp_path / "really16.up1"
    os.rename(path, renamed)
    with pytest.raises(InputError) as e:
        open_scan(renamed)
    assert_names(e, renamed)
    assert "16-bit" in str(e.value) and ".up2" in str(e.value)
    data8 = patterns(6, dtype=np.uint8)
    path = write_up(tmp_path / "really8.up1", data8, rows=2, cols=3)
    renamed = tmp_path / "really8.up2"
    os.rename(path, renamed)
    with pytest.raises(InputError) as e:
        open_scan(renamed)
    assert_names(e, renamed)
    assert "8-bit" in str(e.value)


def test_up_forced_format_under_other_name(tmp_path):
    data = patterns(6)
    path = write_up(tmp_path / "scan.up2", data, rows=2, cols=3)
    other = tmp_path / "scan.bin"
    shutil.copy(path, other)
    assert not edax_binary.detect(other)  # the extension says the bit depth
    src = open_scan(other, format="edax_binary")
    assert src.dtype == np.uint16
    assert_reads_like(src, data)
    v1 = write_up(tmp_path / "v1.up2", data, version=1)
    shutil.copy(v1, tmp_path / "v1.bin")
    with pytest.raises(InputError, match="name the file .up1"):
        open_scan(tmp_path / "v1.bin", format="edax_binary")


def test_up_version1_partial_last_pattern(tmp_path):
    data = patterns(3, dtype=np.uint8)
    path = write_up(tmp_path / "v1.up1", data, version=1, tail=b"\x05" * 50)
    with pytest.warns(UserWarning, match="50 bytes"):
        src = open_scan(path)
    assert (src.grid.rows, src.grid.cols) == (1, 3)
    assert_reads_like(src, data)


@needs_samples
def test_up_version2_is_refused(tmp_path):
    path = tmp_path / "v2.up2"
    shutil.copy(UP2, path)
    patch(path, 0, "<I", 2)
    assert edax_binary.detect(path)  # claimed, so that the error says why
    with pytest.raises(InputError) as e:
        open_scan(path)
    assert_names(e, path)
    assert "unsupported version 2" in str(e.value)


@needs_samples
def test_up_truncated_sample(tmp_path):
    path = tmp_path / "cut.up1"
    shutil.copy(UP1, path)
    os.truncate(path, 16 + 60 * 60 * 4 + 100)
    with pytest.warns(UserWarning, match="100 bytes"):
        src = open_scan(path, grid_shape="3x3")
    assert src.present.reshape(-1).tolist() == [True] * 4 + [False] * 5
    np.testing.assert_array_equal(src.read(0, 9)[4:], 0)


def test_up_bad_headers(tmp_path):
    data = patterns(6)
    path = write_up(tmp_path / "zero.up2", data, rows=0, cols=3)
    with pytest.raises(InputError) as e:
        open_scan(path)
    assert_names(e, path)
    path = write_up(tmp_path / "hex1col.up2", patterns(2), rows=3, cols=1, hexflag=1)
    with pytest.raises(InputError) as e:
        open_scan(path)
    assert_names(e, path)
    path = write_up(tmp_path / "scan.up2", data, rows=2, cols=3)
    with pytest.raises(InputError) as e:
        open_scan(path, dataset="x")
    assert_names(e, path)


# ----------------------------------------------------------------------------- Oxford, hand-written


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_ebsp_versions(tmp_path, version, dtype):
    rows, cols = 3, 4
    data = patterns(rows * cols, dtype=dtype, seed=version)
    order = np.random.default_rng(version).permutation(rows * cols)
    path = write_ebsp(tmp_path / "scan.ebsp", data.reshape(rows, cols, 12, 10), version=version,
                      order=order)
    assert oxford_binary.detect(path)
    src = open_scan(path)
    assert src.format == "oxford_binary" and src.dtype == dtype
    assert src.metadata["header"]["version"] == version
    if version == 0:  # no positions: one row
        assert (src.grid.rows, src.grid.cols) == (1, 12)
        assert src.grid.step is None
        src = open_scan(path, grid_shape="3x4")
    assert (src.grid.rows, src.grid.cols) == (rows, cols)
    if version:
        assert src.grid.step == (1.5, 1.5)
    assert_reads_like(src, data)


def test_ebsp_grid_from_map_positions(tmp_path):
    data = patterns(6).reshape(2, 3, 12, 10)
    path = write_ebsp(tmp_path / "v5.ebsp", data, version=5, beam=False)
    src = open_scan(path)
    assert (src.grid.rows, src.grid.cols) == (2, 3)
    assert src.grid.step is None and src.metadata["grid_from"] == "map positions"
    # without map positions (version 4) and beam positions: one row
    path = write_ebsp(tmp_path / "v4.ebsp", data, version=4, beam=False)
    src = open_scan(path)
    assert (src.grid.rows, src.grid.cols) == (1, 6)


@pytest.mark.parametrize("shape", [(1, 5), (4, 1), (5, 7)])
def test_ebsp_grid_shapes(tmp_path, shape):
    data = patterns(shape[0] * shape[1]).reshape(*shape, 12, 10)
    path = write_ebsp(tmp_path / "scan.ebsp", data, version=2)
    src = open_scan(path)
    assert (src.grid.rows, src.grid.cols) == shape
    assert src.grid.step == (1.5, 1.5)
    np.testing.assert_array_equal(src.read(0, src.n_patterns), data.reshape(-1, 12, 10))


def test_ebsp_positions_not_a_grid(tmp_path):
    data = patterns(6).reshape(2, 3, 12, 10)
    path = write_ebsp(tmp_path / "scan.ebsp", data, version=1)
    # scramble the beam x of the point in the middle of the file
    src = open_scan(path)
    rec = src.metadata["header"]["record_bytes"]
    first = 8 + 8 * 6
    patch(path, first + 2 * rec + 16 + 240, "<d", 17.25)
    with pytest.warns(UserWarning, match="do not form a grid") as w:
        src = open_scan(path)
    assert str(path) in str(w[0].message)
    assert (src.grid.rows, src.grid.cols) == (1, 6)
    src = open_scan(path, grid_shape="2x3")
    assert (src.grid.rows, src.grid.cols) == (2, 3)


def test_ebsp_missing_patterns(tmp_path):
    data = patterns(12).reshape(3, 4, 12, 10)
    path = write_ebsp(tmp_path / "scan.ebsp", data, version=2, missing={0, 5, 6})
    src = open_scan(path)
    assert (src.grid.rows, src.grid.cols) == (3, 4)
    assert src.present.reshape(-1).tolist() == [i not in (0, 5, 6) for i in range(12)]
    assert src.metadata["n_stored"] == 9
    expected = data.reshape(12, 12, 10).copy()
    expected[[0, 5, 6]] = 0
    assert_reads_like(src, expected)


@needs_samples
def test_ebsp_sample_with_missing_pattern(kp, tmp_path):
    expected = np.asarray(kp_load(kp, EBSP).data).reshape(9, 60, 60).copy()
    path = tmp_path / "missing.ebsp"
    shutil.copy(EBSP, path)
    patch(path, 8 + 8 * 4, "<q", 0)  # point 4 not acquired
    src = open_scan(path)
    assert (src.grid.rows, src.grid.cols) == (3, 3)
    assert not src.present[1, 1] and src.present.sum() == 8
    expected[4] = 0
    assert_reads_like(src, expected)


@needs_samples
def test_ebsp_compressed_is_refused(tmp_path):
    path = tmp_path / "compressed.ebsp"
    shutil.copy(EBSP, path)
    patch(path, 8 + 8 * 9, "<i", 1)  # the compression flag of the first record
    assert oxford_binary.detect(path)
    with pytest.raises(InputError) as e:
        open_scan(path)
    assert_names(e, path)
    assert "compressed patterns are not supported" in str(e.value)


@needs_samples
@pytest.mark.parametrize("version", [7, 99])
def test_ebsp_unknown_version(tmp_path, version):
    path = tmp_path / "future.ebsp"
    shutil.copy(EBSP, path)
    patch(path, 0, "<q", -version)
    assert oxford_binary.detect(path)
    with pytest.raises(InputError) as e:
        open_scan(path)
    assert_names(e, path)
    assert f"unknown version {version}" in str(e.value)


@needs_samples
def test_ebsp_truncated(kp, tmp_path):
    expected = np.asarray(kp_load(kp, EBSP).data).reshape(9, 60, 60).copy()
    path = tmp_path / "cut.ebsp"
    shutil.copy(EBSP, path)
    # the file's last record is map point 0's; cut it in the middle of its pixels
    os.truncate(path, os.path.getsize(path) - 3634 + 16 + 1800)
    with pytest.warns(UserWarning, match="past the end") as w:
        src = open_scan(path)
    assert str(path) in str(w[0].message)
    assert (src.grid.rows, src.grid.cols) == (3, 3)
    assert not src.present[0, 0] and src.present.sum() == 8
    expected[0] = 0
    assert_reads_like(src, expected)


def test_ebsp_records_of_different_sizes(tmp_path):
    data = patterns(4).reshape(2, 2, 12, 10)
    path = write_ebsp(tmp_path / "scan.ebsp", data, version=2)
    rec = 16 + 240 + 18
    patch(path, 8 + 8 * 4 + 3 * rec + 4, "<i", 11)  # the last record says 11 rows
    with pytest.raises(InputError) as e:
        open_scan(path)
    assert_names(e, path)


def test_ebsp_bad_pixel_count(tmp_path):
    data = patterns(4).reshape(2, 2, 12, 10)
    path = write_ebsp(tmp_path / "scan.ebsp", data, version=2)
    patch(path, 8 + 8 * 4 + 12, "<i", 999)
    with pytest.raises(InputError) as e:
        open_scan(path)
    assert_names(e, path)
    assert "999" in str(e.value)


# ----------------------------------------------------------------------------- detection


@pytest.fixture
def other_files(tmp_path):
    """Files of other kinds, some named like the binary formats."""
    rng = np.random.default_rng(3)
    files = {}
    for name in ("random.up1", "random.up2", "random.ebsp", "random.bin"):
        p = tmp_path / name
        p.write_bytes(rng.integers(0, 256, 100_000, dtype=np.uint8).tobytes())
        files[name] = p
    files["small.up2"] = tmp_path / "small.up2"
    files["small.up2"].write_bytes(b"\x03\x00")
    files["text.ebsp"] = tmp_path / "text.ebsp"
    files["text.ebsp"].write_text("just some text, not patterns\n" * 50)
    h5 = tmp_path / "scan.h5"
    with h5py.File(h5, "w") as f:
        f["patterns"] = patterns(4)
    files["h5"] = h5
    tif = tmp_path / "pattern.tif"
    tifffile.imwrite(tif, patterns(1)[0])
    files["tif"] = tif
    for name in ("scan.up1", "scan.up2"):  # HDF5 and TIFF content behind binary names
        shutil.copy(h5 if name.endswith("1") else tif, tmp_path / name)
        files[name] = tmp_path / name
    return files


def test_detection_negatives(tmp_path, other_files):
    own = {
        "edax": write_up(tmp_path / "own.up2", patterns(4), rows=2, cols=2),
        "oxford": write_ebsp(tmp_path / "own.ebsp", patterns(4).reshape(2, 2, 12, 10)),
    }
    assert edax_binary.detect(own["edax"]) and not oxford_binary.detect(own["edax"])
    assert oxford_binary.detect(own["oxford"]) and not edax_binary.detect(own["oxford"])
    for name, path in other_files.items():
        assert not edax_binary.detect(path), name
        assert not oxford_binary.detect(path), name
        assert not image_stack.detect(path), name
    for path in own.values():
        assert not hdf5_reader.detect(path)
        assert not image_stack.detect(path)
    assert not edax_binary.detect(tmp_path) and not oxford_binary.detect(tmp_path)
    assert not edax_binary.detect(tmp_path / "missing.up2")


@needs_samples
def test_samples_detected_only_by_their_reader():
    for path, reader in ((UP1, edax_binary), (UP2, edax_binary), (EBSP, oxford_binary)):
        for other in (edax_binary, oxford_binary, image_stack, hdf5_reader):
            assert other.detect(path) is (other is reader), (path, other.NAME)


def test_random_file_is_not_a_scan(other_files):
    for name in ("random.up2", "random.ebsp", "random.bin"):
        with pytest.raises(InputError) as e:
            open_scan(other_files[name])
        assert_names(e, other_files[name])
