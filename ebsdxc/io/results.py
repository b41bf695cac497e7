"""The results file, schema v1 (HDF5; readable with plain h5py).

Group ``/ebsdxc`` holds ``displacement`` (rows, cols, n_roi, 2) [dx, dy] px,
``peak_height`` (rows, cols, n_roi), ``status`` (rows, cols, n_roi) uint8, ``done``
(rows, cols) bool and ``roi/centers``, ``roi/size``; attributes record the schema,
package version, command line, parameters (JSON), inputs (name, size, modification
time), creation time and ``complete``. Datasets are chunked along scan rows and
written batch by batch; ``complete`` turns true only after the last batch, and
unprocessed points keep NaN displacement and status ``NOT_PROCESSED``.

Faults: the file starts with a 512-byte user block holding :data:`SIGNATURE`, so a file that
HDF5 can no longer open is still recognisably ours; the per-point datasets are allocated
(and filled) when the file is created, so a full disk shows at once, not hours into the run;
every write is checked, and a failed one ends the run with one line, leaving the points
already marked ``done`` valid. One writer at a time: ``OUT.lock`` (see :class:`ResultsLock`).
Derived results (strain, GND) are marked stale (``strain_stale``, ``gnd_stale``, their
``*_complete`` false) as soon as the displacement they came from changes.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
import shutil
import socket
import sys
import time
from dataclasses import dataclass

import h5py
import numpy as np

from .. import __version__
from .. import status as st
from ..errors import InputError

SCHEMA = 1
GROUP = "ebsdxc"

__all__ = ["ResultsHandle", "ResultsWriter", "ResultsLock", "RunRecord", "require_results", "read_record",
           "read_results", "read_attrs", "is_results_file", "is_damaged_results", "check_not_damaged", "lock_holder",
           "input_record", "read_grains", "write_gnd", "SCHEMA", "SIGNATURE"]

#: The first bytes of every results file (in HDF5's user block, which HDF5 never reads or writes).
SIGNATURE = b"ebsdxc results file (HDF5 follows this 512-byte block)\n"
USERBLOCK = 512
#: What a results file of ``rows * cols`` points and ``n`` ROIs needs beyond its datasets (bytes).
_OVERHEAD = 1 << 16
#: Derived results and the flag that says they are complete (stale ones are marked, not kept as true).
_DERIVED = {"strain": ("strain_complete", "fit_status"), "gnd": ("gnd_complete", "gnd_density")}


#: Bytes a chunk of a per-point dataset aims at. Every batch rewrites the chunks it touches
#: whole, so a chunk of one scan row of a wide scan (10,000 points x 49 ROIs of displacement:
#: 3.9 MB) made each batch's write cost as much as the batch's correlation.
CHUNK_BYTES = 1 << 20


def _row_chunks(cols: int, tail=(), itemsize: int = 4) -> tuple:
    """Chunk shape of a (rows, cols, *tail) per-point dataset: one scan row, or as many of its
    points as fill :data:`CHUNK_BYTES`."""
    per_point = int(np.prod(tail, dtype=np.int64)) * int(itemsize)
    return (1, max(1, min(int(cols), CHUNK_BYTES // max(per_point, 1))), *tail)


def input_record(path) -> dict:
    """Name, absolute path, size and modification time of an input file."""
    s = os.stat(path)
    return {"name": os.path.basename(path), "path": os.path.abspath(path), "size": s.st_size,
            "mtime": datetime.datetime.fromtimestamp(s.st_mtime, datetime.timezone.utc).isoformat()}


def is_results_file(path) -> bool:
    """True for a results file HDF5 can open (one another process holds open counts as ours too
    only if it carries :data:`SIGNATURE`: see :func:`is_damaged_results`)."""
    try:
        with h5py.File(path, "r") as f:
            return GROUP in f and "schema" in f[GROUP].attrs
    except (OSError, RuntimeError, ValueError, KeyError):
        return False


def _has_signature(path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(len(SIGNATURE)) == SIGNATURE
    except OSError:
        return False


def is_damaged_results(path) -> bool:
    """True for a file that carries the ebsdxc :data:`SIGNATURE` but that HDF5 cannot open, e.g.
    after a full disk or a crash mid-write. (Only the signature counts: a file of another
    program is never taken for ours, whatever its name or a lock beside it says.)"""
    path = os.fspath(path)
    return os.path.isfile(path) and _has_signature(path) and not is_results_file(path)


def check_not_damaged(path, *, action: str = "read") -> None:
    """InputError naming ``path`` when it is an ebsdxc results file HDF5 cannot open."""
    if is_damaged_results(path):
        raise InputError(f"ebsdxc results file that HDF5 cannot open (damaged: the disk filled up or the "
                         f"run crashed mid-write?); it cannot be {action}: start again with --overwrite "
                         "(overwrite=True), which replaces it", path)


# --------------------------------------------------------------------------- one writer per file

def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> int | None:
    # Field 22 of /proc/PID/stat: the process's start time, which tells a reused pid apart.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(holder: dict) -> bool:
    """Whether the run a lock names still runs; True when that cannot be told (another host)."""
    if holder.get("host") != socket.gethostname():
        return True
    if holder.get("boot_id") and _boot_id() and holder["boot_id"] != _boot_id():
        return False  # the machine restarted since
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    start = _start_ticks(pid)
    return holder.get("start_ticks") is None or start is None or start == holder["start_ticks"]


def _read_lock(lock_path) -> dict | None:
    try:
        with open(lock_path) as fh:
            d = json.load(fh)
        return d if isinstance(d, dict) else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # being written this instant, or garbage: judged by its age


def _describe_holder(h: dict) -> str:
    if not h:
        return "another ebsdxc run"
    return (f"another ebsdxc run (pid {h.get('pid')} on {h.get('host')}, since {h.get('started')}"
            + (f": {h['command']}" if h.get("command") else "") + ")")


def lock_holder(path) -> dict | None:
    """The live run holding ``path``'s lock (its record: pid, host, started, command), or None
    (no lock, or the lock of a run that is gone)."""
    lock_path = os.fspath(path) + ".lock"
    h = _read_lock(lock_path)
    if h is None:
        return None
    if not h:
        try:
            young = time.time() - os.path.getmtime(lock_path) < 60
        except OSError:
            return None
        return h if young else None
    return h if _alive(h) else None


class ResultsLock:
    """One writer per results file whatever the file system: ``OUT.lock`` beside it.

    Created with ``O_EXCL`` and holding JSON (pid, host, boot id, process start time, start
    time, command line), so a second run names the first; a lock whose process is gone (same
    host: dead pid, pid reused, or a restart since) is stale and taken over. HDF5's own file
    locking is often off on network file systems; this one is not.
    """

    def __init__(self, path, *, command: str = ""):
        self.path = os.path.abspath(os.fspath(path))
        self.lock_path = self.path + ".lock"
        self.command = command
        self.held = False

    def acquire(self) -> ResultsLock:
        record = {"file": self.path, "pid": os.getpid(), "host": socket.gethostname(), "boot_id": _boot_id(),
                  "start_ticks": _start_ticks(os.getpid()),
                  "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "command": self.command}
        for _ in range(3):
            try:
                fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = lock_holder(self.path)
                if holder is not None:
                    raise InputError(f"in use by {_describe_holder(holder)}; one run writes a results file at a "
                                     f"time: wait for it, or delete {os.path.basename(self.lock_path)} if that "
                                     "run is gone", self.path) from None
                self._remove_stale()
                continue
            except OSError as e:
                raise InputError(f"cannot create the lock file {os.path.basename(self.lock_path)} "
                                 f"({e.strerror})", self.path) from None
            try:
                os.write(fd, json.dumps(record).encode())
            except OSError as e:
                os.close(fd)
                os.remove(self.lock_path)
                raise InputError(f"cannot write the lock file ({_why(e)})", self.path) from None
            os.close(fd)
            self.held = True
            return self
        raise InputError(f"cannot take the lock {os.path.basename(self.lock_path)}: other runs keep taking it",
                         self.path)

    def _remove_stale(self):
        # Renamed first: of two runs that both found it stale, only one removes it.
        tmp = f"{self.lock_path}.stale.{os.getpid()}"
        try:
            os.rename(self.lock_path, tmp)
            os.remove(tmp)
        except FileNotFoundError:
            pass

    def release(self) -> None:
        if self.held:
            self.held = False
            try:
                if (_read_lock(self.lock_path) or {}).get("pid") == os.getpid():
                    os.remove(self.lock_path)
            except OSError:
                pass

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


# --------------------------------------------------------------------------- write faults

def _why(e: BaseException) -> str:
    """A write failure in plain words (HDF5 buries errno in a long message)."""
    text = str(e)
    code = getattr(e, "errno", None)
    for num, words in ((errno.ENOSPC, "no space left on the device"), (errno.EDQUOT, "disk quota exceeded"),
                       (errno.EFBIG, "file size limit reached"), (errno.EIO, "input/output error"),
                       (errno.EROFS, "read-only file system")):
        if code == num or f"errno = {num}," in text:
            return words
    return text.splitlines()[0] if text else type(e).__name__


def _write_failed(e: BaseException, path, done: int | None = None) -> InputError:
    kept = "" if done is None else f"; the {done} points done before are kept"
    return InputError(f"cannot write the results ({_why(e)}){kept}: make room, then run again with --resume",
                      path)


@contextlib.contextmanager
def _quiet_failed_writes():
    """HDF5 objects of a failed write, freed later, try to flush and print a traceback each
    (hundreds on a full disk); the failure is reported once, by the caller."""
    hook = sys.unraisablehook

    def quiet(u):
        if not (isinstance(u.exc_value, (OSError, RuntimeError)) and "h5py" in repr(u.object)):
            hook(u)

    sys.unraisablehook = quiet
    try:
        yield
    finally:
        sys.unraisablehook = hook


def _close_failed(f) -> None:
    # After a failed write, the first close fails flushing what could not be written; the
    # second releases the file (else HDF5 tries again at exit, and crashes).
    with _quiet_failed_writes():
        name = f.filename
        for _ in range(3):
            try:
                if f.id.valid:
                    # objects first (a dataset left open is flushed again at exit, and crashes)
                    f.id._close_open_objects(h5py.h5f.OBJ_LOCAL | ~h5py.h5f.OBJ_FILE)
                    f.close()
                break
            except (OSError, RuntimeError, ValueError):
                continue
        for fid in h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE):
            with contextlib.suppress(OSError, RuntimeError, ValueError):
                if fid.valid and fid.name.decode() == name:
                    fid.close()


def _space_needed(rows, cols, n, per_point: int = 0) -> int:
    # displacement, peak height, status, done, positions and ``per_point`` bytes of per-point
    # datasets; chunk indexes are a few percent more
    return int(rows * cols * (n * (2 * 4 + 4 + 1) + 1 + 16 + per_point) * 1.05) + _OVERHEAD


def _point_bytes(point_datasets) -> int:
    return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
               for shape, dtype, _fill, _meaning in (point_datasets or {}).values())


def _check_space(path, need: int) -> None:
    """Refuse at once when the file system has less room than the file needs (quotas and file
    size limits it cannot see still fail on the first write, with the same one line)."""
    try:
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(path)) or ".").free
    except OSError:
        return
    if free < need:
        raise InputError(f"not enough space for the results: they need about {_mb(need)}, the file system "
                         f"has {_mb(free)} free", path)


def _try_reserve(path, need: int) -> None:
    """Claim ``need`` bytes beside ``path`` with plain file calls, then give them back: a full disk,
    a quota or a file size limit fails here, in one clear line, before HDF5 writes anything (HDF5
    failing half-way through creating a file leaves objects that crash the interpreter at exit)."""
    tmp = f"{os.path.abspath(path)}.reserve.{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError:
        return  # cannot even try (a read-only folder): creating the file says why
    try:
        os.posix_fallocate(fd, 0, need)
    except OSError as e:
        raise InputError(f"not enough space for the results, about {_mb(need)} ({_why(e)})", path) from None
    finally:
        os.close(fd)
        os.remove(tmp)


def _grow(f, path, need: int, what: str, kept: str = "the displacement is kept: make room, then run the strain "
                                                    "pass again") -> int:
    """Extend the open results file ``f`` by ``need`` bytes with plain file calls before HDF5
    adds datasets to it; returns the size it had.

    HDF5 failing half-way through growing a file (a full disk, a quota, a file size limit)
    leaves it unreadable, and the displacement in it lost. Claimed here, those fail at once in
    one line with the file as it was, and HDF5's writes then land on blocks already held
    (:func:`_trim` gives back what it did not use).
    """
    f.flush()
    size = os.path.getsize(path)
    fd = os.open(path, os.O_WRONLY)
    try:
        os.posix_fallocate(fd, size, need)
    except OSError as e:
        os.ftruncate(fd, size)
        raise InputError(f"not enough space for the {what}, about {_mb(need)} ({_why(e)}); {kept}", path) from None
    finally:
        os.close(fd)
    return size


def _hdf5_end(f) -> int | None:
    """Where HDF5's data in the open file ``f`` ends (what :func:`_grow` claimed beyond it is slack)."""
    try:
        f.flush()
        return int(f.id.get_filesize())
    except (OSError, RuntimeError, ValueError):
        return None


def _trim(path, end: int | None, size: int) -> None:
    # Give back the claimed room HDF5 did not use (never below the size the file had).
    if end is None:
        return
    with contextlib.suppress(OSError):
        if os.path.getsize(path) > max(end, size):
            os.truncate(path, max(end, size))


def _mb(n) -> str:
    return f"{n / 1e6:.1f} MB" if n < 1e9 else f"{n / 1e9:.2f} GB"


def _early():
    # Allocated (and filled) at creation: a full disk fails at once, and later writes land in
    # place, so a disk that fills up during the run leaves this file's writes unharmed.
    p = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    p.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    return p


class ResultsHandle:
    """Holds an open h5py file ``self._f``; closes it on ``close`` or leaving a ``with`` block
    (and releases the writer's lock, if it holds one)."""

    _lock = None

    def close(self) -> None:
        try:
            if getattr(self, "_failed", False):
                _close_failed(self._f)  # the write error already raised says what happened
            elif self._f.id.valid:
                self._f.close()
        finally:
            if self._lock is not None:
                self._lock.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ResultsWriter(ResultsHandle):
    """Creates (or reopens for ``--resume``) a results file and writes batches into it.

    Holds the file's :class:`ResultsLock` until closed. A write that fails (full disk, quota,
    I/O error) raises an InputError naming the file and the cause; points already marked
    ``done`` stay valid and ``complete`` stays false, so the run resumes once there is room.
    """

    _failed = False
    _unmarked = None  # (blocks, count) of the last write, written and flushed, not yet marked done

    def __init__(self, f: h5py.File, path: str, lock: ResultsLock | None = None):
        self._f = f
        self.path = path
        self._lock = lock
        g = f[GROUP]
        self._g = g
        self.rows, self.cols = g["done"].shape
        self._n_done = int(g["done"][...].sum())
        self._derived_checked = False
        self._datasets = {}  # per-point datasets by name: a group lookup per batch cost a quarter of a write
        try:
            st_ = os.fstat(f.id.get_vfd_handle())
            self._ident = (st_.st_dev, st_.st_ino)
        except (OSError, TypeError, ValueError, RuntimeError):
            self._ident = None

    # -- opening -----------------------------------------------------------------------
    @classmethod
    def create(cls, path, *, grid, centres, roi_size, parameters: dict, inputs: list,
               command_line: str = "", overwrite=False, attrs: dict | None = None,
               point_datasets: dict | None = None, group_attrs: dict | None = None,
               dic_points=None) -> ResultsWriter:
        """A new results file; ``attrs`` are more attributes of ``/ebsdxc`` (written with the rest:
        attributes added later may need room the disk no longer has).

        ``point_datasets`` are per-point datasets the run writes with each batch (``write``'s
        ``extra``): name (under ``/ebsdxc``) -> (trailing shape, dtype, fill value, meaning);
        ``group_attrs`` maps a group name to attributes for it (e.g. ``{"icgn": {...}}``).
        ``dic_points`` (ny, nx, 2): a DIC run, whose scan points are the frames and whose ROIs are
        the subsets (row-major over the grid): the file gets the ``/ebsdxc/dic`` group of the DIC
        contract (:func:`write_dic_strain` fills its strain).
        """
        path = os.fspath(path)
        lock = ResultsLock(path, command=command_line).acquire()
        try:
            if os.path.exists(path):
                if not overwrite:
                    raise InputError("output already exists; pass overwrite=True to replace it "
                                     "or resume=True to continue it", path)
                if not (is_results_file(path) or is_damaged_results(path)):
                    raise InputError("output exists and is not an ebsdxc results file; "
                                     "refusing to replace it", path)
                os.remove(path)
            need = _space_needed(grid.rows, grid.cols, len(centres), _point_bytes(point_datasets))
            if dic_points is not None:  # the strain, 4 float32 per subset and frame (and the accumulated
                need += grid.rows * grid.cols * len(centres) * (16 + 9)  # displacement of incremental runs)
            _check_space(path, need)
            _try_reserve(path, need)
            try:
                f = h5py.File(path, "w-", userblock_size=USERBLOCK)
            except OSError as e:
                raise InputError(f"cannot create the output file ({_why(e)})", path) from None
            failure = None
            with _quiet_failed_writes():
                try:
                    cls._build(f, grid=grid, centres=centres, roi_size=roi_size, parameters=parameters,
                               inputs=inputs, command_line=command_line, attrs=attrs or {})
                    cls._build_point_datasets(f, grid, point_datasets or {}, group_attrs or {})
                    if dic_points is not None:
                        dp = parameters.get("dic") or {}
                        cls._build_dic(f, grid, np.asarray(dic_points, dtype=np.float64),
                                       incremental=bool(dp.get("incremental")), corrected=bool(dp.get("distortion")))
                    f.flush()
                    fd = os.open(path, os.O_WRONLY)
                    try:
                        os.pwrite(fd, SIGNATURE, 0)
                    finally:
                        os.close(fd)
                except (OSError, RuntimeError, ValueError, KeyError) as e:
                    failure = _why(e)  # raised below: an exception kept alive holds HDF5 objects past close
            if failure is not None:
                _close_failed(f)
                os.remove(path)  # made a moment ago by this call: it holds nothing yet
                raise InputError(f"cannot create the results file ({failure}); nothing was written", path)
        except BaseException:
            lock.release()
            raise
        return cls(f, path, lock)

    @staticmethod
    def _build(f, *, grid, centres, roi_size, parameters, inputs, command_line, attrs):
        rows, cols = grid.rows, grid.cols
        n = len(centres)
        g = f.create_group(GROUP)
        a = g.attrs
        a["schema"] = SCHEMA
        a["version"] = __version__
        a["command_line"] = command_line
        a["parameters"] = json.dumps(parameters, sort_keys=True)
        a["inputs"] = json.dumps(inputs)
        a["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
        a["complete"] = False
        # Fixed size, set in place at the end: nothing the finished run writes needs new room.
        a["finished"] = np.bytes_(b" " * 32)
        for k, v in attrs.items():
            a[k] = v
        a["grid_kind"] = grid.kind
        if grid.step is not None:
            a["step"] = np.asarray(grid.step, dtype=np.float64)
        # Where each point sits on the sample, so maps of hexagonal scans are drawn true to
        # the grid without knowing its rules (NaN: a padding slot, not a scan point).
        pos = g.create_dataset("positions", data=grid.positions(), chunks=_row_chunks(cols, (2,), 8))
        pos.attrs["components"] = "x, y"
        pos.attrs["units"] = "um" if grid.step is not None else "scan steps"
        g.create_dataset("displacement", (rows, cols, n, 2), np.float32, chunks=_row_chunks(cols, (n, 2), 4),
                         fillvalue=np.nan, dcpl=_early())
        g["displacement"].attrs["units"] = "px"
        g["displacement"].attrs["components"] = "dx, dy: position in the scan pattern minus position in the reference"
        g.create_dataset("peak_height", (rows, cols, n), np.float32, chunks=_row_chunks(cols, (n,), 4),
                         fillvalue=np.nan, dcpl=_early())
        g["peak_height"].attrs["meaning"] = "normalised cross-correlation at the peak, in [-1, 1]"
        g.create_dataset("status", (rows, cols, n), np.uint8, chunks=_row_chunks(cols, (n,), 1),
                         fillvalue=st.NOT_PROCESSED, dcpl=_early())
        g["status"].attrs["codes"] = json.dumps({str(k): v for k, v in st.DESCRIPTIONS.items()})
        g.create_dataset("done", (rows, cols), bool, chunks=_row_chunks(cols, (), 1), fillvalue=False, dcpl=_early())
        r = g.create_group("roi")
        r.create_dataset("centers", data=np.asarray(centres, dtype=np.float64))
        r["centers"].attrs["components"] = "x, y (px, origin at the centre of pixel (0, 0))"
        r.create_dataset("size", data=np.asarray(roi_size, dtype=np.int64))
        r["size"].attrs["components"] = "w, h (px)"

    @staticmethod
    def _build_point_datasets(f, grid, point_datasets, group_attrs):
        g = f[GROUP]
        rows, cols = grid.rows, grid.cols
        for name, (shape, dtype, fill, meaning) in point_datasets.items():
            d = g.create_dataset(name, (rows, cols, *shape), dtype,
                                 chunks=_row_chunks(cols, shape, np.dtype(dtype).itemsize), fillvalue=fill,
                                 dcpl=_early())
            d.attrs["meaning"] = meaning
        for group, attrs in group_attrs.items():
            sub = g.require_group(group)
            for k, v in attrs.items():
                sub.attrs[k] = v

    @staticmethod
    def _build_dic(f, grid, points, *, incremental=False, corrected=False):
        g = f[GROUP]
        ny, nx = points.shape[:2]
        n_frames = grid.rows * grid.cols
        if g["displacement"].shape[2] != ny * nx:
            raise ValueError(f"{ny}x{nx} DIC points but {g['displacement'].shape[2]} ROIs")
        d = g.require_group("dic")  # the per-frame datasets may have made it
        d.attrs["meaning"] = ("digital image correlation: scan points are the frames (in order), ROIs the subsets "
                              "(row-major over the grid); these views give the DIC contract's shapes")
        p = d.create_dataset("points", data=points)
        p.attrs["components"] = "x, y (px, origin at the centre of pixel (0, 0)): subset centres in the reference"
        # Views of the data as written, not copies: virtual datasets over this same file ('.').
        # Incremental runs write increments (frame t against frame t - 1), runs with an SEM
        # distortion model the fields as measured: those are the views, and the contract's
        # displacement and status are real datasets the pass after the frames fills.
        views = (("displacement", (2,), np.float32, np.nan,
                  "u, v px: position in the frame minus position in the reference; NaN where status != 0"),
                 ("status", (), np.uint8, st.NOT_PROCESSED, "codes as /ebsdxc/status (its 'codes' attribute)"),
                 ("zncc", (), np.float32, np.nan, "zero-mean normalised correlation of the subset at the result"))
        if incremental:
            views = (("increment", (2,), np.float32, np.nan,
                      "u, v px: position in frame t minus position in frame t - 1 (frame 0: the reference) of the "
                      "grid point's subset; NaN where increment_status != 0"),
                     ("increment_status", (), np.uint8, st.NOT_PROCESSED,
                      "codes of the increments, as /ebsdxc/status (its 'codes' attribute)"), views[2])
        elif corrected:
            views = (("measured", (2,), np.float32, np.nan,
                      "u, v px as measured, before the SEM distortion correction; NaN where status != 0"),
                     ("measured_status", (), np.uint8, st.NOT_PROCESSED,
                      "codes of the measurements, as /ebsdxc/status (its 'codes' attribute)"), views[2])
        if incremental or corrected:
            made = ("the increments accumulated" if incremental else "") + (
                " and " if incremental and corrected else "") + ("the SEM distortion removed" if corrected else "")
            for name, tail, dtype, fill, meaning in (
                    ("displacement", (2,), np.float32, np.nan,
                     f"u, v px: position in the frame minus position in the reference, {made} "
                     "(displacement_complete says when); NaN where status != 0"),
                    ("status", (), np.uint8, st.NOT_PROCESSED,
                     "codes of the accumulated displacement (a lost point keeps the code of the increment that "
                     "lost it; OUTSIDE_MASK: its path left the grid)")):
                ds = d.create_dataset(name, (n_frames, ny, nx, *tail), dtype, chunks=(1, ny, nx, *tail),
                                      fillvalue=fill, dcpl=_early())
                ds.attrs["meaning"] = meaning
            d.attrs["displacement_complete"] = False
            d.attrs["displacement_kind"] = made
        for name, tail, dtype, fill, meaning in views:
            src = {"displacement": "displacement", "status": "status", "zncc": "peak_height",
                   "increment": "displacement", "increment_status": "status", "measured": "displacement",
                   "measured_status": "status"}[name]
            layout = h5py.VirtualLayout(shape=(n_frames, ny, nx, *tail), dtype=dtype)
            vs = h5py.VirtualSource(".", f"{GROUP}/{src}", shape=g[src].shape, dtype=dtype)
            for r in range(grid.rows):  # frame r * cols + c is scan point (r, c)
                for iy in range(ny):
                    layout[r * grid.cols:(r + 1) * grid.cols, iy] = vs[r, :, iy * nx:(iy + 1) * nx]
            v = d.create_virtual_dataset(name, layout, fillvalue=fill)
            v.attrs["meaning"] = meaning
        s = d.create_dataset("strain", (n_frames, ny, nx, 2, 2), np.float32, chunks=(1, ny, nx, 2, 2),
                             fillvalue=np.nan, dcpl=_early())
        s.attrs["meaning"] = "Green-Lagrange strain [[Exx, Exy], [Eyx, Eyy]] (the strain pass of the run)"
        d.attrs["strain_complete"] = False

    @classmethod
    def resume(cls, path, *, grid, parameters: dict, inputs: list, command_line: str = "") -> ResultsWriter:
        path = os.fspath(path)
        if not os.path.exists(path):
            raise InputError("resume=True given but there is no output to continue", path)
        lock = ResultsLock(path, command=command_line).acquire()
        try:
            check_not_damaged(path, action="resumed")
            if not is_results_file(path):
                raise InputError("resume=True given but the output is not an ebsdxc results file", path)
            cls._check_resumable(path, grid, parameters, inputs)
            _check_space(path, _OVERHEAD)
            failure = None
            try:
                f = h5py.File(path, "r+")
                f[GROUP].attrs.modify("complete", False)
                f.flush()
            except (OSError, RuntimeError, ValueError) as e:
                failure = _why(e)
            if failure is not None:
                raise InputError(f"cannot write the results ({failure})", path)
        except BaseException:
            lock.release()
            raise
        return cls(f, path, lock)

    @staticmethod
    def _check_resumable(path, grid, parameters, inputs):
        # Checks on a read-only handle: a refused resume leaves the file untouched, mtime included.
        with h5py.File(path, "r") as f:
            g = f[GROUP]
            if int(g.attrs["schema"]) != SCHEMA:
                raise InputError(f"results schema {g.attrs['schema']} cannot be resumed by schema {SCHEMA}",
                                 path)
            if g["done"].shape != (grid.rows, grid.cols):
                raise InputError(f"results grid {g['done'].shape} differs from the scan grid "
                                 f"{(grid.rows, grid.cols)}", path)
            old = json.loads(g.attrs["parameters"])
            if old != json.loads(json.dumps(parameters, sort_keys=True)):
                diff = sorted(k for k in set(old) | set(parameters) if old.get(k) != parameters.get(k))
                raise InputError("was made with other parameters (" + ", ".join(diff) +
                                 "); resume with the same options or pass overwrite=True", path)
            old_inputs = {i["name"]: (i["size"], i["mtime"]) for i in json.loads(g.attrs["inputs"])}
            for i in inputs:
                if i["name"] in old_inputs and old_inputs[i["name"]] != (i["size"], i["mtime"]):
                    raise InputError(f"input {i['name']} changed since the run started; "
                                     "pass overwrite=True to start again", path)

    # -- writing -----------------------------------------------------------------------
    @property
    def done(self) -> np.ndarray:
        if self._unmarked is not None:
            self._guarded(self._settle)
        return self._g["done"][...]

    def _check_still_ours(self) -> None:
        """InputError when the path no longer names the file this writer writes (another program,
        or a run without the lock, replaced or deleted it): this run's results are not there."""
        if self._ident is None:
            return
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != self._ident:
            self._failed = True
            raise InputError("was replaced or deleted by something else during this run; its results are not "
                             "in the file there now: run again", self.path)

    def _guarded(self, fn, *args):
        if self._failed:
            raise InputError("an earlier write failed; nothing more is written", self.path)
        self._check_still_ours()
        failure = None
        with _quiet_failed_writes():
            try:
                if self._unmarked is not None and fn != self._write and fn != self._settle:
                    self._settle()  # every other operation sees the points written so far as done
                return fn(*args)
            except (OSError, RuntimeError, ValueError, KeyError) as e:
                failure = _why(e)  # raised below: an exception kept alive holds HDF5 objects past close
        self._failed = True
        raise InputError(f"cannot write the results ({failure}); the {self._n_done} points done before are kept: "
                         "make room, then run again with --resume", self.path)

    def _invalidate_derived(self) -> None:
        # The displacement is about to change: strain and GND fitted on it no longer hold.
        self._derived_checked = True
        a = self._g.attrs
        changed = False
        for name, (flag, dataset) in _DERIVED.items():
            if dataset in self._g or flag in a:
                a.modify(flag, False)
                a.modify(f"{name}_stale", True)
                changed = True
        if "dic" in self._g:
            for flag in ("strain_complete", "displacement_complete"):
                if bool(self._g["dic"].attrs.get(flag, False)):
                    self._g["dic"].attrs.modify(flag, False)
                    changed = True
        if changed:
            self._f.flush()

    def write(self, start: int, displacement, peak_height, status, extra: dict | None = None) -> None:
        """Write results of flat scan points ``start : start + len(displacement)``; ``extra``
        maps per-point datasets made at creation (``point_datasets``) to (B, ...) arrays."""
        self._guarded(self._write, start, displacement, peak_height, status, extra)

    def _write(self, start, displacement, peak_height, status, extra=None):
        if not self._derived_checked:
            self._invalidate_derived()
        stop = start + len(displacement)
        cols = self.cols
        arrays = {"displacement": displacement, "peak_height": peak_height, "status": status, **(extra or {})}
        datasets = [(self._dataset(name), values) for name, values in arrays.items()]
        i = start
        blocks = []  # (row, rows, c0, c1): a part of a row, or whole rows at once
        while i < stop:
            r, c0 = divmod(i, cols)
            if c0 == 0 and stop - i >= cols:
                nr = (stop - i) // cols
                a = i - start
                for ds, values in datasets:
                    ds[r:r + nr] = values[a:a + nr * cols].reshape(nr, cols, *values.shape[1:])
                blocks.append((r, r + nr, 0, cols))
                i += nr * cols
                continue
            c1 = min(cols, c0 + (stop - i))
            sl = slice(i - start, i - start + (c1 - c0))
            for ds, values in datasets:
                ds[r, c0:c1] = values[sl]
            blocks.append((r, r + 1, c0, c1))
            i += c1 - c0
        # Data reach the disk before any point is marked done, so a failure never marks unwritten
        # points: the previous write's points (flushed then) are marked now, and this one's at the
        # next operation. One flush per batch where there were two (each about 1 ms).
        self._mark_unmarked()
        self._f.flush()
        self._unmarked = (blocks, stop - start)

    def _mark_unmarked(self):
        if self._unmarked is None:
            return
        blocks, count = self._unmarked
        done = self._dataset("done")
        for r0, r1, c0, c1 in blocks:
            done[r0:r1, c0:c1] = True
        self._unmarked = None
        self._n_done += count

    def _settle(self):
        """Mark the last write's points done (its data were flushed with it)."""
        if self._unmarked is not None:
            self._mark_unmarked()
            self._f.flush()

    def close(self) -> None:
        if self._unmarked is not None and not self._failed and self._f.id.valid:
            with contextlib.suppress(InputError):  # its points stay not done: a resume computes them again
                self._guarded(self._settle)
        self._datasets.clear()  # no handle of ours outlives the file
        super().close()

    def _dataset(self, name):
        ds = self._datasets.get(name)
        if ds is None:
            ds = self._datasets[name] = self._g[name]
        return ds

    def mark_missing(self, missing) -> None:
        """Flag (rows, cols) bool ``missing`` points ``MISSING_PATTERN`` and done, without data."""
        self.mark_status(missing, st.MISSING_PATTERN)

    def mark_status(self, points, code: int) -> None:
        """Flag (rows, cols) bool ``points`` with status ``code`` in every ROI, and done, without data
        (points there is nothing to correlate for: no pattern, no reference)."""
        self._guarded(self._mark_status, points, code)

    def _mark_status(self, points, code):
        if not self._derived_checked:
            self._invalidate_derived()
        missing = np.asarray(points, dtype=bool)
        g = self._g
        for r in np.flatnonzero(missing.any(axis=1)):
            cols = missing[r]
            status = g["status"][r]
            status[cols] = code
            g["status"][r] = status
            self._f.flush()
            done = g["done"][r]
            self._n_done += int((cols & ~done).sum())
            done[cols] = True
            g["done"][r] = done
        self._f.flush()

    def write_record(self, group: str, arrays: dict, attrs: dict) -> None:
        """A group of small datasets and attributes describing how the run was made (e.g. the
        pattern-centre calibration), replacing one of that name."""
        self._guarded(self._write_record, group, arrays, attrs)

    def _write_record(self, group, arrays, attrs):
        if group in self._g:
            del self._g[group]
        g = self._g.create_group(group)
        for k, v in arrays.items():
            g.create_dataset(k, data=np.asarray(v))
        for k, v in attrs.items():
            g.attrs[k] = v
        self._f.flush()

    def write_references(self, index, labels) -> None:
        """Record which reference each point used: ``point_reference`` (rows, cols) int32 and
        the references' labels (JSON) in its ``references`` attribute. Only for runs of
        several references; a one-reference run records its reference in the parameters."""
        self._guarded(self._write_references, index, labels)

    def _write_references(self, index, labels):
        d = self._g.create_dataset("point_reference", data=np.asarray(index, dtype=np.int32),
                                   chunks=_row_chunks(self.cols, (), 8))
        d.attrs["references"] = json.dumps(list(labels))
        d.attrs["meaning"] = "index of the reference (in the 'references' attribute) each point is correlated with"
        self._f.flush()

    def write_grains(self, grain_id, reference_point, *, reference_euler=None, phase=None, kam=None,
                     attrs: dict | None = None) -> None:
        """Record the grains of a reference-per-grain run.

        ``grain_id`` (rows, cols) int32, ids 0..n_grains-1, -1 = no grain;
        ``grains/reference_point`` (n_grains, 2) [row, col], (-1, -1) for a grain without a
        usable reference; optionally ``grains/reference_euler`` (n_grains, 3) Bunge degrees,
        ``grains/phase`` (n_grains,) and ``grains/kam`` (rows, cols) degrees. ``attrs`` (JSON-able
        values) describe how the grains were found.
        """
        self._guarded(self._write_grains, grain_id, reference_point, reference_euler, phase, kam, attrs)

    def _write_grains(self, grain_id, reference_point, reference_euler, phase, kam, attrs):
        g = self._g
        gid = np.asarray(grain_id, dtype=np.int32)
        d = g.create_dataset("grain_id", data=gid, chunks=_row_chunks(self.cols, (), 8))
        d.attrs["meaning"] = "grain of each point, 0..n_grains-1; -1: no grain (not indexed, too small, no pattern)"
        grp = g.create_group("grains")
        d = grp.create_dataset("reference_point", data=np.asarray(reference_point, dtype=np.int64).reshape(-1, 2))
        d.attrs["components"] = "row, col of each grain's reference point, indexed by grain id; -1, -1: none"
        if reference_euler is not None:
            d = grp.create_dataset("reference_euler", data=np.asarray(reference_euler, dtype=np.float64))
            d.attrs["components"] = "phi1, Phi, phi2 (Bunge, degrees) of each grain's reference point"
        if phase is not None:
            grp.create_dataset("phase", data=np.asarray(phase, dtype=np.int16))
        if kam is not None:
            d = grp.create_dataset("kam", data=np.asarray(kam, dtype=np.float32), chunks=_row_chunks(self.cols, (), 8))
            d.attrs["units"] = "degrees"
            d.attrs["meaning"] = "kernel average misorientation (first neighbours in the same grain)"
        for k, v in (attrs or {}).items():
            grp.attrs[k] = json.dumps(v)
        self._f.flush()

    def set_attr(self, name, value):
        """Set an attribute of ``/ebsdxc`` (not rewritten when it holds ``value`` already: on a full
        disk, a resume should not need room for what it has)."""
        a = self._g.attrs
        if name in a and np.array_equal(np.asarray(a[name]), np.asarray(value)):
            return
        self._guarded(a.__setitem__, name, value)

    def finish(self) -> None:
        """Mark the file complete when every point is done (after checking it is still this run's)."""
        self._guarded(self._finish)

    def _finish(self):
        a = self._g.attrs
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        if "finished" in a and a["finished"].dtype.kind == "S":  # in place (files before that: a new one)
            a.modify("finished", np.bytes_(now.encode().ljust(32)))
        else:
            a["finished"] = now
        self._f.flush()
        a.modify("complete", bool(self._g["done"][...].all()))
        self._f.flush()



@dataclass(frozen=True)
class RunRecord:
    """What a results file records of the run that made it (for re-fitting, re-correlating).

    ``parameters`` and ``inputs`` are the decoded JSON attributes (``inputs`` keyed by file
    name); ``pattern_shape`` is ``()`` when not recorded; ``scan_format`` is ``None`` when
    not recorded.
    """

    path: str
    parameters: dict
    inputs: dict
    rows: int
    cols: int
    centres: np.ndarray
    roi_size: tuple
    step: tuple | None
    grid_kind: str
    scan_format: str | None
    pattern_shape: tuple
    any_done: bool

    def input_path(self, key: str) -> str | None:
        """Recorded path of the input the parameter ``key`` names (``"scan"``, ``"reference"``)."""
        return (self.inputs.get(self.parameters.get(key)) or {}).get("path")


def read_record(path) -> RunRecord:
    """The :class:`RunRecord` of a results file; InputError naming it when it lacks one."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError("no such file", path)
    check_not_damaged(path)
    if not is_results_file(path):
        raise InputError("not an ebsdxc results file (run 'ebsdxc process' first)", path)
    with h5py.File(path, "r") as f:
        g = f[GROUP]
        a = g.attrs
        try:
            params = json.loads(a["parameters"])
            inputs = {i["name"]: i for i in json.loads(a["inputs"])}
            rows, cols = g["done"].shape
            centres = g["roi/centers"][...]
            roi_size = tuple(int(v) for v in g["roi/size"][...])
        except (KeyError, ValueError, TypeError) as e:
            raise InputError(f"lacks the metadata the strain fit needs ({e})", path) from None
        fmt = str(a.get("scan_format", "")) or None
        return RunRecord(path=path, parameters=params, inputs=inputs, rows=int(rows), cols=int(cols),
                         centres=centres, roi_size=roi_size,
                         step=tuple(float(v) for v in a["step"]) if "step" in a else None,
                         grid_kind=str(a.get("grid_kind", "square")), scan_format=fmt,
                         pattern_shape=tuple(int(v) for v in a.get("pattern_shape", ())),
                         any_done=bool(g["done"][...].any()))


def require_results(path) -> str:
    """``path`` as a string; InputError naming it unless it is an ebsdxc results file."""
    path = os.fspath(path)
    check_not_damaged(path)
    if not is_results_file(path):
        raise InputError("not an ebsdxc results file", path)
    return path


def read_results(path) -> dict:
    """Everything in a results file as NumPy arrays plus an ``attrs`` dict (small scans)."""
    path = require_results(path)
    with h5py.File(path, "r") as f:
        g = f[GROUP]
        out = {k: g[k][...] for k in ("displacement", "peak_height", "status", "done")}
        out["roi_centers"] = g["roi/centers"][...]
        out["roi_size"] = g["roi/size"][...]
        if "positions" in g:
            out["positions"] = g["positions"][...]
        attrs = dict(g.attrs)
        for k in ("parameters", "inputs"):
            attrs[k] = json.loads(attrs[k])
        attrs["complete"] = bool(attrs["complete"])
        out["attrs"] = attrs
    return out


def read_attrs(path) -> dict:
    """The attributes of a results file's group, as stored, without reading its datasets."""
    path = require_results(path)
    with h5py.File(path, "r") as f:
        return dict(f[GROUP].attrs)


def read_summary(path) -> dict:
    """Counts and medians for a one-line report and ``ebsdxc info`` (reads row by row).

    Counts are of scan points: a hexagonal grid's padding slots (NaN ``positions``) are not
    points. ``points_measured`` are done points with a pattern and a reference; ``ok_fraction``
    is of their matches, ``None`` when there are none (nothing was measured). ``stale`` names
    derived results fitted on an earlier displacement.
    """
    path = require_results(path)
    with h5py.File(path, "r") as f:
        g = f[GROUP]
        rows, cols, n = g["status"].shape
        # a hexagonal grid's padding slots are not scan points (files without positions: all are)
        point = (np.isfinite(g["positions"][...]).all(axis=-1) if "positions" in g
                 else np.ones((rows, cols), dtype=bool))
        counts = np.zeros(256, dtype=np.int64)
        heights = []
        for r in range(rows):
            s = g["status"][r][point[r]]
            counts += np.bincount(s.ravel(), minlength=256)
            h = g["peak_height"][r][point[r]]
            heights.append(np.nanmedian(h) if np.isfinite(h).any() else np.nan)
        done_map = g["done"][...] & point
        done = int(done_map.sum())
        strain = None
        if "fit_status" in g:
            fs = g["fit_status"][...][point]
            sp = json.loads(g.attrs.get("strain_parameters", "{}"))
            strain = {"complete": bool(g.attrs.get("strain_complete", False)), "material": sp.get("material"),
                      "points_fitted": int((fs == 0).sum()), "points_remapped": int(g["remapped"][...][point].sum()),
                      "points_flagged": int(((fs != 0) & (fs != 2)).sum())}
        a = g.attrs
        stale = [name for name in _DERIVED if bool(a.get(f"{name}_stale", False))]
        n = max(n, 1)
        missing = int(counts[st.MISSING_PATTERN]) // n
        no_ref = int(counts[st.NO_REFERENCE]) // n
        # Points without a pattern or a reference are not measurements: they do not count against it.
        measured = done - missing - no_ref
        ok = int(counts[st.OK])
        return {
            "schema": int(a["schema"]),
            "version": str(a["version"]),
            "complete": bool(a["complete"]),
            "points": int(point.sum()),
            "points_done": done,
            "points_measured": measured,
            "grid": [rows, cols],
            "grid_kind": str(a.get("grid_kind", "square")),
            "points_missing": missing,
            "points_without_reference": no_ref,
            "n_roi": int(g["status"].shape[2]),
            "roi_size": g["roi/size"][...].tolist(),
            "ok_fraction": ok / (measured * n) if measured > 0 else None,
            "status_counts": {st.DESCRIPTIONS.get(k, str(k)): int(c) for k, c in enumerate(counts) if c},
            "median_peak_height": float(np.nanmedian(heights)) if np.isfinite(heights).any() else float("nan"),
            "created": str(a["created"]),
            "command_line": str(a["command_line"]),
            "device": str(a.get("device", "")),
            "parameters": json.loads(a["parameters"]),
            "stale": stale,
            **({"strain": strain} if strain else {}),
            **({"grains": {"count": int(g["grains/reference_point"].shape[0]),
                           "with_reference": int((g["grains/reference_point"][:, 0] >= 0).sum())}}
               if "grains" in g else {}),
            **({"gnd_points": int(np.isfinite(g["gnd_density"][...]).sum())} if "gnd_density" in g else {}),
            **({"gnd_complete": bool(a["gnd_complete"])} if "gnd_complete" in a else {}),
            **({"icgn": _icgn_summary(g["icgn"])} if "icgn" in g else {}),
            **({"simulated_reference": _simulated_summary(g["simulated_reference"])}
               if "simulated_reference" in g else {}),
            **({"pc_calibration": {"points": int(g["pc_calibration/used"].shape[0]),
                                   "used": int(g["pc_calibration/used"][()].sum())}}
               if "pc_calibration" in g else {}),
            **({"dic": _dic_summary(g["dic"])} if "dic" in g and "points" in g["dic"] else {}),
        }


def _dic_summary(grp) -> dict:
    """What a DIC file's fields are and whether the passes after the frames ran."""
    a = grp.attrs
    ny, nx = grp["points"].shape[:2]
    out = {"points": [int(ny), int(nx)], "frames": int(grp["displacement"].shape[0]),
           "strain_complete": bool(a.get("strain_complete", False))}
    if "displacement_complete" in a:  # made after the frames: accumulated and/or corrected
        out["displacement_complete"] = bool(a["displacement_complete"])
        out["displacement_kind"] = str(a.get("displacement_kind", ""))
    if "distortion" in grp:
        rec = json.loads(grp["distortion"].attrs["record"])
        out["distortion"] = {"spatial_degree": rec.get("spatial_degree"), "drift_degree": rec.get("drift_degree")}
    return out


def _icgn_summary(grp) -> dict:
    """Converged points, median iterations and whole-pattern ZNCC of a refined run."""
    status = grp["status"][()]
    refined = status != 255
    ok = status == 0
    its = grp["iterations"][()][ok]
    zncc = grp["zncc"][()][ok]
    return {"points": int(refined.sum()), "converged": int(ok.sum()),
            "median_iterations": float(np.median(its)) if its.size else float("nan"),
            "median_zncc": float(np.median(zncc)) if zncc.size else float("nan")}


def _simulated_summary(grp) -> dict:
    sims = grp["simulations"][()]
    left = grp["rotation_left_deg"][()]
    made = sims > 0
    return {"points": int(made.sum()), "median_simulations": float(np.median(sims[made])) if made.any() else 0.0,
            "median_rotation_left_deg": float(np.nanmedian(left)) if np.isfinite(left).any() else float("nan")}


# --------------------------------------------------------------------------- strain (HR-EBSD)

#: Datasets the strain pass adds to ``/ebsdxc`` (name -> (trailing shape, dtype, fill, attrs)).
STRAIN_DATASETS = {
    "deformation_gradient": ((3, 3), np.float32, np.nan, {
        "frame": "sample", "meaning": "F: a lattice vector r of the reference becomes F r"}),
    "strain": ((3, 3), np.float32, np.nan, {
        "frame": "sample", "meaning": "elastic strain V - I of F = V R (symmetric; small strain to first order)"}),
    "strain_crystal": ((3, 3), np.float32, np.nan, {
        "frame": "crystal", "meaning": "strain in the deformed crystal's frame g R^T"}),
    "rotation": ((3, 3), np.float32, np.nan, {
        "frame": "sample", "units": "rad",
        "meaning": "antisymmetric lattice rotation w = log(R), R = expm(w) ~ I + w; w_10 = rotation about z"}),
    "rotation_crystal": ((3, 3), np.float32, np.nan, {
        "frame": "crystal", "units": "rad", "meaning": "g w g^T, g the reference orientation"}),
    "fit_residual": ((), np.float32, np.nan, {
        "units": "px", "meaning": "RMS distance between measured and fitted ROI positions (used ROIs)"}),
    "angular_error": ((), np.float32, np.nan, {
        "units": "rad", "meaning": "mean angle between measured and fitted ROI directions (used ROIs)"}),
    "rois_used": ((), np.int16, 0, {"meaning": "ROIs used in the fit after rejection"}),
    "fit_status": ((), np.uint8, 2, {}),
    "remapped": ((), bool, False, {
        "meaning": "fitted against the reference rotated by the first-pass rotation (Britton & Wilkinson 2012)"}),
    "pattern_centre": ((3,), np.float64, np.nan, {
        "convention": "bruker", "meaning": "PCx, PCy (fractions of width, height from the top-left corner), "
                                           "PCz (distance / height), as kikuchipy's EBSDDetector"}),
}


class StrainWriter(ResultsHandle):
    """Adds the strain datasets to a finished results file, row chunk by row chunk.

    ``strain_complete`` stays false until :meth:`finish`, so a crash mid-pass never leaves
    a result that looks complete. Complete strain results are replaced only with
    ``overwrite``; incomplete or stale ones (``strain_complete`` false) always. The room the
    datasets need is claimed before HDF5 adds any (:func:`_grow`): a full disk, a quota or a
    file size limit is one line with the file as it was.
    """

    def __init__(self, path, *, parameters: dict, n_roi: int, fit_codes: dict, overwrite=False):
        self.path = require_results(path)
        self._lock = ResultsLock(self.path, command="strain").acquire()
        self._failed = False
        try:
            self._f = h5py.File(self.path, "r+")
        except OSError as e:
            self._lock.release()
            raise InputError(f"cannot open the results file for writing ({_why(e)})", path) from None
        failure = None
        with _quiet_failed_writes():
            try:
                self._open(parameters, n_roi, fit_codes, overwrite)
            except InputError:
                self.close()
                raise
            except (OSError, RuntimeError, ValueError, KeyError) as e:
                failure = _why(e)  # raised below: an exception kept alive holds HDF5 objects past close
        if failure is not None:
            self._failed = True
            self.close()
            raise InputError(f"cannot write the strain results ({failure}); the displacement is kept and the "
                             "strain marked incomplete: make room, then run the strain pass again", path)

    def _open(self, parameters, n_roi, fit_codes, overwrite):
        g = self._g = self._f[GROUP]
        rows, cols = g["done"].shape
        present = [k for k in STRAIN_DATASETS if k in g] + [k for k in ("roi_used",) if k in g]
        # Incomplete (a pass that failed or was stopped) or stale strain claims nothing: redone freely.
        if present and not overwrite and bool(g.attrs.get("strain_complete", False)):
            raise InputError("already holds strain results; pass overwrite=True to replace them", self.path)
        need = rows * cols * (sum(int(np.prod(t, dtype=np.int64)) * np.dtype(d).itemsize
                                  for t, d, _, _ in STRAIN_DATASETS.values()) + n_roi) + _OVERHEAD
        _check_space(self.path, need)
        self._size = _grow(self._f, self.path, need, "strain results")
        # Flags first: whatever fails below, the file never claims a strain (or GND from it) it lacks.
        g.attrs.modify("strain_complete", False)
        if "gnd_density" in g or "gnd_complete" in g.attrs:
            g.attrs.modify("gnd_complete", False)
            g.attrs.modify("gnd_stale", True)
        self._f.flush()
        for k in present:
            del g[k]
        for name, (tail, dtype, fill, attrs) in STRAIN_DATASETS.items():
            ds = g.create_dataset(name, (rows, cols, *tail), dtype,
                                  chunks=_row_chunks(cols, tail, np.dtype(dtype).itemsize), fillvalue=fill,
                                  dcpl=_early())
            for k, v in attrs.items():
                ds.attrs[k] = v
        g["fit_status"].attrs["codes"] = json.dumps({str(k): v for k, v in fit_codes.items()})
        source = (parameters.get("sources") or {}).get("pattern_centre")
        if source:  # where the PCs came from: the file, a plane, a calibration
            g["pattern_centre"].attrs["source"] = str(source)
        g.create_dataset("roi_used", (rows, cols, n_roi), bool, chunks=_row_chunks(cols, (n_roi,), 1), fillvalue=False,
                         dcpl=_early())
        g["roi_used"].attrs["meaning"] = "ROI kept by the rejection rule"
        g.attrs["strain_parameters"] = json.dumps(parameters, sort_keys=True)
        # present from now on, so a resume marks them stale in place
        g.attrs.modify("strain_stale", False)
        g.attrs.modify("gnd_stale", bool(g.attrs.get("gnd_stale", False)))
        self.rows, self.cols = rows, cols
        self._f.flush()

    def close(self) -> None:
        end = None if self._failed or getattr(self, "_size", None) is None else _hdf5_end(self._f)
        super().close()
        if end is not None:
            _trim(self.path, end, self._size)

    def _guarded(self, fn, *args, **kw):
        if self._failed:
            raise InputError("an earlier write failed; nothing more is written", self.path)
        failure = None
        with _quiet_failed_writes():
            try:
                return fn(*args, **kw)
            except (OSError, RuntimeError, ValueError, KeyError) as e:
                failure = _why(e)
        self._failed = True
        raise InputError(f"cannot write the strain results ({failure}); they stay marked incomplete: make "
                         "room, then run the strain pass again", self.path)

    def write(self, rows: slice, cols: int, **arrays) -> None:
        """Write whole scan rows ``rows`` (arrays of shape (n_rows * cols, ...), row-major)."""
        self._guarded(self._write, rows, cols, arrays)

    def _write(self, rows, cols, arrays):
        n = rows.stop - rows.start
        for name, a in arrays.items():
            self._g[name][rows] = np.asarray(a).reshape(n, cols, *np.shape(a)[1:])
        self._f.flush()

    def finish(self) -> None:
        self._guarded(self._finish)

    def _finish(self):
        self._g.attrs.modify("strain_complete", True)
        self._f.flush()


def read_grains(path) -> dict | None:
    """The grains a reference-per-grain results file records, or None: ``grain_id``,
    ``reference_point``, ``reference_euler`` and ``phase`` (None where not recorded) and the
    ``grains`` group's attributes (JSON-decoded)."""
    path = require_results(path)
    with h5py.File(path, "r") as f:
        g = f[GROUP]
        if "grain_id" not in g or "grains" not in g:
            return None
        grp = g["grains"]
        out = {"grain_id": g["grain_id"][...], "reference_point": grp["reference_point"][...]}
        for k in ("reference_euler", "phase"):
            out[k] = grp[k][...] if k in grp else None
        out["attrs"] = {k: json.loads(v) for k, v in grp.attrs.items()}
    return out


def write_gnd(path, nye, density, *, attrs: dict) -> None:
    """Write ``nye_tensor`` (rows, cols, 3, 3) 1/m and ``gnd_density`` (rows, cols) 1/m^2 into a
    results file (replacing earlier ones); ``None`` writes neither and records in ``gnd``'s
    attributes why (``attrs["skipped"]``). ``gnd_complete`` turns true only after both."""
    path = require_results(path)
    with ResultsLock(path, command="gnd"):
        failure = None
        with _quiet_failed_writes():
            try:
                _write_gnd(path, nye, density, attrs)
            except InputError:
                raise
            except (OSError, RuntimeError, ValueError, KeyError) as e:
                failure = _why(e)
        if failure is not None:
            raise InputError(f"cannot write the GND results ({failure}); they stay marked incomplete: make room, "
                             "then run the strain pass again", path)


def _write_gnd(path, nye, density, attrs):
    with h5py.File(path, "r+") as f:
        g = f[GROUP]
        g.attrs["gnd_complete"] = False
        f.flush()
        need = _OVERHEAD + (0 if nye is None else np.asarray(nye, np.float64).nbytes
                            + np.asarray(density, np.float64).nbytes)
        size = _grow(f, path, need, "GND results", "the strain is kept: make room, then run the strain pass "
                                                   "again with --overwrite")
        for k in ("nye_tensor", "gnd_density"):
            if k in g:
                del g[k]
        if nye is not None:
            rows, cols = np.shape(density)
            d = g.create_dataset("nye_tensor", data=np.asarray(nye, dtype=np.float64),
                                 chunks=_row_chunks(cols, (3, 3), 8))
            d.attrs["units"] = "1/m"
            d.attrs["frame"] = "sample (kikuchipy / EDAX TSL); map x = column * step, y = row * step"
            d.attrs["meaning"] = ("alpha = kappa^T - tr(kappa) I, kappa_ij = d theta_i / d x_j; NaN in the "
                                  "components a 2-D map cannot measure (alpha_11, alpha_22, alpha_31, alpha_32)")
            d = g.create_dataset("gnd_density", data=np.asarray(density, dtype=np.float64),
                                 chunks=_row_chunks(cols, (), 8))
            d.attrs["units"] = "1/m^2"
            d.attrs["meaning"] = "total GND density, lower bound (L1 minimisation over the slip systems)"
        g.attrs["gnd_parameters"] = json.dumps(attrs, sort_keys=True)
        g.attrs["gnd_stale"] = False
        f.flush()
        g.attrs["gnd_complete"] = nye is not None
        end = _hdf5_end(f)
    _trim(path, end, size)


def read_strain(path) -> dict:
    """The strain datasets of a results file (NumPy arrays) plus ``strain_parameters``."""
    path = require_results(path)
    with h5py.File(path, "r") as f:
        g = f[GROUP]
        if "strain" not in g:
            raise InputError("holds no strain results (run 'ebsdxc strain' on it)", path)
        out = {k: g[k][...] for k in (*STRAIN_DATASETS, "roi_used")}
        out["strain_parameters"] = json.loads(g.attrs["strain_parameters"])
        out["strain_complete"] = bool(g.attrs["strain_complete"])
    return out


def _write_dic_pass(path, *, flag: str, what: str, fill) -> None:
    """One pass's datasets of ``/ebsdxc/dic`` written by ``fill(dic_group)``: ``flag`` is false
    while they are written and turns true only after them; a failed write is one line."""
    path = require_results(path)
    with ResultsLock(path, command=f"dic {what}"):
        failure = None
        with _quiet_failed_writes():
            try:
                with h5py.File(path, "r+") as f:
                    d = f[GROUP]["dic"]
                    d.attrs[flag] = False
                    f.flush()
                    fill(d)
                    f.flush()
                    d.attrs[flag] = True
            except (OSError, RuntimeError, ValueError, KeyError) as e:
                failure = _why(e)
        if failure is not None:
            raise InputError(f"cannot write the DIC {what} ({failure}); it stays marked incomplete", path)


def write_dic_displacement(path, displacement, status, *, attrs: dict, distortion: dict | None = None) -> None:
    """Write the displacement (n_frames, ny, nx, 2) and its status of a DIC results file whose
    contract fields are made after the frames (increments accumulated, SEM distortion removed:
    ``distortion`` is the model, kept in ``/ebsdxc/dic/distortion``); ``dic`` attribute
    ``displacement_complete`` turns true only after it."""
    def fill(d):
        d["displacement"][...] = np.asarray(displacement, dtype=np.float32)
        d["status"][...] = np.asarray(status, dtype=np.uint8)
        d.attrs["derivation"] = json.dumps(attrs, sort_keys=True)
        if distortion is not None:
            dg = d.require_group("distortion")
            dg.attrs["record"] = json.dumps(distortion, sort_keys=True)
            dg.attrs["meaning"] = ("the SEM distortion model removed from the measured fields "
                                   "(ebsdxc.sem_distortion.DistortionModel.from_dict of 'record')")
    _write_dic_pass(path, flag="displacement_complete", what="displacement", fill=fill)


def write_dic_strain(path, strain, *, attrs: dict) -> None:
    """Write the Green-Lagrange strain (n_frames, ny, nx, 2, 2) of a DIC results file into
    ``/ebsdxc/dic/strain``; ``dic`` attribute ``strain_complete`` turns true only after it."""
    def fill(d):
        d["strain"][...] = np.asarray(strain, dtype=np.float32)
        d.attrs["strain_parameters"] = json.dumps(attrs, sort_keys=True)
    _write_dic_pass(path, flag="strain_complete", what="strain", fill=fill)


def write_profile(path, report: dict) -> None:
    """Store a run's stage profile (``ebsdxc process --profile``, :mod:`ebsdxc.timing`) as the
    JSON attribute ``profile`` of ``/ebsdxc``: provenance of where the run's time went."""
    path = require_results(path)
    with ResultsLock(path, command="profile"):
        try:
            with h5py.File(path, "r+") as f:
                f[GROUP].attrs["profile"] = json.dumps(report)
        except (OSError, RuntimeError, ValueError, KeyError) as e:
            raise InputError(f"cannot store the run's profile ({_why(e)})", path) from None
