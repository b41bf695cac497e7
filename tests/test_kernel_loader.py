"""Kernel sources ship with the package and load without a GPU (compilation is tested under `gpu`)."""

import re

import pytest

from ebsdxc.engines import gpu_ops
from ebsdxc.kernel_loader import kernel_source


@pytest.mark.parametrize("name", ["tiles.cu", "peaks.cu", "direct.cu"])
def test_sources_found_and_includes_inlined(name):
    src = kernel_source(name)
    assert "#include \"" not in src
    if name != "direct.cu":
        assert "block_sum" in src or "warp_sum" in src  # common.cuh was inlined
    assert "#pragma once" not in src


def test_every_launched_kernel_exists_in_its_source():
    names = {"tiles.cu": gpu_ops._TILE_NAMES, "peaks.cu": gpu_ops._PEAK_NAMES + ("dft_refine",),
             "direct.cu": ("xcorr_overlap",)}
    for source, exprs in names.items():
        src = kernel_source(source)
        for expr in exprs:
            base = expr.split("<")[0]
            pattern = r"__global__ void (__launch_bounds__\([^)]*\) )?" + re.escape(base) + r"\("
            assert re.search(pattern, src), (source, expr)


def test_status_codes_match_python():
    from ebsdxc import status as st

    src = kernel_source("tiles.cu")
    assert f"#define ST_CONSTANT {st.CONSTANT_TILE}" in src
    assert f"#define ST_NOT_FINITE {st.NOT_FINITE}" in src
    assert f"#define ST_OK {st.OK}" in src
