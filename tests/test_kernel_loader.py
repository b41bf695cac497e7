"""Kernel sources ship with the package and load without a GPU (compilation is tested under `gpu`)."""

import re

import pytest

from ebsdxc.engines import gpu_ops
from ebsdxc.engines.definition import ALGORITHMS, KernelChoice
from ebsdxc.kernel_loader import kernel_source


@pytest.mark.parametrize("name", ["tiles.cu", "peaks.cu", "definition.cu"])
def test_sources_found_and_includes_inlined(name):
    src = kernel_source(name)
    assert "#include \"" not in src
    if name != "definition.cu":
        assert "block_sum" in src or "warp_sum" in src  # common.cuh was inlined
    assert "#pragma once" not in src


def test_every_launched_kernel_exists_in_its_source():
    names = {"tiles.cu": gpu_ops._TILE_NAMES, "peaks.cu": gpu_ops._PEAK_NAMES + ("dft_refine",),
             "definition.cu": tuple(KernelChoice(a, **({"kr": 2} if a == "multi_matrix_right" else
                                                    {"kl": 2} if a == "multi_matrix_both" else
                                                    {"g": 2} if a == "grouped_overlap" else
                                                    {"splits": 2} if a == "split_row" else {})).name_expression
                                    for a in ALGORITHMS)}
    for source, exprs in names.items():
        src = kernel_source(source)
        for expr in exprs:
            base = expr.split("<")[0]
            pattern = r"__global__ void\s+(__launch_bounds__\([^)]*\)\s+)?" + re.escape(base) + r"\("
            assert re.search(pattern, src), (source, expr)


def test_status_codes_match_python():
    from ebsdxc import status as st

    src = kernel_source("tiles.cu")
    assert f"#define ST_CONSTANT {st.CONSTANT_TILE}" in src
    assert f"#define ST_NOT_FINITE {st.NOT_FINITE}" in src
    assert f"#define ST_OK {st.OK}" in src
