export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
R=$PWD; O=$R/.scratch/o0; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 200 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py tests/engines/test_gpu_engines.py tests/run/test_subpixel_real.py 2>&1 | tail -8 | tee $OUT/gpu-tests.txt
for a in "128 24 16" "256 24 16" "96 0 16" "128 24 50 2"; do timeout 100 compute-sanitizer --tool racecheck python3 benchmarks/results/s14-2026-11-27/scripts/race.py.txt $a 2>&1 | tail -2; done | tee $OUT/racecheck.txt
timeout 60 compute-sanitizer --tool memcheck python3 benchmarks/results/s14-2026-11-27/scripts/race.py.txt 128 24 16 2>&1 | tail -2 | tee -a $OUT/racecheck.txt
for c in "--tile 128 --rois 45 --mode window --max-shift 24 --subpixel upsampled" "--tile 64 --rois 86 --mode window --max-shift 16 --subpixel upsampled" "--tile 96 --rois 86 --subpixel upsampled" "--tile 256 --rois 45 --mode window --max-shift 24 --patterns 20 --subpixel upsampled" "--tile 96 --rois 86 --subpixel dft" "--tile 128 --rois 45 --mode window --max-shift 24 --subpixel dft"; do
  echo "== $c"
  echo -n "9a4b980: "; (cd $O && PYTHONPATH=$O:/tmp/site timeout 40 python3 benchmarks/fused_fft.py $c 2>&1 | grep "^fused " | head -1)
  echo -n "now:     "; (cd $R && timeout 40 python3 benchmarks/fused_fft.py $c 2>&1 | grep "^fused " | head -1)
done 2>&1 | tee $OUT/old-new.txt
timeout 60 python3 benchmarks/fused_upsampled_phases.py 128:24 2>&1 | tail -16 | tee $OUT/phases.txt
cd /tmp
timeout 120 python3 -m ebsdxc bench --pipeline $R/benchmarks/recipes/hrebsd-49roi-w24-upsampled.toml --patterns 10000 --pattern-size 512 --repeats 2 2>&1 | tail -14 | tee $OUT/e2e512.txt
timeout 120 python3 -m ebsdxc bench --pipeline $R/benchmarks/recipes/hrebsd-49roi-w24-upsampled.toml --patterns 3000 --pattern-size 1024 --repeats 2 2>&1 | tail -14 | tee $OUT/e2e1024.txt
