"""The pipeline on a real Dask cluster (distributed.LocalCluster of worker processes): the
same results as one process, a worker killed mid-run, a transient error retried, campaigns."""

import os
import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from ebsdxc import process, read_results  # noqa: E402
from ebsdxc.cluster import DaskExecutor  # noqa: E402
from ebsdxc.config import ClusterConfig, ProcessConfig, RoiConfig, RunConfig  # noqa: E402
from ebsdxc.errors import InputError  # noqa: E402
from ebsdxc.io.results import ResultsWriter  # noqa: E402
from ebsdxc.progress import NullProgress  # noqa: E402
from ebsdxc.run.planning import plan_tasks  # noqa: E402

CFG = ProcessConfig(roi=RoiConfig(grid=(4, 4), size=40))
CPU = RunConfig(device="cpu")


@pytest.fixture(scope="module")
def single(big_scan, tmp_path_factory, sample_dir):
    out = tmp_path_factory.mktemp("single") / "one.h5"
    return read_results(process(big_scan, ref=f"{sample_dir}/ref.tif", config=CFG, run=CPU, output=out))


@pytest.fixture
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as c, distributed.Client(c) as client:
        yield client


def assert_identical(a, b):
    np.testing.assert_array_equal(a["displacement"], b["displacement"])
    np.testing.assert_array_equal(a["peak_height"], b["peak_height"])
    np.testing.assert_array_equal(a["status"], b["status"])
    assert a["done"].all() and b["done"].all()


class CountingWrites:
    """Counts how often each point is written (monkeypatched onto ResultsWriter.write)."""

    def __init__(self, monkeypatch, shape):
        self.count = np.zeros(shape[0] * shape[1], int)
        original = ResultsWriter.write

        def write(writer, start, displacement, *rest):
            self.count[start:start + len(displacement)] += 1
            return original(writer, start, displacement, *rest)

        monkeypatch.setattr(ResultsWriter, "write", write)


def test_row_tasks_cover_undone_rows():
    done = np.zeros((7, 3), bool)
    done[2] = True
    done[4, 1] = True  # a partly done row is in a task
    assert [(t.row0, t.row1) for t in plan_tasks(done, 2)] == [(0, 2), (3, 5), (5, 7)]
    assert plan_tasks(np.ones((3, 3), bool), 2) == []


def test_cluster_gives_the_single_process_results(big_scan, single, cluster, tmp_path, monkeypatch, sample_dir):
    counter = CountingWrites(monkeypatch, (40, 10))
    out = process(big_scan, ref=f"{sample_dir}/ref.tif", config=CFG, run=CPU, output=tmp_path / "c.h5",
                  executor=DaskExecutor(cluster, ClusterConfig(rows_per_task=3)))
    got = read_results(out)
    assert_identical(got, single)
    assert got["attrs"]["complete"] and (counter.count == 1).all()
    with h5py.File(out, "r") as f:
        assert f["ebsdxc"].attrs["cluster"].startswith("tcp://")
    assert all(cluster.run(_malloc_tuned).values()), "workers run with glibc's usual malloc thresholds"


def _malloc_tuned():
    from ebsdxc import cluster

    return cluster._malloc_tuned


class KillOneWorker(NullProgress):
    """After the first task's results arrive, SIGKILL one worker process (mid-run)."""

    def __init__(self, client):
        self.client = client
        self.killed = None

    def update(self, n=1):
        if self.killed is None:
            pids = self.client.run(os.getpid)
            addr, pid = sorted(pids.items())[0]
            os.kill(pid, signal.SIGKILL)
            self.killed = pid


def test_a_worker_killed_mid_run_loses_and_duplicates_nothing(big_scan, single, cluster, tmp_path,
                                                              monkeypatch, sample_dir):
    counter = CountingWrites(monkeypatch, (40, 10))
    killer = KillOneWorker(cluster)
    out = process(big_scan, ref=f"{sample_dir}/ref.tif", config=CFG, run=CPU, output=tmp_path / "k.h5",
                  executor=DaskExecutor(cluster, ClusterConfig(rows_per_task=1)), progress=killer)
    assert killer.killed is not None
    got = read_results(out)
    assert_identical(got, single)
    assert got["attrs"]["complete"]
    assert (counter.count == 1).all(), "every point written exactly once"
    cluster.wait_for_workers(2, timeout=60)  # the nanny replaced the dead worker
    assert killer.killed not in cluster.run(os.getpid).values()


class FailOnce:
    """A task function that fails the first time any worker runs it (the marker file is there),
    then runs the real one: a transient fault inside a task, on a real worker."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __call__(self, job, task):
        from ebsdxc.cluster import run_on_worker

        try:
            os.remove(self.marker)
        except FileNotFoundError:
            return run_on_worker(job, task)
        raise OSError("injected transient failure")


class FlakyDask(DaskExecutor):
    """The real Dask executor, whose tasks run :class:`FailOnce` around the real task function."""

    def __init__(self, client, config, marker):
        super().__init__(client, config)
        self.fail_once = FailOnce(marker)

    def submit(self, job_future, task, *, key):
        return self.client.submit(self.fail_once, job_future, task, key=key, retries=self.config.retries,
                                  pure=False)


@pytest.fixture(autouse=True)
def _ship_this_module_by_value():
    """Workers cannot import this test module: cloudpickle sends its classes by value."""
    import cloudpickle

    module = sys.modules[FailOnce.__module__]
    cloudpickle.register_pickle_by_value(module)
    yield
    cloudpickle.unregister_pickle_by_value(module)


def test_a_transient_error_is_retried(big_scan, single, tmp_path, sample_dir):
    marker = tmp_path / "fail-once"
    marker.write_text("the first task to see this file fails, then removes it")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as c, distributed.Client(c) as client:
        out = process(big_scan, ref=f"{sample_dir}/ref.tif", config=CFG, run=CPU, output=tmp_path / "r.h5",
                      executor=FlakyDask(client, ClusterConfig(rows_per_task=4, retries=1), marker))
    assert not marker.exists()  # the failure did happen
    assert_identical(read_results(out), single)


def test_retries_used_up_stop_the_run_and_resume_finishes_it(big_scan, single, tmp_path, sample_dir):
    marker = tmp_path / "fail-once"
    marker.write_text("x")
    out = tmp_path / "r.h5"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as c, distributed.Client(c) as client:
        with pytest.raises(InputError, match="failed on the cluster after 0 retries .*resume=True continues") as e:
            process(big_scan, ref=f"{sample_dir}/ref.tif", config=CFG, run=CPU, output=out,
                    executor=FlakyDask(client, ClusterConfig(rows_per_task=4, retries=0), marker))
        assert big_scan in str(e.value)
        assert not marker.exists()
        with h5py.File(out, "r") as f:
            assert not f["ebsdxc"].attrs["complete"]
        got = read_results(process(big_scan, ref=f"{sample_dir}/ref.tif", config=CFG, run=CPU, output=out,
                                   executor=DaskExecutor(client, ClusterConfig(rows_per_task=4)), resume=True))
    assert_identical(got, single)


def test_cli_cluster_local_and_campaign(tmp_path, sample_dir, big_scan):
    """`ebsdxc process A B --cluster local`: one results file per scan, as a user runs it."""
    a = tmp_path / "a.h5"
    b = tmp_path / "b.h5"
    with h5py.File(f"{sample_dir}/scan.h5", "r") as f:
        p = f["patterns"][...]
    for path in (a, b):
        with h5py.File(path, "w") as f:
            f["patterns"] = p
    r = subprocess.run([sys.executable, "-m", "ebsdxc", "process", str(tmp_path / "*.h5"), "--ref",
                        f"{sample_dir}/ref.tif", "--cluster", "local", "--workers", "2", "-q",
                        "--roi-grid", "4x4", "--roi-size", "40", "--device", "cpu", "-o", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    one = read_results(process(str(a), ref=f"{sample_dir}/ref.tif", config=CFG, run=CPU, output=tmp_path / "one.h5"))
    for name in ("a", "b"):
        assert_identical(read_results(tmp_path / "out" / f"{name}.ebsdxc.h5"), one)
    assert r.stdout.count("100/100 points") == 2


def test_campaign_goes_on_after_a_bad_scan(tmp_path, sample_dir):
    good = tmp_path / "good.h5"
    with h5py.File(f"{sample_dir}/scan.h5", "r") as f:
        p = f["patterns"][...]
    with h5py.File(good, "w") as f:
        f["patterns"] = p
    bad = tmp_path / "bad.h5"
    bad.write_text("not a scan")
    r = subprocess.run([sys.executable, "-m", "ebsdxc", "process", str(bad), str(good), "--ref",
                        f"{sample_dir}/ref.tif", "-q", "--device", "cpu"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1
    assert f"ebsdxc: error: {bad}" in r.stderr and "1 of 2 scans failed" in r.stderr
    assert (tmp_path / "good.ebsdxc.h5").exists() and not (tmp_path / "bad.ebsdxc.h5").exists()


def test_cluster_options_without_cluster_and_bad_address(tmp_path, sample_dir):
    for extra, words in ((["--retries", "3"], "add --cluster"), (["--cluster", "mars"], "--cluster must be"),
                         (["--cluster", "slurm"], "needs job settings")):
        r = subprocess.run([sys.executable, "-m", "ebsdxc", "process", f"{sample_dir}/scan.h5", "--ref",
                            f"{sample_dir}/ref.tif", "-o", str(tmp_path / "x.h5"), *extra],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr
        assert not (tmp_path / "x.h5").exists()


@pytest.mark.gpu
def test_gpu_cluster_gives_the_single_gpu_results(big_scan, tmp_path, sample_dir):
    """`--cluster local` on a GPU machine: one worker per GPU (dask-cuda when installed)."""
    from ebsdxc.cluster import connect

    cfg = ProcessConfig(roi=RoiConfig(grid=(4, 4), size=40))
    run = RunConfig(device="cuda", batch=16)
    one = read_results(process(big_scan, ref=f"{sample_dir}/ref.tif", config=cfg, run=run,
                               output=tmp_path / "one.h5"))
    client, cluster = connect(ClusterConfig(address="local"))
    try:
        client.wait_for_workers(1, timeout=120)
        got = read_results(process(big_scan, ref=f"{sample_dir}/ref.tif", config=cfg, run=run,
                                   output=tmp_path / "c.h5",
                                   executor=DaskExecutor(client, ClusterConfig(rows_per_task=2))))
        devices = client.run(_visible_devices)
    finally:
        client.close()
        cluster.close()
    assert_identical(got, one)
    assert "cuda" in got["attrs"]["device"]
    assert len(set(devices.values())) == len(devices), f"workers share a GPU: {devices}"


def _visible_devices():
    import cupy

    bus = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["pciBusID"]
    return bus, os.environ.get("CUDA_VISIBLE_DEVICES")
