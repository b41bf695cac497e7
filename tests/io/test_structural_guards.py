"""Structural guards against damage that would change data without an error (issue 20).

Each test damages a real sample file (``sample_data/``, kikuchipy's data files, or a file the
fuzz harness writes with h5py, tifffile) the way one guard detects, and asserts the one-line
:class:`~ebsdxc.errors.InputError` naming the file; the first test checks that every undamaged
sample still opens and reads exactly what h5py, tifffile and the text itself hold. The damage
is what the long fuzz run 2 found read silently (``benchmarks/results/fuzz_readers_run2.json``).
"""

from __future__ import annotations

import importlib.util
import shutil
import struct
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest

from ebsdxc.errors import InputError
from ebsdxc.io import h5check, hdf5, open_scan, read_orientation_map, read_reference

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_data"
_KP = importlib.util.find_spec("kikuchipy")
KP_DATA = None if _KP is None else Path(_KP.origin).parent / "data"
needs_kp = pytest.mark.skipif(KP_DATA is None, reason="kikuchipy ships the vendor sample files")


def _copy(src, tmp_path, name=None) -> Path:
    dst = tmp_path / (name or Path(src).name)
    shutil.copy(src, dst)
    dst.chmod(0o644)
    return dst


def _patch(path, offset, new: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(new)


def _replace_once(path, old: bytes, new: bytes, *, nth=0) -> None:
    data = Path(path).read_bytes()
    at = -1
    for _ in range(nth + 1):
        at = data.index(old, at + 1)
    _patch(path, at, new)


def _one_line_error(exc_info, path, *words):
    msg = str(exc_info.value)
    assert msg.startswith(str(path)), msg
    assert "\n" not in msg.strip(), msg
    for w in words:
        assert w in msg, (w, msg)
    return msg


def _read_all(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with open_scan(path) as src:
            return src.read(0, src.n_patterns), src.static_background()


# --------------------------------------------------------------------------- undamaged


def _h5_samples():
    files = sorted(SAMPLE.rglob("*.h5"))
    if KP_DATA is not None:
        files += sorted(KP_DATA.rglob("*.h5"))
    return files


@pytest.mark.parametrize("path", _h5_samples(), ids=lambda p: str(p.relative_to(p.parents[1])))
def test_every_undamaged_hdf5_sample_passes_the_structure_check(path):
    with hdf5.open_file(path) as f:  # check_file runs here
        assert f.id.valid


def test_undamaged_samples_read_exactly_what_the_files_hold():
    # ebsdxc's own samples: the scan is what h5py reads, the reference what tifffile reads
    import tifffile

    got, _ = _read_all(SAMPLE / "scan.h5")
    with h5py.File(SAMPLE / "scan.h5") as f:
        want = f["patterns"][()].reshape(-1, *f["patterns"].shape[2:])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(read_reference(SAMPLE / "ref.tif"), tifffile.imread(SAMPLE / "ref.tif"))
    omap = read_orientation_map(SAMPLE / "polycrystal" / "scan.ang")
    assert np.isfinite(omap.euler_deg[omap.grid.in_grid()]).all()


@needs_kp
@pytest.mark.parametrize("rel, dataset", [
    ("kikuchipy_h5ebsd/patterns.h5", "Scan 1/EBSD/Data/patterns"),
    ("kikuchipy_h5ebsd/patterns_nochunks.h5", "Scan 1/EBSD/Data/patterns"),
    ("edax_h5ebsd/patterns.h5", "Scan 1/EBSD/Data/Pattern"),
    ("emsoft_ebsd/simulated_ebsd.h5", "EMData/EBSD/EBSDPatterns"),
])
def test_undamaged_vendor_samples_read_exactly_what_h5py_reads(rel, dataset):
    got, _ = _read_all(KP_DATA / rel)
    with h5py.File(KP_DATA / rel) as f:
        want = f[dataset][()]
    want = want.reshape(-1, *want.shape[-2:])
    np.testing.assert_array_equal(got[:len(want)], want)


# --------------------------------------------------------------------------- chunk index


def _chunk_key_offset(path, index=1) -> tuple[int, object, int]:
    """Byte offset of chunk ``index``'s key in the file's (old-layout) chunk B-tree."""
    data = Path(path).read_bytes()
    with h5py.File(path) as f:
        ds = f["patterns"]
        info = ds.id.get_chunk_info(index)
        nfilters = ds.id.get_create_plist().get_nfilters()
        key = struct.pack("<II", info.size, info.filter_mask) + struct.pack(
            f"<{ds.ndim + 1}Q", *info.chunk_offset, 0)
    at = data.index(key)
    assert data.count(key) == 1
    return at, info, nfilters


@pytest.mark.parametrize("origin, words", [
    (11, "outside the dataset"),      # a row past the 10 of the scan
    (0, "two chunks at the same place"),  # row 1's chunk now claims row 0
])
def test_a_chunk_moved_by_a_damaged_key_is_an_error_before_any_pattern(tmp_path, origin, words):
    # without the guard the moved chunk's patterns read as zeros (run 2: 104 such inputs)
    path = _copy(SAMPLE / "scan.h5", tmp_path)
    at, _, _ = _chunk_key_offset(path)
    _patch(path, at + 8, struct.pack("<Q", origin))
    with pytest.raises(InputError) as e:
        _read_all(path)
    _one_line_error(e, path, "is damaged", "chunk index", "'/patterns'", words)


def test_a_chunk_off_the_chunk_grid_is_an_error(tmp_path):
    path = _copy(SAMPLE / "polycrystal" / "scan.h5", tmp_path)
    at, _, _ = _chunk_key_offset(path)
    _patch(path, at + 16, struct.pack("<Q", 3))  # column 3 of chunks 12 columns wide
    with pytest.raises(InputError) as e:  # HDF5 itself refuses this one when the walk opens it
        _read_all(path)
    _one_line_error(e, path, "is damaged", "'/patterns'")


def test_a_filter_mask_naming_filters_the_dataset_lacks_is_an_error(tmp_path):
    # run 2: mask 0 -> 13 skipped the shuffle filter and returned scrambled pixels
    path = _copy(SAMPLE / "scan.h5", tmp_path)
    at, _, nfilters = _chunk_key_offset(path)
    _patch(path, at + 4, struct.pack("<I", 1 << nfilters))
    with pytest.raises(InputError) as e:
        _read_all(path)
    _one_line_error(e, path, "skips filters")


def test_a_chunk_too_large_for_its_filters_is_an_error(tmp_path):
    # a mask that skips deflate leaves a chunk that must hold its raw bytes: it does not
    path = _copy(SAMPLE / "scan.h5", tmp_path)
    at, _, nfilters = _chunk_key_offset(path)
    with h5py.File(path) as f:
        codes = [f["patterns"].id.get_create_plist().get_filter(i)[0] for i in range(nfilters)]
    _patch(path, at + 4, struct.pack("<I", 1 << codes.index(1)))
    with pytest.raises(InputError) as e:
        _read_all(path)
    _one_line_error(e, path, "cannot be stored in with its filters")


def test_an_empty_or_outside_chunk_is_an_error_on_the_h5py_path_too(tmp_path, monkeypatch):
    monkeypatch.setenv("EBSDXC_DIRECT_READ", "0")  # h5py reads: the check is not the fast reader's
    path = _copy(SAMPLE / "scan.h5", tmp_path)
    at, _, _ = _chunk_key_offset(path)
    _patch(path, at, struct.pack("<I", 0))
    with pytest.raises(InputError) as e:
        _read_all(path)
    _one_line_error(e, path, "is empty or lies outside the file")


def test_a_large_chunk_index_is_checked_at_the_first_read_not_at_open(tmp_path):
    # 5000 chunks: more than check_file walks at open, so the first read checks them
    path = tmp_path / "many.h5"
    rng = np.random.default_rng(3)
    with h5py.File(path, "w") as f:
        f.create_dataset("patterns", data=rng.integers(0, 255, (5000, 8, 8), dtype=np.uint8),
                         chunks=(1, 8, 8), compression="gzip")
    at, info, _ = _chunk_key_offset(path, index=1234)
    _patch(path, at + 8, struct.pack("<Q", 1233))  # chunk 1234 now claims 1233's place
    src = open_scan(path)  # opening stays cheap
    with src, pytest.raises(InputError) as e:
        src.read(4000, 4001)  # any first read, even far from the damage
    _one_line_error(e, path, "two chunks at the same place")


def test_chunk_table_is_what_hdf5_reports():
    with h5py.File(SAMPLE / "scan.h5") as f:
        ds = f["patterns"]
        table = h5check.chunk_table(ds, str(SAMPLE / "scan.h5"))
        infos = [ds.id.get_chunk_info(i) for i in range(ds.id.get_num_chunks())]
    assert len(table) == len(infos) == 10
    got = sorted(zip(table.origins[:, 0].tolist(), table.offsets.tolist(), table.sizes.tolist()))
    assert got == sorted((i.chunk_offset[0], i.byte_offset, i.size) for i in infos)


# --------------------------------------------------------------------------- dataspaces, layouts


@needs_kp
def test_a_shrunk_dataspace_of_contiguous_patterns_is_an_error(tmp_path):
    # kikuchipy's contiguous file: the patterns' last dimension 60 -> 56 (run 2 read 56 px rows)
    path = _copy(KP_DATA / "kikuchipy_h5ebsd" / "patterns_nochunks.h5", tmp_path)
    _replace_once(path, struct.pack("<3Q", 1, 60, 60), struct.pack("<3Q", 1, 60, 56))
    with pytest.raises(InputError) as e:
        open_scan(path)
    _one_line_error(e, path, "is damaged", "patterns")


def test_pattern_axes_smaller_than_their_room_are_an_error(tmp_path):
    # ebsdxc's sample: chunked (1, 10, 160, 160); the dataspace's width 160 -> 100 only
    path = _copy(SAMPLE / "scan.h5", tmp_path)
    _replace_once(path, struct.pack("<4Q", 10, 10, 160, 160), struct.pack("<4Q", 10, 10, 160, 100))
    with pytest.raises(InputError) as e:
        open_scan(path)
    _one_line_error(e, path, "is damaged", "160 x 100 px in room for 160 x 160")


@needs_kp
def test_a_string_longer_than_its_storage_is_an_error(tmp_path):
    # run 2: the root 'manufacturer' |S10 -> |S4618 made a kikuchipy file plain HDF5
    path = _copy(KP_DATA / "kikuchipy_h5ebsd" / "patterns_nochunks.h5", tmp_path)
    with h5py.File(path) as f:
        offset = f["manufacturer"].id.get_offset()
    import re

    data = path.read_bytes()
    # the string datatype message: version 1, class 3 (string), 3 bytes of bits, size 10
    at = re.search(rb"\x13[\x00-\x1f]\x00\x00\x0a\x00\x00\x00", data).start()
    assert at < offset
    _patch(path, at + 4, struct.pack("<I", 4618))
    with pytest.raises(InputError) as e:
        open_scan(path)
    _one_line_error(e, path, "is damaged", "'/manufacturer'")


@needs_kp
def test_data_moved_onto_another_datasets_bytes_is_an_error(tmp_path):
    path = _copy(KP_DATA / "edax_h5ebsd" / "patterns.h5", tmp_path)
    with h5py.File(path) as f:
        phi1 = f["Scan 1/EBSD/Data/Phi1"].id.get_offset()
        phi = f["Scan 1/EBSD/Data/Phi"].id.get_offset()
    _replace_once(path, struct.pack("<Q", phi1) + struct.pack("<Q", 36), struct.pack("<Q", phi))
    with pytest.raises(InputError) as e:
        read_orientation_map(path)
    _one_line_error(e, path, "overlap", "Phi")


# --------------------------------------------------------------------------- names, objects


@needs_kp
@pytest.mark.parametrize("old, new, words", [
    (b"static_background", b"staTic_background", "'staTic_background' where 'static_background'"),
    (b"manufacturer", b"manufacXurer", "'manufacXurer' where 'manufacturer'"),
    (b"Header\x00", b"HSader\x00", "'HSader' where 'Header'"),
    (b"Data\x00", b"Da\xe7a\x00", "no name"),
])
def test_a_damaged_name_is_an_error_not_a_missing_entry(tmp_path, old, new, words):
    # each of these read the file without its background (or as plain HDF5) in run 2
    path = _copy(KP_DATA / "kikuchipy_h5ebsd" / "patterns_nochunks.h5", tmp_path)
    _replace_once(path, old, new)
    with pytest.raises(InputError) as e:
        open_scan(path)
    _one_line_error(e, path, "is damaged", words)


@needs_kp
def test_names_differing_only_in_a_first_capital_are_not_damage(tmp_path):
    path = _copy(KP_DATA / "kikuchipy_h5ebsd" / "patterns_nochunks.h5", tmp_path)
    with h5py.File(path, "r+") as f:  # Bruker's spelling beside kikuchipy's is a real file's
        f["Scan 1/EBSD/Header/Magnification"] = 1
    _read_all(path)


def _fuzz():
    spec = importlib.util.spec_from_file_location(
        "ebsdxc_fuzz_readers_guards", REPO / "benchmarks" / "fuzz_readers.py")
    mod = importlib.util.module_from_spec(spec)
    import sys

    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@needs_kp
@pytest.mark.parametrize("rel, mutation, a, b, words", [
    # inputs of long run 2 that read silently (benchmarks/results/fuzz_readers_run2.json)
    ("kikuchipy_h5ebsd/patterns_nochunks.h5", "header", 2026, None, "'/Scan 1/EBSD/Header'"),
    ("kikuchipy_h5ebsd/patterns_nochunks.h5", "bitflip", 10697, None, "a datatype, not data"),
    ("edax_h5ebsd/patterns.h5", "header", 857, None, "cannot be read"),
])
def test_run2_structural_damage_is_now_an_error(tmp_path, rel, mutation, a, b, words):
    import json

    fuzz = _fuzz()
    report = json.loads((REPO / "benchmarks/results/fuzz_readers_run2.json").read_text())
    name = {"kikuchipy_h5ebsd/patterns_nochunks.h5": "h5ebsd_contiguous",
            "edax_h5ebsd/patterns.h5": "edax_h5"}[rel]
    original = (KP_DATA / rel).read_bytes()
    n = len(original) if mutation == "bitflip" else min(len(original), 2048)
    case = next(f for f in report["failures"] if f["seed"] == name and f["mutation"] == mutation
                and f["a"] % n == a)
    path = tmp_path / Path(rel).name
    path.write_bytes(fuzz.mutate(original, mutation, case["a"], case["b"]))
    with pytest.raises(InputError) as e:
        _read_all(path)
    _one_line_error(e, path, "is damaged", words)


@needs_kp
def test_a_static_background_of_the_wrong_shape_is_an_error_not_dropped(tmp_path):
    path = _copy(KP_DATA / "kikuchipy_h5ebsd" / "patterns_nochunks.h5", tmp_path)
    with h5py.File(path, "r+") as f:  # chunked, resizable: a shape HDF5 accepts
        f["Scan 1/EBSD/Header/static_background"].resize((60, 56))
    with open_scan(path) as src, pytest.raises(InputError) as e:
        src.static_background()
    _one_line_error(e, path, "static_background is (60, 56)")


# --------------------------------------------------------------------------- TIFF


def _tiff_tag_entry(path, code) -> int:
    """Byte offset of tag ``code``'s 12-byte entry in the first IFD of a little-endian TIFF."""
    data = Path(path).read_bytes()
    ifd = struct.unpack_from("<I", data, 4)[0]
    n = struct.unpack_from("<H", data, ifd)[0]
    for i in range(n):
        at = ifd + 2 + 12 * i
        if struct.unpack_from("<H", data, at)[0] == code:
            return at
    raise AssertionError(f"no tag {code}")


@pytest.mark.parametrize("tag, field, value, words", [
    (256, 8, struct.pack("<H", 79), "strips hold 51200 bytes"),   # ImageWidth 160 -> 79
    (256, 2, struct.pack("<H", 161), "is damaged"),  # its type -> 161: tifffile drops the tag
    (258, 8, struct.pack("<H", 112), "no pixel type"),           # BitsPerSample 16 -> 112
    (257, 2, struct.pack("<H", 245), "a TIFF tag could not be read"),  # what tifffile logs
])
def test_a_damaged_tiff_tag_is_an_error(tmp_path, tag, field, value, words):
    path = _copy(SAMPLE / "ref.tif", tmp_path)
    _patch(path, _tiff_tag_entry(path, tag) + field, value)
    with pytest.raises(InputError) as e:
        read_reference(path)
    _one_line_error(e, path, words)


# --------------------------------------------------------------------------- text maps, .up


def test_an_ang_number_damaged_into_infinity_is_an_error(tmp_path):
    path = _copy(SAMPLE / "polycrystal" / "scan.ang", tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    i = next(k for k, line in enumerate(lines) if not line.startswith("#"))
    first = lines[i].split()
    lines[i] = lines[i].replace(first[0], first[0][:3] + "E540", 1)  # 1.11871 -> 1.1E540
    path.write_text("".join(lines))
    with pytest.raises(InputError) as e:
        read_orientation_map(path)
    _one_line_error(e, path, f"line {i + 1}", "not angles")


def test_a_ctf_euler_angle_out_of_range_is_an_error(tmp_path):
    from ebsdxc.io import write_ctf

    path = tmp_path / "scan.ctf"
    write_ctf(path, read_orientation_map(SAMPLE / "polycrystal" / "scan.ang"))
    lines = path.read_text().splitlines(keepends=True)
    i = next(k for k, line in enumerate(lines) if line.startswith("Phase\t")) + 1
    cols = lines[i].split("\t")
    cols[5] = "9" + cols[5]  # 357.9 deg -> 9357.9 deg
    lines[i] = "\t".join(cols)
    path.write_text("".join(lines))
    with pytest.raises(InputError) as e:
        read_orientation_map(path)
    _one_line_error(e, path, f"line {i + 1}", "not angles")


@needs_kp
@pytest.mark.parametrize("rel", ["edax_binary/edax_binary.up1", "edax_binary/edax_binary.up2"])
def test_an_up_header_whose_data_offset_moved_is_an_error(tmp_path, rel):
    # run 2: offset 42 -> 50 shifted every pattern and read as "one pattern more"
    path = _copy(KP_DATA / rel, tmp_path)
    offset = struct.unpack_from("<I", path.read_bytes(), 12)[0]
    _patch(path, 12, struct.pack("<I", offset + 8))
    with pytest.raises(InputError) as e:
        open_scan(path)
    _one_line_error(e, path, f"start at byte {offset + 8}", "damaged header")


# --------------------------------------------------------------------------- the judge


def test_the_judge_counts_one_stored_angle_seen_twice_once():
    fuzz = _fuzz()
    want = {"orientations": np.zeros((2, 2, 3)), "omap/euler": np.zeros((2, 2, 3))}
    got = {k: v.copy() for k, v in want.items()}
    got["orientations"][0, 1, 2] = got["omap/euler"][0, 1, 2] = 5.0
    assert fuzz._compare(got, want) == (1, 0)
    got["omap/euler"][1, 1, 0] = 7.0  # a change of the map alone is counted apart
    assert fuzz._compare(got, want) == (3, 0)
