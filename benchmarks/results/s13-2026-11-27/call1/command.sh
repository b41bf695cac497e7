export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline -1
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 330 python3 -m pytest -n 12 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py -k "dft or upsampled" tests/run/test_device_readers.py tests/run/test_gpu_faults.py tests/run/test_gpu_run.py 2>&1 | tail -25 | tee $OUT/gpu-tests.txt
timeout 150 python3 benchmarks/fused_grid_columns.py 3,6,m3,m4,m6,m8 2>&1 | tee $OUT/columns.txt
