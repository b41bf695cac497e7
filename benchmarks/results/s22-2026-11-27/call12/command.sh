export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
timeout 150 python3 -m pytest -n 4 -q -p no:cacheprovider -rfEs --tb=short tests/engines/test_dispatch_measured.py tests/engines/test_tensor.py -k "dispatch or device_bytes" 2>&1 | tail -8 | tee $OUT/tests.txt
