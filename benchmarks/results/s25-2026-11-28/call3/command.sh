export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
echo "$(cat .scratch/rev) (working tree = HEAD)" > $OUT/rev.txt
(cd /tmp && EBSDXC_CACHE_DIR=$OUT/cache timeout 450 python3 -m ebsdxc bench --calibrate --out $OUT/bench > $OUT/calibrate.txt 2>&1; echo "rc $?" >> $OUT/calibrate.txt; tail -3 $OUT/calibrate.txt)
cp $OUT/cache/calibration/*.json $R/ebsdxc/calibration/ && ls -l $R/ebsdxc/calibration/
timeout 90 python3 -m pytest -n 12 -q -p no:cacheprovider -rfE --tb=short tests/engines/test_dispatch_measured.py tests/engines/test_registry.py 2>&1 | grep -v Warning | tail -6 | tee $OUT/dispatch-tests.txt
