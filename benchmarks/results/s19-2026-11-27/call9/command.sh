export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
timeout 150 python3 benchmarks/tensor_engine.py --tile 256 --rois 45 --max-shift 24 --patterns 128 --skip direct --json $OUT/t256-128.json 2>&1 | grep -v "launch:" | tee $OUT/t256-128.txt
(cd /tmp && EBSDXC_CACHE_DIR=$OUT/cache timeout 330 python3 -m ebsdxc bench --calibrate --out $OUT/bench > $OUT/calibrate.txt 2>&1; echo "rc $?" >> $OUT/calibrate.txt; tail -3 $OUT/calibrate.txt)
cp $OUT/cache/calibration/*.json $R/ebsdxc/calibration/
timeout 100 python3 -m pytest -n 8 -q -p no:cacheprovider -rfE --tb=short tests/engines/test_dispatch_measured.py tests/engines/test_registry.py 2>&1 | tail -6 | tee $OUT/dispatch-tests.txt
