export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
R=$PWD; O=$R/.scratch/o0; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 200 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py 2>&1 | tail -8 | tee $OUT/gpu-tests.txt
timeout 150 python3 benchmarks/results/s14-2026-11-27/scripts/nodes.py.txt 2>&1 | tee $OUT/widths.txt
timeout 100 python3 benchmarks/results/s14-2026-11-27/scripts/acc.py.txt 2>&1 | tee $OUT/acc.txt
cd /tmp
for r in upsampled dft; do timeout 150 python3 -m ebsdxc bench --pipeline $R/benchmarks/recipes/hrebsd-49roi-w24-$r.toml --patterns 10000 --pattern-size 512 --repeats 2 2>&1 | tail -14; done | tee $OUT/e2e512.txt
timeout 150 python3 -m ebsdxc bench --pipeline $R/benchmarks/recipes/hrebsd-49roi-w24-upsampled.toml --patterns 3000 --pattern-size 1024 --repeats 2 2>&1 | tail -14 | tee $OUT/e2e1024.txt
