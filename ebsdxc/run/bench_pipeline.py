"""``ebsdxc bench --pipeline``: a whole run on a synthetic scan, next to the bounds this machine
sets, all measured in the same process.

The scan is written first (HDF5, uint16, uncompressed chunks of 64 patterns: one smooth random
pattern shifted by up to 2 px, with noise, so that every pattern correlates with the reference
as a real scan does) and read once, so it is in the page cache as
in the issue's set-up; a first run of the same configuration compiles the kernels. Then,
``repeats`` times each, the figures of :func:`measure`:

- **end to end**: :func:`ebsdxc.run.process` on the file, patterns/s while streaming (from the
  first batch to the last), after the first batch (from the first batch written to the last:
  without the pipeline's start, where nothing overlaps the first batch's reading; what a long
  scan sees) and over the whole wall time (set-up included), with the stage profile
  (:mod:`ebsdxc.timing`) that says which stage bounds it;
- **read bound**: the scan read batch by batch into host memory by the same reader, nothing else;
- **host-to-device bound** (GPU): a pinned batch copied to the device on one stream; where
  the run sends only the ROIs (:mod:`ebsdxc.run.transfer`), also the same copy of the ROIs,
  which is then the bound the run is held to;
- **read bound while copying** (GPU): the read bound again while another thread copies batches
  to the device without pause (reads and copies share the host's memory bandwidth; not one
  of the bounds the share below is taken of);
- **read to the device by reader processes** (GPU, where the run reads with them,
  :mod:`ebsdxc.run.device_readers`): the same processes reading the scan into three device
  buffers in turn, two batches in flight, as the run does, and nothing computed; such a run
  neither reads in this process nor copies pinned batches, so this figure, not the read bound,
  is the bound the share below is taken of;
- **engine bound**: the run's per-batch pipeline (preprocessing, correlation, peaks) on
  patterns already on the device.

Every figure is the median of the repeats with its range; the end-to-end rate is also given
as a share of the smallest bound.

:func:`memory_over_time` runs instead a scan too large for the disk (a million points, say):
its patterns are made on the fly (:class:`SyntheticScan`), and host RSS and device memory are
sampled while the whole run goes, to show that neither grows with the scan.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from .. import timing
from ..backend import select_backend
from ..io.source import PatternSource, ScanGrid
from ..progress import RecordingProgress
from ..references import ReferenceSet
from ..rois import layout_for
from .pipeline import Pipeline
from .streaming import host_buffers, start_device_readers
from .transfer import copy_to_device

__all__ = ["write_scan", "read_rate", "transfer_rate", "read_rate_while_copying", "engine_rate", "measure",
           "format_table", "SyntheticScan", "memory_over_time", "format_memory"]


def _smooth_patterns(distinct: int, shape, seed: int) -> np.ndarray:
    """``distinct`` uint16 patterns of ``shape``: one smooth random pattern shifted by up to 2 px
    (the first not at all), with 2% noise. Like a scan against its reference, every pattern
    correlates with the first: the refinements of ``dft`` and ``upsampled`` do the work they do
    on real scans (unrelated patterns put their peaks in noise, where ``upsampled`` re-centres
    to its limit and runs several times slower)."""
    h, w = shape
    rng = np.random.default_rng(seed)
    ky = np.fft.fftfreq(h)[:, None]
    kx = np.fft.rfftfreq(w)[None, :]
    lowpass = np.exp(-(kx ** 2 + ky ** 2) / (2 * 0.03 ** 2))
    spectrum = np.fft.rfft2(rng.standard_normal((h, w))) * lowpass
    shifts = rng.uniform(-2.0, 2.0, (distinct, 2))
    shifts[0] = 0.0
    ramp = np.exp(-2j * np.pi * (ky[None] * shifts[:, 0, None, None] + kx[None] * shifts[:, 1, None, None]))
    base = np.fft.irfft2(spectrum[None] * ramp, s=(h, w))
    base += 0.02 * base.std() * rng.standard_normal(base.shape)
    base -= base.min(axis=(1, 2), keepdims=True)
    return (base / base.max(axis=(1, 2), keepdims=True) * 50000 + 5000).astype(np.uint16)


class SyntheticScan(PatternSource):
    """``n`` uint16 patterns made on the fly: ``distinct`` shifted copies of one pattern, repeated, on a
    grid of ``cols`` columns (one row when ``n`` is not a multiple). Reads cost a copy in memory,
    so a scan larger than the disk runs as a file in the page cache would."""

    format = "synthetic"

    def __init__(self, n: int, shape=(256, 256), *, distinct: int = 16, seed: int = 0, cols: int = 1000):
        self._base = _smooth_patterns(distinct, shape, seed)
        grid = ScanGrid(n // cols, cols) if n % cols == 0 and n >= cols else ScanGrid(1, n)
        super().__init__(f"<synthetic {n} patterns of {shape[1]}x{shape[0]}>", grid=grid, pattern_shape=shape,
                         dtype=np.uint16)

    def read_into(self, start, stop, out):
        np.take(self._base, np.arange(start, stop) % len(self._base), axis=0, out=out)


def write_scan(path, n: int, shape=(256, 256), *, chunk: int = 64, distinct: int = 16, seed: int = 0) -> str:
    """An HDF5 scan of ``n`` uint16 patterns (``/patterns``, uncompressed chunks of ``chunk``
    patterns): ``distinct`` shifted copies of one pattern (:func:`_smooth_patterns`), repeated."""
    import h5py

    h, w = shape
    base = _smooth_patterns(distinct, shape, seed)
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("patterns", shape=(n, h, w), dtype=np.uint16, chunks=(min(chunk, n), h, w))
        step = 1024
        for i in range(0, n, step):
            k = min(step, n - i)
            ds[i:i + k] = base[np.arange(i, i + k) % distinct]
    return str(path)


def read_rate(source, batch: int) -> float:
    """Patterns/s of reading the whole scan batch by batch into one host buffer."""
    buf = np.empty((batch, *source.pattern_shape), dtype=source.dtype.newbyteorder("="))
    n = source.n_patterns
    t = time.perf_counter()
    for i in range(0, n, batch):
        k = min(batch, n - i)
        source.read_into(i, i + k, buf[:k])
    return n / (time.perf_counter() - t)


def _batch_copier(backend, shape, dtype, batch: int, plan=None):
    """(copy, stream): ``copy()`` queues one copy of a pinned batch to the device on ``stream``,
    whole or the ROIs of ``plan``, as the run copies it; the buffers are made once."""
    import cupy as cp

    host = host_buffers(backend, 1, (batch, *shape), dtype)[0]  # pinned, as the run's reader fills
    host[...] = 1
    dev = cp.empty((batch, *(shape if plan is None else plan.shape)), dtype=host.dtype)
    stream = cp.cuda.Stream(non_blocking=True)
    return (lambda: copy_to_device(host, dev, stream, plan)), stream


def transfer_rate(backend, shape, dtype, batch: int, reps: int = 20, plan=None) -> float | None:
    """Patterns/s of pinned host-to-device copies of a batch (None on the CPU): whole patterns,
    or the ROIs of ``plan`` (a :class:`~ebsdxc.run.transfer.TransferPlan`), as the run copies them."""
    if not backend.is_gpu:
        return None
    copy, stream = _batch_copier(backend, shape, dtype, batch, plan)
    copy()
    stream.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        copy()
    stream.synchronize()
    return reps * batch / (time.perf_counter() - t)


def read_rate_while_copying(source, backend, batch: int, plan=None) -> float | None:
    """Patterns/s of :func:`read_rate` while another thread copies pinned batches to the device
    without pause (None on the CPU): both draw on the host's memory bandwidth, so together
    they bound a run more tightly than each alone."""
    if not backend.is_gpu:
        return None
    copy, stream = _batch_copier(backend, source.pattern_shape, source.dtype, batch, plan)
    halt = threading.Event()

    def copies():
        with backend.use():
            while not halt.is_set():
                copy()
                stream.synchronize()
    t = threading.Thread(target=copies, daemon=True)
    t.start()
    try:
        time.sleep(0.2)  # the copies running before the reads start
        return read_rate(source, batch)
    finally:
        halt.set()
        t.join()


def device_read_rate(readers, source, batch: int) -> float:
    """Patterns/s of ``readers`` (a :class:`~ebsdxc.run.device_readers.DeviceReaders`) reading
    the whole of ``source`` to the device batch by batch, into three device buffers in turn with
    two batches in flight, as a run streams them (the same
    :class:`~ebsdxc.run.device_readers.DeviceRing`), nothing computed."""
    from .device_readers import DeviceRing

    n = source.n_patterns
    chunks = [(i, min(i + batch, n)) for i in range(0, n, batch)]
    with readers.lock, DeviceRing(readers, source, chunks, batch) as ring:  # the one stream that uses them
        t = time.perf_counter()
        ring.start()
        for k in range(len(chunks)):
            ring.ready(k)
            ring.done(k - 1)
        rate = n / (time.perf_counter() - t)
    return rate


def engine_rate(pipeline, patterns, reps: int = 10, plan=None) -> float:
    """Patterns/s of the per-batch pipeline on ``patterns`` (B, H, W) already where it runs
    (cropped by ``plan`` when the run sends only the ROIs)."""
    be = pipeline.backend
    if plan is not None:
        patterns = be.xp.asarray(plan.crop(be.asnumpy(patterns)))
    pipeline.match(patterns, transferred=plan)  # compiles, plans
    be.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        pipeline.match(patterns, transferred=plan)
    be.synchronize()
    return reps * len(patterns) / (time.perf_counter() - t)


_DEVICE_READ = "read to the device by reader processes"
_STEADY = "end to end, after the first batch"


def _median(values):
    v = [x for x in values if x is not None]
    if not v:
        return None
    return {"median": float(np.median(v)), "min": float(min(v)), "max": float(max(v))}


def measure(config, run, *, patterns: int, shape=(256, 256), workdir: str, repeats: int = 3, chunk: int = 64) -> dict:
    """The figures of the module docstring for ``config`` (a ProcessConfig) and ``run`` (a
    RunConfig), on a scan of ``patterns`` patterns of ``shape`` (HDF5 chunks of ``chunk``
    patterns) written into ``workdir``."""
    import tifffile

    from .. import io as scan_io
    from .process import process

    os.makedirs(workdir, exist_ok=True)
    scan = write_scan(os.path.join(workdir, f"bench-pipeline-{patterns}-{shape[0]}x{shape[1]}-c{chunk}.h5"), patterns,
                      shape, chunk=chunk)
    ref = os.path.join(workdir, "bench-pipeline-ref.tif")
    source = scan_io.open_scan(scan)
    first = source.read(0, 1)[0]
    tifffile.imwrite(ref, first)
    out = os.path.join(workdir, "bench-pipeline-result.h5")
    be = select_backend(run.device)
    batch = run.batch or 512
    rows = {"end to end, streaming": [], _STEADY: [], "end to end, wall with set-up": [], "read bound": [],
            "host-to-device bound": [], "host-to-device bound, ROIs only": [], "read bound while copying": [],
            _DEVICE_READ: [], "engine bound": []}
    bounds_by = []
    read_rate(source, batch)  # into the page cache
    with be.use():
        # a run of its own first, of the same scan so of the same batches: kernels compiled and
        # FFT plans made stay out of the figures
        process(scan, ref=ref, output=out, config=config, run=run, overwrite=True)
        layout = layout_for(config.roi, source.pattern_shape, path=scan)
        pipe = Pipeline(be, config, layout, ReferenceSet.single(first))
        # and the reader processes' start (seconds, once per Python process) when the scan uses them
        readers = start_device_readers(pipe, source, wait=True)
        plan = pipe.transfer_plan(source.pattern_shape, source.dtype.itemsize)
        dev = None
        for _ in range(repeats):
            prog, prof = RecordingProgress(), timing.StageProfile()
            t = time.perf_counter()
            process(scan, ref=ref, output=out, config=config, run=run, overwrite=True, progress=prog, profile=prof)
            wall = time.perf_counter() - t
            if dev is None:  # the bounds at the batch the run chose
                batch = _run_batch(out, batch)
                dev = be.xp.asarray(source.read(0, min(batch, patterns)))
            rows["end to end, streaming"].append(prog.count / prog.elapsed if prog.elapsed else None)
            rows[_STEADY].append(prog.steady_rate)
            rows["end to end, wall with set-up"].append(patterns / wall)
            bounds_by.append(prof.last_report["bound"])
            rows["read bound"].append(read_rate(source, batch))
            rows["host-to-device bound"].append(transfer_rate(be, source.pattern_shape, source.dtype, batch))
            if plan is not None:
                rows["host-to-device bound, ROIs only"].append(
                    transfer_rate(be, source.pattern_shape, source.dtype, batch, plan=plan))
            rows["read bound while copying"].append(read_rate_while_copying(source, be, batch, plan=plan))
            if readers is not None:
                rows[_DEVICE_READ].append(device_read_rate(readers, source, batch))
            rows["engine bound"].append(engine_rate(pipe, dev, plan=plan))
        engine = _engine_name(pipe.engine)
        pipe.close()
    source.close()
    figures = {k: _median(v) for k, v in rows.items()}
    # what the run transfers: its ROIs when it sends only those
    sent = "host-to-device bound, ROIs only"
    if figures[sent] is None:
        del figures[sent]
        sent = "host-to-device bound"
    read = "read bound"
    if figures[_DEVICE_READ] is None:
        del figures[_DEVICE_READ]
    else:  # the run read with the reader processes
        read = _DEVICE_READ
    if figures[_STEADY] is None:  # a single batch
        del figures[_STEADY]
    bounds = [figures[k]["median"] for k in (read, sent, "engine bound") if figures[k] is not None]
    e2e = figures["end to end, streaming"]["median"]
    return {"device": be.name, "engine": engine, "patterns": patterns, "shape": list(shape), "chunk": chunk,
            "batch": batch,
            "repeats": repeats,
            "figures": figures, "smallest_bound": min(bounds), "share_of_bound": e2e / min(bounds),
            "profile_bound": max(set(bounds_by), key=bounds_by.count)}


def _run_batch(results_path, default) -> int:
    """The batch size a run used (its results file's ``batch_sizes``, the first), or ``default``."""
    from ..io.results import read_attrs

    sizes = read_attrs(results_path).get("batch_sizes")
    return int(sizes[0]) if sizes is not None and len(sizes) else default


def _engine_name(engine) -> str:
    # the engine "auto" picked, and a fused plan's FFT and block split: which kernel set the figures
    name = engine.info.name
    plan = getattr(engine, "plan", None)
    if hasattr(plan, "split"):
        ny, nx = plan.fft
        name += f" (FFT {nx}x{ny}" + (f", map split over {plan.split} blocks)" if plan.split > 1 else ")")
    return name


def format_table(result: dict) -> str:
    lines = [f"{result['device']}: {result['patterns']} patterns of {result['shape'][1]}x{result['shape'][0]} "
             f"uint16 from HDF5 (chunks of {result['chunk']}, page cache), batches of {result['batch']}, "
             f"median of {result['repeats']}; engine {result.get('engine', '?')}",
             "", "| measure | patterns/s | range |", "|---|---|---|"]
    for k, f in result["figures"].items():
        if f is None:
            lines.append(f"| {k} | (no GPU) | |")
        else:
            lines.append(f"| {k} | {f['median']:,.0f} | {f['min']:,.0f} - {f['max']:,.0f} |")
    steady = result["figures"].get(_STEADY)
    after = (f" (after the first batch: {100 * steady['median'] / result['smallest_bound']:.0f}%)"
             if steady else "")
    lines += ["", f"end to end (streaming) = {100 * result['share_of_bound']:.0f}% of the smallest bound "
                  f"({result['smallest_bound']:,.0f} patterns/s){after}; the run's profile names "
                  f"'{result['profile_bound']}' as its bound"]
    h2d = result["figures"].get("host-to-device bound")
    if h2d is not None:  # issue 18's measure for the realistic sizes
        share = result["figures"]["end to end, streaming"]["median"] / h2d["median"]
        lines.append(f"end to end = {100 * share:.0f}% of the host-to-device bound of whole patterns")
    return "\n".join(lines)


def _rss_bytes() -> int:
    """This process's resident set size now (Linux ``/proc``; elsewhere the peak so far)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _device_bytes(backend):
    """(used on the device as the driver counts it, held by CuPy's pool) in bytes, or (None, None)."""
    if not backend.is_gpu:
        return None, None
    import cupy as cp

    with backend.use():
        free, total = cp.cuda.runtime.memGetInfo()
    return int(total - free), int(cp.get_default_memory_pool().total_bytes())


def memory_over_time(config, run, *, patterns: int, shape=(256, 256), workdir: str, interval: float = 1.0) -> dict:
    """Run ``config`` over a :class:`SyntheticScan` of ``patterns`` points, sampling host RSS and
    device memory every ``interval`` seconds (with the points done); the results file goes to
    ``workdir``."""
    import tifffile

    from .process import process

    os.makedirs(workdir, exist_ok=True)
    source = SyntheticScan(patterns, shape)
    ref = os.path.join(workdir, "bench-memory-ref.tif")
    tifffile.imwrite(ref, source.read(0, 1)[0])
    out = os.path.join(workdir, "bench-memory-result.h5")
    be = select_backend(run.device)
    prog = RecordingProgress()
    samples = []
    t0 = time.perf_counter()

    def take():
        dev, pool = _device_bytes(be)
        samples.append({"t": time.perf_counter() - t0, "done": prog.count, "rss": _rss_bytes(), "device": dev,
                        "pool": pool})

    halt = threading.Event()

    def sampler():
        while not halt.wait(interval):
            take()

    take()
    thread = threading.Thread(target=sampler, name="ebsdxc-memory", daemon=True)
    thread.start()
    try:
        process(source, ref=ref, output=out, config=config, run=run, overwrite=True, progress=prog)
    finally:
        halt.set()
        thread.join()
    take()
    wall = time.perf_counter() - t0
    os.remove(out)
    return {"device": be.name, "patterns": patterns, "shape": list(shape), "wall": wall, "interval": interval,
            "samples": samples}


def format_memory(result: dict, rows: int = 12) -> str:
    """The samples of :func:`memory_over_time` at about ``rows`` evenly spread times, and the
    growth of each measure between 10% of the points done and the end."""
    s = result["samples"]
    n = result["patterns"]
    pick = sorted({round(i * (len(s) - 1) / (rows - 1)) for i in range(rows)}) if len(s) > rows else range(len(s))
    mb = 1 << 20

    def fmt(v):
        return "-" if v is None else f"{v / mb:,.0f}"

    lines = [f"{result['device']}: {n:,} patterns of {result['shape'][1]}x{result['shape'][0]} made on the fly, "
             f"{result['wall']:.0f} s; memory sampled every {result['interval']:g} s", "",
             "| t (s) | points done | host RSS (MB) | device used (MB) | CuPy pool (MB) |", "|---|---|---|---|---|"]
    for i in pick:
        x = s[i]
        lines.append(f"| {x['t']:.0f} | {x['done']:,} | {fmt(x['rss'])} | {fmt(x['device'])} | {fmt(x['pool'])} |")
    after = [x for x in s if x["done"] >= 0.1 * n]
    if after:
        lines.append("")
        for key, name in (("rss", "host RSS"), ("device", "device used"), ("pool", "CuPy pool")):
            if after[0][key] is None:
                continue
            peak = max(x[key] for x in after)
            lines.append(f"{name}: {fmt(after[0][key])} MB at 10% of the points, peak {fmt(peak)} MB after it "
                         f"({peak / after[0][key] - 1:+.1%})")
    return "\n".join(lines)
