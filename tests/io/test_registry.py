"""The reader registry: one registration makes a format detectable, forceable and listed."""

from __future__ import annotations

import importlib
import sys
import textwrap

import numpy as np
import pytest

import ebsdxc.io as scan_io
from ebsdxc.errors import InputError
from ebsdxc.io import describe_file, describe_formats, formats_help, get_reader, open_scan, registry

BUILTIN = ("h5ebsd", "edax_h5", "bruker_h5", "oxford_h5oina", "emsoft_h5", "edax_binary",
           "oxford_binary", "image_stack", "tiff_stack", "hdf5")

# A made-up format: the line "XCTEST rows cols H W" then rows*cols*H*W uint8 pixels.
READER = textwrap.dedent('''
    """A throwaway scan reader for the registry tests."""
    import builtins

    import numpy as np

    from ebsdxc.errors import InputError
    from ebsdxc.io import ArraySource, ScanGrid

    NAME = "xctest"
    DESCRIPTION = "made-up test format (XCTEST header line, then raw uint8 patterns)"
    MAGIC = b"XCTEST "


    class XCTestSource(ArraySource):
        format = NAME


    def detect(path) -> bool:
        try:
            with builtins.open(path, "rb") as f:
                return f.read(len(MAGIC)) == MAGIC
        except OSError:
            return False


    def open(path, *, dataset=None, grid_shape=None):  # noqa: A001 - registry interface
        with builtins.open(path, "rb") as f:
            header = f.readline().split()
            if header[:1] != [MAGIC.strip()]:
                raise InputError("not an XCTEST file", path)
            rows, cols, h, w = (int(v) for v in header[1:])
            data = np.frombuffer(f.read(), np.uint8).reshape(rows, cols, h, w)
        return XCTestSource(data, path=str(path), grid=ScanGrid(rows, cols))
''')


@pytest.fixture
def xctest(tmp_path, monkeypatch):
    """The throwaway reader, importable and registered for one test only."""
    pkg = tmp_path / "readers"
    pkg.mkdir()
    (pkg / "ebsdxc_xctest_reader.py").write_text(READER)
    monkeypatch.syspath_prepend(str(pkg))
    importlib.invalidate_caches()
    registry.register("xctest", "ebsdxc_xctest_reader", reads="made-up XCTEST files", before="hdf5")
    try:
        yield
    finally:
        registry.unregister("xctest")
        sys.modules.pop("ebsdxc_xctest_reader", None)


def write_xctest(path, data):
    rows, cols, h, w = data.shape
    path.write_bytes(f"XCTEST {rows} {cols} {h} {w}\n".encode() + data.astype(np.uint8).tobytes())
    return path


def test_builtin_readers_in_detection_order():
    assert scan_io.SCAN_FORMATS == BUILTIN
    assert registry.names() == BUILTIN
    assert all(isinstance(e, registry.ReaderEntry) for e in registry.entries())


def test_every_registered_module_says_its_name_and_what_it_reads():
    descriptions = describe_formats()
    assert tuple(descriptions) == BUILTIN
    for entry in registry.entries():
        module = get_reader(entry.name)
        assert module.NAME == entry.name
        assert descriptions[entry.name] == module.DESCRIPTION
        assert callable(module.detect) and callable(module.open)
        assert entry.reads in formats_help()


def test_a_registered_reader_is_detected_listed_and_forced(xctest, tmp_path):
    assert scan_io.SCAN_FORMATS == (*BUILTIN[:-1], "xctest", "hdf5")
    from ebsdxc.io import SCAN_FORMATS  # a fresh import sees it too

    assert "xctest" in SCAN_FORMATS
    assert "made-up XCTEST files" in formats_help()
    assert describe_formats()["xctest"].startswith("made-up test format")
    assert get_reader("XCTest ").NAME == "xctest"

    data = np.arange(2 * 3 * 4 * 5, dtype=np.uint8).reshape(2, 3, 4, 5)
    path = write_xctest(tmp_path / "scan.bin", data)
    with open_scan(path) as src:  # detected from the content
        assert src.format == "xctest"
        assert (src.grid.rows, src.grid.cols) == (2, 3)
        np.testing.assert_array_equal(src.read(0, 6), data.reshape(6, 4, 5))
    with open_scan(path, format="xctest") as src:
        assert src.pattern_shape == (4, 5)
    assert describe_file(path)["format"] == "xctest"


def test_a_format_nobody_registered_is_listed_in_the_error(xctest, tmp_path):
    path = tmp_path / "junk.bin"
    path.write_bytes(b"nothing anyone reads\n")
    with pytest.raises(InputError, match="made-up XCTEST files") as exc:
        open_scan(path)
    assert str(path) in str(exc.value)


def test_unregistering_removes_every_trace(tmp_path):
    data = np.zeros((1, 2, 3, 3), np.uint8)
    path = write_xctest(tmp_path / "scan.bin", data)
    for _ in range(2):  # registering again after unregistering works
        registry.register("xctest", "ebsdxc_xctest_reader", reads="made-up XCTEST files")
        assert scan_io.SCAN_FORMATS[-1] == "xctest"  # no `before`: tried last
        registry.unregister("xctest")
    assert scan_io.SCAN_FORMATS == BUILTIN
    assert "XCTEST" not in formats_help()
    with pytest.raises(InputError, match="unknown scan format 'xctest'"):
        get_reader("xctest")
    with pytest.raises(InputError, match="not a scan format ebsdxc can read"):
        open_scan(path)
    with pytest.raises(InputError, match="unknown scan format 'xctest'"):
        open_scan(path, format="xctest")


def test_registration_mistakes_are_value_errors():
    with pytest.raises(ValueError, match="already registered"):
        registry.register("HDF5", "elsewhere", reads="x")
    with pytest.raises(ValueError, match="before='nope' names no registered scan reader"):
        registry.register("new_one", "elsewhere", reads="x", before="nope")
    with pytest.raises(ValueError, match="name must not be empty"):
        registry.register(" ", "elsewhere", reads="x")
    with pytest.raises(ValueError, match="no scan reader named 'nope'"):
        registry.unregister("nope")
    assert scan_io.SCAN_FORMATS == BUILTIN


def test_help_text_reads_as_a_sentence():
    text = formats_help()
    assert text.startswith("kikuchipy h5ebsd, EDAX/TSL h5, ")
    assert text.endswith(", or any HDF5 file with one pattern dataset")
    assert registry.reads_list("and").endswith(", and any HDF5 file with one pattern dataset")
