export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo f58d17d > $OUT/rev.txt
(cd /tmp && EBSDXC_CACHE_DIR=/tmp/cacheM timeout 200 python3 -m ebsdxc bench --calibrate --missing --out /tmp/benchM 2>&1 | tail -15) | tee $OUT/calibrate.txt
mkdir -p $OUT/calibration && cp /tmp/cacheM/calibration/*.json $OUT/calibration/ 2>/dev/null; cp -r /tmp/benchM $OUT/benchM 2>/dev/null
timeout 300 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests 2>&1 | grep -v Warning | tail -8 | tee $OUT/gpu-suite.txt
