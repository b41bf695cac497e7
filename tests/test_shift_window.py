"""The shift window against the ROI size (issue 20): ``2 * correlation.max_shift <= roi.size``.

Beyond half an ROI less than half of a tile overlaps its match and the Hann window leaves a
perfect match under 15 % of its correlation: the peak found out there is not a measurement.
"""

from __future__ import annotations

import numpy as np
import pytest

from ebsdxc import cli
from ebsdxc.config import load_config
from ebsdxc.engines import EngineConfig
from ebsdxc.errors import InputError
from ebsdxc.peaks import window_autocorrelation, window_power_spectrum
from ebsdxc.preprocess import window_1d


@pytest.mark.parametrize("size,shift,ok", [(16, 8, True), (16, 9, False), (17, 8, True), (40, 24, False),
                                           (48, 24, True), (96, 16, True)])
def test_rule_is_half_the_roi(size, shift, ok):
    why = EngineConfig(mode="window", max_shift=shift).shift_refusal(size)
    assert (why is None) == ok, why
    if not ok:
        assert "correlation.max_shift" in why and "roi.size" in why and "\n" not in why
        assert f"at least {2 * shift} px" in why


def test_full_mode_has_no_window_to_check():
    assert EngineConfig().shift_refusal(4) is None


def test_the_rule_is_where_the_window_leaves_little_correlation():
    # The number in the rule's reason: the Hann window's own autocorrelation at half the ROI.
    for w in (16, 40, 96):
        p = window_power_spectrum(window_1d(w), 2 * w)
        at_half, beyond = (float(window_autocorrelation(p, np.array([s]))[0]) for s in (w / 2, 0.6 * w))
        assert 0.12 < at_half < 0.17 and beyond < 0.07


def test_load_config_refuses_with_both_settings_named():
    with pytest.raises(InputError) as e:
        load_config(None, {"roi": {"size": 16}, "correlation": {"mode": "window", "max_shift": 9}})
    assert e.value.path is None
    assert "correlation.max_shift (9 px)" in str(e.value) and "roi.size (16 px)" in str(e.value)
    load_config(None, {"roi": {"size": 16}, "correlation": {"mode": "window", "max_shift": 8}})  # the limit


def test_recipe_error_names_the_recipe(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('[roi]\nsize = 16\n[correlation]\nmode = "window"\nmax_shift = 12\n')
    with pytest.raises(InputError) as e:
        load_config(recipe)
    assert e.value.path == str(recipe) and "correlation.max_shift" in e.value.problem


def test_cli_names_the_flags(tmp_path, capsys, sample_dir):
    out = tmp_path / "r.h5"
    rc = cli.main(["process", f"{sample_dir}/scan.h5", "--ref", f"{sample_dir}/ref.tif", "--roi-size", "16",
                   "--max-shift", "12", "--device", "cpu", "-q", "-o", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and not out.exists()
    assert len(err.splitlines()) == 1, err
    assert "--max-shift (12 px)" in err and "--roi-size (16 px)" in err and "Traceback" not in err


def test_a_size_from_the_pattern_warns_once_naming_both(tmp_path, capsys, sample_dir):
    """The ROI size follows from the pattern size only when the pipeline is built: then the rule
    is one warning line (the shipped hrebsd recipe meets it on the 160-px sample), not a refusal."""
    out = tmp_path / "r.h5"
    rc = cli.main(["process", f"{sample_dir}/scan.h5", "--ref", f"{sample_dir}/ref.tif", "--pipeline", "hrebsd",
                   "--device", "cpu", "-q", "-o", str(out)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 0 and out.exists()
    assert len(err) == 1 and "warning" in err[0]
    assert "--max-shift (24 px) is more than half of --roi-size (40 px)" in err[0]
