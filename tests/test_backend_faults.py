"""Choosing the device where no GPU is usable (issue 20): ``--device cuda`` is one clear line and
exit 2, before any file is written; ``auto`` runs on the CPU, saying so once per process where
CuPy is installed (the user meant to use a GPU) and silently where it is not (a CPU install).

``CUDA_VISIBLE_DEVICES=""`` makes CUDA itself see no device: on a GPU machine these tests run
the real "CuPy installed, no usable GPU" case; here, without CuPy, the "not installed" one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ebsdxc.backend import select_backend
from ebsdxc.errors import InputError
from ebsdxc.io.results import read_results

CUPY = importlib.util.find_spec("cupy") is not None
NO_GPU = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ebsdxc", *map(str, args)], env=NO_GPU, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("device", ["cuda", "cuda:1", pytest.param("gpu", id="gpu-alias")])
def test_device_cuda_without_a_usable_gpu_is_one_line(tmp_path, sample_dir, device):
    out = tmp_path / "out.h5"
    res = _cli("process", os.path.join(sample_dir, "scan.h5"), "--ref", os.path.join(sample_dir, "ref.tif"),
               "-o", out, "--device", device, "-q", cwd=tmp_path)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith(f"ebsdxc: error: device {device} asked for, but "), res.stderr
    assert ("no CUDA device" if CUPY else "CuPy is not installed") in res.stderr, res.stderr
    assert "use device cpu or auto" in res.stderr and "Traceback" not in res.stderr
    assert not out.exists()  # refused before anything was written


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "cuda:-1", "cuda0"])
def test_unknown_device_is_an_input_error(device):
    with pytest.raises(InputError, match="device must be auto, cpu, cuda or cuda:N"):
        select_backend(device)


AUTO_SCRIPT = textwrap.dedent('''
    import json, sys, warnings

    from ebsdxc.config import RunConfig
    from ebsdxc.run import process
    from ebsdxc.run.executors import ThreadExecutor

    scan, ref = sys.argv[1:3]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # Python's own once-per-place filter would hide repeats
        with ThreadExecutor(3, rows_per_task=1) as ex:  # ten tasks, three pipelines built
            process(scan, ref=ref, output="auto.h5", run=RunConfig(device="auto", batch=7), executor=ex)
    print(json.dumps([str(w.message) for w in caught if "GPU" in str(w.message)]))
''')


def test_auto_without_a_usable_gpu_runs_on_the_cpu_warning_once(tmp_path, sample_dir):
    scan, ref = os.path.join(sample_dir, "scan.h5"), os.path.join(sample_dir, "ref.tif")
    (tmp_path / "auto.py").write_text(AUTO_SCRIPT)
    res = subprocess.run([sys.executable, "auto.py", scan, ref], env=NO_GPU, cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    lines = json.loads(res.stdout.splitlines()[-1])
    if CUPY:  # installed, so a GPU was meant: said once, not once per task or pipeline
        assert len(lines) == 1 and lines[0].startswith("device auto found no usable GPU: "), lines
    else:  # a CPU-only install: the CPU is what was meant
        assert lines == []
    got = read_results(tmp_path / "auto.h5")
    assert got["attrs"]["device"].startswith("cpu") and got["attrs"]["complete"]
    cpu = _cli("process", scan, "--ref", ref, "-o", tmp_path / "cpu.h5", "--device", "cpu", "-q", cwd=tmp_path)
    assert cpu.returncode == 0 and cpu.stderr == "", cpu.stderr
    want = read_results(tmp_path / "cpu.h5")
    for k in ("displacement", "peak_height", "status", "done"):
        np.testing.assert_array_equal(got[k], want[k])
