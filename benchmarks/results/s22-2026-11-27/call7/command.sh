export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
git log --oneline | head -1 > $OUT/rev.txt
(cd /tmp && EBSDXC_CACHE_DIR=/tmp/cache timeout 400 python3 -m ebsdxc bench --calibrate --out /tmp/bench > $OUT/calibrate.txt 2>&1; echo "rc $?" >> $OUT/calibrate.txt; tail -2 $OUT/calibrate.txt)
cp /tmp/cache/calibration/*.json $R/ebsdxc/calibration/; cp /tmp/cache/calibration/*.json $OUT/; cp /tmp/bench/*.csv $OUT/ 2>/dev/null
timeout 120 python3 -m pytest -n 8 -q -p no:cacheprovider -rfE --tb=short tests/engines/test_dispatch_measured.py tests/engines/test_registry.py 2>&1 | tail -4 | tee $OUT/dispatch-tests.txt
timeout 150 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct --from-patterns --json $OUT/paper-512.json 2>&1 | grep -v "launch:" | tee $OUT/paper-512.txt
cd /tmp
for v in new base; do PP=$R; [ $v = base ] && PP=$R/.scratch/base
  echo "== tensor $v"; PYTHONPATH=$PP:/tmp/site timeout 100 python3 -m ebsdxc bench --pipeline $R/benchmarks/recipes/paper-86roi-96-w16-tensor.toml --patterns 50000 --repeats 3 --out /tmp/bp 2>&1 | grep -E "^\||batches of|profile"
done 2>&1 | tee $OUT/e2e.txt
