"""Stage profiles (``ebsdxc process --profile``, ebsdxc.timing): exclusive nesting, threads, the
report, and a real run that stores it."""

from __future__ import annotations

import json
import os
import threading

import h5py
import pytest

from ebsdxc import cli, timing


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(timing.time, "perf_counter", c)
    return c


def test_nested_stages_are_exclusive_and_the_busiest_bounds(clock):
    p = timing.StageProfile()
    with timing.activate(p), timing.stage("other"):
        clock.t += 9.0  # set-up: the most time, but no stage of the pipeline
        with timing.stage("correlate"):
            clock.t += 2.0
            with timing.stage("peaks"):
                clock.t += 3.0
            clock.t += 1.0
        with timing.stage("write"):
            clock.t += 0.5
    r = p.report()
    assert r["wall_s"] == pytest.approx(15.5)
    busy = {k: v["busy_s"] for k, v in r["stages"].items()}
    assert busy == pytest.approx({"correlate": 3.0, "peaks": 3.0, "write": 0.5, "other": 9.0})
    assert list(r["stages"]) == ["correlate", "peaks", "write", "other"]  # pipeline order
    assert r["stages"]["write"]["idle_s"] == pytest.approx(15.0)
    assert r["bound"] in ("correlate", "peaks")
    assert "bound by" in timing.format_report(r)


def test_stages_from_other_threads_and_no_profile(clock):
    with timing.stage("read"):  # nothing active: a no-op
        clock.t += 1.0
    p = timing.StageProfile()
    with timing.activate(p):
        def reader():
            with timing.stage("read"):
                clock.t += 0.25
        t = threading.Thread(target=reader)
        t.start()
        t.join()
    assert timing.active() is None
    assert p.report()["stages"]["read"] == {"busy_s": pytest.approx(0.25), "idle_s": pytest.approx(0.0),
                                            "calls": 1}


def test_process_profile_prints_the_stages_and_stores_them(tmp_path, sample_dir, capsys):
    out = tmp_path / "p.h5"
    assert cli.main(["process", os.path.join(sample_dir, "scan.h5"), "--ref", os.path.join(sample_dir, "ref.tif"),
                     "--device", "cpu", "-o", str(out), "-q", "--profile"]) == 0
    err = capsys.readouterr().err
    with h5py.File(out, "r") as f:
        report = json.loads(f["ebsdxc"].attrs["profile"])
    stages = report["stages"]
    assert {"read", "preprocess", "correlate", "peaks", "write", "other"} <= set(stages)
    assert all(s["busy_s"] >= 0 and s["calls"] >= 1 for s in stages.values())
    assert report["bound"] == max((k for k in stages if k not in ("other", "results")),
                                  key=lambda k: stages[k]["busy_s"])
    # "other" is the calling thread's time outside the stages: within the wall time (the CPU
    # engine's pool threads add theirs to preprocess, correlate and peaks on top of it)
    assert 0 < stages["other"]["busy_s"] < report["wall_s"]
    assert f"bound by {report['bound']}" in err and "correlate" in err
