"""``ebsdxc distortion`` and ``ebsdxc process --mode dic --distortion``: calibrate an SEM
distortion from translated images, then remove it from the fields of a strained, moved specimen."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import tifffile
from exact_warps import texture
from test_sem_distortion import SHAPE, TRUE, _image, _through, _translated

from ebsdxc import cli
from ebsdxc import status as st
from ebsdxc.sem_distortion import DistortionModel

G = np.array([[1e-3, 0.0], [0.0, -3e-4]])
T = np.array([15.0, -6.0])


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    d = tmp_path_factory.mktemp("distortion")
    f = texture(1)
    tifffile.imwrite(d / "ref.tif", _translated(f, (0.0, 0.0)).astype(np.float32))
    (d / "translated").mkdir()
    for k, move in enumerate([(11.3, -4.2), (-7.5, 9.1), (3.2, 13.7), (-12.4, -8.8)]):
        tifffile.imwrite(d / "translated" / f"t{k}.tif", _translated(f, move).astype(np.float32))
    (d / "frames").mkdir()
    frame = _image(f, lambda x: (_through(TRUE, x) - T) @ np.linalg.inv(np.eye(2) + G).T)
    tifffile.imwrite(d / "frames" / "f1.tif", frame.astype(np.float32))
    return d


def test_calibrate_then_correct(series, capsys):
    d = series
    model_path = d / "model.json"
    assert cli.main(["distortion", "--ref", str(d / "ref.tif"), "--translated", str(d / "translated"),
                     "--step", "12", "-o", str(model_path)]) == 0
    assert "spatial distortion of degree 3 from 4 translated images" in capsys.readouterr().out
    model = DistortionModel.from_json(model_path.read_text())
    pts = np.stack(np.meshgrid(np.arange(20.0, 230, 20), np.arange(20.0, 190, 20)), -1).reshape(-1, 2)
    assert np.abs(model.spatial_at(pts) - TRUE.spatial_at(pts)).max() < 0.05
    strain = {}
    for name, extra in (("raw", []), ("fixed", ["--distortion", str(model_path)])):
        out = d / f"{name}.h5"
        assert cli.main(["process", str(d / "frames"), "--ref", str(d / "ref.tif"), "--mode", "dic", "--subset", "31",
                         "--step", "12", "-o", str(out), "-q", "--overwrite", *extra]) == 0
        with h5py.File(out, "r") as f:
            g = f["ebsdxc/dic"]
            strain[name] = g["strain"][0]
            if name == "fixed":
                assert g.attrs["displacement_complete"] and g.attrs["strain_complete"]
                rec = json.loads(g["distortion"].attrs["record"])
                assert rec["spatial_degree"] == 3
                meas, disp, status = g["measured"][0], g["displacement"][0], g["status"][0]
                ok = status == st.OK
                # the correction moved the fields by the distortion's change between X and X + u
                assert np.nanmax(np.abs(meas[ok] - disp[ok])) > 0.3
    E = 0.5 * ((np.eye(2) + G).T @ (np.eye(2) + G) - np.eye(2))
    errs = {}
    for name in ("raw", "fixed"):
        e = strain[name]
        ok = np.isfinite(e).all(axis=(-2, -1))
        errs[name] = (np.abs(e[ok] - E).max(), np.sqrt(((e[ok] - E) ** 2).mean(axis=0)).max())
    assert errs["raw"][1] > 1e-3, errs  # the distortion read as strain
    # measured: 5.6e-3 RMS raw, 1.0e-4 corrected with the calibrated model (within 0.05 px of the
    # true distortion; with the true model it is below 1e-4 at every point: test_sem_distortion)
    assert errs["fixed"][1] < 1.5e-4 and errs["fixed"][0] < 3e-4, errs


@pytest.mark.parametrize("content, words", [
    ("nonsense", "cannot read the distortion model"),
    (json.dumps({"shape": [10, 12]}), "calibrated on 12x10 px images"),
    (json.dumps({"shape": list(SHAPE), "drift_degree": 1, "drift": [[1.0], [0.0]]}), "give the start time of each"),
])
def test_bad_model_is_one_line(series, tmp_path, capsys, content, words):
    d = series
    (tmp_path / "m.json").write_text(content)
    code = cli.main(["process", str(d / "frames"), "--ref", str(d / "ref.tif"), "--mode", "dic", "--subset", "31",
                     "--step", "12", "--distortion", str(tmp_path / "m.json"), "-o", str(tmp_path / "r.h5"), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0], err
    assert not (tmp_path / "r.h5").exists()


def test_distortion_command_checks_its_input(series, tmp_path, capsys):
    d = series
    assert cli.main(["distortion", "--ref", str(d / "ref.tif"), "-o", str(tmp_path / "m.json")]) == 2
    assert "give --translated" in capsys.readouterr().err
    assert cli.main(["distortion", "--ref", str(d / "ref.tif"), "--static", str(d / "translated"),
                     "-o", str(tmp_path / "m.json")]) == 2
    assert "need --times" in capsys.readouterr().err
