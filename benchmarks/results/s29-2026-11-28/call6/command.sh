export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) (working tree = HEAD); old = .scratch/head (4a6c52c)" > $OUT/rev.txt
timeout 230 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; grep -v Warning $OUT/gpu-suite.txt | tail -4
timeout 60 python3 benchmarks/preprocessing.py benchmarks/recipes/hrebsd-49roi-w24-dft.toml 512 512 2>&1 | grep -v Warn | tee $OUT/prep-bench.txt
mkdir -p /tmp/b
for t in new old; do
  case $t in new) D=$R;; old) D=$R/.scratch/head;; esac
  echo "== $t pipelines/hrebsd.toml, EBSDXC_READER_PROCESSES=4x4"; (cd $D && EBSDXC_READER_PROCESSES=4x4 PYTHONPATH=$D:/tmp/site:/tmp/kp timeout 100 python3 -m ebsdxc bench --pipeline $R/pipelines/hrebsd.toml --patterns 6000 --pattern-size 512 --repeats 1 --out /tmp/b 2>&1 | grep -v Warn | grep "end to end\|bound\|engine\|patterns of\|reader")
done | tee $OUT/e2e.txt
