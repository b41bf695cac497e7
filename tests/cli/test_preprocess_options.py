"""Preprocessing options through a recipe (the configuration loader) and through the CLI's flags."""

from __future__ import annotations

import json

import pytest

from ebsdxc.errors import InputError
from ebsdxc.preprocess import PreprocessConfig

# ================================================================ recipes

RECIPE = """
[preprocess]
dynamic_background_sigma = 8.0
bandpass_kind = "erf"
bandpass_cutoffs = [0.015, 0.35]
bandpass_width = 0.02
binning = 2
mask = "circle"
mask_centre = [239.5, 230.0]
mask_radius = 220.0
average_neighbours = 3
average_kernel = "circular"
average_sigma = 1.5
"""


def test_recipe_round_trip(tmp_path):
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    from ebsdxc.config import ProcessConfig, load_config

    p = tmp_path / "r.toml"
    p.write_text(RECIPE)
    cfg = load_config(p)[0]
    pre = cfg.preprocess
    assert pre == PreprocessConfig(dynamic_background_sigma=8.0, bandpass_kind="erf", bandpass_cutoffs=(0.015, 0.35),
                                   bandpass_width=0.02, binning=2, mask="circle", mask_centre=(239.5, 230.0),
                                   mask_radius=220.0, average_neighbours=3, average_kernel="circular",
                                   average_sigma=1.5)
    # through the results file's JSON parameters and back
    params = json.loads(json.dumps(cfg.parameters(), sort_keys=True))
    assert params["preprocess"]["binning"] == 2 and params["preprocess"]["bandpass_cutoffs"] == [0.015, 0.35]
    back = ProcessConfig.from_parameters(params)
    assert back.preprocess == pre
    # settings over that recipe (in its TOML shape): mask "none" switches it off, a Gaussian
    # band-pass replaces the erf one
    over = tomllib.loads('[preprocess]\nmask = "none"\nbandpass_kind = "gaussian"\nbandpass = [1.0, 20.0]\n')
    pre2 = load_config(p, over)[0].preprocess
    assert pre2.mask is None and pre2.mask_centre is None and pre2.mask_radius is None
    assert pre2.bandpass_kind == "gaussian" and pre2.bandpass == (1.0, 20.0) and pre2.bandpass_cutoffs is None
    assert pre2.binning == 2 and pre2.average_neighbours == 3


def test_old_parameters_without_the_new_keys_still_load():
    from ebsdxc.config import ProcessConfig

    params = ProcessConfig().parameters()
    for k in ("bandpass_kind", "bandpass_cutoffs", "bandpass_width", "binning", "mask", "mask_centre",
              "mask_radius", "average_neighbours", "average_kernel", "average_sigma"):
        del params["preprocess"][k]
    assert ProcessConfig.from_parameters(params).preprocess == PreprocessConfig()


@pytest.mark.parametrize("text,words", [
    ("binning = 0", "binning"),
    ("binning = 1.5", "binning"),
    ('mask = "square"', "mask"),
    ("mask_radius = 10.0", "mask"),
    ('bandpass_kind = "erf"', "bandpass_cutoffs"),
    ('bandpass_kind = "erf"\nbandpass_cutoffs = [0.3, 0.1]', "low < high"),
    ("bandpass_cutoffs = 0.1", "two numbers"),
    ("average_neighbours = 4", "odd"),
    ('average_kernel = "hann"', "kernel"),
    ("average_sigma = -1.0", "sigma"),
    ("mask_center = [1, 2]", "unknown key"),
])
def test_recipe_bad_values_are_input_errors(tmp_path, text, words):
    from ebsdxc.config import load_config

    p = tmp_path / "bad.toml"
    p.write_text("[preprocess]\n" + text + "\n")
    with pytest.raises(InputError, match=words) as e:
        load_config(p)
    assert str(p) in str(e.value)


# ================================================================ flags

def cli_config(*flags, pipeline=None):
    from ebsdxc.cli import _config_from_args, _parser

    argv = ["process", "scan.h5", "--ref-index", "0", *flags]
    if pipeline:
        argv += ["--pipeline", str(pipeline)]
    return _config_from_args(_parser().parse_args(argv))[0]


def test_cli_flags_reach_the_config():
    pre = cli_config("--pattern-binning", "4", "--bandpass-cutoffs", "0.01", "0.3", "--bandpass-width", "0.02",
                     "--mask", "circle", "--mask-radius", "200", "--mask-centre", "240,230.5",
                     "--average-neighbours", "5", "--average-kernel", "box", "--average-sigma", "2").preprocess
    assert pre == PreprocessConfig(binning=4, bandpass_kind="erf", bandpass_cutoffs=(0.01, 0.3), bandpass_width=0.02,
                                   mask="circle", mask_radius=200.0, mask_centre=(240.0, 230.5),
                                   average_neighbours=5, average_kernel="box", average_sigma=2.0)
    assert cli_config().preprocess == PreprocessConfig()
    # --mask-radius alone asks for the circle; --bandpass-kind erf with cutoffs is the same as cutoffs alone
    assert cli_config("--mask-radius", "50").preprocess.mask == "circle"
    a = cli_config("--bandpass-kind", "erf", "--bandpass-cutoffs", "0", "0.25").preprocess
    assert (a.bandpass_kind, a.bandpass_cutoffs, a.bandpass) == ("erf", (0.0, 0.25), None)
    # the detector binning of the strain options is a different option
    c = cli_config("--binning", "2", "--material", "Ni")
    assert c.strain.binning == 2 and c.preprocess.binning == 1


def test_cli_flags_over_a_recipe(tmp_path):
    p = tmp_path / "r.toml"
    p.write_text(RECIPE)
    pre = cli_config("--bandpass", "1", "20", "--mask", "none", "--average-neighbours", "0", pipeline=p).preprocess
    assert (pre.bandpass_kind, pre.bandpass, pre.bandpass_cutoffs) == ("gaussian", (1.0, 20.0), None)
    assert pre.mask is None and pre.mask_centre is None and pre.average_neighbours == 0
    assert pre.binning == 2 and pre.dynamic_background_sigma == 8.0  # the rest of the recipe stays


@pytest.mark.parametrize("flags,words", [
    (["--bandpass", "1", "20", "--bandpass-cutoffs", "0.01", "0.3"], "not both"),
    (["--bandpass", "1", "20", "--bandpass-kind", "erf"], "bandpass-cutoffs"),
    (["--bandpass-cutoffs", "0.01", "0.3", "--bandpass-kind", "gaussian"], "erf"),
    (["--bandpass-kind", "erf"], "--bandpass-cutoffs"),
    (["--bandpass-cutoffs", "0.3", "0.1"], "low < high"),
    (["--bandpass-cutoffs", "0.01", "0.3", "--bandpass-width", "0"], "width"),
    (["--mask", "none", "--mask-radius", "5"], "mask"),
    (["--mask-radius", "-5"], "radius"),
    (["--average-neighbours", "4"], "odd"),
    (["--average-neighbours", "3", "--average-sigma", "0"], "sigma"),
])
def test_cli_bad_combinations_are_input_errors(flags, words):
    with pytest.raises(InputError, match=words):
        cli_config(*flags)


@pytest.mark.parametrize("flags", [["--pattern-binning", "0"], ["--pattern-binning", "2.5"], ["--mask", "ellipse"],
                                   ["--mask-centre", "10"], ["--mask-centre", "a,b"], ["--bandpass-kind", "box"],
                                   ["--average-kernel", "hann"], ["--average-neighbours", "-1"],
                                   ["--bandpass-cutoffs", "-0.1", "0.2"], ["--bandpass-cutoffs", "0.1"]])
def test_cli_bad_flags_are_usage_errors(flags, capsys):
    from ebsdxc.cli import _parser

    with pytest.raises(SystemExit) as e:
        _parser().parse_args(["process", "scan.h5", "--ref-index", "0", *flags])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("ebsdxc: error:") and err.count("\n") == 1
