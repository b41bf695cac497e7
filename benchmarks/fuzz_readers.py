"""Fuzz every ebsdxc reader with truncated, bit-flipped and header-corrupted sample files.

Each reader must, for every damaged input, either return exactly what the undamaged file
holds, or raise :class:`ebsdxc.errors.InputError` with a one-line message naming the file;
it must never crash the interpreter, hang, raise anything else, or return different data
without a word where the damage is detectable (see :data:`UNDETECTABLE`).

Inputs are read in a worker subprocess (one per :class:`Worker`, reused across inputs), so
a crash (a signal) or a hang (a time limit) is recorded against the input, not taken down
with the caller; the worker is restarted after either.

Usage::

    python benchmarks/fuzz_readers.py --minutes 25 --out benchmarks/results/fuzz_readers.json

``tests/io/test_fuzz_readers.py`` drives the same machinery with hypothesis for a bounded
number of examples (``EBSDXC_FUZZ_EXAMPLES`` raises it).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import random
import select
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MUTATIONS = ("truncate", "bitflip", "header")

#: What one damaged byte can still change without any reader noticing, after the structural
#: guards (``ebsdxc.io.h5check``, ``image.check_page``/``tiff_checked``, the header and angle
#: checks of the binary and text readers). The formats keep no checksum of their values, and
#: these structures have no second copy to check them against. Long run 3 found only these.
UNDETECTABLE = ("a bit flip inside uncompressed pattern values (HDF5 contiguous or unfiltered "
                "chunks, .up1/.up2, .ebsp, TIFF/PNG strips)",
                "a bit flip inside a number of an .ang/.ctf data row that still parses to an "
                "angle or a declared phase (a phase 1 -> 0 also blanks that point's angles)",
                "a bit flip inside stored orientation/quality values of a vendor h5 (one value, "
                "which orientations() and the orientation map both show)",
                "an .up1/.up2 pattern width, height or grid field changed to one that the file "
                "size still fits as an interrupted scan or a surplus of whole patterns",
                "an HDF5 datatype's byte order or sign changed in place (uint16 -> >u2, >i2)",
                "a small HDF5 dataset's data address moved onto unused bytes inside the file",
                "a vendor's marker value damaged (root 'manufacturer' 'kikuchipy' -> 'kikuch)py'): "
                "the file is then read as plain HDF5, without the vendor's extras",
                "an old-layout group's symbol-table node losing entries while the group still "
                "lists (an optional entry such as the static background then reads as absent)")


@dataclass(frozen=True)
class Seed:
    """One undamaged sample file and how it is read.

    ``target`` is the file mutations are applied to; ``read_path`` is what the reader is
    given (the same file, or the folder of an image stack that holds ``target``).
    """

    name: str
    reader: str  # "scan", "orientation" or "reference"
    target: Path
    read_path: Path


# ----------------------------------------------------------------------------- seeds


def _kp_data() -> Path | None:
    spec = importlib.util.find_spec("kikuchipy")
    return None if spec is None else Path(spec.origin).parent / "data"


def build_seeds(folder) -> list[Seed]:
    """Write (or copy) one small sample of every format into ``folder``."""
    import h5py
    import numpy as np

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    seeds = []

    def add(name, reader, path, read_path=None):
        os.chmod(path, 0o644)
        seeds.append(Seed(name, reader, Path(path), Path(read_path or path)))

    pats = rng.integers(0, 4000, size=(6, 24, 24), dtype=np.uint16)
    p = folder / "generic_contiguous.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("patterns", data=pats)
        f["patterns"].attrs.update(nrows=2, ncols=3, step_x=1.0, step_y=1.0)
    add("hdf5_contiguous", "scan", p)
    p = folder / "generic_gzip.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("patterns", data=pats, chunks=(1, 24, 24), compression="gzip",
                         shuffle=True)
    add("hdf5_gzip", "scan", p)
    p = folder / "generic_4d_gzip.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("p", data=pats.reshape(2, 3, 24, 24), chunks=(1, 3, 24, 24),
                         compression="gzip")
    add("hdf5_4d_gzip", "scan", p)

    kp = _kp_data()
    if kp is not None:
        for name, reader, rel in (
                ("h5ebsd_chunked", "scan", "kikuchipy_h5ebsd/patterns.h5"),
                ("h5ebsd_contiguous", "scan", "kikuchipy_h5ebsd/patterns_nochunks.h5"),
                ("edax_h5", "scan", "edax_h5ebsd/patterns.h5"),
                ("emsoft_h5", "scan", "emsoft_ebsd/simulated_ebsd.h5"),
                ("edax_up1", "scan", "edax_binary/edax_binary.up1"),
                ("edax_up2", "scan", "edax_binary/edax_binary.up2"),
                ("oxford_ebsp", "scan", "oxford_binary/patterns.ebsp")):
            dst = folder / rel.replace("/", "_")
            shutil.copy(kp / rel, dst)
            add(name, reader, dst)
        from kikuchipy.data._dummy_files.bruker_h5ebsd import create_dummy_bruker_h5ebsd_file
        from kikuchipy.data._dummy_files.oxford_h5ebsd import create_dummy_oxford_h5ebsd_file

        create_dummy_bruker_h5ebsd_file(folder / "bruker.h5")
        add("bruker_h5", "scan", folder / "bruker.h5")
        add("bruker_h5_orientation", "orientation", folder / "bruker.h5")
        create_dummy_oxford_h5ebsd_file(folder / "oxford.h5oina", version="7.0")
        add("oxford_h5oina", "scan", folder / "oxford.h5oina")
        add("edax_h5_orientation", "orientation", folder / "edax_h5ebsd_patterns.h5")

    import tifffile

    stack = folder / "stack"
    stack.mkdir(exist_ok=True)
    for k in range(4):
        tifffile.imwrite(stack / f"p{k}.tif", pats[k])
    add("image_stack_tiff", "scan", stack / "p1.tif", stack)
    from PIL import Image

    pngs = folder / "pngs"
    pngs.mkdir(exist_ok=True)
    for k in range(3):
        Image.fromarray((pats[k] // 16).astype(np.uint8)).save(pngs / f"p{k}.png")
    add("image_stack_png", "scan", pngs / "p2.png", pngs)
    tifffile.imwrite(folder / "pages_tiled.tif", pats[:4], tile=(16, 16), compression="zlib", photometric="minisblack")
    add("tiff_stack_tiled", "scan", folder / "pages_tiled.tif")
    tifffile.imwrite(folder / "pages_strips.tif", pats[:4], rowsperstrip=5, photometric="minisblack")
    add("tiff_stack_strips", "scan", folder / "pages_strips.tif")
    shutil.copy(REPO / "sample_data" / "ref.tif", folder / "ref.tif")
    add("reference_tiff", "reference", folder / "ref.tif")

    from ebsdxc.io import read_orientation_map, write_ctf

    ang = REPO / "sample_data" / "polycrystal" / "scan.ang"
    shutil.copy(ang, folder / "scan.ang")
    add("ang", "orientation", folder / "scan.ang")
    write_ctf(folder / "scan.ctf", read_orientation_map(ang), overwrite=True)  # a rerun in the same folder
    add("ctf", "orientation", folder / "scan.ctf")
    return seeds


# ----------------------------------------------------------------------------- mutations


def mutate(data: bytes, kind: str, a: int, b: int) -> bytes:
    """``data`` damaged by mutation ``kind`` with parameters ``a``, ``b`` (any non-negative ints).

    ``truncate``: cut at byte ``a % len``; ``bitflip``: flip bit ``b % 8`` of byte ``a % len``;
    ``header``: overwrite byte ``a % min(len, 2048)`` (where headers, superblocks and
    first object headers sit) with ``b % 256``, or with ``b % 256 + 1`` if that is the same.
    """
    n = len(data)
    if kind == "truncate":
        return data[:a % n]
    buf = bytearray(data)
    if kind == "bitflip":
        buf[a % n] ^= 1 << (b % 8)
    elif kind == "header":
        i = a % min(n, 2048)
        v = b % 256
        buf[i] = v if v != buf[i] else (v + 1) % 256
    else:
        raise ValueError(f"unknown mutation {kind!r}")
    return bytes(buf)


# ----------------------------------------------------------------------------- worker


def _read_everything(reader, path):
    """Everything a reader gives for ``path``: {name: numpy array}."""
    import numpy as np

    from ebsdxc import io
    from ebsdxc.errors import InputError

    out = {}
    if reader == "reference":
        out["reference"] = io.read_reference(path)
        return out
    if reader == "orientation":
        omap = io.read_orientation_map(path)
        out["euler"] = np.asarray(omap.euler_deg)
        out["phase"] = np.asarray(omap.phase)
        for k, v in sorted(getattr(omap, "quality", {}).items()):
            out[f"quality/{k}"] = np.asarray(v)
        out["grid"] = np.array([omap.grid.rows, omap.grid.cols])
        return out
    with io.open_scan(path) as src:
        out["grid"] = np.array([src.grid.rows, src.grid.cols])
        out["patterns"] = src.read(0, src.n_patterns)
        out["present"] = (np.ones(src.grid.size, bool) if src.present is None
                          else np.asarray(src.present).reshape(-1))
        for name in ("static_background", "pattern_centres", "orientations"):
            value = getattr(src, name)()
            if value is not None:
                out[name] = np.asarray(value)
        try:  # kikuchipy's dummy H5OINA declares no phases: its map is refused, undamaged too
            omap = src.orientation_map()
        except InputError:
            omap = None
        if omap is not None:
            out["omap/euler"] = np.asarray(omap.euler_deg)
        json.dumps(src.describe())
    return out


def _same_change(got, want, a, b) -> bool:
    """Whether keys ``a`` and ``b`` (two views of the same stored values) changed in the same
    places, so that one changed value is counted once."""
    import numpy as np

    if not all(k in d for k in (a, b) for d in (got, want)):
        return False
    pairs = [(np.asarray(got[k]), np.asarray(want[k])) for k in (a, b)]
    if any(g.shape != w.shape for g, w in pairs) or pairs[0][0].shape != pairs[1][0].shape:
        return False
    masks = [~((g == w) | (np.isnan(g) & np.isnan(w))) for g, w in pairs]
    return bool(np.array_equal(masks[0], masks[1]))


def _compare(got, want) -> tuple[int, int]:
    """(values that differ, scan points dropped) between a damaged read and the original.

    Patterns are compared only where the damaged read says a pattern is present; points it
    no longer holds count as dropped (the run flags them missing: allowed with a warning).
    Any other difference (a shape, an orientation) counts every value.
    """
    import numpy as np

    n_diff = n_dropped = 0
    for key in set(got) | set(want):
        if key in ("present", "grid"):
            continue
        if key == "omap/euler" and _same_change(got, want, "orientations", key):
            continue  # the same stored angles seen twice (orientations() and the map): count once
        if key not in got or key not in want:
            n_diff += max(np.size(got.get(key, 0)), np.size(want.get(key, 0)))
            continue
        a, b = np.asarray(got[key]), np.asarray(want[key])
        if key == "patterns" and a.shape[1:] == b.shape[1:] and a.dtype == b.dtype:
            pa, pb = got["present"], want["present"]
            m = min(len(a), len(b))
            keep = pa[:m]
            n_diff += int(np.count_nonzero(a[:m][keep] != b[:m][keep]))
            n_diff += int(np.count_nonzero(pa[m:])) * int(np.prod(a.shape[1:]))
            n_dropped += int(np.count_nonzero(pb[:m] & ~pa[:m])) + int(np.count_nonzero(pb[m:]))
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            n_diff += max(a.size, b.size)
            continue
        if a.dtype.kind == "f":
            n_diff += int(np.count_nonzero(~((a == b) | (np.isnan(a) & np.isnan(b)))))
        else:
            n_diff += int(np.count_nonzero(a != b))
    return n_diff, n_dropped


def worker_main():  # pragma: no cover - runs in the subprocess
    """Read requests (JSON lines) from stdin; answer one JSON line each on stdout."""
    import faulthandler
    import warnings

    faulthandler.enable()
    warnings.simplefilter("ignore")
    from ebsdxc.errors import InputError

    baseline = {}
    warnings.simplefilter("ignore")
    for line in sys.stdin:
        req = json.loads(line)
        key = (req["reader"], req["original"])
        if key not in baseline:
            baseline[key] = _read_everything(req["reader"], req["original"])
        answer = {}
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = _read_everything(req["reader"], req["path"])
        except InputError as e:
            answer = {"outcome": "input_error", "message": str(e)}
        except Exception as e:  # noqa: BLE001 - recorded as a failure of the reader
            import traceback

            answer = {"outcome": "other_error", "message": f"{type(e).__name__}: {e}",
                      "traceback": traceback.format_exc()[-3000:]}
        else:
            n_diff, n_dropped = _compare(got, baseline[key])
            answer = {"outcome": "ok", "n_diff": n_diff, "n_dropped": n_dropped,
                      "warnings": [str(w.message)[:200] for w in caught]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


class Worker:
    """A reader subprocess; :meth:`check` sends it one input and classifies what happened."""

    def __init__(self, timeout=20.0):
        self.timeout = timeout
        self.proc = None

    def _start(self):
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   EBSDXC_READ_THREADS="2")
        # stderr to a file, not a pipe: a library that logs every damaged tag (tifffile) would
        # fill an undrained pipe and block the worker, which then looks like a hang
        import tempfile

        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (kept open with the worker)
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True, env=env, cwd=str(REPO))

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def read(self, seed: Seed, path) -> dict:
        """Outcome of reading ``path`` (a damaged copy of ``seed``) in the worker."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        req = {"reader": seed.reader, "original": str(seed.read_path), "path": str(path)}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        # the first request also imports ebsdxc and reads the baseline
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
        if not ready:
            self.close()
            return {"outcome": "hang", "message": f"no answer in {self.timeout:g} s"}
        line = self.proc.stdout.readline()
        if not line:
            rc = self.proc.wait()
            self._stderr.seek(0)
            err = self._stderr.read()[-3000:]
            self.proc = None
            return {"outcome": "crash", "message": f"worker exited with {rc}", "stderr": err}
        return json.loads(line)


def judge(answer: dict, mutation: str, path) -> str | None:
    """Why ``answer`` breaks the rules, or ``None`` when it keeps them."""
    outcome = answer["outcome"]
    if outcome in ("crash", "hang", "other_error"):
        return f"{outcome}: {answer['message']}"
    if outcome == "input_error":
        msg = answer["message"]
        if "\n" in msg.strip():
            return f"InputError message spans several lines: {msg!r}"
        if not msg.startswith(str(path)):
            return f"InputError message does not start with the file's path: {msg!r}"
        return None
    n_diff = answer["n_diff"]
    if answer["n_dropped"] and not answer["warnings"]:
        return f"{answer['n_dropped']} scan points dropped without a warning"
    if n_diff == 0:
        return None
    if mutation == "truncate":
        return f"a truncated file read without error, {n_diff} values differ"
    if n_diff > 1:
        return f"one damaged byte changed {n_diff} values without an error"
    return None


class Fuzzer:
    """Applies a mutation to a seed in a scratch copy, reads it in a :class:`Worker`, judges."""

    def __init__(self, seeds, scratch, *, timeout=20.0):
        self.seeds = {s.name: s for s in seeds}
        self.scratch = Path(scratch)
        self.worker = Worker(timeout)
        self._data = {name: s.target.read_bytes() for name, s in self.seeds.items()}

    def run(self, seed_name: str, mutation: str, a: int, b: int) -> tuple[dict, str | None]:
        seed = self.seeds[seed_name]
        damaged = mutate(self._data[seed_name], mutation, a, b)
        case = self.scratch / "case"
        if case.exists():
            shutil.rmtree(case)
        if seed.read_path != seed.target:  # a folder: copy it, damage one file
            shutil.copytree(seed.read_path, case)
            (case / seed.target.name).write_bytes(damaged)
            path = case
            msg_path = case / seed.target.name
        else:
            case.mkdir()
            path = msg_path = case / seed.target.name
            path.write_bytes(damaged)
        answer = self.worker.read(seed, path)
        # a folder's errors name the damaged image (or the folder)
        problem = judge(answer, mutation, msg_path)
        if problem and answer["outcome"] == "input_error" and msg_path != path:
            problem = judge(answer, mutation, path)
        return answer, problem

    def close(self):
        self.worker.close()


# ----------------------------------------------------------------------------- long run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scratch", default=None, help="folder for the damaged copies")
    parser.add_argument("--out", default=None, help="JSON report")
    args = parser.parse_args(argv)
    if args.worker:
        worker_main()
        return 0
    import tempfile

    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="ebsdxc-fuzz-"))
    seeds = build_seeds(scratch / "seeds")
    fuzzer = Fuzzer(seeds, scratch)
    rng = random.Random(args.seed)
    names = sorted(fuzzer.seeds)
    counts = {n: dict.fromkeys(MUTATIONS, 0) for n in names}
    outcomes: dict[str, int] = {}
    failures = []
    end = time.monotonic() + 60 * args.minutes
    total = 0
    try:
        while time.monotonic() < end:
            name, mutation = rng.choice(names), rng.choice(MUTATIONS)
            a, b = rng.randrange(1 << 31), rng.randrange(1 << 31)
            answer, problem = fuzzer.run(name, mutation, a, b)
            total += 1
            counts[name][mutation] += 1
            key = f"{name}/{answer['outcome']}"
            outcomes[key] = outcomes.get(key, 0) + 1
            if problem:
                failures.append({"seed": name, "mutation": mutation, "a": a, "b": b,
                                 "problem": problem, **{k: v for k, v in answer.items()
                                                        if k in ("traceback", "stderr")}})
                print(f"FAIL {name} {mutation} a={a} b={b}: {problem}", flush=True)
    finally:
        fuzzer.close()
    report = {"inputs": total, "minutes": args.minutes, "seed": args.seed,
              "per_format": counts, "outcomes": outcomes, "failures": failures,
              "undetectable": list(UNDETECTABLE),
              "seeds": {s.name: hashlib.sha256(s.target.read_bytes()).hexdigest()[:16]
                        for s in seeds}}
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(f"{total} inputs, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
