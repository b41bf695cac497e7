"""CUDA sources of ebsdxc, shipped as package data (``ebsdxc.kernels``) and compiled at
run time through CuPy; see :mod:`ebsdxc.kernel_loader`."""
