"""PreprocessConfig: which options it accepts and refuses."""

from __future__ import annotations

import pytest

from ebsdxc.preprocess import PatternPreprocessor, PreprocessConfig


@pytest.mark.parametrize("kwargs", [
    dict(static_operation="multiply"),
    dict(window="hamming"),
    dict(dynamic_background_sigma=0),
    dict(dynamic_background_sigma=-2.0),
    dict(dynamic_background_sigma=float("nan")),
    dict(bandpass=(-1.0, 2.0)),
    dict(bandpass=(3.0, 2.0)),
    dict(bandpass=(2.0, 2.0)),
    dict(bandpass=(0.0, -1.0)),
])
def test_config_validation(kwargs):
    with pytest.raises(ValueError):
        PreprocessConfig(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(), dict(static_operation="divide"), dict(window="none"),
                                    dict(dynamic_background_sigma=0.5), dict(bandpass=(0.0, 2.0)),
                                    dict(bandpass=(2.0, 0.0)), dict(bandpass=(1.0, 10.0))])
def test_config_valid(kwargs):
    PreprocessConfig(**kwargs)


@pytest.mark.parametrize("kwargs", [
    dict(bandpass_kind="fft"),
    dict(bandpass_kind="erf"),  # no cutoffs
    dict(bandpass_kind="erf", bandpass_cutoffs=(0.01, 0.2), bandpass=(1.0, 5.0)),
    dict(bandpass_cutoffs=(0.01, 0.2)),  # cutoffs with the gaussian kind
    dict(bandpass_kind="erf", bandpass_cutoffs=(0.3, 0.2)),
    dict(bandpass_kind="erf", bandpass_cutoffs=(-0.1, 0.2)),
    dict(bandpass_kind="erf", bandpass_cutoffs=(0.1,)),
    dict(bandpass_kind="erf", bandpass_cutoffs=(float("nan"), 0.2)),
    dict(bandpass_kind="erf", bandpass_cutoffs=(0.01, 0.2), bandpass_width=0),
    dict(bandpass_width=-0.01),
    dict(bandpass_width=float("inf")),
    dict(binning=0), dict(binning=-1), dict(binning=2.0), dict(binning=True),
    dict(mask="ellipse"), dict(mask="none"),
    dict(mask_radius=10.0),  # no mask
    dict(mask_centre=(1.0, 2.0)),
    dict(mask="circle", mask_radius=0.0), dict(mask="circle", mask_radius=float("nan")),
    dict(mask="circle", mask_centre=(1.0,)), dict(mask="circle", mask_centre=(1.0, float("inf"))),
    dict(average_neighbours=1), dict(average_neighbours=2), dict(average_neighbours=-3),
    dict(average_neighbours=3.0),
    dict(average_kernel="hann"), dict(average_sigma=0.0), dict(average_sigma=float("nan")),
])
def test_config_validation_extras(kwargs):
    with pytest.raises(ValueError) as e:
        PreprocessConfig(**kwargs)
    assert len(str(e.value).split()) >= 4  # a sentence, not a bare value


@pytest.mark.parametrize("kwargs", [
    dict(bandpass_kind="erf", bandpass_cutoffs=(0.0, 0.2)),
    dict(bandpass_kind="erf", bandpass_cutoffs=(0.02, 0.0)),
    dict(bandpass_kind="erf", bandpass_cutoffs=[0.02, float("inf")], bandpass_width=0.005),
    dict(binning=4), dict(mask="circle"), dict(mask="circle", mask_centre=[10, 20.5], mask_radius=30),
    dict(average_neighbours=3), dict(average_neighbours=5, average_kernel="box"),
    dict(average_kernel="circular", average_sigma=2.5),
])
def test_config_valid_extras(kwargs):
    c = PreprocessConfig(**kwargs)
    for k in ("bandpass_cutoffs", "mask_centre"):
        v = getattr(c, k)
        assert v is None or (isinstance(v, tuple) and all(isinstance(a, float) for a in v))


def test_default_config_unchanged():
    c = PreprocessConfig()
    assert (c.bandpass_kind, c.bandpass_cutoffs, c.binning, c.mask, c.average_neighbours) == \
        ("gaussian", None, 1, None, 0)
    from ebsdxc.backend import select_backend

    assert PatternPreprocessor(c, select_backend("cpu")).is_identity
