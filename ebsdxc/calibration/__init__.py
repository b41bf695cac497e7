"""Dispatch tables measured by ``ebsdxc bench --calibrate`` on reference GPUs (JSON, one per GPU
model), used where a user has not calibrated their own GPU (:mod:`ebsdxc.engines.dispatch`)."""
