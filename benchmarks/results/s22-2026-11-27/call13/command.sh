export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
rm -rf /tmp/bench13 /tmp/cache13
(cd /tmp && /usr/bin/time -f "calibrate wall %e s" env EBSDXC_CACHE_DIR=/tmp/cache13 timeout 380 python3 -m ebsdxc bench --calibrate --out /tmp/bench13 > $OUT/calibrate.txt 2>&1; echo "rc $?" >> $OUT/calibrate.txt; tail -3 $OUT/calibrate.txt)
cp /tmp/cache13/calibration/*.json $R/ebsdxc/calibration/ && cp /tmp/cache13/calibration/*.json $OUT/; cp /tmp/bench13/*.csv $OUT/ 2>/dev/null
timeout 100 python3 -m pytest -n 8 -q -p no:cacheprovider -rfEs --tb=short tests/engines/test_dispatch_measured.py tests/engines/test_registry.py 2>&1 | tail -6 | tee $OUT/dispatch-tests.txt
cd /tmp
for v in auto fused; do P=$R/benchmarks/recipes/paper-86roi-96-w16-$v.toml; [ $v = auto ] && P=$R/.scratch/s22/paper-86roi-96-w16-auto.toml
  echo "== $v"; timeout 50 python3 -m ebsdxc bench --pipeline $P --patterns 50000 --repeats 1 --out /tmp/bp 2>&1 | grep -E "streaming|engine bound|batches of"
done 2>&1 | tee $OUT/e2e.txt
