python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=$PWD:/tmp/site
timeout 150 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=line tests/engines/test_fused.py 2>&1 | tail -4 | tee $OUT/gpu-tests.txt
