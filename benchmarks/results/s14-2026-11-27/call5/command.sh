export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 240 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py tests/engines/test_gpu_engines.py tests/run/test_subpixel_real.py 2>&1 | tail -8 | tee $OUT/gpu-tests.txt
for c in "--tile 128 --rois 45 --mode window --max-shift 24" "--tile 256 --rois 45 --mode window --max-shift 24 --patterns 20" "--tile 96 --rois 86"; do
  echo -n "$c upsampled: "; timeout 40 python3 benchmarks/fused_fft.py $c --subpixel upsampled 2>&1 | grep "^fused " | head -1
done 2>&1 | tee $OUT/engine.txt
