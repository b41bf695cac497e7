export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
R=$PWD; O=$R/.scratch/oprev; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 240 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py 2>&1 | tail -6 | tee $OUT/gpu-tests.txt
for c in "--tile 128 --rois 45 --mode window --max-shift 24" "--tile 96 --rois 86" "--tile 256 --rois 45 --mode window --max-shift 24 --patterns 20" "--tile 64 --rois 86 --mode window --max-shift 16"; do
  echo "== $c --subpixel upsampled"
  for i in 1 2; do
  echo -n "b83fdc6: "; (cd $O && PYTHONPATH=$O:/tmp/site timeout 40 python3 benchmarks/fused_fft.py $c --subpixel upsampled 2>&1 | grep -A1 "^fused " | head -2 | tr '\n' ' '; echo)
  echo -n "now:     "; (cd $R && timeout 40 python3 benchmarks/fused_fft.py $c --subpixel upsampled 2>&1 | grep -A1 "^fused " | head -2 | tr '\n' ' '; echo)
  done
done 2>&1 | tee $OUT/old-new.txt
timeout 60 python3 benchmarks/fused_upsampled_phases.py 128:24 2>&1 | tee $OUT/up-phases.txt
for a in "128x128 upsampled 0 24" "128x128 upsampled 0 24 50" "96x96 upsampled 0 0"; do echo "$a"; timeout 120 compute-sanitizer --tool racecheck python3 .scratch/san2.py $a 2>&1 | tail -1; done | tee $OUT/racecheck.txt
