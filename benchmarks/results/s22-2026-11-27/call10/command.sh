export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
git log --oneline | head -1 > $OUT/rev.txt
rm -rf /tmp/bench10 /tmp/cache10
(cd /tmp && /usr/bin/time -f "calibrate wall %e s" env EBSDXC_CACHE_DIR=/tmp/cache10 timeout 400 python3 -m ebsdxc bench --calibrate --out /tmp/bench10 > $OUT/calibrate.txt 2>&1; echo "rc $?" >> $OUT/calibrate.txt; tail -3 $OUT/calibrate.txt)
cp /tmp/cache10/calibration/*.json $R/ebsdxc/calibration/ && cp /tmp/cache10/calibration/*.json $OUT/; cp /tmp/bench10/*.csv $OUT/ 2>/dev/null
timeout 150 python3 -m pytest -n 8 -q -p no:cacheprovider -rfE --tb=short tests/engines/test_dispatch_measured.py tests/engines/test_registry.py 2>&1 | tail -6 | tee $OUT/dispatch-tests.txt
