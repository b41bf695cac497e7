export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; V=$R/.scratch/v
echo "== tests new" | tee $OUT/gpu-tests.txt
(PYTHONPATH=$R:/tmp/site:/tmp/kp timeout 200 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py tests/engines/test_gpu_engines.py tests/run/test_subpixel_real.py tests/engines/test_dispatch_measured.py tests/engines/test_gpu_ops.py tests/test_peak_conditioning.py tests/run/test_gpu_run.py 2>&1 | tail -8) | tee -a $OUT/gpu-tests.txt
for i in 1 2; do for b in main new; do
  T=$V/$b; [ $b = new ] && T=$R
  echo "== $b"
  (cd $T && for c in "$R/benchmarks/results/s18-2026-11-27/call1/paper-dft.toml 256 512" "$R/benchmarks/results/s18-2026-11-27/call1/paper-dft.toml 256 2048" "benchmarks/recipes/hrebsd-49roi-w24-dft.toml 512 512" "benchmarks/recipes/hrebsd-49roi-w24-dft.toml 1024 128"; do PYTHONPATH=$T:/tmp/site timeout 60 python3 benchmarks/batch_stages.py $c 2>&1 | tail -2; done)
done; done 2>&1 | tee $OUT/batch-stages.txt
cd /tmp
for i in 1 2; do for b in main new; do
  T=$V/$b; [ $b = new ] && T=$R
  echo "== paper dft $b"; PYTHONPATH=$T:/tmp/site timeout 70 python3 -m ebsdxc bench --pipeline --patterns 50000 --repeats 2 --out /tmp/bp-$b-$i 2>&1 | grep -E "^\|" | head -12
done; done 2>&1 | tee $OUT/e2e-paper.txt
