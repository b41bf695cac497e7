"""Loads the CUDA sources in ``kernels/`` (package ``ebsdxc.kernels``) through CuPy.

Sources are read relative to the installed package, so a wheel and an editable
install both find them. Modules are compiled once per (device, source, names,
defines) and memoised for the life of the process.

On disk: CuPy writes every compiled binary to its kernel cache (``~/.cupy/kernel_cache``
or ``$CUPY_CACHE_DIR``) as the md5 of the binary followed by the binary, and reads an
entry back only when the md5 matches, so a truncated, bit-flipped or garbage entry is
compiled again and rewritten (tests/run/test_gpu_faults.py damages every entry). From CuPy
14.2 the entries of modules compiled with ``name_expressions`` (all of ours) keep NVRTC's
mangled names too, so a second process reads them back: a first ``ebsdxc process`` of the
``hrebsd`` recipe with ``--refine icgn`` built our 7 modules in 5.7 s and CuPy's own kernels in
about 30 s more, the next process in 0.03 s (H200, 2026-11-28, BENCHMARKS.md; the dynamic
background's products, added since, build in 2.5 s more). Older CuPy compiles these modules by
NVRTC once in every process.
"""

from __future__ import annotations

import functools

import numpy as np

from ._resources import data_dir

__all__ = ["NULL_POINTER", "kernel_source", "get_function"]

#: A null pointer argument of a kernel (8 bytes of zeros), for pointers a kernel does not use.
NULL_POINTER = np.uint64(0)


@functools.cache
def kernel_source(name: str) -> str:
    """Text of ``kernels/<name>`` with local ``#include "x.cuh"`` lines inlined."""
    root = data_dir("kernels")
    lines = []
    for line in (root / name).read_text().splitlines():
        s = line.strip()
        if s.startswith('#include "') and s.endswith('"'):
            lines.append(kernel_source(s[len('#include "'):-1]))
        elif s == "#pragma once":
            continue
        else:
            lines.append(line)
    return "\n".join(lines)


@functools.cache
def _module(device_id: int, source_name: str, name_expressions: tuple, defines: tuple, options: tuple = ()):
    import cupy as cp

    prelude = "".join(f"#define {k} {v}\n" for k, v in defines)
    with cp.cuda.Device(device_id):
        # CuPy appends its own -arch=sm_XY after these; NVRTC keeps an sm_90a given here (the
        # architecture-specific instructions of tensorgemm.cu need it).
        mod = cp.RawModule(code=prelude + kernel_source(source_name), options=("-std=c++17", *options),
                           name_expressions=name_expressions)
        mod.compile()
    return mod


def get_function(source_name: str, name_expression: str, *, name_expressions=None, defines=(), options=()):
    """The compiled kernel ``name_expression`` of ``kernels/<source_name>`` on the current device.

    ``name_expressions`` lists every specialisation compiled into the same module
    (so one NVRTC call serves them all); ``defines`` is a tuple of (name, value)
    pairs emitted as a ``#define`` prelude; ``options`` are further NVRTC options
    (``("-arch=sm_90a",)`` for Hopper's architecture-specific instructions).
    """
    import cupy as cp

    names = tuple(name_expressions or (name_expression,))
    if name_expression not in names:
        names = names + (name_expression,)
    mod = _module(cp.cuda.Device().id, source_name, names, tuple(defines), tuple(options))
    return mod.get_function(name_expression)
