export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; O=$R/.scratch/o0; export PYTHONPATH=$R:/tmp/site:/tmp/kp
for c in "--tile 128 --rois 45 --mode window --max-shift 24 --subpixel upsampled" "--tile 128 --rois 45 --mode window --max-shift 24 --subpixel dft" "--tile 128 --rois 45 --mode window --max-shift 24 --subpixel quadratic" "--tile 96 --rois 86 --mode window --max-shift 16 --subpixel quadratic" "--tile 96 --rois 86 --mode window --max-shift 16 --subpixel dft" "--tile 64 --rois 86 --mode window --max-shift 16 --subpixel upsampled" "--tile 64 --rois 86 --mode window --max-shift 16 --subpixel quadratic"; do
  echo "== $c"
  for i in 1 2; do
  echo -n "c8f8dde: "; (cd $O && PYTHONPATH=$O:/tmp/site timeout 40 python3 benchmarks/fused_fft.py $c 2>&1 | grep "^fused " | head -1)
  echo -n "now:     "; (cd $R && timeout 40 python3 benchmarks/fused_fft.py $c 2>&1 | grep -E "^fused |^fused vs" | head -2)
  done
done 2>&1 | tee $OUT/old-new.txt
timeout 230 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py tests/engines/test_gpu_engines.py tests/run/test_subpixel_real.py 2>&1 | tail -30 | tee $OUT/gpu-tests.txt
for a in "128 24 16 0 upsampled" "128 24 16 0 dft" "96 16 16 0 quadratic" "64 16 16 0 upsampled"; do timeout 100 compute-sanitizer --tool racecheck python3 .scratch/race2.py $a 2>&1 | tail -2; done | tee $OUT/racecheck.txt
timeout 60 compute-sanitizer --tool memcheck python3 .scratch/race2.py 128 24 16 0 upsampled 2>&1 | tail -2 | tee -a $OUT/racecheck.txt
timeout 60 python3 benchmarks/fused_upsampled_phases.py 128:24 2>&1 | tail -16 | tee $OUT/phases.txt
