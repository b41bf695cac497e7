export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; git log --oneline | head -1 | tee $OUT/rev.txt
(PYTHONPATH=$R:/tmp/site:/tmp/kp timeout 400 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfEs --tb=short tests 2>&1 | grep -E "passed|failed|FAILED|ERROR" | tail -30) | tee $OUT/gpu-suite.txt
