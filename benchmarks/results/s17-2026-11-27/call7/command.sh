export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; V=$R/.scratch/v; O=$V/o0; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 200 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py tests/engines/test_gpu_engines.py tests/run/test_subpixel_real.py tests/engines/test_dispatch_measured.py tests/engines/test_gpu_ops.py tests/test_peak_conditioning.py tests/run/test_gpu_run.py 2>&1 | tail -3 | tee $OUT/gpu-tests.txt
for i in 1 2; do for b in o0 main; do T=$V/$b; [ $b = main ] && T=$R
  echo "== $b"; (cd $T && PYTHONPATH=$T:/tmp/site timeout 40 python3 benchmarks/fused_dft_phases.py 96:0 2>&1 | grep -E "cycles per ROI|kernel")
done; done 2>&1 | tee $OUT/phases.txt
cd /tmp
for i in 1 2; do for b in o0 main; do T=$V/$b; [ $b = main ] && T=$R
  echo "== paper dft $b"; PYTHONPATH=$T:/tmp/site timeout 60 python3 -m ebsdxc bench --pipeline --patterns 50000 --repeats 2 --out /tmp/bp-$b-$i 2>&1 | grep -E "^\|" | head -12
done; done 2>&1 | tee $OUT/e2e-paper.txt
