export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
R=$PWD; O=$R/.scratch/o0; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 300 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py 2>&1 | tail -15 | tee $OUT/gpu-tests.txt
timeout 200 python3 benchmarks/results/s14-2026-11-27/scripts/nodes.py.txt 2>&1 | tee $OUT/nodes.txt
for c in "--tile 128 --rois 45 --mode window --max-shift 24" "--tile 64 --rois 86 --mode window --max-shift 16" "--tile 96 --rois 86" "--tile 256 --rois 45 --mode window --max-shift 24 --patterns 20"; do
  echo "== $c --subpixel upsampled"
  echo -n "9a4b980: "; (cd $O && PYTHONPATH=$O:/tmp/site timeout 40 python3 benchmarks/fused_fft.py $c --subpixel upsampled 2>&1 | grep "^fused " | head -1)
  echo -n "now:     "; (cd $R && timeout 40 python3 benchmarks/fused_fft.py $c --subpixel upsampled 2>&1 | grep "^fused " | head -1)
done 2>&1 | tee $OUT/old-new.txt
