"""The SLURM paths against a real SLURM (slurmctld, slurmd and munge on this machine), not a
fake ``srun``: ``--cluster slurm`` (worker jobs through dask-jobqueue) and
``pipelines/slurm-ebsdxc.sh`` submitted with sbatch, each compared with a single-process run,
their logs free of tracebacks; and a job cancelled mid-run (as at its time limit): one line
per process in its log, no traceback, an incomplete results file of valid points that
``--resume`` finishes, inline or submitted again.

The cluster is started with ``../shared/tools/slurm-single-node.sh`` (or the script named by
``EBSDXC_SLURM_TOOL``; Debian's slurm-wlm and munge, as root, about a minute the first time)
unless ``sinfo`` already answers; where it cannot start (no root, no apt, no tool) the tests
skip and say why."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import h5py
import pytest

pytest.importorskip("distributed")

from ebsdxc import read_results  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
SLURM_SH = os.path.join(REPO, "pipelines", "slurm-ebsdxc.sh")
TOOL_NAME = "slurm-single-node.sh"
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE"}

pytestmark = pytest.mark.slow

#: What a line about a cancel says (SLURM's, the job script's, ebsdxc's, Dask's on a TERM).
CANCEL_WORDS = re.compile(r"cancel|SIGTERM|signal[- ]15|terminat|killed", re.IGNORECASE)


def _sinfo_answers():
    if shutil.which("sinfo") is None:
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _tool():
    named = os.environ.get("EBSDXC_SLURM_TOOL")
    candidates = [named] if named else [os.path.join(REPO, os.pardir, "shared", "tools", TOOL_NAME),
                                        os.path.join(REPO, "shared", "tools", TOOL_NAME)]
    return next((os.path.abspath(p) for p in candidates if p and os.path.isfile(p)), None)


def start_slurm() -> str | None:
    """Start the one-node cluster where none answers: ``None`` when SLURM runs, else why not."""
    if _sinfo_answers():
        return None
    tool = _tool()
    if tool is None:
        return f"no SLURM here (sinfo does not answer) and no {TOOL_NAME} to start one (EBSDXC_SLURM_TOOL)"
    try:
        r = subprocess.run(["bash", tool], capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return f"{tool} did not start SLURM within 15 minutes"
    if r.returncode != 0 or not _sinfo_answers():
        lines = (r.stderr or r.stdout).strip().splitlines() or [f"exit status {r.returncode}"]
        return f"SLURM could not be started here: {lines[-1]}"
    return None


@pytest.fixture(scope="session")
def slurm():
    """The partition and CPUs of a running SLURM node; skips where none can be started."""
    why = start_slurm()
    if why:
        pytest.skip(why)
    out = subprocess.run(["sinfo", "-h", "-o", "%P %c %T"], capture_output=True, text=True, timeout=10).stdout
    nodes = [line.split() for line in out.splitlines() if line.strip()]
    usable = [(p, int(c)) for p, c, state in nodes if state.rstrip("*~#") in ("idle", "mixed", "allocated")]
    if not usable:
        pytest.skip(f"no SLURM node up to run jobs (sinfo: {out.strip()!r})")
    default = [u for u in usable if u[0].endswith("*")] or usable
    partition, cpus = default[0]
    return {"partition": partition.rstrip("*"), "cpus": cpus, "workers": max(1, min(2, cpus))}


@pytest.fixture
def jobs():
    """Job ids a test submits; whatever still runs at its end is cancelled."""
    ids = []
    yield ids
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, timeout=30)


def job_state(job_id):
    """(state, exit code) of a job, from scontrol (no accounting needed)."""
    r = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30)
    state = re.search(r"JobState=(\S+)", r.stdout)
    code = re.search(r"ExitCode=(\S+)", r.stdout)
    return (state.group(1) if state else "GONE"), (code.group(1) if code else "")


def wait_finished(job_id, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state, code = job_state(job_id)
        if state in FINISHED or state == "GONE":
            return state, code
        time.sleep(0.25)
    raise AssertionError(f"SLURM job {job_id} still {state} after {timeout} s")


def in_queue(job_ids):
    r = subprocess.run(["squeue", "-h", "-o", "%i", "-j", ",".join(job_ids)], capture_output=True, text=True,
                       timeout=30)
    return r.stdout.split() if r.returncode == 0 else []


def user_env(tmp_path, **extra):
    """The environment a user submits from: this Python first on PATH, no SLURM job around."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
    env.update(PATH=os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")]),
               PYTHON=sys.executable, TMPDIR=str(tmp_path), **extra)
    return env


def cli(*args, env=None, cwd=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "ebsdxc", "process", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


def assert_same_results(got_path, want_path):
    got, want = read_results(got_path), read_results(want_path)
    assert got["attrs"]["parameters"] == want["attrs"]["parameters"]  # the same settings, so the same results
    for name in ("displacement", "peak_height", "status", "done"):
        assert got[name].tobytes() == want[name].tobytes(), f"{name} differs from the single-process run"
    assert got["done"].all() and got["attrs"]["complete"]
    with h5py.File(got_path, "r") as f:
        assert str(f["ebsdxc"].attrs["cluster"]).startswith("tcp://")


def no_traceback(text, where):
    for bad in ("Traceback", "CommClosedError", "StreamClosedError", "Worker process died"):
        assert bad not in text, f"{where} holds a {bad}:\n{text[-4000:]}"


# =========================================================================== SIGTERM, no SLURM


@pytest.mark.parametrize("where", ["inline", "local"])
def test_process_terminated_mid_run_says_so_in_one_line_then_resumes(where, big_scan, sample_dir, tmp_path):
    """TERM to `ebsdxc process` mid-run (what SLURM's cancel and time limit send, and the job
    script forwards), with no SLURM: one line, exit status 143, no traceback; the results file
    incomplete with every done point valid; --resume gives the uninterrupted results."""
    ref = f"{sample_dir}/ref.tif"
    common = [big_scan, "--ref", ref, "--pipeline", "hrebsd", "--device", "cpu"]
    if where == "inline":  # a second or so of batches to stop in
        common += ["--batch", "1"]
    else:  # the job script's client: a Dask client
        common += ["--cluster", "local", "--workers", "1", "--rows-per-task", "1"]
    one = cli(big_scan, "--ref", ref, "--pipeline", "hrebsd", "--device", "cpu", "-q", "-o", str(tmp_path / "one.h5"))
    assert one.returncode == 0, one.stderr[-3000:]
    out = tmp_path / "run.h5"
    p = subprocess.Popen([sys.executable, "-m", "ebsdxc", "process", *common, "-o", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    seen = []
    try:
        for line in p.stderr:  # text mode: the progress bar's \r ends a line too
            seen.append(line)
            m = re.search(r"(\d+)/400 \[", line)
            if m and 0 < int(m.group(1)) < 400:
                break
        p.send_signal(signal.SIGTERM)
        rest = p.stderr.read()
        code = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    text = "".join(seen) + rest
    assert code == 143, text[-3000:]
    no_traceback(text, "stderr")
    assert [line for line in rest.splitlines() if CANCEL_WORDS.search(line)] == [
        "ebsdxc: cancelled (SIGTERM); the results file is marked incomplete; --resume continues"], rest
    part, want = read_results(out), read_results(tmp_path / "one.h5")
    assert not part["attrs"]["complete"] and 0 < part["done"].sum() < part["done"].size
    done = part["done"]
    for name in ("displacement", "peak_height", "status"):
        assert part[name][done].tobytes() == want[name][done].tobytes(), f"{name} of a point marked done"
    r = cli(*common, "-q", "-o", str(out), "--resume", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    got = read_results(out)
    assert got["done"].all() and got["attrs"]["complete"]
    for name in ("displacement", "peak_height", "status"):
        assert got[name].tobytes() == want[name].tobytes(), f"{name} differs from the uninterrupted run"


# =========================================================================== --cluster slurm


def test_cluster_slurm_worker_jobs_give_the_single_process_results(slurm, jobs, tmp_path, sample_dir):
    """`ebsdxc process --cluster slurm` from the submit host: dask-jobqueue submits the worker
    jobs with the recipe's [cluster.job] settings; results as one process, clean job logs, no
    job left behind."""
    logs = tmp_path / "logs"
    recipe = tmp_path / "slurm.toml"
    recipe.write_text(textwrap.dedent(f"""
        [roi]
        grid = [4, 4]
        size = 40

        [cluster]
        address = "slurm"
        workers = {slurm["workers"]}
        rows_per_task = 2

        [cluster.job]
        queue = "{slurm["partition"]}"
        walltime = "00:10:00"
        cores = 1
        processes = 1
        memory = "2GB"
        local_directory = "{tmp_path}"
        log_directory = "{logs}"
        death_timeout = 60
        scheduler_options = {{ dashboard_address = ":0" }}
    """))
    scan, ref = f"{sample_dir}/scan.h5", f"{sample_dir}/ref.tif"
    env = user_env(tmp_path)
    one = cli(scan, "--ref", ref, "--pipeline", str(recipe), "--device", "cpu", "-q", "-o", str(tmp_path / "one.h5"),
              env=env)
    assert one.returncode == 0, one.stderr[-3000:]

    t0 = time.monotonic()
    r = cli(scan, "--ref", ref, "--pipeline", str(recipe), "--cluster", "slurm", "--device", "cpu", "-q",
            "-o", str(tmp_path / "slurm.h5"), env=env, cwd=tmp_path)
    elapsed = time.monotonic() - t0
    worker_logs = sorted(logs.glob("*.err"))
    jobs.extend(re.sub(r"\D", "", p.stem) for p in worker_logs)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "100/100 points" in r.stdout
    no_traceback(r.stderr, "the client's stderr")
    assert len(worker_logs) == slurm["workers"], "one SLURM job per worker"
    for path in worker_logs:
        text = path.read_text() + path.with_suffix(".out").read_text()
        assert "Registered to:" in text, f"{path.name}: the worker never joined"
        no_traceback(text, path.name)
    assert_same_results(tmp_path / "slurm.h5", tmp_path / "one.h5")
    deadline = time.monotonic() + 30
    while in_queue(jobs) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not in_queue(jobs), "the worker jobs end with the run"
    print(f"--cluster slurm, {slurm['workers']} worker jobs, 100 points: {elapsed:.1f} s")


# =========================================================================== sbatch slurm-ebsdxc.sh


def sbatch(slurm, tmp_path, log, env, *, ntasks):
    """Submit the shipped script as a user would, its #SBATCH lines overridden on the command
    line for this one CPU node (no GPUs: --gres=none)."""
    r = subprocess.run(["sbatch", "--parsable", f"--partition={slurm['partition']}", "--nodes=1",
                        f"--ntasks-per-node={ntasks}", "--cpus-per-task=1", "--gres=none", "--time=00:10:00",
                        f"--output={log}", f"--chdir={tmp_path}", SLURM_SH],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0]


def test_sbatch_script_gives_the_single_process_results_and_a_clean_log(slurm, jobs, tmp_path, sample_dir):
    scan, ref = f"{sample_dir}/scan.h5", f"{sample_dir}/ref.tif"
    n = slurm["workers"]
    one = cli(scan, "--ref", ref, "--pipeline", "hrebsd", "--device", "cpu", "-q", "-o", str(tmp_path / "one.h5"))
    assert one.returncode == 0, one.stderr[-3000:]

    log = tmp_path / "job.out"
    env = user_env(tmp_path, SCAN=scan, REF=ref, OUT=str(tmp_path / "sbatch.h5"),
                   EXTRA_ARGS="--device cpu -q --rows-per-task 2")
    t0 = time.monotonic()
    job = sbatch(slurm, tmp_path, log, env, ntasks=n)
    jobs.append(job)
    state, code = wait_finished(job, timeout=300)
    elapsed = time.monotonic() - t0
    text = log.read_text()
    assert (state, code) == ("COMPLETED", "0:0"), text[-4000:]
    assert f"waiting for {n} Dask workers on 1 node(s)" in text
    assert "100/100 points" in text
    no_traceback(text, "the job log")
    assert "Stopping worker" in text and "End scheduler" in text  # the whole cluster went down, in order
    assert text.index("End worker") < text.index("Closing scheduler"), "workers stop before the scheduler"
    assert not (tmp_path / f"ebsdxc-dask-{job}.json").exists()  # the scheduler file is cleaned up
    assert_same_results(tmp_path / "sbatch.h5", tmp_path / "one.h5")
    print(f"sbatch slurm-ebsdxc.sh, {n} workers, 100 points: {elapsed:.1f} s from submission to the end")


@pytest.fixture(scope="module")
def cancelled_job(slurm, big_scan, sample_dir, tmp_path_factory):
    """The shipped script scancelled mid-run (what SLURM does at a job's time limit as well: TERM
    to every process of the job at once), and the uninterrupted single-process run to compare
    with: a dict of the job's id, state, exit code and log, its results file, ``one.h5``, the
    progress it was cancelled at and the seconds it took to go."""
    tmp = tmp_path_factory.mktemp("job")
    ref = f"{sample_dir}/ref.tif"
    one = cli(big_scan, "--ref", ref, "--pipeline", "hrebsd", "--device", "cpu", "-q", "-o", str(tmp / "one.h5"))
    assert one.returncode == 0, one.stderr[-3000:]
    out, log = tmp / "sbatch.h5", tmp / "job1.out"
    env = user_env(tmp, SCAN=big_scan, REF=ref, OUT=str(out), EXTRA_ARGS="--device cpu --rows-per-task 1")
    job = sbatch(slurm, tmp, log, env, ntasks=slurm["workers"])
    try:
        deadline = time.monotonic() + 300
        progress = []
        while time.monotonic() < deadline and job_state(job)[0] not in FINISHED:
            text = log.read_text() if log.exists() else ""
            progress = [int(p) for p in re.findall(r"(\d+)/400 \[", text)]
            if progress and 0 < progress[-1] < 400:
                break
            time.sleep(0.1)
        assert progress and 0 < progress[-1] < 400, f"no progress to cancel into:\n{log.read_text()[-3000:]}"
        t0 = time.monotonic()
        subprocess.run(["scancel", job], check=True, timeout=30)
        state, code = wait_finished(job, timeout=120)
        deadline = time.monotonic() + 60
        while in_queue([job]) and time.monotonic() < deadline:
            time.sleep(0.25)
        gone_s = time.monotonic() - t0
    finally:
        subprocess.run(["scancel", job], capture_output=True, timeout=30)
    return {"job": job, "state": state, "code": code, "log": log.read_text(), "out": out, "one": tmp / "one.h5",
            "env": env, "dir": tmp, "progress": progress[-1], "gone_s": gone_s}


def test_sbatch_job_cancelled_leaves_one_line_per_process(cancelled_job):
    """scancel: the script stops the client, the workers, then the scheduler itself, in time
    (its exit status, not SLURM's KILL after KillWait); the log holds no traceback and no Dask
    warning, and of the cancel only SLURM's line per step, the script's and the client's."""
    c = cancelled_job
    # a line of its own for each message: the progress bar ends in \r, not \n
    text = re.sub(r"(?=slurmstepd|slurm-ebsdxc\.sh: |ebsdxc: |srun: )", "\n", c["log"].replace("\r", "\n"))
    assert c["state"] == "CANCELLED"
    assert c["code"] == "143:0", f"the script did not finish its clean-up (exit code {c['code']}):\n{text[-4000:]}"
    no_traceback(text, "the cancelled job's log")
    assert not re.search(r" - (WARNING|ERROR|CRITICAL) - ", text), f"Dask complained:\n{text[-4000:]}"
    about = [line.strip() for line in text.splitlines() if CANCEL_WORDS.search(line)]
    slurm_own = [line for line in about if line.startswith("slurmstepd")]
    ours = sorted(line for line in about if not line.startswith("slurmstepd"))
    steps = [re.search(r"\*\*\* (JOB|STEP) (\S+) ", line) for line in slurm_own]
    assert all(steps) and len({m.group(2) for m in steps}) == len(steps), f"SLURM's lines: {slurm_own}"
    assert ours == [
        "ebsdxc: cancelled (SIGTERM); the results file is marked incomplete; --resume continues",
        "slurm-ebsdxc.sh: cancelled (SIGTERM); stopping the client, the workers, then the scheduler",
    ], f"lines about the cancel other than SLURM's: {ours}\n{text[-4000:]}"
    assert "End worker" in text and "End scheduler" in text  # the whole cluster went down, in order
    assert text.rindex("End worker") < text.rindex("Closing scheduler"), "workers stop before the scheduler"
    assert not (c["dir"] / f"ebsdxc-dask-{c['job']}.json").exists()  # the scheduler file is cleaned up
    print(f"cancelled at {c['progress']}/400 points, job gone {c['gone_s']:.1f} s after scancel")


def _copy(path, to):
    shutil.copyfile(path, to)
    return to


def test_sbatch_job_cancelled_leaves_an_incomplete_file_of_valid_points(cancelled_job):
    c = cancelled_job
    part, want = read_results(c["out"]), read_results(c["one"])
    assert not part["attrs"]["complete"] and 0 < part["done"].sum() < part["done"].size
    done = part["done"]
    for name in ("displacement", "peak_height", "status"):
        assert part[name][done].tobytes() == want[name][done].tobytes(), f"{name} of a point marked done"


def test_sbatch_job_cancelled_then_resumed_inline_gives_the_uninterrupted_results(cancelled_job, big_scan,
                                                                               sample_dir, tmp_path):
    """--resume without SLURM (one process) finishes what the cancelled job left."""
    out = _copy(cancelled_job["out"], tmp_path / "resumed.h5")
    r = cli(big_scan, "--ref", f"{sample_dir}/ref.tif", "--pipeline", "hrebsd", "--device", "cpu", "-q",
            "-o", str(out), "--resume")
    assert r.returncode == 0, r.stderr[-3000:]
    no_traceback(r.stderr, "the resumed run's stderr")
    got, want = read_results(out), read_results(cancelled_job["one"])
    assert got["attrs"]["parameters"] == want["attrs"]["parameters"]
    assert got["done"].all() and got["attrs"]["complete"]
    for name in ("displacement", "peak_height", "status"):
        assert got[name].tobytes() == want[name].tobytes(), f"{name} differs from the uninterrupted run"


def test_sbatch_job_cancelled_then_resubmitted_with_resume(slurm, jobs, cancelled_job, tmp_path):
    """The same job again with EXTRA_ARGS="--resume": the single-process results, a clean log."""
    out = _copy(cancelled_job["out"], tmp_path / "sbatch.h5")
    log = tmp_path / "job2.out"
    env = dict(cancelled_job["env"], OUT=str(out), TMPDIR=str(tmp_path),
               EXTRA_ARGS="--device cpu --rows-per-task 1 -q --resume")
    t0 = time.monotonic()
    job = sbatch(slurm, tmp_path, log, env, ntasks=slurm["workers"])
    jobs.append(job)
    state, code = wait_finished(job, timeout=300)
    resumed_s = time.monotonic() - t0
    text = log.read_text()
    assert (state, code) == ("COMPLETED", "0:0"), text[-4000:]
    assert "400/400 points" in text
    no_traceback(text, "the resumed job's log")
    assert_same_results(out, cancelled_job["one"])
    print(f"resumed job {resumed_s:.1f} s")
