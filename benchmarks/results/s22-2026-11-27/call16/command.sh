export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
rm -rf /tmp/benchM /tmp/cacheM
(cd /tmp && EBSDXC_CACHE_DIR=/tmp/cacheM timeout 240 python3 -m ebsdxc bench --calibrate --missing --out /tmp/benchM > $OUT/calibrate.txt 2>&1; echo "rc $?" >> $OUT/calibrate.txt; grep -v "^|" $OUT/calibrate.txt | tail -4)
cp /tmp/cacheM/calibration/*.json $R/ebsdxc/calibration/ && cp /tmp/cacheM/calibration/*.json $OUT/; cp /tmp/benchM/*.csv $OUT/ 2>/dev/null
(cd /tmp && EBSDXC_CACHE_DIR=/tmp/cacheM timeout 30 python3 -m ebsdxc bench --calibrate --missing --out /tmp/benchM2 2>&1 | tail -1) | tee $OUT/again.txt
timeout 150 python3 -m pytest -n 8 -q -p no:cacheprovider -rfEs --tb=line tests/engines/test_dispatch_measured.py tests/engines/test_registry.py tests/engines/test_dispatch.py 2>&1 | tail -8 | tee $OUT/dispatch-tests.txt
