"""Readers fed real damaged files: one flipped byte in a gzip chunk, truncation, a broken
datatype, a ``--grid`` that does not fit. Each must end in one :class:`InputError` line
naming the file (or, where the damage is an interrupted scan, a warning and flagged points),
never a traceback of zlib or h5py, a crash, or other data without a word."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest

from ebsdxc.errors import InputError
from ebsdxc.io import open_scan
from ebsdxc.io.source import choose_grid

REPO = Path(__file__).resolve().parents[2]


def one_line(exc_info, path):
    msg = str(exc_info.value)
    assert "\n" not in msg, msg
    assert msg.startswith(os.fspath(path)), msg
    return msg


@pytest.fixture(params=["1", "0"], ids=["direct", "h5py"])
def read_path(request, monkeypatch):
    """Both HDF5 read paths: the fast direct reader and h5py's own."""
    monkeypatch.setenv("EBSDXC_DIRECT_READ", request.param)
    return request.param


def gzip_scan(path, rng):
    pats = rng.integers(0, 4000, size=(8, 32, 32), dtype=np.uint16)
    with h5py.File(path, "w") as f:
        f.create_dataset("patterns", data=pats, chunks=(2, 32, 32), compression="gzip",
                         shuffle=True)
        info = f["patterns"].id.get_chunk_info(1)  # patterns 2 and 3
    return pats, int(info.byte_offset), int(info.size)


def test_a_flipped_byte_in_a_gzip_chunk_is_one_clear_line(tmp_path, read_path):
    pats, offset, size = gzip_scan(tmp_path / "scan.h5", np.random.default_rng(1))
    with open_scan(tmp_path / "scan.h5") as src:  # undamaged: the truth
        np.testing.assert_array_equal(src.read(0, 8), pats)
    data = bytearray((tmp_path / "scan.h5").read_bytes())
    data[offset + size // 2] ^= 0x10
    (tmp_path / "scan.h5").write_bytes(bytes(data))
    with open_scan(tmp_path / "scan.h5") as src:
        np.testing.assert_array_equal(src.read(0, 2), pats[:2])  # other chunks still read
        with pytest.raises(InputError) as e:
            src.read(0, 8)
    msg = one_line(e, tmp_path / "scan.h5")
    assert "damaged" in msg


def test_a_truncated_hdf5_scan_is_one_clear_line(tmp_path, read_path):
    pats = np.random.default_rng(2).integers(0, 255, size=(6, 40, 40), dtype=np.uint8)
    with h5py.File(tmp_path / "scan.h5", "w") as f:
        f.create_dataset("patterns", data=pats)
        offset = f["patterns"].id.get_offset()
    data = (tmp_path / "scan.h5").read_bytes()
    cut = tmp_path / "cut.h5"
    cut.write_bytes(data[:offset + 3 * 1600 + 100])  # ends inside the 4th pattern
    with pytest.raises(InputError) as e, open_scan(cut) as src:
        src.read(0, 6)
    one_line(e, cut)


def test_a_damaged_object_header_is_one_clear_line(tmp_path):
    # byte-by-byte over the root group's object header and the dataset's: whatever h5py
    # raises (RuntimeError, KeyError, OSError, TypeError) reaches the user as an InputError
    pats = np.arange(4 * 16 * 16, dtype=np.uint16).reshape(4, 16, 16)
    with h5py.File(tmp_path / "scan.h5", "w") as f:
        f.create_dataset("patterns", data=pats)
        end = f["patterns"].id.get_offset()
    data = (tmp_path / "scan.h5").read_bytes()
    errors = same = 0
    for i in range(0, end, 7):
        bad = bytearray(data)
        bad[i] ^= 0xFF
        (tmp_path / "bad.h5").write_bytes(bytes(bad))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with open_scan(tmp_path / "bad.h5") as src:
                    got = src.read(0, src.n_patterns)
        except InputError as e:
            assert "\n" not in str(e) and str(e).startswith(str(tmp_path / "bad.h5")), str(e)
            errors += 1
        else:
            same += got.shape == pats.shape and np.array_equal(got, pats)
    assert errors > 10  # the sweep does hit structure


def test_a_truncated_up2_flags_the_missing_points_with_a_warning(tmp_path):
    kp = importlib.util.find_spec("kikuchipy")
    if kp is None:
        pytest.skip("kikuchipy not installed")
    src_path = Path(kp.origin).parent / "data" / "edax_binary" / "edax_binary.up2"
    with open_scan(src_path) as src:
        truth = src.read(0, src.n_patterns)
        n = src.n_patterns
    data = src_path.read_bytes()
    cut = tmp_path / "cut.up2"
    cut.write_bytes(data[:len(data) - 3 * 60 * 60 * 2 - 500])  # 3.x patterns short
    with pytest.warns(UserWarning, match="cut.up2"):
        src = open_scan(cut)
    with src:
        got = src.read(0, n)
        present = src.present.reshape(-1)
    assert present.sum() < n  # the lost points are flagged, not silently zero
    np.testing.assert_array_equal(got[present], truth[present])
    assert not got[~present].any()


def test_a_broken_string_datatype_is_refused_not_a_crash(tmp_path):
    # A damaged datatype message turns a variable-length string into a variable-length
    # sequence; reading one makes HDF5 crash the interpreter (found by the fuzzer). In a
    # subprocess, so that a regression is a failed test, not a dead pytest.
    pytest.importorskip("kikuchipy")
    from kikuchipy.data._dummy_files.oxford_h5ebsd import create_dummy_oxford_h5ebsd_file

    path = tmp_path / "oxford.h5oina"
    create_dummy_oxford_h5ebsd_file(path, version="7.0")
    with h5py.File(path, "r") as f:
        assert f["Manufacturer"].id.get_type().get_class() == h5py.h5t.STRING
    data = bytearray(path.read_bytes())
    data[1713] = 91  # the fuzzer's input: Manufacturer's datatype class STRING -> VLEN
    path.write_bytes(bytes(data))
    with h5py.File(path, "r") as f:
        if f["Manufacturer"].id.get_type().get_class() != h5py.h5t.VLEN:
            pytest.skip("this h5py/HDF5 lays the dummy file out differently")
    code = ("import warnings; warnings.simplefilter('ignore')\n"
            "from ebsdxc.errors import InputError\nfrom ebsdxc.io import open_scan\n"
            f"try:\n    open_scan({str(path)!r}, format='oxford_h5oina')\n"
            "except InputError as e:\n    print('INPUTERROR', e)\n")
    run = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True,
                         text=True, timeout=60, cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith(f"INPUTERROR {path}"), run.stdout
    assert "\n" not in run.stdout.strip()


def test_a_grid_smaller_than_the_file_is_an_error_larger_a_warning(tmp_path):
    with pytest.raises(InputError) as e:
        choose_grid(None, "2x3", 7, "scan.h5")
    assert "6 points" in str(e.value) and "7 patterns" in str(e.value)
    with pytest.warns(UserWarning, match=r"scan\.h5: grid_shape 3x3 has 9 points but the file "
                                         r"holds 7 patterns; the last 2 points"):
        grid = choose_grid(None, "3x3", 7, "scan.h5")
    assert (grid.rows, grid.cols) == (3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an exact grid says nothing
        choose_grid(None, "3x3", 9, "scan.h5")


def test_a_larger_grid_reads_the_missing_points_as_flagged(tmp_path):
    pats = np.random.default_rng(3).integers(0, 255, size=(7, 16, 16), dtype=np.uint8)
    with h5py.File(tmp_path / "scan.h5", "w") as f:
        f.create_dataset("patterns", data=pats)
    with pytest.warns(UserWarning, match="7 patterns"):
        src = open_scan(tmp_path / "scan.h5", grid_shape="3x3")
    with src:
        got = src.read(0, 9)
        present = src.present.reshape(-1)
    np.testing.assert_array_equal(present, np.arange(9) < 7)
    np.testing.assert_array_equal(got[:7], pats)


def test_a_damaged_datatype_in_a_map_is_the_files_error_not_the_callers():
    """h5py raises ValueError for a float type a damaged byte made impossible ("Insufficient
    precision ..."), found by the long fuzz run in a Bruker orientation map: a method without a
    caller's range turns it into the file's one-line error; a read with a range passes a caller's
    ValueError on."""
    from ebsdxc.io.source import PatternSource, ScanGrid

    class Damaged(PatternSource):
        def orientation_map(self):
            raise ValueError("Insufficient precision in available types to represent (31, 23, 8, 0, 23)")

        def read_into(self, start, stop, out):
            raise ValueError("out has the wrong shape")

    src = Damaged("scan.h5", grid=ScanGrid(1, 2), pattern_shape=(4, 4), dtype=np.uint16)
    with pytest.raises(InputError, match=r"scan.h5: is damaged or truncated: .*Insufficient precision"):
        src.orientation_map()
    with pytest.raises(ValueError, match="wrong shape"):
        src.read_into(0, 1, np.zeros((1, 4, 4), np.uint16))
