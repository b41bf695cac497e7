export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; O=$R/.scratch/o0; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 200 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py tests/engines/test_gpu_engines.py tests/run/test_subpixel_real.py tests/engines/test_dispatch_measured.py 2>&1 | tail -4 | tee $OUT/gpu-tests.txt
for c in "--subpixel dft" "--tile 128 --rois 45 --mode window --max-shift 24 --subpixel dft"; do
  echo "== $c"
  for i in 1 2; do
  echo -n "481f16b: "; (cd $O && PYTHONPATH=$O:/tmp/site timeout 40 python3 benchmarks/fused_fft.py $c 2>&1 | grep "^fused " | head -1)
  echo -n "now:     "; (cd $R && timeout 40 python3 benchmarks/fused_fft.py $c 2>&1 | grep -E "^fused " | head -1)
  done
done 2>&1 | tee $OUT/old-new.txt
timeout 60 python3 benchmarks/fused_dft_phases.py 96:0 128:24 2>&1 | tee $OUT/phases.txt
(cd /tmp && EBSDXC_CACHE_DIR=$OUT/cache timeout 240 python3 -m ebsdxc bench --calibrate --out $OUT/bench > $OUT/calibrate.txt 2>&1; echo "rc $?" >> $OUT/calibrate.txt; tail -3 $OUT/calibrate.txt)
