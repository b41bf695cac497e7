export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; V=$R/.scratch/v; Q=$V/quad; O=$V/o0; cp -r $R/sample_data $Q/
for i in 1 2; do for b in o0 main quad; do
  T=$V/$b; [ $b = main ] && T=$R
  echo "== $b"; (cd $T && PYTHONPATH=$T:/tmp/site timeout 40 python3 benchmarks/fused_dft_phases.py 96:0 128:24 2>&1 | grep -vE "^\s+(row weights|window autocorr|barrier|nine sums)")
done; done 2>&1 | tee $OUT/phases.txt
for b in quad main; do T=$V/$b; [ $b = main ] && T=$R; echo "== tests $b"; (cd $T && PYTHONPATH=$T:/tmp/site:/tmp/kp timeout 150 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py tests/engines/test_gpu_engines.py tests/run/test_subpixel_real.py tests/engines/test_dispatch_measured.py tests/engines/test_gpu_ops.py tests/test_peak_conditioning.py 2>&1 | tail -4); done | tee $OUT/gpu-tests.txt
for a in "96 0 16 0 dft" "96 0 16 2 dft" "64 16 16 0 dft"; do echo "== racecheck quad $a"; (cd $Q && PYTHONPATH=$Q:/tmp/site timeout 40 compute-sanitizer --tool racecheck python3 $R/.scratch/race2.py $a 2>&1 | tail -1); done | tee $OUT/racecheck.txt
for c in "--subpixel dft" "--tile 128 --rois 45 --mode window --max-shift 24 --subpixel dft"; do
  echo "== $c"
  for i in 1 2; do for b in o0 main quad; do
  T=$V/$b; [ $b = main ] && T=$R
  echo -n "$b: "; (cd $T && PYTHONPATH=$T:/tmp/site timeout 40 python3 benchmarks/fused_fft.py $c 2>&1 | grep -E "^fused " | head -1)
  done; done
done 2>&1 | tee $OUT/old-new.txt
cd /tmp
for i in 1 2; do for b in o0 main quad; do
  T=$V/$b; [ $b = main ] && T=$R
  echo "== paper dft $b"; PYTHONPATH=$T:/tmp/site timeout 60 python3 -m ebsdxc bench --pipeline --patterns 50000 --repeats 2 --out /tmp/bp-$b-$i 2>&1 | grep -E "^\|" | head -12
done; done 2>&1 | tee $OUT/e2e-paper.txt
