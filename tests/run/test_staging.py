"""Reading in pieces straight to the device (ebsdxc.run.staging): on the CPU the device batches
are NumPy arrays and copies happen at once, so these tests check the bookkeeping (pieces dealt
to threads, batches complete and in order, device batches reused only once handed back, a
failed read after the batches before it, stopping early) on real HDF5 files; the GPU test runs
whole scans through the staged path against the batch path."""

import os

import numpy as np
import pytest

from ebsdxc.errors import InputError
from ebsdxc.io import open_scan
from ebsdxc.io.source import ArraySource
from ebsdxc.run.bench_pipeline import write_scan
from ebsdxc.run.staging import SLOTS, StagedReader, piece_bytes, ring_shape


def _scan(tmp_path, n=230, shape=(12, 10), chunk=16):
    return open_scan(write_scan(tmp_path / "scan.h5", n, shape, chunk=chunk, distinct=n))


def _chunks(n, sizes):
    out, a, i = [], 0, 0
    while a < n:
        b = min(n, a + sizes[i % len(sizes)])
        out.append((a, b))
        a, i = b, i + 1
    return out


def _consume(reader, targets, truth, *, hold=1):
    """Take every batch, check it against ``truth``, hand device batches back ``hold`` batches
    late (as the GPU's compute stream does); returns the (start, stop) seen, and what ended it."""
    seen, held = [], []
    reader.start()
    try:
        while True:
            item = reader.ready.get(timeout=30)
            if item is None or isinstance(item, BaseException):
                return seen, item
            np.testing.assert_array_equal(targets[item.slot][:item.stop - item.start], truth[item.start:item.stop])
            assert item.slot not in held, "a device batch still in use was written"
            seen.append((item.start, item.stop))
            held.append(item.slot)
            if len(held) > hold:
                reader.release(held.pop(0))
            if len(held) == len(targets):  # nothing else could arrive: give the oldest back
                reader.release(held.pop(0))
    finally:
        reader.stop()
        reader.join(timeout=10)


@pytest.mark.parametrize("raw", [True, False], ids=["byte pieces", "parts of patterns"])
@pytest.mark.parametrize("threads,piece,sizes", [(1, 7, [64]), (3, 5, [64, 17, 1, 40]), (4, 64, [64]),
                                                 (5, 3, [2, 64])])
def test_batches_arrive_whole_and_in_order(tmp_path, threads, piece, sizes, raw):
    src = _scan(tmp_path)
    truth = src.read(0, src.n_patterns)
    chunks = _chunks(src.n_patterns, sizes)
    batch = max(b - a for a, b in chunks)
    ring = np.empty(ring_shape(threads, min(piece, batch) * truth[0].nbytes + 6), np.uint8)
    targets = [np.full((batch, *src.pattern_shape), 7, src.dtype) for _ in range(2)]
    seen, end = _consume(StagedReader(src, chunks, targets, ring, raw=raw), targets, truth)
    assert end is None and seen == chunks


def test_parts_of_patterns_from_any_source():
    data = np.random.default_rng(3).integers(0, 255, (50, 9, 8), dtype=np.uint8)
    src = ArraySource(data)
    chunks = _chunks(50, [16])
    ring = np.empty(ring_shape(1, 5 * data[0].nbytes), np.uint8)
    targets = [np.empty((16, 9, 8), np.uint8) for _ in range(3)]
    seen, end = _consume(StagedReader(src, chunks, targets, ring, raw=False), targets, data, hold=2)
    assert end is None and seen == chunks


def test_three_device_batches_and_late_release(tmp_path):
    src = _scan(tmp_path, n=100)
    truth = src.read(0, 100)
    chunks = _chunks(100, [9])
    ring = np.empty(ring_shape(2, 4 * src.nbytes_per_pattern), np.uint8)
    targets = [np.empty((9, *src.pattern_shape), src.dtype) for _ in range(3)]
    seen, end = _consume(StagedReader(src, chunks, targets, ring), targets, truth, hold=2)
    assert end is None and seen == chunks


@pytest.mark.parametrize("raw", [True, False], ids=["byte pieces", "parts of patterns"])
def test_a_failed_read_comes_after_the_batches_before_it_and_ends_the_stream(tmp_path, raw):
    src = _scan(tmp_path, n=200, chunk=10)
    truth = src.read(0, 200)
    # the file loses its last 25 patterns after it was opened (a copy still being written)
    with open(src.path, "r+b") as f:
        f.truncate(os.path.getsize(src.path) - 25 * truth[0].nbytes)
    chunks = _chunks(200, [20])
    ring = np.empty(ring_shape(3, 4 * src.nbytes_per_pattern), np.uint8)
    targets = [np.empty((20, *src.pattern_shape), src.dtype) for _ in range(2)]
    seen, end = _consume(StagedReader(src, chunks, targets, ring, raw=raw), targets, truth)
    assert isinstance(end, InputError) and src.path in str(end) and "\n" not in str(end)
    # every batch before the one that failed, none after it
    assert seen == chunks[:len(seen)] and seen[-1][1] <= 175 < seen[-1][1] + 20


def test_stopping_early_ends_every_thread(tmp_path):
    src = _scan(tmp_path, n=200)
    chunks = _chunks(200, [10])
    ring = np.empty(ring_shape(4, 2 * src.nbytes_per_pattern), np.uint8)
    targets = [np.empty((10, *src.pattern_shape), src.dtype) for _ in range(2)]
    reader = StagedReader(src, chunks, targets, ring)
    reader.start()
    first = reader.ready.get(timeout=30)
    assert (first.start, first.stop) == (0, 10)
    reader.stop()  # the consumer failed: nothing handed back, the reader waits for a device batch
    reader.join(timeout=10)
    assert not reader.is_alive() and not any(w.is_alive() for w in reader.workers)


def test_piece_sizes(monkeypatch):
    monkeypatch.delenv("EBSDXC_STAGE_BYTES", raising=False)
    assert piece_bytes(256 << 20) == 8 << 20
    assert piece_bytes(1 << 20) == 1 << 20  # never more than a batch
    monkeypatch.setenv("EBSDXC_STAGE_BYTES", str(4 << 20))
    assert piece_bytes(256 << 20) == 4 << 20
    monkeypatch.setenv("EBSDXC_STAGE_BYTES", "lots")
    assert piece_bytes(256 << 20) == 8 << 20
    assert ring_shape(16, 4 << 20) == (16 * SLOTS, 4 << 20)


def _bytes_of(ranges, n_bytes):
    """The bytes ``ranges`` describe, read back through their reader."""
    out = np.full(n_bytes, 0xAB, np.uint8)
    for d, s, k in zip(ranges.dst.tolist(), ranges.src.tolist(), ranges.size.tolist()):
        ranges.reader.read_range(s, k, out[d:d + k])
    return out


@pytest.mark.parametrize("layout", ["chunks", "contiguous", "4-D", "records"])
def test_raw_ranges_are_the_patterns(tmp_path, layout):
    import h5py

    rng = np.random.default_rng(1)
    data = rng.integers(0, 60000, (6, 5, 9, 8), dtype=np.uint16)
    path = tmp_path / f"{layout}.h5"
    with h5py.File(path, "w") as f:
        if layout == "4-D":
            f.create_dataset("patterns", data=data, chunks=(2, 3, 9, 8))
        elif layout == "contiguous":
            f.create_dataset("patterns", data=data.reshape(30, 9, 8))
        elif layout == "records":  # an interrupted scan: 23 of 30 points stored, grid given
            f.create_dataset("patterns", data=data.reshape(30, 9, 8)[:23], chunks=(4, 9, 8))
        else:  # a chunk never written reads as zeros
            ds = f.create_dataset("patterns", shape=(30, 9, 8), dtype=np.uint16, chunks=(4, 9, 8))
            ds[:12] = data.reshape(30, 9, 8)[:12]
            ds[16:] = data.reshape(30, 9, 8)[16:]
    if layout == "records":
        with pytest.warns(UserWarning, match="interrupted scan"):
            src = open_scan(path, grid_shape=(6, 5))
    else:
        src = open_scan(path)
    truth = src.read(0, src.n_patterns)
    for a, b in [(0, src.n_patterns), (3, 17), (11, 12), (20, 30)]:
        r = src.raw_ranges(a, b)
        got = _bytes_of(r, (b - a) * src.nbytes_per_pattern)
        np.testing.assert_array_equal(got.view(np.uint16).reshape(b - a, 9, 8), truth[a:b], err_msg=f"{a}:{b}")
        # cut into small pieces, the same bytes
        got = _bytes_of(r.split(50), (b - a) * src.nbytes_per_pattern)
        assert (r.split(50).size <= 50).all()
        np.testing.assert_array_equal(got.view(np.uint16).reshape(b - a, 9, 8), truth[a:b])
    if layout == "records":
        assert (truth[23:] == 0).all()


def test_which_sources_read_in_pieces(tmp_path):
    import h5py

    assert _scan(tmp_path).raw_ranges(0, 5) is not None  # raw chunks, positioned reads
    assert ArraySource(np.zeros((4, 8, 8), np.uint16)).raw_ranges(0, 2) is None
    with h5py.File(tmp_path / "gz.h5", "w") as f:  # a piece would inflate its whole chunk again
        f.create_dataset("patterns", data=np.zeros((40, 8, 8), np.uint16), chunks=(10, 8, 8), compression="gzip")
    assert open_scan(tmp_path / "gz.h5").raw_ranges(0, 5) is None
    with h5py.File(tmp_path / "be.h5", "w") as f:  # big-endian: h5py converts
        f.create_dataset("patterns", data=np.zeros((40, 8, 8), ">u2"))
    assert open_scan(tmp_path / "be.h5").raw_ranges(0, 5) is None


# ----------------------------------------------------------------------------- on the GPU


def _gpu_process(scan, out, batch, **kw):
    from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
    from ebsdxc.run import process

    cfg = ProcessConfig(roi=RoiConfig(grid=(3, 3), size=32))  # covers the pattern: whole patterns travel
    return process(scan, ref_index=0, config=cfg, run=RunConfig(device="cuda", batch=batch), output=out, **kw)


@pytest.fixture
def spied(monkeypatch):
    """The staged readers the runner makes (a subclass that counts them), pieces of 5 patterns,
    3 threads."""
    from ebsdxc.run import staging, streaming

    made = []

    class Counted(staging.StagedReader):
        def __init__(self, *args, **kwargs):
            made.append(args[1])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(streaming, "StagedReader", Counted)
    monkeypatch.setenv("EBSDXC_STAGE_BYTES", str(5 * 96 * 96 * 2 + 6))  # pieces cut patterns apart
    monkeypatch.setenv("EBSDXC_READ_THREADS", "3")
    return made


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["batches", "pieces"])
@pytest.mark.parametrize("batch", [16, 37])
def test_gpu_runs_read_staged_equal_runs_read_in_whole_batches(tmp_path, monkeypatch, spied, batch, mode):
    from ebsdxc.io.results import read_results

    path = write_scan(tmp_path / "scan.h5", 300, (96, 96), chunk=16, distinct=16)
    monkeypatch.setenv("EBSDXC_STAGED_READ", mode)
    staged = read_results(_gpu_process(path, tmp_path / "staged.h5", batch))
    assert len(spied) == 1 and len(spied[0]) == -(-300 // batch)  # one reader, every batch
    monkeypatch.setenv("EBSDXC_STAGED_READ", "0")
    whole = read_results(_gpu_process(path, tmp_path / "whole.h5", batch))
    assert len(spied) == 1  # the batch path this time
    for key in ("displacement", "peak_height", "status"):
        np.testing.assert_array_equal(staged[key], whole[key])
    assert staged["done"].all() and (staged["status"] == 0).mean() > 0.3  # measured, not all flagged


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["batches", "pieces"])
def test_gpu_run_on_a_file_cut_short_mid_run_keeps_what_it_read(tmp_path, monkeypatch, spied, mode):
    from ebsdxc.io.results import read_results

    path = write_scan(tmp_path / "scan.h5", 300, (96, 96), chunk=16, distinct=16)
    monkeypatch.setenv("EBSDXC_STAGED_READ", mode)
    whole = read_results(_gpu_process(path, tmp_path / "whole.h5", 20))
    src = open_scan(path)
    src.read(0, 1)  # opened and its chunk index checked, as when the run has started
    with open(path, "r+b") as f:  # the last 60 patterns go after the scan was opened
        f.truncate(os.path.getsize(path) - 60 * 96 * 96 * 2)
    out = tmp_path / "cut.h5"
    with pytest.raises(InputError) as e:
        _gpu_process(src, out, 20)
    assert str(path) in str(e.value) and "cannot read patterns" in str(e.value) and "\n" not in str(e.value)
    got = read_results(out)
    done = got["done"].reshape(-1)
    assert 0 < done.sum() <= 240 and not got["attrs"]["complete"]
    assert done[:done.sum()].all()  # the batches before the failed one, in order
    d = done.reshape(got["done"].shape)
    np.testing.assert_array_equal(got["displacement"][d], whole["displacement"][d])
