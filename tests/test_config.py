"""The configuration schema (ebsdxc.config): one dataclass per recipe table, TOML keys = field names,
one loader for recipes and overrides (the command line), each rule validated in one place."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from ebsdxc.config import (
    TABLES,
    ClusterConfig,
    GrainsConfig,
    ProcessConfig,
    RoiConfig,
    RunConfig,
    load_config,
    shipped_recipes,
)
from ebsdxc.dic import DicConfig
from ebsdxc.engines.base import EngineConfig
from ebsdxc.errors import InputError
from ebsdxc.hrebsd import StrainConfig
from ebsdxc.preprocess import PreprocessConfig
from ebsdxc.refine import RefineConfig

CLASSES = {"roi": RoiConfig, "preprocess": PreprocessConfig, "correlation": EngineConfig, "strain": StrainConfig,
           "grains": GrainsConfig, "refine": RefineConfig, "dic": DicConfig, "run": RunConfig, "cluster": ClusterConfig}

# A value other than the default for every field of every table, as a recipe writes it.
EVERY_KEY = {
    "roi": {"layout": "ring", "grid": [3, 4], "size": 40, "margin": 2, "drop_corners": True, "n": 6,
            "radius": 50.0, "include_centre": False, "centres": "centres.txt"},
    "preprocess": {"static_background": "bg.tif", "static_operation": "divide", "dynamic_background_sigma": 9.0,
                   "bandpass": [1.0, 20.0], "window": "none", "bandpass_kind": "gaussian",
                   "bandpass_cutoffs": None, "bandpass_width": 0.02, "binning": 2, "mask": "circle",
                   "mask_centre": [100.0, 90.5], "mask_radius": 80.0, "average_neighbours": 3,
                   "average_kernel": "box", "average_sigma": 2.0},
    "correlation": {"mode": "window", "max_shift": 12, "subpixel": "upsampled", "upsample": 8, "compensate": False,
                    "circular": True, "kernel": "grouped_overlap:g=4,kr=8", "engine": "fft", "precision": "tf32",
                    "peak_precision": "fp64"},
    "strain": {"material": "Ni", "pc": [0.5, 0.4, 0.6], "pc_ref": [0.5, 0.45, 0.6], "pc_convention": "tsl",
               "pc_map": "constant", "pixel_size": 40.0, "binning": 2, "orientation": [10.0, 20.0, 30.0],
               "sample_tilt": 69.0, "detector_tilt": 2.0, "remap_threshold_deg": 0.5, "min_peak_height": 0.4,
               "outlier_sigma": 3.0, "residual_floor_px": 0.2, "min_rois": 6, "step": 0.5, "gnd": False,
               "slip_systems": "slip.csv", "master_pattern": "ni.h5", "pc_calibrate": True,
               "pc_calibration_points": [3, 4], "pc_model": "extrapolation", "simulated_pc": "refine"},
    "grains": {"per_grain": True, "tolerance_deg": 3.0, "min_size": 8, "rule": "centre", "min_boundary_distance": 1,
               "similarity_threshold": 0.6},
    "refine": {"method": "icgn", "max_iterations": 20, "tolerance_px": 0.001, "margin": 0.1, "max_outside": 0.1,
               "min_zncc": 0.3, "region": "rois"},
    "dic": {"enabled": True, "subset": 21, "step": 5, "search": 8, "coarse_size": 256, "shape_function": "quadratic",
            "max_iterations": 20, "tolerance_px": 0.01, "min_zncc": 0.7, "strain_window": 7, "guess": "search",
            "seed_spacing": 4, "mask": "mask.png", "polygon": [[0.0, 0.0], [10.0, 0.0], [10.0, 10.0]],
            "incremental": True, "distortion": "model.json", "frame_times": [1.0, 2.5], "reference_time": 0.5,
            "tile": 1024, "tile_margin": 32},
    "run": {"device": "cpu", "batch": 16, "threads": 2, "executor": "threads"},
    "cluster": {"address": "slurm", "workers": 3, "retries": 1, "rows_per_task": 4, "job": {"cores": 1}},
}


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(v)  # numbers, and strings as TOML basic strings


def toml(tables: dict) -> str:
    """A recipe of ``tables`` (``None`` values left out: TOML has no null)."""
    lines = []
    for table, values in tables.items():
        lines.append(f"[{table}]")
        subs = {k: v for k, v in values.items() if isinstance(v, dict)}
        lines += [f"{k} = {toml_value(v)}" for k, v in values.items() if v is not None and k not in subs]
        for k, sub in subs.items():
            lines.append(f"[{table}.{k}]")
            lines += [f"{kk} = {toml_value(vv)}" for kk, vv in sub.items()]
    return "\n".join(lines) + "\n"


def recipe(tmp_path, tables, name="r.toml"):
    path = tmp_path / name
    path.write_text(tables if isinstance(tables, str) else toml(tables))
    return str(path)


def section(pcfg, rcfg, table):
    return {"roi": pcfg.roi, "preprocess": pcfg.preprocess, "correlation": pcfg.correlation,
            "strain": pcfg.strain, "grains": pcfg.grains, "refine": pcfg.refine, "dic": pcfg.dic, "run": rcfg,
            "cluster": rcfg.cluster}[table]


def as_recipe(v):
    return [as_recipe(x) for x in v] if isinstance(v, tuple) else v


# --------------------------------------------------------------------------- the schema


def test_every_table_is_a_dataclass_whose_fields_are_the_keys():
    assert set(TABLES) == set(CLASSES) == set(EVERY_KEY)
    for table, cls in CLASSES.items():
        fields = {f.name for f in dataclasses.fields(cls)} - ({"cluster"} if table == "run" else set())
        assert set(EVERY_KEY[table]) == fields, table  # a new field needs its line here


def test_every_key_of_every_table_reaches_its_field(tmp_path):
    (tmp_path / "centres.txt").write_text("10 10\n")
    path = recipe(tmp_path, EVERY_KEY)
    pcfg, rcfg = load_config(path)
    for table, values in EVERY_KEY.items():
        obj = section(pcfg, rcfg, table)
        for key, value in values.items():
            got = as_recipe(getattr(obj, key))
            # file settings are relative to the recipe's folder
            if key in ("centres", "static_background", "slip_systems", "master_pattern") or (
                    (table, key) in (("dic", "mask"), ("dic", "distortion"))):
                value = str(tmp_path / value)
            assert got == value, (table, key, got, value)
    # and nothing differs from the defaults but what the recipe says
    for table, cls in CLASSES.items():
        obj = section(pcfg, rcfg, table)
        for f in dataclasses.fields(cls):
            if f.name not in EVERY_KEY[table] and f.name != "cluster":
                assert getattr(obj, f.name) == getattr(cls(), f.name)


@pytest.mark.parametrize("name", sorted(shipped_recipes()))
def test_shipped_recipes_load(name):
    pcfg, rcfg = load_config(name)
    assert (pcfg, rcfg) == load_config(shipped_recipes()[name]) == load_config(name + ".toml")
    assert isinstance(pcfg, ProcessConfig) and isinstance(rcfg, RunConfig)
    json.dumps(pcfg.parameters())


def test_defaults():
    assert load_config() == (ProcessConfig(), RunConfig())
    assert load_config(None, {}) == (ProcessConfig(), RunConfig())


@pytest.mark.parametrize("text,words", [
    ("[rois]\nsize = 3\n", ["unknown table [rois]", "did you mean roi?"]),
    ("[roi]\nsise = 32\n", ["unknown key(s) in [roi]: sise", "did you mean size?"]),
    ("[preprocess]\ndynamic_sigma = 8.0\n", ["dynamic_sigma", "dynamic_background_sigma"]),
    ("[run]\nworkers = 2\n", ["unknown key(s) in [run]: workers"]),
    ("[cluster]\nnodes = 2\n", ["nodes", "[cluster.job]"]),
    ("roi = 3\n", ["[roi] must be a table"]),
])
def test_unknown_tables_and_keys_name_the_file_and_key(tmp_path, text, words):
    path = recipe(tmp_path, text)
    with pytest.raises(InputError) as e:
        load_config(path)
    assert e.value.path == path
    for w in words:
        assert w in e.value.problem
    with pytest.raises(InputError) as e:  # the same in overrides, without a file
        load_config(overrides={"roi": {"sise": 32}})
    assert e.value.path is None and "sise" in e.value.problem


# --------------------------------------------------------------------------- layers


def test_overrides_beat_the_recipe_which_beats_the_defaults(tmp_path):
    path = recipe(tmp_path, {"roi": {"grid": [3, 3], "size": 32}, "run": {"batch": 8, "device": "cpu"},
                             "correlation": {"mode": "window", "max_shift": 10},
                             "cluster": {"workers": 2, "job": {"cores": 1, "memory": "1GB"}}})
    pcfg, rcfg = load_config(path, {"roi": {"size": 48}, "run": {"batch": 64},
                                    "cluster": {"job": {"memory": "8GB"}}})
    assert pcfg.roi == RoiConfig(grid=(3, 3), size=48)  # size from the overrides, grid from the recipe
    assert (rcfg.batch, rcfg.device, rcfg.threads) == (64, "cpu", None)  # threads: the default
    assert pcfg.correlation == EngineConfig(mode="window", max_shift=10)
    assert rcfg.cluster == ClusterConfig(workers=2, job={"cores": 1, "memory": "8GB"})  # [cluster.job] merged


def test_a_choice_replaces_what_it_excludes(tmp_path):
    path = recipe(tmp_path, {"preprocess": {"bandpass_kind": "erf", "bandpass_cutoffs": [0.01, 0.3],
                                            "mask": "circle", "mask_radius": 90.0}})
    pre = load_config(path, {"preprocess": {"bandpass": [1.0, 10.0], "bandpass_kind": "gaussian",
                                            "mask": "none"}})[0].preprocess
    assert (pre.bandpass_kind, pre.bandpass, pre.bandpass_cutoffs) == ("gaussian", (1.0, 10.0), None)
    assert (pre.mask, pre.mask_radius) == (None, None)
    # within one table the keys must agree
    with pytest.raises(InputError, match="not both"):
        load_config(overrides={"preprocess": {"bandpass": [1.0, 10.0], "bandpass_cutoffs": [0.01, 0.3]}})
    with pytest.raises(InputError, match="mask_radius"):
        load_config(overrides={"preprocess": {"mask": "none", "mask_radius": 5.0}})


def test_relative_paths(tmp_path, monkeypatch):
    sub = tmp_path / "recipes"
    sub.mkdir()
    path = recipe(sub, {"roi": {"layout": "file", "centres": "c.txt"},
                        "preprocess": {"static_background": "bg.tif"}})
    pcfg = load_config(path)[0]
    assert pcfg.roi.centres == str(sub / "c.txt") and pcfg.preprocess.static_background == str(sub / "bg.tif")
    monkeypatch.chdir(tmp_path)
    pcfg = load_config(path, {"roi": {"centres": "mine.txt"}, "preprocess": {"static_background": "b.tif"}})[0]
    assert pcfg.roi.centres == str(tmp_path / "mine.txt")
    assert pcfg.preprocess.static_background == str(tmp_path / "b.tif")
    for special in ("mean", "file"):  # not paths
        assert load_config(path, {"preprocess": {"static_background": special}})[0].preprocess.static_background \
            == special


def test_run_auto_values_and_executor(tmp_path):
    rcfg = load_config(recipe(tmp_path, '[run]\nbatch = "auto"\nthreads = "auto"\nexecutor = "dask"\n'))[1]
    assert (rcfg.batch, rcfg.threads, rcfg.executor) == (None, None, "dask")


# --------------------------------------------------------------------------- one rule, one place

RULES = [  # (table, key, bad value, setting named)
    ("roi", "layout", "spiral", "roi.layout"),
    ("roi", "grid", [0, 3], "roi.grid"),
    ("roi", "size", 0, "roi.size"),
    ("roi", "margin", -1, "roi.margin"),
    ("roi", "n", 0, "roi.n"),
    ("roi", "radius", -3.0, "roi.radius"),
    ("roi", "drop_corners", "yes", "roi.drop_corners"),
    ("preprocess", "static_operation", "multiply", "preprocess.static_operation"),
    ("preprocess", "dynamic_background_sigma", 0, "preprocess.dynamic_background_sigma"),
    ("preprocess", "bandpass", [3.0, 2.0], "preprocess.bandpass"),
    ("preprocess", "bandpass_kind", "box", "preprocess.bandpass_kind"),
    ("preprocess", "bandpass_cutoffs", [0.01, 0.3], "preprocess.bandpass_cutoffs"),  # needs the erf kind
    ("preprocess", "bandpass_width", 0, "preprocess.bandpass_width"),
    ("preprocess", "binning", 0, "preprocess.binning"),
    ("preprocess", "mask", "square", "preprocess.mask"),
    ("preprocess", "mask_radius", 10.0, "preprocess.mask_radius"),  # needs the circle
    ("preprocess", "average_neighbours", 4, "preprocess.average_neighbours"),
    ("preprocess", "average_kernel", "hann", "preprocess.average_kernel"),
    ("preprocess", "average_sigma", -1.0, "preprocess.average_sigma"),
    ("preprocess", "window", "hamming", "preprocess.window"),
    ("strain", "pc", [0.5, 0.5], "strain.pc"),
    ("strain", "pc_map", "sideways", "strain.pc_map"),
    ("strain", "pc_convention", "martian", "strain.pc_convention"),
    ("strain", "pixel_size", -1.0, "strain.pixel_size"),
    ("strain", "binning", 0, "strain.binning"),
    ("strain", "remap_threshold_deg", -1.0, "strain.remap_threshold_deg"),
    ("strain", "min_peak_height", 2.0, "strain.min_peak_height"),
    ("strain", "min_rois", 2, "strain.min_rois"),
    ("run", "batch", 0, "run.batch"),
    ("run", "threads", -2, "run.threads"),
    ("run", "executor", "mpi", "run.executor"),
    ("cluster", "address", "mars", "cluster.address"),
    ("cluster", "workers", 0, "cluster.workers"),
    ("cluster", "retries", -1, "cluster.retries"),
    ("cluster", "rows_per_task", 1.5, "cluster.rows_per_task"),
    ("cluster", "job", "big", "cluster.job"),
]


@pytest.mark.parametrize("table,key,value,name", RULES, ids=[f"{t}.{k}" for t, k, _, _ in RULES])
def test_each_rule_raises_once_naming_the_setting(tmp_path, table, key, value, name):
    cls = CLASSES[table]
    kw = {key: value}
    with pytest.raises(ValueError) as direct:
        cls(**kw)
    own = str(direct.value)
    assert name in own
    # The loader passes the dataclass's own message on: the rule is written there only.
    with pytest.raises(InputError) as over:
        load_config(overrides={table: {key: value}})
    assert over.value.path is None and over.value.problem == own
    path = recipe(tmp_path, {table: {key: value}})
    with pytest.raises(InputError) as rec:
        load_config(path)
    assert rec.value.path == path and rec.value.problem == own


def test_a_recipe_error_is_the_recipe_s_and_an_override_error_the_override_s(tmp_path):
    path = recipe(tmp_path, {"preprocess": {"binning": 0}})
    with pytest.raises(InputError) as e:  # the recipe's bad value, whatever the overrides say
        load_config(path, {"preprocess": {"window": "none"}})
    assert e.value.path == path
    good = recipe(tmp_path, {"preprocess": {"binning": 2}}, name="good.toml")
    with pytest.raises(InputError) as e:
        load_config(good, {"preprocess": {"binning": 0}})
    assert e.value.path is None and "preprocess.binning" in e.value.problem


def test_job_settings_are_needed_for_a_job_queue_run(tmp_path):
    with pytest.raises(InputError, match="needs job settings") as e:
        load_config(overrides={"cluster": {"address": "slurm"}, "run": {"executor": "dask"}})
    assert "cluster.address" in e.value.problem
    load_config(overrides={"cluster": {"address": "slurm"}})  # no Dask run: not needed
    load_config("cluster-slurm", {"run": {"executor": "dask"}})


# --------------------------------------------------------------------------- parameters


def test_run_settings_are_not_parameters(tmp_path):
    plain = recipe(tmp_path, {"roi": {"grid": [3, 3]}}, name="plain.toml")
    running = recipe(tmp_path, {"roi": {"grid": [3, 3]}, "run": {"device": "cpu", "batch": 7, "threads": 3,
                                                                 "executor": "threads"},
                                "correlation": {"engine": "fft"},
                                "cluster": {"address": "tcp://h:8786", "workers": 4}}, name="running.toml")
    a, b = load_config(plain)[0], load_config(running)[0]
    assert a.parameters() == b.parameters()
    text = json.dumps(b.parameters())
    for word in ("device", "batch", "threads", "executor", "engine", "cluster", "tcp://", "strain"):
        assert word not in text, word
    assert set(b.parameters()) == {"roi", "preprocess", "correlation"}


def test_parameters_round_trip():
    cfg = ProcessConfig(roi=RoiConfig(layout="ring", n=6, size=32),
                        preprocess=PreprocessConfig(static_background="mean", dynamic_background_sigma=8.0,
                                                    bandpass_kind="erf", bandpass_cutoffs=(0.01, 0.3),
                                                    mask="circle", mask_centre=(10, 12)),
                        correlation=EngineConfig(mode="window", max_shift=8, subpixel="upsampled"))
    params = json.loads(json.dumps(cfg.parameters()))
    assert params["preprocess"]["static_background"] == "mean"
    assert params["preprocess"]["dynamic_background_sigma"] == 8.0
    assert ProcessConfig.from_parameters(params) == cfg


def test_old_layout_parameters_still_load():
    """Results files written before the schema had one table per dataclass."""
    old = {"roi": {"layout": "grid", "grid": [3, 3], "size": 32, "margin": 0, "drop_corners": False, "n": 8,
                   "radius": None, "include_centre": True, "centres": None},
           "preprocess": {"static_operation": "subtract", "dynamic_sigma": 12.0, "bandpass": [1.0, 20.0],
                          "window": "hann"},
           "static_background": "file",
           "correlation": {"mode": "window", "max_shift": 24, "subpixel": "dft", "upsample": 16,
                           "compensate": True, "circular": False, "kernel": "auto"},
           "scan": "scan.h5", "reference_index": 0}
    cfg = ProcessConfig.from_parameters(old)
    assert cfg.preprocess == PreprocessConfig(static_background="file", dynamic_background_sigma=12.0,
                                              bandpass=(1.0, 20.0))
    assert cfg.roi == RoiConfig(grid=(3, 3), size=32)
    assert cfg.correlation == EngineConfig(mode="window", max_shift=24)
    new = cfg.parameters()
    assert "static_background" not in new and new["preprocess"]["static_background"] == "file"
    assert ProcessConfig.from_parameters(new) == cfg
    with pytest.raises(ValueError, match="preprocess.sharpen"):
        ProcessConfig.from_parameters({**new, "preprocess": {**new["preprocess"], "sharpen": 2}})


# --------------------------------------------------------------------------- the command line


def cli(*flags, pipeline=None):
    from ebsdxc.cli import _config_from_args, _parser

    argv = ["process", "scan.h5", "--ref-index", "0", *map(str, flags)]
    if pipeline:
        argv += ["--pipeline", str(pipeline)]
    return _config_from_args(_parser().parse_args(argv))


FLAGS = ["--roi-grid", "3x4", "--roi-size", "40", "--static-background", "bg.tif", "--dynamic-background", "9",
         "--bandpass-cutoffs", "0.01", "0.3", "--bandpass-width", "0.02", "--pattern-binning", "2",
         "--mask-radius", "80", "--mask-centre", "100,90.5", "--average-neighbours", "3", "--average-kernel", "box",
         "--average-sigma", "2", "--max-shift", "12", "--subpixel", "upsampled", "--engine", "fft",
         "--material", "Ni", "--pc", "0.5,0.4,0.6", "--pc-ref", "0.5,0.45,0.6", "--pc-convention", "tsl",
         "--pc-map", "constant", "--pixel-size", "40", "--binning", "2", "--orientation", "10,20,30",
         "--sample-tilt", "69", "--detector-tilt", "2", "--remap-threshold", "0.5", "--min-peak-height", "0.4",
         "--device", "cpu", "--batch", "16",
         "--cluster", "tcp://h:8786", "--workers", "3", "--retries", "1", "--rows-per-task", "4"]
SAME_RECIPE = {
    "roi": {"layout": "grid", "grid": [3, 4], "size": 40},
    "preprocess": {"static_background": "bg.tif", "dynamic_background_sigma": 9.0, "bandpass_kind": "erf",
                   "bandpass_cutoffs": [0.01, 0.3], "bandpass_width": 0.02, "binning": 2, "mask": "circle",
                   "mask_radius": 80.0, "mask_centre": [100.0, 90.5], "average_neighbours": 3,
                   "average_kernel": "box", "average_sigma": 2.0},
    "correlation": {"mode": "window", "max_shift": 12, "subpixel": "upsampled", "engine": "fft"},
    "strain": {"material": "Ni", "pc": [0.5, 0.4, 0.6], "pc_ref": [0.5, 0.45, 0.6], "pc_convention": "tsl",
               "pc_map": "constant", "pixel_size": 40.0, "binning": 2, "orientation": [10.0, 20.0, 30.0],
               "sample_tilt": 69.0, "detector_tilt": 2.0, "remap_threshold_deg": 0.5, "min_peak_height": 0.4},
    "run": {"device": "cpu", "batch": 16, "executor": "dask"},
    "cluster": {"address": "tcp://h:8786", "workers": 3, "retries": 1, "rows_per_task": 4},
}


def test_flags_and_the_same_recipe_give_the_same_configuration(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # --static-background bg.tif: here; the recipe's: beside it, the same file
    by_flags = cli(*FLAGS)
    by_recipe = load_config(recipe(tmp_path, SAME_RECIPE))
    assert by_flags == by_recipe
    assert by_flags[0].preprocess.static_background == str(tmp_path / "bg.tif")
    # flags over the recipe: the same again, and each flag beats its key
    assert cli(*FLAGS, pipeline=recipe(tmp_path, SAME_RECIPE)) == by_recipe
    pcfg, rcfg = cli("--roi-size", "24", "--batch", "5", pipeline=recipe(tmp_path, SAME_RECIPE))
    assert (pcfg.roi.size, pcfg.roi.grid, rcfg.batch, rcfg.device) == (24, (3, 4), 5, "cpu")


def test_no_remap_and_ring_and_centres_flags(tmp_path):
    assert cli("--material", "Ni", "--no-remap")[0].strain.remap_threshold_deg == 0.0
    assert cli("--roi-ring", "6")[0].roi == load_config(overrides={"roi": {"layout": "ring", "n": 6}})[0].roi
    c = tmp_path / "c.txt"
    assert cli("--roi-centres", c)[0].roi == RoiConfig(layout="file", centres=str(c))


def test_every_flag_of_the_table_is_a_flag_and_a_setting():
    import argparse

    from ebsdxc.cli import _FLAGS, _parser

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    options = {s for act in sub.choices["process"]._actions for s in act.option_strings}
    for setting, flag in _FLAGS.items():
        table, key = setting.split(".")
        assert key in {f.name for f in dataclasses.fields(CLASSES[table])}, setting
        assert flag in options, flag


@pytest.mark.parametrize("flags,flag", [
    (["--bandpass-width", "0"], "--bandpass-width"),
    (["--mask-radius", "-5"], "--mask-radius"),
    (["--average-neighbours", "4"], "--average-neighbours"),
    (["--dynamic-background", "-1"], "--dynamic-background"),
    (["--cluster", "mars"], "--cluster"),
    (["--material", "Ni", "--min-peak-height", "3"], "--min-peak-height"),
])
def test_flag_errors_name_the_flag(flags, flag):
    with pytest.raises(InputError) as e:
        cli(*flags)
    assert flag in e.value.problem and "preprocess." not in e.value.problem and e.value.path is None


def test_recipe_errors_name_the_key_not_a_flag(tmp_path):
    path = recipe(tmp_path, {"preprocess": {"bandpass_width": 0}})
    with pytest.raises(InputError) as e:
        cli("--roi-size", "32", pipeline=path)
    assert e.value.path == path and "preprocess.bandpass_width" in e.value.problem and "--" not in e.value.problem


def test_config_does_not_import_the_run_or_the_cluster():
    code = ("import sys, ebsdxc.config; bad = [m for m in sys.modules if m.startswith(('ebsdxc.cluster', "
            "'ebsdxc.run', 'ebsdxc.cli'))]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(__file__))


def test_messages_name_flags_but_keep_the_recipe_s_own_keys():
    from ebsdxc.cli import _flag_names

    assert _flag_names("preprocess.binning 3 does not divide") == "--pattern-binning 3 does not divide"
    assert _flag_names("preprocess.binning 3", keep={"preprocess.binning"}) == "preprocess.binning 3"
    assert _flag_names("or switch remapping off (strain.remap_threshold_deg = 0)") == \
        "or switch remapping off (--no-remap)"
    assert _flag_names("a [cluster.job] table; cluster.address slurm") == "a [cluster.job] table; --cluster slurm"
    assert _flag_names("roi.layout file needs roi.centres") == "roi.layout file needs --roi-centres"


def test_run_errors_name_the_flag_or_the_recipe_key(tmp_path, sample_dir, capsys):
    """An error found while running names the setting as the user gave it: a flag, or the
    recipe's key (with the flag of a setting nobody gave)."""
    from ebsdxc import cli

    scan, ref = os.path.join(sample_dir, "scan.h5"), os.path.join(sample_dir, "ref.tif")
    base = ["process", scan, "--ref", ref, "-o", str(tmp_path / "o.h5"), "--device", "cpu", "-q"]
    assert cli.main([*base, "--pattern-binning", "3"]) == 2
    err = capsys.readouterr().err
    assert "--pattern-binning 3" in err and "preprocess.binning" not in err and err.count("\n") == 1
    path = recipe(tmp_path, {"preprocess": {"binning": 3}})
    assert cli.main([*base, "--pipeline", path]) == 2
    err = capsys.readouterr().err
    assert "preprocess.binning 3" in err and "--pattern-binning" not in err and err.count("\n") == 1
    assert not (tmp_path / "o.h5").exists()
