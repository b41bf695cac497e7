export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) + working tree" > $OUT/rev.txt
timeout 230 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; grep -v Warning $OUT/gpu-suite.txt | tail -8
python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/hrebsd/test_remap_batches.py tests/run/test_gpu_faults.py -k "pinned or read_while" > $OUT/new-tests.txt 2>&1; tail -3 $OUT/new-tests.txt
(timeout 60 python3 .scratch/s29/prep_bench.py pipelines/paper-86roi-96.toml 256 1024; timeout 60 python3 .scratch/s29/prep_bench.py benchmarks/recipes/hrebsd-49roi-w24-dft.toml 512 512) 2>&1 | grep -v Warn | tee $OUT/prep-bench.txt
mkdir -p /tmp/b
for r in .scratch/s29/hrebsd-nodyn.toml pipelines/hrebsd.toml; do echo "== $r"; timeout 100 python3 -m ebsdxc bench --pipeline $r --patterns 6000 --pattern-size 512 --repeats 1 --out /tmp/b 2>&1 | grep -v Warn; done | tee $OUT/e2e.txt
