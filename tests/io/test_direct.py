"""The direct HDF5 read path (ebsdxc.io.direct) against h5py on every storage layout."""

import os
import pickle

import h5py
import numpy as np
import pytest

from ebsdxc.errors import InputError
from ebsdxc.io import direct, open_scan

RANGES = [(0, 300), (5, 6), (13, 250), (299, 300), (6, 14), (0, 0)]


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(0).integers(0, 4000, (300, 32, 24)).astype(np.uint16)


LAYOUTS = {
    "contiguous": {},
    "chunked": {"chunks": (7, 32, 24)},
    "one pattern per chunk": {"chunks": (1, 32, 24)},
    "gzip": {"chunks": (7, 32, 24), "compression": "gzip"},
    "gzip+shuffle": {"chunks": (16, 32, 24), "compression": "gzip", "compression_opts": 9, "shuffle": True},
    "shuffle only": {"chunks": (5, 32, 24), "shuffle": True},
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_direct_reads_equal_h5py(tmp_path, data, layout):
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("p", data=data, **LAYOUTS[layout])
    with h5py.File(path, "r") as f:
        reader = direct.plan(path, f["p"])
        assert reader is not None
    for a, b in RANGES:
        out = np.full((b - a, 32, 24), 7, np.uint16)
        reader.read(a, b, out)
        np.testing.assert_array_equal(out, data[a:b])
    # a second reader after pickling (a Dask worker) reopens the file itself
    again = pickle.loads(pickle.dumps(reader))
    out = np.empty((10, 32, 24), np.uint16)
    again.read(290, 300, out)
    np.testing.assert_array_equal(out, data[290:])


@pytest.mark.parametrize("compression", ["gzip", None])
@pytest.mark.parametrize("chunks", [(2, 3), (1, 20), (3, 20), (1, 1)])
def test_direct_reads_4d_chunks_across_rows(tmp_path, data, compression, chunks):
    # unfiltered chunks are read straight into the batch, a byte range of the chunk per run:
    # chunks of part of a row, of whole rows, of several rows, of one pattern
    path = tmp_path / "d4.h5"
    grid = data.reshape(15, 20, 32, 24)
    with h5py.File(path, "w") as f:
        f.create_dataset("p", data=grid, chunks=(*chunks, 32, 24), compression=compression)
    with open_scan(path) as src:
        assert src._direct_reader(np.empty((1, 32, 24), np.uint16)) is not None
        for a, b in RANGES:
            out = np.empty((b - a, 32, 24), np.uint16)
            src.read_into(a, b, out)
            np.testing.assert_array_equal(out, data[a:b])


@pytest.mark.parametrize("kwargs", [
    {"chunks": (7, 16, 24), "compression": "gzip"},   # chunks cut patterns apart
    {"chunks": (7, 32, 24), "compression": "lzf"},    # a filter zlib does not speak
    {"chunks": (7, 32, 24), "scaleoffset": 0},        # nor this one
])
def test_other_layouts_fall_back_to_h5py(tmp_path, data, kwargs):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("p", data=data, **kwargs)
    with h5py.File(path, "r") as f:
        assert direct.plan(path, f["p"]) is None
    with open_scan(path) as src:
        np.testing.assert_array_equal(src.read(13, 250), data[13:250])


def test_big_endian_falls_back_and_converts(tmp_path, data):
    path = tmp_path / "be.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("p", data=data.astype(">u2"))
    with h5py.File(path, "r") as f:
        assert direct.plan(path, f["p"]) is None
    with open_scan(path) as src:
        out = np.empty((10, 32, 24), np.uint16)  # native buffer, as the runner gives
        src.read_into(0, 10, out)
        np.testing.assert_array_equal(out, data[:10])


@pytest.mark.parametrize("compression", ["gzip", None])
def test_unwritten_chunks_read_as_zeros(tmp_path, data, compression):
    path = tmp_path / "holes.h5"
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("p", shape=data.shape, dtype=data.dtype, chunks=(10, 32, 24), compression=compression)
        ds[:100] = data[:100]
    with open_scan(path) as src:
        assert src._direct_reader(np.empty((1, 32, 24), np.uint16)) is not None
        got = src.read(95, 120)
    np.testing.assert_array_equal(got[:5], data[95:100])
    assert not got[5:].any()


def test_read_threads_setting(monkeypatch):
    monkeypatch.setenv("EBSDXC_READ_THREADS", "3")
    assert direct.threads() == 3
    monkeypatch.setenv("EBSDXC_READ_THREADS", "x")
    assert direct.threads() >= 1


@pytest.mark.parametrize("layout", ["contiguous", "gzip", "one pattern per chunk"])
def test_truncated_file_is_an_error_naming_it(tmp_path, data, layout):
    path = tmp_path / "cut.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("p", data=data, **LAYOUTS[layout])
    size = os.path.getsize(path)
    src = open_scan(path)
    with open(path, "r+b") as fh:  # the file loses its tail after it was opened
        fh.truncate(size - size // 3)
    from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
    from ebsdxc.run import process

    cfg = ProcessConfig(roi=RoiConfig(grid=(1, 1), size=16))
    with pytest.raises(InputError) as e:
        process(src, ref_index=0, config=cfg, run=RunConfig(device="cpu", batch=50), output=tmp_path / "r.h5")
    # the chunk index is checked before the first pattern is read (ebsdxc.io.h5check): a
    # chunk now past the end of the file is named there; contiguous data fail in the read
    msg = str(e.value)
    assert str(path) in msg and ("cannot read patterns" in msg or "outside the file" in msg)
    assert msg.count(str(path)) == 1 and "\n" not in msg  # one line, the file named once
    src.close()


def test_missing_filter_is_refused_at_open_naming_the_file(tmp_path, data):
    """A filter HDF5 lacks here (id 32001, blosc, unless hdf5plugin is installed): one error at
    open, not an OSError halfway through a run; the direct path would not have read it either."""
    path = tmp_path / "blosc.h5"
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("p", shape=data.shape, dtype=data.dtype, chunks=(1, 32, 24),
                              compression=32001, allow_unknown_filter=True)
        for i in range(data.shape[0]):
            ds.id.write_direct_chunk((i, 0, 0), data[i].tobytes())
    if h5py.h5z.filter_avail(32001):
        pytest.skip("blosc is available here")
    with pytest.raises(InputError, match="32001") as e:
        open_scan(path)
    assert str(path) in str(e.value)
    with h5py.File(path, "r") as f:
        assert direct.plan(path, f["p"]) is None


@pytest.mark.parametrize("chunks", [(1, 32, 24), (7, 32, 24), (300, 32, 24)])
def test_unfiltered_reads_cut_into_pieces(tmp_path, data, monkeypatch, chunks):
    # ranges longer than the piece size are cut (here at 1000 bytes, inside patterns of 1536) and
    # dealt to several threads: the bytes land where they belong
    monkeypatch.setattr(direct, "_SPLIT_BYTES", 1000)
    monkeypatch.setattr(direct, "_GROUP_BYTES", 4000)
    monkeypatch.setenv("EBSDXC_READ_THREADS", "3")
    path = tmp_path / "p.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("p", data=data, chunks=chunks)
    with h5py.File(path, "r") as f:
        reader = direct.plan(path, f["p"])
    for a, b in RANGES + [(0, 299), (1, 300)]:
        out = np.full((b - a, 32, 24), 7, np.uint16)
        reader.read(a, b, out)
        np.testing.assert_array_equal(out, data[a:b])


def _fill(path, pieces, shape, dtype):
    """What positioned reads of ``pieces`` put in a buffer (a reader process's work, here)."""
    buf = np.full(shape, 7, dtype)
    raw = buf.reshape(-1).view(np.uint8)
    with open(path, "rb") as fh:
        for o, off, n in pieces:
            if off < 0:
                raw[o:o + n] = 0
            else:
                fh.seek(off)
                raw[o:o + n] = np.frombuffer(fh.read(n), np.uint8)
    return buf


@pytest.mark.parametrize("layout", ["contiguous", "chunked", "one pattern per chunk"])
@pytest.mark.parametrize("split", [1 << 20, 3000, 1536])
def test_byte_pieces_fill_what_the_reader_reads(tmp_path, data, layout, split):
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("p", data=data, **LAYOUTS[layout])
    with open_scan(path) as src:
        for a, b in RANGES:
            pieces = src.byte_pieces(a, b, split)
            assert pieces.shape[1] == 3 and (pieces[:, 2] <= split).all()
            assert pieces[:, 2].sum() == (b - a) * 32 * 24 * 2  # every byte once
            np.testing.assert_array_equal(_fill(path, pieces, (b - a, 32, 24), np.uint16), data[a:b])


def test_byte_pieces_of_4d_scans_and_unwritten_chunks(tmp_path, data):
    path = tmp_path / "d4.h5"
    grid = data.reshape(15, 20, 32, 24)
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("p", shape=grid.shape, dtype=grid.dtype, chunks=(2, 3, 32, 24))
        ds[:9] = grid[:9]  # chunks of two rows: row 9 is written as zeros, rows 10 and after never
    want = grid.reshape(300, 32, 24).copy()
    want[9 * 20:] = 0
    with open_scan(path) as src:
        for a, b in [(0, 300), (17, 203), (175, 185)]:
            pieces = src.byte_pieces(a, b, 5000)
            assert (pieces[:, 1] < 0).any() == (b > 200)  # chunks of rows 10 and after: none
            np.testing.assert_array_equal(_fill(path, pieces, (b - a, 32, 24), np.uint16), want[a:b])


@pytest.mark.parametrize("layout", ["gzip", "shuffle only"])
def test_no_byte_pieces_where_chunks_need_decoding(tmp_path, data, layout):
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("p", data=data, **LAYOUTS[layout])
    with open_scan(path) as src:
        assert src.byte_pieces(0, 10, 1 << 20) is None


def test_reader_processes_setting(monkeypatch):
    from ebsdxc.run.device_readers import MIN_SCAN_BYTES, reader_processes

    monkeypatch.delenv("EBSDXC_READER_PROCESSES", raising=False)
    assert reader_processes(MIN_SCAN_BYTES - 1, 80 << 30) is None  # a small scan: threads
    assert reader_processes(MIN_SCAN_BYTES, 10 << 30) is None  # no room for the contexts
    assert reader_processes(MIN_SCAN_BYTES, 80 << 30) == (4, 4)
    monkeypatch.setenv("EBSDXC_READER_PROCESSES", "0")
    assert reader_processes(MIN_SCAN_BYTES, 80 << 30) is None
    monkeypatch.setenv("EBSDXC_READER_PROCESSES", "3x2")
    assert reader_processes(1, 0) == (3, 2)
    monkeypatch.setenv("EBSDXC_READER_PROCESSES", "8")
    assert reader_processes(1, 0) == (8, 1)
    monkeypatch.setenv("EBSDXC_READER_PROCESSES", "many")
    with pytest.raises(InputError, match="EBSDXC_READER_PROCESSES"):
        reader_processes(1, 0)


@pytest.mark.parametrize("sizes,k", [([8] * 10, 4), ([100, 1, 1, 1, 100], 3), ([5], 4), ([], 3), ([3, 3], 1)])
def test_byte_groups_are_k_contiguous_groups_of_about_equal_bytes(sizes, k):
    groups = direct.byte_groups(sizes, k)
    assert len(groups) == k  # one per worker (a reader process waits for its message), some empty
    np.testing.assert_array_equal(np.concatenate(groups) if sizes else [], np.arange(len(sizes)))
    sums = [int(np.asarray(sizes, int)[g].sum()) for g in groups]
    assert max(sums, default=0) <= sum(sizes) / k + max(sizes, default=0)
