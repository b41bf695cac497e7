"""Running out of memory mid-run, a corrupted kernel cache and a GPU that is not usable, each
injected for real (issue 20; the GPU tests run with ``pytest -m gpu``).

- Host memory (CPU, here): a subprocess lowers its own address-space limit (RLIMIT_AS) after the
  first batch is written, so that the next batch's arrays cannot be allocated (NumPy's and
  pocketfft's real MemoryError). The batch halves, the run completes, the results are those of
  the run without a limit, bit for bit, and match the scan's known shifts.
- GPU memory: after the first batch is written, the next device allocation raises CuPy's
  OutOfMemoryError (through CuPy's allocator hook: a steady run allocates nothing new, see
  :class:`FailNextDeviceAllocation`); the batch halves and the run completes. With the memory
  pool limited to one byte no batch fits: the run stops with one clear error and resumes to the
  uninterrupted results.
- Pinned host memory refused (CuPy's pinned allocator hook): the batches go through ordinary
  memory, with one warning, to the same results.
- Kernel cache: every file of CuPy's kernel cache (``CUPY_CACHE_DIR``) truncated, bit-flipped,
  emptied or overwritten with garbage; the next process recompiles and rewrites them.
- No usable GPU: ``CUDA_VISIBLE_DEVICES=""`` hides the device from CUDA itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import h5py
import numpy as np
import pytest

from ebsdxc.backend import is_out_of_memory
from ebsdxc.config import RunConfig
from ebsdxc.errors import InputError
from ebsdxc.io.results import read_results
from ebsdxc.progress import Progress
from ebsdxc.run import process
from ebsdxc.run.executors import Executor
from ebsdxc.run.tasks import TaskContexts, run_task

FIELDS = ("displacement", "peak_height", "status", "done")


class RecordingExecutor(Executor):
    """Tasks inline, as the default executor runs them, keeping the batch sizes they used."""

    def __init__(self, on_emit=None):
        self.contexts = TaskContexts()
        self.sizes = ()
        self.on_emit = on_emit  # called in the run's thread after each batch, between two batches

    def run_tasks(self, job, tasks, emit) -> None:
        def emitted(*batch):
            emit(*batch)
            if self.on_emit is not None:
                self.on_emit()

        try:
            for task in tasks:
                run_task(job, task, emitted, contexts=self.contexts)
        finally:
            self.sizes = self.contexts.batch_sizes(job)

    def close(self) -> None:
        self.contexts.close()


def _same(a, b):
    for k in FIELDS:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# --------------------------------------------------------------------------- host memory (CPU)

ROWS = COLS = 12
SIDE = 640  # large patterns: a batch's arrays (tens of MB) dwarf the allocator's noise


def _shifted_scan(path):
    """A scan whose point (r, c) is the same texture moved by c // 3 px right and r // 3 px down:
    the displacement against point 0 is (c // 3, r // 3) in every ROI."""
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(20)
    m = ROWS // 3 + 1
    base = gaussian_filter(rng.normal(size=(SIDE + m, SIDE + m)), 2.0)
    base = ((base - base.min()) / np.ptp(base) * 50000 + 1000).astype(np.uint16)
    pats = np.empty((ROWS, COLS, SIDE, SIDE), np.uint16)
    for r in range(ROWS):
        for c in range(COLS):
            pats[r, c] = base[m - r // 3:m - r // 3 + SIDE, m - c // 3:m - c // 3 + SIDE]
    with h5py.File(path, "w") as f:
        f["patterns"] = pats


HOST_SCRIPT = textwrap.dedent('''
    import json, resource, sys, warnings

    from ebsdxc.config import ProcessConfig, RoiConfig, RunConfig
    from ebsdxc.run import process
    from test_gpu_faults import RecordingExecutor

    def vm(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024

    class LimitAfterFirstBatch:
        """After the first batch (in the run's thread, before the next one is made): address
        space = what the process holds + margin."""

        def __init__(self, margin):
            self.margin, self.at = margin, None

        def __call__(self):
            if self.at is None:
                self.at = vm("VmSize")
                if self.margin is not None:
                    resource.setrlimit(resource.RLIMIT_AS, (self.at + self.margin, resource.RLIM_INFINITY))

    scan = sys.argv[1]
    cfg = ProcessConfig(roi=RoiConfig(grid=(3, 3), size=40))
    run = RunConfig(device="cpu", batch=48, threads=1)  # one thread: a batch's arrays are allocated at once
    free = LimitAfterFirstBatch(None)
    process(scan, ref_index=0, config=cfg, run=run, output="free.h5", executor=RecordingExecutor(free))
    batch_bytes = vm("VmPeak") - free.at  # what a batch of 48 allocates beyond the steady state
    tight = RecordingExecutor(LimitAfterFirstBatch(int(0.6 * batch_bytes)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        process(scan, ref_index=0, config=cfg, run=run, output="tight.h5", executor=tight)
    print(json.dumps({"batch_bytes": batch_bytes, "sizes": tight.sizes,
                      "warnings": [str(w.message) for w in caught if "memory" in str(w.message)]}))
''')


def test_host_out_of_memory_mid_run_halves_the_batch(tmp_path):
    scan = tmp_path / "scan.h5"
    _shifted_scan(scan)
    (tmp_path / "host_oom.py").write_text(HOST_SCRIPT)
    # one malloc arena: a thread's own arena reserves 64 MB of address space, noise at this scale
    env = {**os.environ, "MALLOC_ARENA_MAX": "1",
           "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "host_oom.py", str(scan)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.splitlines()[-1])
    assert got["batch_bytes"] > 40e6, got  # the batch really is large against the margin
    sizes = got["sizes"]
    assert sizes[0] == 48 and len(sizes) >= 2 and sizes[-1] < 48, sizes  # halved at least once
    assert all(b == a // 2 for a, b in zip(sizes, sizes[1:])), sizes
    assert len(got["warnings"]) == len(sizes) - 1, got["warnings"]  # one line per halving, no more
    assert all("out of host memory with batches of" in w and "\n" not in w for w in got["warnings"])
    free, tight = read_results(tmp_path / "free.h5"), read_results(tmp_path / "tight.h5")
    assert tight["attrs"]["complete"] and tight["done"].all()
    _same(tight, free)
    # and the results are right: point (r, c) moved by (c // 3, r // 3) px
    r, c = np.mgrid[:ROWS, :COLS] // 3
    truth = np.stack([c, r], axis=-1)[:, :, None, :].astype(np.float32)
    err = np.abs(tight["displacement"] - truth)
    assert np.nanmedian(err) < 0.02 and np.nanmax(err) < 0.1, (np.nanmedian(err), np.nanmax(err))


def test_is_out_of_memory_on_real_errors():
    with pytest.raises(MemoryError) as e:
        np.empty(1 << 62, dtype=np.uint8)  # NumPy's own error for an allocation that cannot be
    assert is_out_of_memory(e.value)
    assert not is_out_of_memory(ValueError("bad"))
    assert not is_out_of_memory(OSError(28, "No space left on device"))


def test_batch_sizes_recorded_in_results(tmp_path, sample_dir):
    out = process(os.path.join(sample_dir, "scan.h5"), ref=os.path.join(sample_dir, "ref.tif"),
                  output=tmp_path / "r.h5", run=RunConfig(device="cpu", batch=7))
    assert list(read_results(out)["attrs"]["batch_sizes"]) == [7]


# --------------------------------------------------------------------------- GPU memory


class PoolLimitAfterFirstBatch(Progress):
    """After the first batch is written: the pool may hold ``headroom`` bytes more than it uses
    now (``None``: one byte in all, so that nothing fits), its cached blocks given back."""

    def __init__(self, cp, headroom):
        self.cp, self.headroom, self.used = cp, headroom, None

    def update(self, n):
        if self.used is None:
            pool = self.cp.get_default_memory_pool()
            self.used = pool.used_bytes()
            pool.free_all_blocks()
            pool.set_limit(size=1 if self.headroom is None else self.used + self.headroom)


@pytest.fixture
def cp():
    import cupy

    pool = cupy.get_default_memory_pool()
    pool.set_limit(size=0)
    pool.free_all_blocks()
    yield cupy
    pool.set_limit(size=0)  # never leave a limit to the next test
    pool.free_all_blocks()


def _gpu_run(sample_dir, out, **kw):
    return process(os.path.join(sample_dir, "scan.h5"), ref=os.path.join(sample_dir, "ref.tif"), output=out,
                   run=RunConfig(device="cuda", batch=16), **kw)


class FailNextDeviceAllocation(Progress):
    """After the first batch is written, the next device allocation the run asks CuPy for raises
    CuPy's OutOfMemoryError, once.

    A pool limit no longer reaches a batch in the middle of a run: the raw patterns travel into
    two device buffers made once per call, and every other array of a batch comes from blocks the
    pool cached for the batch before, so a steady run asks the device for nothing new. The
    error is therefore raised by CuPy's allocator hook at the next allocation, wherever it is."""

    def __init__(self, cp):
        self.cp, self.armed, self.raised = cp, None, 0
        self.pool = cp.get_default_memory_pool()

    def malloc(self, size):
        if self.armed:
            self.armed = False
            self.raised += 1
            raise self.cp.cuda.memory.OutOfMemoryError(size, self.pool.total_bytes())
        return self.pool.malloc(size)

    def update(self, n):
        if self.armed is None:
            self.armed = True


@pytest.mark.gpu
def test_gpu_out_of_memory_mid_run_halves_the_batch(tmp_path, sample_dir, cp):
    whole = read_results(_gpu_run(sample_dir, tmp_path / "whole.h5"))
    ex = RecordingExecutor()
    hook = FailNextDeviceAllocation(cp)
    cp.cuda.set_allocator(hook.malloc)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = read_results(_gpu_run(sample_dir, tmp_path / "tight.h5", progress=hook, executor=ex))
    finally:
        cp.cuda.set_allocator(hook.pool.malloc)
    lines = [str(w.message) for w in caught if "out of GPU memory" in str(w.message)]
    assert hook.raised == 1 and list(ex.sizes) == [16, 8], ex.sizes
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert got["attrs"]["complete"] and got["done"].all()
    np.testing.assert_array_equal(got["status"], whole["status"])
    np.testing.assert_array_equal(got["done"], whole["done"])
    # per (pattern, ROI) arithmetic does not depend on the batch; cuFFT plans of other batch
    # counts may round differently, far below the subpixel fit's precision
    np.testing.assert_allclose(got["displacement"], whole["displacement"], rtol=0, atol=1e-5, equal_nan=True)
    np.testing.assert_allclose(got["peak_height"], whole["peak_height"], rtol=0, atol=1e-6, equal_nan=True)


@pytest.mark.gpu
def test_gpu_out_of_memory_with_one_pattern_is_one_error_and_resumes(tmp_path, sample_dir, cp):
    whole = read_results(_gpu_run(sample_dir, tmp_path / "whole.h5"))
    part = tmp_path / "part.h5"
    hook = PoolLimitAfterFirstBatch(cp, headroom=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(InputError) as e:
            _gpu_run(sample_dir, part, progress=hook)
    cp.get_default_memory_pool().set_limit(size=0)
    msg = str(e.value)
    assert "\n" not in msg and "scan.h5" in msg and "out of GPU memory with batches of 1 pattern" in msg, msg
    halvings = [str(w.message) for w in caught if "out of GPU memory" in str(w.message)]
    assert len(halvings) == 4, halvings  # 16 -> 8 -> 4 -> 2 -> 1
    r = read_results(part)
    assert not r["attrs"]["complete"] and 0 < r["done"].sum() < r["done"].size
    for k in ("displacement", "peak_height", "status"):  # every point marked done holds its result
        np.testing.assert_array_equal(r[k][r["done"]], whole[k][r["done"]])
    _gpu_run(sample_dir, part, resume=True)
    got = read_results(part)
    assert got["attrs"]["complete"]
    _same(got, whole)


@pytest.mark.gpu
def test_gpu_out_of_memory_errors_are_recognised(cp):
    pool = cp.get_default_memory_pool()
    pool.set_limit(size=1 << 20)
    with pytest.raises(MemoryError) as e:
        cp.empty(1 << 24, dtype=cp.uint8)
    pool.set_limit(size=0)
    assert is_out_of_memory(e.value)
    from cupy.cuda import cufft, runtime

    assert is_out_of_memory(cufft.CuFFTError(2))  # CUFFT_ALLOC_FAILED
    assert is_out_of_memory(runtime.CUDARuntimeError(2))  # cudaErrorMemoryAllocation
    assert not is_out_of_memory(runtime.CUDARuntimeError(700))  # an illegal address is no OOM


# --------------------------------------------------------------------------- pinned host memory


@pytest.mark.gpu
def test_pinned_memory_refused_runs_on_ordinary_memory(tmp_path, sample_dir, cp, monkeypatch):
    """Some systems hand out little page-locked memory (WSL2 limits it). With every pinned
    allocation refused (CuPy's pinned allocator hook raising the CUDA runtime's own
    allocation error), the run's batches go through ordinary memory: one warning, and the
    results of the run with pinned memory, bit for bit."""
    from ebsdxc import backend

    whole = read_results(_gpu_run(sample_dir, tmp_path / "whole.h5"))
    refused = []

    def refuse(size):
        refused.append(size)
        raise cp.cuda.runtime.CUDARuntimeError(2)  # cudaErrorMemoryAllocation

    monkeypatch.setattr(backend, "_pinned_warned", False)
    cp.cuda.set_pinned_memory_allocator(refuse)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = read_results(_gpu_run(sample_dir, tmp_path / "pageable.h5"))
    finally:
        cp.cuda.set_pinned_memory_allocator(cp.get_default_pinned_memory_pool().malloc)
    said = [str(w.message) for w in caught]
    ours = [k for k, w in enumerate(said) if "pinned host memory refused" in w]
    assert refused and len(ours) == 1 and "\n" not in said[ours[0]], said
    assert "pinned host memory refused (CUDARuntimeError: cudaErrorMemoryAllocation" in said[ours[0]], said
    # CuPy's own fallback for its small transfers warned before ours, and is quiet after it
    assert not [w for w in said[ours[0]:] if "Using synchronous transfer" in w], said
    assert got["attrs"]["complete"] and got["done"].all()
    _same(got, whole)


# --------------------------------------------------------------------------- kernel cache, no GPU


def _cli(args, env, cwd):
    return subprocess.run([sys.executable, "-m", "ebsdxc", *map(str, args)], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def _cache_entries(cache):
    return sorted(p for p in cache.rglob("*") if p.is_file())


@pytest.mark.gpu
def test_corrupted_kernel_cache_is_recompiled(tmp_path, sample_dir):
    cache = tmp_path / "kernel_cache"
    env = {**os.environ, "CUPY_CACHE_DIR": str(cache)}
    scan, ref = os.path.join(sample_dir, "scan.h5"), os.path.join(sample_dir, "ref.tif")
    first = _cli(["process", scan, "--ref", ref, "-o", tmp_path / "first.h5", "--device", "cuda", "-q"], env, tmp_path)
    assert first.returncode == 0, first.stderr
    entries = _cache_entries(cache)
    assert entries, "the first run left no kernel cache entries"
    rng = np.random.default_rng(0)
    written = {}  # the damaged entries that were CuPy's (md5 + binary) before
    for i, p in enumerate(entries):  # four kinds of damage, each on a quarter of the files
        data = bytearray(p.read_bytes())
        kind = i % 4
        if kind == 0:
            data = data[:len(data) // 2]  # truncated (a disk that filled while writing)
        elif kind == 1 and len(data) > 33:
            data[32 + (len(data) - 32) // 2] ^= 0xFF  # one flipped byte in the binary
        elif kind in (1, 2):
            data = bytearray()  # emptied
        else:
            data = bytearray(rng.integers(0, 256, len(data), dtype=np.uint8).tobytes())  # garbage
        written[p] = bytes(data)
        p.write_bytes(bytes(data))
    second = _cli(["process", scan, "--ref", ref, "-o", tmp_path / "second.h5", "--device", "cuda", "-q"], env,
                  tmp_path)
    assert second.returncode == 0, second.stderr
    assert "Traceback" not in second.stderr and "Error" not in second.stderr, second.stderr
    _same(read_results(tmp_path / "second.h5"), read_results(tmp_path / "first.h5"))
    # recompiled, not loaded: the entries the run needed were written again (the cache's own
    # format, checksum or not, is CuPy's business; identical results above are the point)
    rewritten = [p for p, bad in written.items() if (p.read_bytes() if p.exists() else b"") != bad]
    assert rewritten, "no damaged cache entry was written again"


@pytest.mark.gpu
def test_no_usable_gpu_is_one_error_and_auto_one_warning(tmp_path, sample_dir):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # CUDA itself sees no device
    scan, ref = os.path.join(sample_dir, "scan.h5"), os.path.join(sample_dir, "ref.tif")
    res = _cli(["process", scan, "--ref", ref, "-o", tmp_path / "cuda.h5", "--device", "cuda", "-q"], env, tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("ebsdxc: error: device cuda asked for, but "), \
        res.stderr
    assert "no CUDA device" in res.stderr and not (tmp_path / "cuda.h5").exists()
    res = _cli(["process", scan, "--ref", ref, "-o", tmp_path / "auto.h5", "-q"], env, tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ebsdxc: warning: device auto found no usable GPU"), res.stderr
    got = read_results(tmp_path / "auto.h5")
    assert got["attrs"]["complete"] and got["attrs"]["device"].startswith("cpu")


@pytest.mark.gpu
def test_references_the_gpu_cannot_hold_are_one_plain_error(cp):
    """Many reference sets (a reference per grain) whose prepared ROIs do not fit on the device:
    an error that says so (no smaller batch helps), not the batch advice of a run's OOM."""
    from ebsdxc.backend import select_backend
    from ebsdxc.config import load_config
    from ebsdxc.references import ReferenceSet
    from ebsdxc.rois import layout_for
    from ebsdxc.run.pipeline import Pipeline

    config, _ = load_config(None, {"roi": {"layout": "grid", "grid": [9, 10], "size": 96, "drop_corners": True}})
    layout = layout_for(config.roi, (256, 256))
    rng = np.random.default_rng(5)
    K = 64  # full mode: 64 x 86 spectra of 192 x 97 complex, 0.8 GB; the ROIs alone 0.2 GB
    refs = ReferenceSet(rng.integers(1000, 60000, (K, 256, 256)).astype(np.uint16),
                        rng.integers(0, K, 1000).astype(np.int32), ())
    be = select_backend("cuda")
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    pool.set_limit(size=pool.used_bytes() + (64 << 20))
    try:
        with pytest.raises(InputError, match=f"{K} reference patterns of 86 ROIs each do not fit in the GPU's memory"):
            Pipeline(be, config, layout, refs, batch=256)
    finally:
        pool.set_limit(size=0)  # never leave a limit to the next test
    two = ReferenceSet(refs.patterns[:2], refs.index % 2, ())
    assert Pipeline(be, config, layout, two, batch=256).references.count == 2
