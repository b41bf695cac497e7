"""Which tile-pass kernel (``kernels/tiles.cu``) runs for which tiles and devices (CPU: the
choice only; ``tests/engines/test_gpu_ops.py`` runs both kernels against float64 oracles)."""

import numpy as np
import pytest

from ebsdxc.engines.gpu_ops import STAGED_TILE_MAX, _tile_kernel

H100 = 227 * 1024  # opt-in shared memory per block
SM86 = 99 * 1024


@pytest.mark.parametrize("dtype,tile,limit,want", [
    (np.uint16, (256, 256), H100, ("prepare_tiles_shaped<unsigned short, 256, 256, 1024, 1>", 1024, 131072)),
    (np.uint16, (128, 128), H100, ("prepare_tiles_shaped<unsigned short, 128, 128, 128, 3>", 128, 32768)),
    (np.uint16, (96, 96), H100, ("prepare_tiles_shaped<unsigned short, 96, 96, 128, 3>", 128, 18432)),
    (np.uint8, (20, 30), H100, ("prepare_tiles_shaped<unsigned char, 20, 30, 128, 3>", 128, 600)),
    (np.int16, (200, 210), H100, ("prepare_tiles_shaped<short, 200, 210, 1024, 1>", 1024, 84000)),
    (np.uint8, (100, 600), H100, ("prepare_tiles<unsigned char>", 256, 0)),  # wider than a lane's registers
    (np.float32, (128, 128), H100, ("prepare_tiles<float>", 256, 0)),
    (np.float64, (7, 13), H100, ("prepare_tiles<double>", 128, 0)),
    (np.uint16, (300, 300), H100, ("prepare_tiles<unsigned short>", 256, 0)),  # over STAGED_TILE_MAX
    (np.uint16, (256, 256), SM86, ("prepare_tiles<unsigned short>", 256, 0)),  # does not fit the device
    (np.uint16, (200, 200), SM86, ("prepare_tiles_shaped<unsigned short, 200, 200, 1024, 1>", 1024, 80000)),
    (np.uint16, (160, 160), 48 * 1024, ("prepare_tiles<unsigned short>", 256, 0)),
])
def test_tile_pass_kernel_fits_the_device(dtype, tile, limit, want):
    """Tiles of 1- and 2-byte values stay in shared memory, in a kernel compiled for their shape,
    where they fit both the kernel's cap and the device's opt-in limit (a 256x256 uint16 tile,
    128 KB, does not fit an sm_86 block) and are at most 512 wide; a launch never asks for more
    than the device has."""
    got = _tile_kernel(dtype, *tile, smem_limit=limit)
    assert got == want
    assert got[2] + 512 <= limit and got[2] <= STAGED_TILE_MAX
