export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; V=$R/.scratch/v
echo "== tests HEAD $(git rev-parse --short HEAD)" | tee $OUT/gpu-tests.txt
(PYTHONPATH=$R:/tmp/site:/tmp/kp timeout 200 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py tests/engines/test_gpu_engines.py tests/run/test_subpixel_real.py tests/engines/test_dispatch_measured.py tests/engines/test_gpu_ops.py tests/test_peak_conditioning.py tests/run/test_gpu_run.py 2>&1 | tail -4) | tee -a $OUT/gpu-tests.txt
for i in 1 2; do for b in main noarg maxonly; do
  T=$V/$b; [ $b = main ] && T=$R
  echo "== $b"; (cd $T && PYTHONPATH=$T:/tmp/site timeout 40 python3 benchmarks/fused_dft_phases.py 96:0 128:24 2>&1 | grep -vE "^\s+(row weights|window autocorr|barrier|nine sums)")
done; done 2>&1 | tee $OUT/phases.txt
for B in 512 2048; do PYTHONPATH=$R:/tmp/site timeout 60 python3 benchmarks/batch_stages.py benchmarks/results/s18-2026-11-27/call1/paper-dft.toml 256 $B; done 2>&1 | tee $OUT/batch-stages.txt
