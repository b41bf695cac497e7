export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 240 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py tests/engines/test_gpu_engines.py tests/run/test_subpixel_real.py tests/engines/test_dispatch_measured.py tests/run/test_gpu_run.py 2>&1 | tail -6 | tee $OUT/gpu-tests.txt
timeout 60 python3 benchmarks/fused_dft_phases.py 96:0 128:24 2>&1 | tee $OUT/phases.txt
timeout 60 python3 .scratch/s16/phases_nocomp.py 96:0 128:24 2>&1 | tee $OUT/phases-nocomp.txt
