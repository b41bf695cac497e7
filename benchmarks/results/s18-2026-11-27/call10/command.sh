export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; V=$R/.scratch/v
echo "== tests new" | tee $OUT/gpu-tests.txt
(PYTHONPATH=$R:/tmp/site:/tmp/kp timeout 220 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py tests/engines/test_gpu_engines.py tests/run/test_subpixel_real.py tests/engines/test_dispatch_measured.py tests/engines/test_gpu_ops.py tests/test_peak_conditioning.py tests/run/test_gpu_run.py 2>&1 | tail -8) | tee -a $OUT/gpu-tests.txt
for i in 1 2; do for b in main new; do
  T=$V/$b; [ $b = new ] && T=$R
  echo "== $b"; (cd $T && PYTHONPATH=$T:/tmp/site timeout 60 python3 benchmarks/fused_dft_phases.py 96:0 128:24 64:0 2>&1 | grep -E "correlate|cycles per ROI|instrumented")
done; done 2>&1 | tee $OUT/phases.txt
for a in "96 0 16 0 dft" "64 0 16 0 dft" "96 16 16 0 quadratic" "96 0 16 0 upsampled"; do echo "== racecheck $a"; (PYTHONPATH=$R:/tmp/site timeout 60 compute-sanitizer --tool racecheck python3 $R/.scratch/race2.py $a 2>&1 | tail -1); done | tee $OUT/racecheck.txt
echo "== memcheck 96 0 16 0 dft" | tee $OUT/memcheck.txt; (PYTHONPATH=$R:/tmp/site timeout 60 compute-sanitizer --tool memcheck python3 $R/.scratch/race2.py 96 0 16 0 dft 2>&1 | tail -1) | tee -a $OUT/memcheck.txt
cd /tmp
for i in 1 2; do for b in main new; do
  T=$V/$b; [ $b = new ] && T=$R
  echo "== paper dft $b"; PYTHONPATH=$T:/tmp/site timeout 70 python3 -m ebsdxc bench --pipeline --patterns 50000 --repeats 2 --out /tmp/bp-$b-$i 2>&1 | grep -E "^\|" | head -12
done; done 2>&1 | tee $OUT/e2e-paper.txt
