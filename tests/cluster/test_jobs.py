"""Cluster jobs: the recipes' [cluster] table, the shipped dask-jobqueue recipes and the
sbatch/qsub scripts of ``pipelines/`` (no real SLURM or PBS: fake ``srun``/``pbsdsh``/``sbatch``
/``qsub`` on PATH, real Dask scheduler and workers on this machine)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import time

import h5py
import pytest

import ebsdxc
from ebsdxc.config import ClusterConfig, load_config, shipped_recipes
from ebsdxc.errors import InputError

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
PIPELINES = os.path.join(REPO, "pipelines")
SLURM_SH = os.path.join(PIPELINES, "slurm-ebsdxc.sh")
PBS_SH = os.path.join(PIPELINES, "pbs-ebsdxc.sh")


def write(path, text, mode=None):
    path.write_text(textwrap.dedent(text).lstrip())
    if mode:
        path.chmod(mode)
    return str(path)


def read(path):
    with open(path) as f:
        return f.read()


def cluster_of(recipe):
    """The recipe's [cluster] table as the one loader reads it (``RunConfig.cluster``)."""
    return load_config(recipe)[1].cluster


def process_of(recipe):
    """The settings of the recipe that define the result."""
    return load_config(recipe)[0]


def has(module):
    try:
        __import__(module)
    except ImportError:
        return False
    return True


needs_jobqueue = pytest.mark.skipif(not has("dask_jobqueue"), reason="dask-jobqueue is not installed")
needs_distributed = pytest.mark.skipif(not has("distributed"), reason="dask distributed is not installed")


# =========================================================================== [cluster] in recipes


def test_every_cluster_key(tmp_path):
    path = write(tmp_path / "r.toml", """
        [roi]
        grid = [3, 3]

        [cluster]
        address = "slurm"
        workers = 4
        retries = 5
        rows_per_task = 3

        [cluster.job]
        queue = "gpu"
        account = "abc123"
        walltime = "01:00:00"
        cores = 1
        memory = "16GB"
        processes = 1
        job_extra_directives = ["--gres=gpu:1"]
        worker_extra_args = ["--resources", "GPU=1"]
    """)
    cfg = cluster_of(path)
    assert cfg == ClusterConfig(address="slurm", workers=4, retries=5, rows_per_task=3, job={
        "queue": "gpu", "account": "abc123", "walltime": "01:00:00", "cores": 1, "memory": "16GB",
        "processes": 1, "job_extra_directives": ["--gres=gpu:1"], "worker_extra_args": ["--resources", "GPU=1"]})


def test_cluster_defaults_and_addresses(tmp_path):
    assert cluster_of(write(tmp_path / "empty.toml", "[cluster]\n")) == ClusterConfig()
    cfg = cluster_of(write(tmp_path / "tcp.toml", '[cluster]\naddress = "tcp://node12:8786"\n'))
    assert cfg == ClusterConfig(address="tcp://node12:8786")
    assert (cfg.workers, cfg.retries, cfg.rows_per_task, cfg.job) == (None, 2, None, {})
    cfg = cluster_of(write(tmp_path / "pbs.toml", '[cluster]\naddress = "pbs"\nworkers = 1\n'))
    assert (cfg.address, cfg.workers, cfg.job) == ("pbs", 1, {})


def test_no_cluster_table_is_the_default(tmp_path):
    assert cluster_of(write(tmp_path / "r.toml", "[roi]\ngrid = [3, 3]\n")) == ClusterConfig()
    assert cluster_of("hrebsd") == ClusterConfig()  # a shipped recipe, by name
    assert load_config("hrebsd")[1].executor == "inline"  # a [cluster] table alone sends nothing to it
    assert load_config("cluster-slurm")[1].executor == "inline"


def test_the_cluster_table_is_no_parameter(tmp_path):
    plain = write(tmp_path / "plain.toml", """
        [roi]
        grid = [3, 3]
        size = 32
    """)
    clustered = write(tmp_path / "clustered.toml", """
        [roi]
        grid = [3, 3]
        size = 32

        [cluster]
        address = "slurm"
        workers = 8

        [cluster.job]
        queue = "gpu"
        cores = 1
        memory = "8GB"
    """)
    a, b = process_of(plain), process_of(clustered)
    assert a == b
    params = b.parameters()
    assert params == a.parameters()
    assert "cluster" not in params and "slurm" not in json.dumps(params) and "gpu" not in json.dumps(params)


def test_shipped_cluster_recipes_compute_like_hrebsd():
    names = shipped_recipes()
    assert {"cluster-slurm", "cluster-pbs"} <= set(names)
    hr = process_of("hrebsd")
    for name in ("cluster-slurm", "cluster-pbs"):
        assert process_of(name) == hr, name  # same [roi], [preprocess], [correlation]
        assert process_of(name).parameters() == hr.parameters()
        # by name, by name.toml and by path
        assert cluster_of(name) == cluster_of(name + ".toml") == cluster_of(names[name])


def test_shipped_cluster_recipes_settings():
    s = cluster_of("cluster-slurm")
    assert (s.address, s.workers, s.retries, s.rows_per_task) == ("slurm", 2, 2, None)
    assert s.job["walltime"] == "02:00:00" and s.job["memory"] == "64GB" and s.job["processes"] == 1
    assert s.job["job_extra_directives"] == ["--gres=gpu:1"]
    assert s.job["cores"] == 1 and s.job["job_cpu"] == 8  # one thread per GPU worker, 8 CPUs booked
    assert {"queue", "account", "worker_extra_args"} <= set(s.job)
    p = cluster_of("cluster-pbs")
    assert (p.address, p.workers, p.retries) == ("pbs", 2, 2)
    assert "ngpus=1" in p.job["resource_spec"] and "ncpus=8" in p.job["resource_spec"]
    assert p.job["walltime"] == "02:00:00" and p.job["cores"] == 1 and p.job["processes"] == 1
    for path in (shipped_recipes()["cluster-slurm"], shipped_recipes()["cluster-pbs"]):
        head = read(path).split("\n[", 1)[0]
        assert "EDIT" in head, "the placeholders are announced at the top"


BAD = [
    ("workers = -1", "workers"),
    ("workers = 0", "workers"),
    ('workers = "2"', "workers"),
    ("workers = true", "workers"),
    ("retries = -1", "retries"),
    ("rows_per_task = 0", "rows per task"),
    ("rows_per_task = 1.5", "rows_per_task"),
    ('address = "mars"', "mars"),
    ("address = 5", "address"),
    ("nodes = 2", "nodes"),
    ('job = "big"', "[cluster.job]"),
    ('address = "local"\n[cluster.job]\nqueue = "gpu"', "[cluster.job]"),
    ('address = "tcp://h:8786"\n[cluster.job]\nqueue = "gpu"', "tcp://h:8786"),
]


@pytest.mark.parametrize("body,words", BAD, ids=[b for b, _ in BAD])
def test_bad_cluster_values_name_the_recipe(tmp_path, body, words):
    path = write(tmp_path / "bad.toml", "[roi]\ngrid = [3, 3]\n\n[cluster]\n" + body + "\n")
    with pytest.raises(InputError) as e:
        cluster_of(path)
    assert e.value.path == path and str(e.value).startswith(path)
    assert words in str(e.value)
    with pytest.raises(InputError) as again:  # one loader: a recipe is valid or refused as a whole
        process_of(path)
    assert str(again.value) == str(e.value)


def test_cluster_table_that_is_no_table(tmp_path):
    path = write(tmp_path / "bad.toml", "cluster = 5\n")
    with pytest.raises(InputError, match=r"\[cluster\] must be a table") as e:
        cluster_of(path)
    assert e.value.path == path


def test_missing_recipe_names_the_file(tmp_path):
    with pytest.raises(InputError, match="no such recipe file") as e:
        cluster_of(str(tmp_path / "nope.toml"))
    assert e.value.path == str(tmp_path / "nope.toml")


@needs_jobqueue
@pytest.mark.parametrize("address,key,words", [
    ("slurm", "partition", "walltime"),              # not a SLURMCluster argument; accepted ones listed
    ("slurm", "resource_spec", "job_cpu"),           # PBS only
    ("pbs", "job_cpu", "resource_spec"),             # SLURM only
    ("slurm", "job_extra", "renamed to job_extra_directives"),
    ("pbs", "env_extra", "renamed to job_script_prologue"),
    ("slurm", "n_workers", "[cluster] workers"),
    ("pbs", "scheduler", "set by ebsdxc"),
])
def test_unknown_job_keys(tmp_path, address, key, words):
    path = write(tmp_path / "job.toml", f'[cluster]\naddress = "{address}"\n[cluster.job]\n{key} = "x"\n'
                                        'cores = 1\nmemory = "1GB"\n')
    with pytest.raises(InputError) as e:
        cluster_of(path)
    msg = str(e.value)
    assert msg.startswith(path) and f"unknown key in [cluster.job]: {key}" in msg and words in msg
    assert ("SLURMCluster" if address == "slurm" else "PBSCluster") in msg


@needs_jobqueue
def test_job_keys_checked_against_the_right_class(tmp_path):
    slurm = cluster_of(write(tmp_path / "s.toml", '[cluster]\naddress = "slurm"\n[cluster.job]\n'
                                                           'job_cpu = 8\njob_mem = "10G"\ncores = 1\n'))
    assert slurm.job == {"job_cpu": 8, "job_mem": "10G", "cores": 1}
    pbs = cluster_of(write(tmp_path / "p.toml", '[cluster]\naddress = "pbs"\n[cluster.job]\n'
                                                         'resource_spec = "select=1:ngpus=1"\n'))
    assert pbs.job == {"resource_spec": "select=1:ngpus=1"}
    # No address: --cluster slurm|pbs chooses later, so keys of either class are taken.
    either = cluster_of(write(tmp_path / "e.toml", '[cluster.job]\njob_cpu = 8\n'
                                                            'resource_spec = "select=1"\n'))
    assert either.address == "local" and set(either.job) == {"job_cpu", "resource_spec"}


def test_job_keys_unchecked_without_dask_jobqueue(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)  # import fails as if not installed
    cfg = cluster_of(write(tmp_path / "r.toml", '[cluster]\naddress = "slurm"\n[cluster.job]\n'
                                                         'anything_goes = 1\n'))
    assert cfg.job == {"anything_goes": 1}


def test_recipes_command_lists_the_cluster_recipes(capsys):
    from ebsdxc import cli

    assert cli.main(["recipes"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^cluster-slurm\s+\S", out, re.MULTILINE) and re.search(r"^cluster-pbs\s+\S", out, re.MULTILINE)


# =========================================================================== dask-jobqueue job scripts


def fake_submitter(tmp_path, name, reply):
    """A fake sbatch/qsub (and scancel/qdel) on PATH that keeps the scripts it is given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    write(bin_dir / name, f"""
        #!/bin/bash
        cp "${{@: -1}}" "{tmp_path}/submitted-$$.sh"
        echo "{reply}"
    """, mode=0o755)
    for cancel in ("scancel", "qdel"):
        write(bin_dir / cancel, f'#!/bin/bash\necho "$@" >> "{tmp_path}/cancelled"\n', mode=0o755)
    return str(bin_dir)


SLURM_LINES = ["#SBATCH --gres=gpu:1", "#SBATCH -t 02:00:00", "#SBATCH -A EDIT-ME", "#SBATCH -p gpu",
               "#SBATCH --cpus-per-task=8", "#SBATCH --mem=", "#SBATCH -n 1"]
PBS_LINES = ["#PBS -l select=1:ncpus=8:ngpus=1:mem=64GB", "#PBS -l walltime=02:00:00", "#PBS -A EDIT-ME",
             "#PBS -q gpu", "#PBS -j oe"]
WORKER_WORDS = ["-m distributed.cli.dask_worker", "--nthreads 1", "--resources GPU=1", "--nanny",
                "--local-directory ${TMPDIR:-/tmp}", "--death-timeout 120"]


@needs_jobqueue
@pytest.mark.parametrize("name,cls,lines", [("cluster-slurm", "SLURMCluster", SLURM_LINES),
                                            ("cluster-pbs", "PBSCluster", PBS_LINES)])
def test_shipped_recipe_job_script(tmp_path, monkeypatch, name, cls, lines):
    import dask_jobqueue

    monkeypatch.chdir(tmp_path)  # log_directory is created where the client runs
    cfg = cluster_of(name)
    # (no dashboard: port 8787 may be taken by another test run here)
    with getattr(dask_jobqueue, cls)(**cfg.job, dashboard_address=None) as cluster:  # submits nothing yet
        script = cluster.job_script()
        assert not cluster.workers
    for line in lines:
        assert line in script, (line, script)
    worker = [w for w in script.splitlines() if "dask_worker" in w]
    assert len(worker) == 1, script
    for words in WORKER_WORDS:
        assert words in worker[0], (words, worker[0])
    assert "--nworkers" not in worker[0]  # processes = 1: one worker (one GPU) per job
    assert (tmp_path / "ebsdxc-dask-logs").is_dir()


@needs_jobqueue
@pytest.mark.parametrize("name,submit,reply,lines", [
    ("cluster-slurm", "sbatch", "Submitted batch job 4242", SLURM_LINES),
    ("cluster-pbs", "qsub", "4242.pbs-server", PBS_LINES)])
def test_connect_submits_the_recipe_jobs(tmp_path, monkeypatch, name, submit, reply, lines):
    """ebsdxc.cluster.connect with the shipped recipe: `workers` jobs go to (fake) sbatch/qsub."""
    from ebsdxc.cluster import connect

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", fake_submitter(tmp_path, submit, reply) + os.pathsep + os.environ["PATH"])
    cfg = cluster_of(name)
    client, cluster = connect(dataclasses.replace(cfg, job={**cfg.job, "dashboard_address": None}))
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("submitted-*.sh"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        client.close()
        cluster.close()
    scripts = sorted(tmp_path.glob("submitted-*.sh"))
    assert len(scripts) == 2  # [cluster] workers = 2 jobs
    for path in scripts:
        text = path.read_text()
        for line in lines:
            assert line in text, (line, text)
        assert cluster.scheduler_address.split("://")[-1] in text  # the workers call home
    assert "4242" in (tmp_path / "cancelled").read_text()  # closing the cluster cancels its jobs


# =========================================================================== the batch scripts


def directives_before_commands(path, prefix):
    """sbatch and qsub read directives only up to the first command: all must come before it."""
    seen_command = False
    for line in read(path).splitlines()[1:]:
        s = line.strip()
        if s.startswith(prefix):
            assert not seen_command, f"{path}: {line!r} after the first command is ignored by the scheduler"
        elif s and not s.startswith("#"):
            seen_command = True


@pytest.mark.parametrize("path", [SLURM_SH, PBS_SH], ids=os.path.basename)
def test_script_syntax(path):
    assert read(path).splitlines()[0].startswith("#!/bin/bash")
    r = subprocess.run(["bash", "-n", path], check=False, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "set -euo pipefail" in read(path)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
@pytest.mark.parametrize("path", [SLURM_SH, PBS_SH], ids=os.path.basename)
def test_shellcheck(path):
    r = subprocess.run(["shellcheck", "-s", "bash", path], check=False, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_slurm_script_directives():
    text = read(SLURM_SH)
    for d in ("#SBATCH --nodes=2", "#SBATCH --gres=gpu:2", "#SBATCH --ntasks-per-node=2",
              "#SBATCH --cpus-per-task=8", "#SBATCH --time=02:00:00", "##SBATCH --account=", "##SBATCH --partition="):
        assert d in text, d
    for words in ("--scheduler-file", "--nthreads", "--nworkers 1", "SLURM_LOCALID", "wait_for_workers",
                  "--cluster \"$ADDRESS\"", "trap cleanup EXIT", "srun ", "EDIT"):
        assert words in text, words
    directives_before_commands(SLURM_SH, "#SBATCH")


def test_pbs_script_directives():
    text = read(PBS_SH)
    for d in ("#PBS -l select=2:ncpus=16:ngpus=2", "#PBS -l walltime=02:00:00", "#PBS -l place=scatter",
              "##PBS -A", "##PBS -q"):
        assert d in text, d
    for words in ("--scheduler-file", "pbsdsh", "PBS_NODEFILE", "PBS_O_WORKDIR", "wait_for_workers",
                  "--cluster \"$ADDRESS\"", "trap cleanup EXIT", "EDIT"):
        assert words in text, words
    directives_before_commands(PBS_SH, "#PBS")


def fake_launchers(tmp_path):
    """srun: start the command once per task (SLURM_LOCALID=0..N-1) in the background, wait,
    and pass TERM on; pbsdsh: run the command (pbsdsh waits for its task). Both record the
    PIDs they start."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    pids = tmp_path / "pids"
    write(bin_dir / "srun", f"""
        #!/bin/bash
        n=${{SLURM_NTASKS:-1}}
        while [ $# -gt 0 ]; do
            case $1 in
                --ntasks=*) n=${{1#--ntasks=}}; shift ;;
                -*) shift ;;
                *) break ;;
            esac
        done
        pids=()
        for ((i = 0; i < n; i++)); do
            SLURM_LOCALID=$i SLURM_PROCID=$i SLURM_NODEID=0 "$@" &
            pids+=($!)
            echo $! >> "{pids}"
        done
        trap 'kill "${{pids[@]}}" 2>/dev/null; wait' TERM INT
        wait
    """, mode=0o755)
    write(bin_dir / "pbsdsh", f"""
        #!/bin/bash
        while [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done
        shift
        echo $$ >> "{pids}"
        exec "$@"
    """, mode=0o755)
    return str(bin_dir), pids


def script_env(tmp_path, bin_dir, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_"))}
    src = os.path.dirname(os.path.dirname(os.path.abspath(ebsdxc.__file__)))  # this ebsdxc
    env.update(PATH=os.pathsep.join([bin_dir, os.path.dirname(sys.executable), env.get("PATH", "")]),
               PYTHONPATH=os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               PYTHON=sys.executable, TMPDIR=str(tmp_path), WAIT_WORKERS_S="120", **extra)
    return env


def run_script(path, cwd, env, timeout):
    return subprocess.run(["bash", path], check=False, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def assert_all_gone(pid_file, timeout=20):
    """The processes the fake launchers started have ended (the script's trap shut them down)."""
    pids = [int(p) for p in pid_file.read_text().split()]
    assert pids
    deadline = time.monotonic() + timeout
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    assert not alive, f"still running after the script ended: {alive}"


def assert_done(path):
    with h5py.File(path, "r") as f:
        assert f["ebsdxc/done"][...].all()
        assert f["ebsdxc"].attrs["complete"]
        assert str(f["ebsdxc"].attrs["cluster"]).startswith("tcp://")


@needs_distributed
@pytest.mark.slow
def test_slurm_script_runs_a_scan_on_local_workers(tmp_path, sample_dir):
    """The sbatch script as SLURM would run it on one node with two tasks: a real scheduler, two
    real workers through (fake) srun, `ebsdxc process --cluster tcp://...` to the end."""
    bin_dir, pids = fake_launchers(tmp_path)
    out = tmp_path / "scan.ebsdxc.h5"
    env = script_env(tmp_path, bin_dir, SLURM_JOB_ID="4242", SLURM_JOB_NUM_NODES="1", SLURM_NTASKS="2",
                     SLURM_NTASKS_PER_NODE="2", SLURM_CPUS_PER_TASK="1",
                     SCAN=os.path.join(sample_dir, "scan.h5"), REF=os.path.join(sample_dir, "ref.tif"),
                     OUT=str(out), EXTRA_ARGS="--device cpu -q")
    r = run_script(SLURM_SH, tmp_path, env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr[-5000:]
    assert "waiting for 2 Dask workers on 1 node(s)" in r.stderr
    assert "100/100 points" in r.stdout
    assert "Traceback" not in r.stderr, r.stderr[-5000:]  # workers stopped before the scheduler
    assert_done(out)
    assert len(pids.read_text().split()) == 2  # one worker per task
    assert not (tmp_path / "ebsdxc-dask-4242.json").exists()  # the scheduler file is cleaned up
    assert_all_gone(pids)


@needs_distributed
@pytest.mark.slow
def test_pbs_script_runs_a_campaign_on_local_workers(tmp_path, sample_dir):
    """The qsub script on one (fake) node with two GPUs' worth of workers: two scans in one
    `ebsdxc process --cluster tcp://...`, one results file each in OUT."""
    bin_dir, pids = fake_launchers(tmp_path)
    for name in ("a", "b"):
        shutil.copy(os.path.join(sample_dir, "scan.h5"), tmp_path / f"{name}.h5")
    (tmp_path / "nodefile").write_text("node0\n")
    work = tmp_path / "submitted-from"
    work.mkdir()
    env = script_env(tmp_path, bin_dir, PBS_JOBID="4243.server", PBS_NODEFILE=str(tmp_path / "nodefile"),
                     PBS_O_WORKDIR=str(work), GPUS_PER_NODE="2",
                     SCANS=str(tmp_path / "*.h5"),  # a glob: passed on as it is, ebsdxc expands it
                     REF=os.path.join(sample_dir, "ref.tif"), OUT=str(tmp_path / "results"),
                     EXTRA_ARGS="--device cpu -q")
    r = run_script(PBS_SH, tmp_path, env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr[-5000:]
    assert "waiting for 2 Dask workers on 1 node(s)" in r.stderr
    assert r.stdout.count("100/100 points") == 2
    assert "Traceback" not in r.stderr, r.stderr[-5000:]  # workers stopped before the scheduler
    for name in ("a", "b"):
        assert_done(tmp_path / "results" / f"{name}.ebsdxc.h5")
    assert sorted(os.listdir(work)) == []  # scheduler file and node script are cleaned up
    assert_all_gone(pids)


@needs_distributed
@pytest.mark.slow
def test_pbs_script_on_qdel_stops_in_order_and_resumes(tmp_path, sample_dir, big_scan):
    """qdel (or the wall time): PBS sends TERM to every process of the job at once (here: the
    job script's whole process group, the workers of (fake) pbsdsh included). The script stops
    the client, the workers, then the scheduler within PBS's kill_delay (10 s): exit 143, one
    line from the script and one from ebsdxc, no traceback, an incomplete results file whose
    done points are valid; the same job with --resume gives the uninterrupted results."""
    import signal

    from ebsdxc.io.results import read_results

    bin_dir, pids = fake_launchers(tmp_path)
    (tmp_path / "nodefile").write_text("node0\n")
    work = tmp_path / "submitted-from"
    work.mkdir()
    ref = os.path.join(sample_dir, "ref.tif")
    one = subprocess.run([sys.executable, "-m", "ebsdxc", "process", big_scan, "--ref", ref, "--pipeline", "hrebsd",
                          "--device", "cpu",
                          "-q", "-o", str(tmp_path / "one.h5")], capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    out = tmp_path / "pbs.h5"
    env = script_env(tmp_path, bin_dir, PBS_JOBID="4245.server", PBS_NODEFILE=str(tmp_path / "nodefile"),
                     PBS_O_WORKDIR=str(work), GPUS_PER_NODE="1", SCAN=big_scan, REF=ref, OUT=str(out),
                     EXTRA_ARGS="--device cpu --rows-per-task 1")
    p = subprocess.Popen(["bash", PBS_SH], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = []
    try:
        for line in p.stderr:
            seen.append(line)
            m = re.search(r"(\d+)/400 \[", line)
            if m and 0 < int(m.group(1)) < 400:
                break
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGTERM)
        rest = p.stderr.read()
        code = p.wait(timeout=60)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    text = ("".join(seen) + rest).replace("\r", "\n")
    assert code == 143, text[-4000:]
    assert took < 10, f"the clean-up took {took:.1f} s: PBS kills the job 10 s after its TERM"
    for bad in ("Traceback", "CommClosedError", "StreamClosedError", "Worker process died"):
        assert bad not in text, f"the log holds a {bad}:\n{text[-4000:]}"
    about = sorted(line.strip() for line in re.sub(r"(?=pbs-ebsdxc\.sh: |ebsdxc: )", "\n", text).splitlines()
                   if re.search(r"cancel|SIGTERM|terminat|killed", line, re.IGNORECASE))
    assert about == [
        "ebsdxc: cancelled (SIGTERM); the results file is marked incomplete; --resume continues",
        "pbs-ebsdxc.sh: cancelled (SIGTERM); stopping the client, the workers, then the scheduler",
    ], text[-4000:]
    assert_all_gone(pids)
    assert sorted(os.listdir(work)) == []  # scheduler file and node script cleaned up
    part, want = read_results(out), read_results(tmp_path / "one.h5")
    assert not part["attrs"]["complete"] and 0 < part["done"].sum() < part["done"].size
    done = part["done"]
    for name in ("displacement", "peak_height", "status"):
        assert part[name][done].tobytes() == want[name][done].tobytes(), f"{name} of a point marked done"
    pids.unlink()
    env["EXTRA_ARGS"] = "--device cpu --rows-per-task 1 -q --resume"
    r = run_script(PBS_SH, tmp_path, env, timeout=300)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-4000:]
    got = read_results(out)
    assert got["done"].all() and got["attrs"]["complete"]
    for name in ("displacement", "peak_height", "status"):
        assert got[name].tobytes() == want[name].tobytes(), f"{name} differs from the uninterrupted run"


@needs_distributed
@pytest.mark.slow
def test_slurm_script_passes_ebsdxc_failure_on(tmp_path, sample_dir):
    """A scan ebsdxc cannot read: the job fails with ebsdxc's exit status, cluster shut down."""
    bin_dir, pids = fake_launchers(tmp_path)
    env = script_env(tmp_path, bin_dir, SLURM_JOB_ID="4244", SLURM_JOB_NUM_NODES="1", SLURM_NTASKS="1",
                     SCAN=str(tmp_path / "missing.h5"), REF=os.path.join(sample_dir, "ref.tif"),
                     EXTRA_ARGS="--device cpu -q")
    r = run_script(SLURM_SH, tmp_path, env, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr[-5000:]
    assert f"ebsdxc: error: {tmp_path / 'missing.h5'}" in r.stderr
    assert not (tmp_path / "ebsdxc-dask-4244.json").exists()
    assert_all_gone(pids)


@pytest.mark.parametrize("path", [SLURM_SH, PBS_SH], ids=os.path.basename)
def test_script_without_scan_says_so(tmp_path, path):
    bin_dir, _ = fake_launchers(tmp_path)
    env = script_env(tmp_path, bin_dir, PBS_NODEFILE=os.devnull)
    env.pop("SCAN", None)
    env.pop("SCANS", None)
    r = run_script(path, tmp_path, env, timeout=60)
    assert r.returncode == 2 and "set SCAN (or SCANS)" in r.stderr, r.stderr
    assert not list(tmp_path.glob("ebsdxc-dask-*"))


def test_scripts_are_package_data():
    """pyproject ships pipelines/*.sh with the recipes (ebsdxc.pipelines)."""
    text = read(os.path.join(REPO, "pyproject.toml"))
    assert re.search(r'"ebsdxc\.pipelines" = \[[^\]]*"\*\.sh"', text)
    assert stat.S_ISREG(os.stat(SLURM_SH).st_mode) and stat.S_ISREG(os.stat(PBS_SH).st_mode)
