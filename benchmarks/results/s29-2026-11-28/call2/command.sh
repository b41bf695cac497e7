export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) + working tree; old = .scratch/head (4a6c52c)" > $OUT/rev.txt
python3 -m pytest -n 8 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/preprocess tests/run/test_preprocessing.py tests/run/test_gpu_faults.py tests/hrebsd/test_remap_batches.py tests/test_refine.py > $OUT/tests.txt 2>&1; tail -3 $OUT/tests.txt
for s in "256 1024 12" "512 512 12" "512 512 30"; do timeout 60 python3 .scratch/s29/breakdown.py $s; done 2>&1 | grep -v Warn | tee $OUT/breakdown.txt
for t in new old; do
  echo "=== $t"
  if [ $t = old ]; then cd .scratch/head; P=$PWD:/tmp/site:/tmp/kp; else P=$R:/tmp/site:/tmp/kp; fi
  (PYTHONPATH=$P timeout 60 python3 $R/.scratch/s29/prep_bench.py $R/pipelines/paper-86roi-96.toml 256 1024; PYTHONPATH=$P timeout 60 python3 $R/.scratch/s29/prep_bench.py $R/benchmarks/recipes/hrebsd-49roi-w24-dft.toml 512 512) 2>&1 | grep -v Warn
  cd $R
done | tee $OUT/prep-bench.txt
mkdir -p /tmp/b
for r in pipelines/hrebsd.toml; do echo "== $r"; timeout 100 python3 -m ebsdxc bench --pipeline $r --patterns 6000 --pattern-size 512 --repeats 1 --out /tmp/b 2>&1 | grep -v Warn; done | tee $OUT/e2e.txt
