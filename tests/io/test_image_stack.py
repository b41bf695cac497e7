"""Image stacks: a folder, glob or list of TIFF/PNG files, one pattern per file."""

from __future__ import annotations

import glob
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import tifffile
from PIL import Image

from ebsdxc.errors import InputError
from ebsdxc.io import image_stack, open_scan

ROOT = Path(__file__).resolve().parents[2]
SHAPE = (12, 10)


def image(value, dtype=np.uint16, shape=SHAPE):
    """A non-uniform image whose pixel (1, 1) is ``value``."""
    rng = np.random.default_rng(int(value))
    if np.dtype(dtype).kind == "f":
        a = rng.random(shape).astype(dtype)
    else:
        a = rng.integers(0, np.iinfo(dtype).max, size=shape, dtype=dtype)
    a[1, 1] = value
    return a


def write_tiffs(folder, numbers, dtype=np.uint16, prefix="p", ext=".tif"):
    folder.mkdir(exist_ok=True)
    images = {}
    for k in numbers:
        images[k] = image(k, dtype)
        tifffile.imwrite(folder / f"{prefix}{k}{ext}", images[k])
    return images


def write_png(path, array):
    Image.fromarray(array).save(path)
    return path


def assert_names(exc_info, *words):
    for w in words:
        assert os.fspath(w) in str(exc_info.value), str(exc_info.value)


def values(src):
    return src.read(0, src.n_patterns)[:, 1, 1].tolist()


# ----------------------------------------------------------------------------- forms of a stack


def test_folder_in_natural_order_ignoring_other_files(tmp_path):
    folder = tmp_path / "frames"
    images = write_tiffs(folder, [10, 2, 1, 3, 11])
    (folder / "notes.txt").write_text("not an image")
    (folder / "._p4.tif").write_bytes(b"AppleDouble junk")  # hidden: ignored
    (folder / "sub").mkdir()
    tifffile.imwrite(folder / "sub" / "p0.tif", image(99))
    src = open_scan(folder)
    assert src.format == "image_stack"
    assert values(src) == [1, 2, 3, 10, 11]
    np.testing.assert_array_equal(src.read(3, 4)[0], images[10])
    assert (src.grid.rows, src.grid.cols) == (1, 5) and src.present is None
    assert src.path == os.fspath(folder)
    m = src.metadata
    assert (m["n_files"], m["first_file"], m["last_file"]) == (5, "p1.tif", "p11.tif")
    assert image_stack.detect(folder)


def test_extension_case_and_tiff_png_mix(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    tifffile.imwrite(folder / "a1.TIF", image(1))
    tifffile.imwrite(folder / "a2.tiff", image(2))
    write_png(folder / "a3.PNG", image(3))
    src = open_scan(folder)
    assert values(src) == [1, 2, 3]
    assert src.metadata["image_format"] == "TIFF and PNG"


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32])
def test_tiff_dtypes_roundtrip(tmp_path, dtype):
    images = write_tiffs(tmp_path / "s", [1, 2, 3], dtype=dtype)
    src = open_scan(tmp_path / "s")
    assert src.dtype == dtype and src.pattern_shape == SHAPE
    got = src.read(0, 3)
    for i, k in enumerate([1, 2, 3]):
        np.testing.assert_array_equal(got[i], images[k])
    # odd sub-ranges and a strided buffer
    np.testing.assert_array_equal(src.read(1, 3), got[1:3])
    out = np.zeros((2, SHAPE[0], 2 * SHAPE[1]), dtype=dtype)[:, :, ::2]
    src.read_into(1, 3, out)
    np.testing.assert_array_equal(out, got[1:3])


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_png_keeps_dtype(tmp_path, dtype):
    folder = tmp_path / "png"
    folder.mkdir()
    images = [image(k, dtype) for k in (5, 6)]
    for k, a in zip((5, 6), images):
        write_png(folder / f"q{k}.png", a)
    src = open_scan(folder)
    assert src.dtype == dtype
    np.testing.assert_array_equal(src.read(0, 2), np.stack(images))


def test_glob_pattern(tmp_path):
    write_tiffs(tmp_path / "d", [1, 2, 10, 20])
    write_tiffs(tmp_path / "d", [7], prefix="other")
    pattern = os.path.join(tmp_path, "d", "p*.tif")
    src = open_scan(pattern)
    assert values(src) == [1, 2, 10, 20]
    assert src.path == pattern and src.metadata["stack"] == "glob"
    with pytest.raises(InputError) as e:
        open_scan(os.path.join(tmp_path, "d", "x*.tif"))
    assert_names(e, "x*.tif", "no TIFF or PNG")


def test_list_keeps_given_order(tmp_path):
    write_tiffs(tmp_path / "d", [1, 2, 3])
    files = [tmp_path / "d" / f"p{k}.tif" for k in (3, 1, 2)]
    src = open_scan(files)
    assert values(src) == [3, 1, 2]
    assert src.path == os.fspath(tmp_path / "d")
    src = open_scan(tuple(str(f) for f in files[:2]))
    assert values(src) == [3, 1]
    with pytest.raises(InputError) as e:
        open_scan([files[0], tmp_path / "d" / "p9.tif"])
    assert_names(e, tmp_path / "d" / "p9.tif")
    with pytest.raises(InputError):
        open_scan([])


def test_grid_shape(tmp_path):
    write_tiffs(tmp_path / "d", range(1, 7))
    src = open_scan(tmp_path / "d", grid_shape="2x3")
    assert (src.grid.rows, src.grid.cols) == (2, 3) and src.present is None
    assert values(src) == [1, 2, 3, 4, 5, 6]
    # an interrupted scan: the grid has more points than files
    src = open_scan(tmp_path / "d", grid_shape=(2, 4))
    assert src.present.reshape(-1).tolist() == [True] * 6 + [False] * 2
    assert values(src) == [1, 2, 3, 4, 5, 6, 0, 0]
    assert src.metadata["n_stored"] == 6
    with pytest.raises(InputError) as e:
        open_scan(tmp_path / "d", grid_shape="2x2")
    assert_names(e, tmp_path / "d")


# ----------------------------------------------------------------------------- errors


def test_mismatched_shape_names_file_and_shapes(tmp_path):
    folder = tmp_path / "d"
    write_tiffs(folder, [1, 2])
    tifffile.imwrite(folder / "p3.tif", image(3, shape=(12, 11)))
    with pytest.raises(InputError) as e:
        open_scan(folder)
    assert_names(e, folder / "p3.tif", folder / "p1.tif", "12 x 11", "12 x 10")


def test_mismatched_dtype_names_file(tmp_path):
    folder = tmp_path / "d"
    write_tiffs(folder, [1, 2])
    tifffile.imwrite(folder / "p3.tif", image(3, np.uint8))
    with pytest.raises(InputError) as e:
        open_scan(folder)
    assert_names(e, folder / "p3.tif", "uint8", "uint16")


def test_colour_images_are_refused(tmp_path):
    folder = tmp_path / "d"
    write_tiffs(folder, [1, 2], dtype=np.uint8)
    rgb = np.zeros((*SHAPE, 3), np.uint8)
    write_png(folder / "p3.png", rgb)
    with pytest.raises(InputError) as e:
        open_scan(folder)
    assert_names(e, folder / "p3.png", "colour")
    os.remove(folder / "p3.png")
    tifffile.imwrite(folder / "p3.tif", rgb, photometric="rgb")
    with pytest.raises(InputError) as e:
        open_scan(folder)
    assert_names(e, folder / "p3.tif", "colour")
    os.remove(folder / "p3.tif")
    Image.fromarray(np.zeros(SHAPE, np.uint8)).convert("LA").save(folder / "p3.png")
    with pytest.raises(InputError) as e:
        open_scan(folder)
    assert_names(e, folder / "p3.png", "alpha")


def test_multipage_tiff_is_refused(tmp_path):
    folder = tmp_path / "d"
    write_tiffs(folder, [1, 2])
    tifffile.imwrite(folder / "p3.tif", np.stack([image(3), image(4)]))
    with pytest.raises(InputError) as e:
        open_scan(folder)
    assert_names(e, folder / "p3.tif", "multi-page")


def test_empty_folder_and_folder_without_images(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    with pytest.raises(InputError) as e:
        open_scan(folder)
    assert_names(e, folder, "no TIFF or PNG images")
    (folder / "readme.txt").write_text("x")
    with pytest.raises(InputError) as e:
        open_scan(folder)
    assert_names(e, folder, "no TIFF or PNG images")
    assert not image_stack.detect(folder)


def test_file_that_is_not_an_image(tmp_path):
    folder = tmp_path / "d"
    write_tiffs(folder, [1])
    (folder / "p2.tif").write_text("not a tiff at all")
    with pytest.raises(InputError) as e:
        open_scan(folder)
    assert_names(e, folder / "p2.tif")


def test_low_bit_depth_png_is_refused(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    Image.fromarray(np.zeros(SHAPE, bool)).save(folder / "p1.png")  # 1-bit
    with pytest.raises(InputError) as e:
        open_scan(folder)
    assert_names(e, folder / "p1.png", "1-bit")


def test_dataset_does_not_apply(tmp_path):
    write_tiffs(tmp_path / "d", [1])
    with pytest.raises(InputError) as e:
        open_scan(tmp_path / "d", dataset="/patterns")
    assert_names(e, tmp_path / "d")


def test_single_file_is_not_a_stack(tmp_path):
    write_tiffs(tmp_path / "d", [1])
    one = tmp_path / "d" / "p1.tif"
    assert not image_stack.detect(one)
    with pytest.raises(InputError) as e:
        image_stack.open(one)
    assert_names(e, one)


def test_file_changed_after_opening(tmp_path):
    write_tiffs(tmp_path / "d", [1, 2])
    src = open_scan(tmp_path / "d")
    tifffile.imwrite(tmp_path / "d" / "p2.tif", image(2, shape=(5, 5)))
    with pytest.raises(InputError) as e:
        src.read(0, 2)
    assert_names(e, tmp_path / "d" / "p2.tif")


# ----------------------------------------------------------------------------- pickle, CLI


def test_describe_and_pickle(tmp_path):
    write_tiffs(tmp_path / "d", [1, 2, 3])
    src = open_scan(tmp_path / "d", grid_shape="1x3")
    d = src.describe()
    assert d["format"] == "image_stack" and d["pattern_shape"] == list(SHAPE)
    assert d["metadata"]["n_files"] == 3
    clone = pickle.loads(pickle.dumps(src))
    np.testing.assert_array_equal(clone.read(0, 3), src.read(0, 3))
    assert clone.grid == src.grid


def test_cli_info_on_folder(tmp_path):
    write_tiffs(tmp_path / "d", [1, 2, 10])
    res = subprocess.run([sys.executable, "-m", "ebsdxc", "info", str(tmp_path / "d")],
                         check=False, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    for w in ("image_stack", "cols: 3", "p1.tif", "p10.tif"):
        assert w in res.stdout, res.stdout


def test_matches_kikuchipy_directory_reader(tmp_path):
    kp = pytest.importorskip("kikuchipy")
    folder = tmp_path / "d"
    write_tiffs(folder, [1, 2, 10, 3], dtype=np.uint8)
    pattern = str(folder / "*.tif")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kikuchipy: no coordinates in the names, one row
        expected = np.asarray(kp.load(pattern).data)
    src = open_scan(pattern)
    ours = dict(zip(src.files, src.read(0, src.n_patterns)))
    # kikuchipy keeps glob's (directory) order; compare file by file
    for i, f in enumerate(glob.glob(pattern)):
        np.testing.assert_array_equal(ours[f], expected[i])


def test_cli_process_end_to_end(tmp_path, sample_dir):
    """Six patterns of the shipped sample scan as a 16-bit TIFF/PNG stack."""
    with open_scan(os.path.join(sample_dir, "scan.h5")) as scan:
        pats = scan.read(0, 6)
    folder = tmp_path / "frames"
    folder.mkdir()
    for i, p in enumerate(pats):
        if i % 2:
            write_png(folder / f"f{i + 1}.png", p)
        else:
            tifffile.imwrite(folder / f"f{i + 1}.tif", p)
    out = tmp_path / "OUT.h5"
    res = subprocess.run([sys.executable, "-m", "ebsdxc", "process", str(folder), "--ref-index",
                          "0", "-o", str(out), "--device", "cpu", "-q"],
                         check=False, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    with h5py.File(out, "r") as f:
        g = f["ebsdxc"]
        assert g["done"].shape == (1, 6) and g["done"][...].all()
        assert g.attrs["scan_format"] == "image_stack"
        # the reference point against itself: no shift
        np.testing.assert_allclose(g["displacement"][0, 0], 0, atol=1e-3)
