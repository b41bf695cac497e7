"""The SLURM paths against a real SLURM (slurmctld, slurmd and munge on this machine), not a
fake ``srun``: ``--cluster slurm`` (worker jobs through dask-jobqueue) and
``pipelines/slurm-ebsdxc.sh`` submitted with sbatch, each compared with a single-process run,
their logs free of tracebacks; and a job cancelled mid-run (as at its time limit), submitted
again with ``--resume``.

The cluster is started with ``../shared/tools/slurm-single-node.sh`` (or the script named by
``EBSDXC_SLURM_TOOL``; Debian's slurm-wlm and munge, as root, about a minute the first time)
unless ``sinfo`` already answers; where it cannot start (no root, no apt, no tool) the tests
skip and say why."""

from __future__ import annotations

import os
import re
import shutil
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


def test_sbatch_job_cancelled_mid_run_then_resubmitted_with_resume(slurm, jobs, tmp_path, big_scan,
                                                                    sample_dir):
    """scancel mid-run (what SLURM does at a job's time limit: TERM to every process of the
    job), then the same job again with EXTRA_ARGS="--resume": the single-process results."""
    ref = f"{sample_dir}/ref.tif"
    n = slurm["workers"]
    one = cli(big_scan, "--ref", ref, "--pipeline", "hrebsd", "--device", "cpu", "-q", "-o",
              str(tmp_path / "one.h5"))
    assert one.returncode == 0, one.stderr[-3000:]
    out = tmp_path / "sbatch.h5"

    log1 = tmp_path / "job1.out"
    env = user_env(tmp_path, SCAN=big_scan, REF=ref, OUT=str(out), EXTRA_ARGS="--device cpu --rows-per-task 1")
    job1 = sbatch(slurm, tmp_path, log1, env, ntasks=n)
    jobs.append(job1)
    deadline = time.monotonic() + 300
    progress = []
    while time.monotonic() < deadline and job_state(job1)[0] not in FINISHED:
        text = log1.read_text() if log1.exists() else ""
        progress = [int(p) for p in re.findall(r"(\d+)/400 \[", text)]
        if progress and 0 < progress[-1] < 400:
            break
        time.sleep(0.1)
    assert progress and 0 < progress[-1] < 400, f"no progress to cancel into:\n{log1.read_text()[-3000:]}"
    t0 = time.monotonic()
    subprocess.run(["scancel", job1], check=True, timeout=30)
    state, _ = wait_finished(job1, timeout=120)
    deadline = time.monotonic() + 60
    while in_queue([job1]) and time.monotonic() < deadline:
        time.sleep(0.25)
    cancelled_s = time.monotonic() - t0
    assert state == "CANCELLED"
    part = read_results(out)
    assert not part["attrs"]["complete"] and 0 < part["done"].sum() < part["done"].size
    want = read_results(tmp_path / "one.h5")
    done = part["done"]
    for name in ("displacement", "peak_height", "status"):
        assert part[name][done].tobytes() == want[name][done].tobytes(), f"{name} of a point marked done"

    log2 = tmp_path / "job2.out"
    env["EXTRA_ARGS"] = "--device cpu --rows-per-task 1 -q --resume"
    t0 = time.monotonic()
    job2 = sbatch(slurm, tmp_path, log2, env, ntasks=n)
    jobs.append(job2)
    state, code = wait_finished(job2, timeout=300)
    resumed_s = time.monotonic() - t0
    text = log2.read_text()
    assert (state, code) == ("COMPLETED", "0:0"), text[-4000:]
    assert "400/400 points" in text
    no_traceback(text, "the resumed job's log")
    assert_same_results(out, tmp_path / "one.h5")
    print(f"cancelled at {progress[-1]}/400 points, job gone {cancelled_s:.1f} s after scancel; "
          f"resumed job {resumed_s:.1f} s")
