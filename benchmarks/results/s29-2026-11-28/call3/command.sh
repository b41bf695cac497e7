export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) + working tree; prev = .scratch/s29/prev (a883283); old = .scratch/head (4a6c52c)" > $OUT/rev.txt
python3 -m pytest -n 8 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/preprocess tests/run/test_preprocessing.py tests/run/test_gpu_faults.py tests/test_refine.py tests/run/test_process.py tests/test_dic*.py > $OUT/tests.txt 2>&1; tail -3 $OUT/tests.txt
for s in "256 1024 12" "512 512 12" "1024 128 24"; do timeout 60 python3 .scratch/s29/breakdown2.py $s; done 2>&1 | grep -v Warn | tee $OUT/breakdown.txt
for t in new prev old; do
  echo "=== $t"
  case $t in new) D=$R;; prev) D=$R/.scratch/s29/prev;; old) D=$R/.scratch/head;; esac
  cd $D
  (PYTHONPATH=$D:/tmp/site:/tmp/kp timeout 60 python3 $R/.scratch/s29/prep_bench.py $R/pipelines/paper-86roi-96.toml 256 1024; PYTHONPATH=$D:/tmp/site:/tmp/kp timeout 60 python3 $R/.scratch/s29/prep_bench.py $R/benchmarks/recipes/hrebsd-49roi-w24-dft.toml 512 512) 2>&1 | grep -v Warn
  cd $R
done | tee $OUT/prep-bench.txt
mkdir -p /tmp/b
for t in new old new old; do
  case $t in new) D=$R;; old) D=$R/.scratch/head;; esac
  echo "== $t pipelines/hrebsd.toml"; (cd $D && PYTHONPATH=$D:/tmp/site:/tmp/kp timeout 100 python3 -m ebsdxc bench --pipeline $R/pipelines/hrebsd.toml --patterns 6000 --pattern-size 512 --repeats 1 --out /tmp/b 2>&1 | grep -v Warn | grep "end to end\|bound\|engine")
done | tee $OUT/e2e.txt
