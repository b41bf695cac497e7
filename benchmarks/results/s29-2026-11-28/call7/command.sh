export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) (working tree = HEAD); prev = .scratch/s29/prev (06fc4b6)" > $OUT/rev.txt
timeout 190 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; grep -v Warning $OUT/gpu-suite.txt | tail -4
for t in new prev; do
  case $t in new) D=$R;; prev) D=$R/.scratch/s29/prev;; esac
  echo "=== $t"; (cd $D && PYTHONPATH=$D:/tmp/site:/tmp/kp timeout 30 python3 $R/benchmarks/preprocessing.py $R/benchmarks/recipes/hrebsd-49roi-w24-dft.toml 512 512 2>&1 | grep -v Warn | grep -v "pipe = ")
done | tee $OUT/prep-bench.txt
