export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=$PWD:/tmp/site
timeout 120 python3 -m pytest -n 8 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py -k "factors_other" 2>&1 | tail -6 | tee $OUT/gpu-tests.txt
timeout 120 compute-sanitizer --tool memcheck python3 benchmarks/results/s14-2026-11-27/scripts/race.py.txt 256 24 24 2>&1 | tail -2 | tee $OUT/memcheck.txt
timeout 120 compute-sanitizer --tool racecheck python3 benchmarks/results/s14-2026-11-27/scripts/race.py.txt 256 24 24 2>&1 | tail -2 | tee -a $OUT/memcheck.txt
