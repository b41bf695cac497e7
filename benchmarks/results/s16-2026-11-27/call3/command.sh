export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; O=$R/.scratch/o0; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 200 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py tests/engines/test_gpu_engines.py tests/run/test_subpixel_real.py tests/engines/test_dispatch_measured.py 2>&1 | tail -4 | tee $OUT/gpu-tests.txt
timeout 60 python3 .scratch/s16/phases_nocomp.py 96:0 2>&1 | tee $OUT/phases-nocomp.txt
cd /tmp
for i in 1 2; do for v in old new; do
  if [ $v = old ]; then P=$O:/tmp/site; else P=$R:/tmp/site; fi
  echo "== paper dft $v"; PYTHONPATH=$P timeout 100 python3 -m ebsdxc bench --pipeline --patterns 50000 --repeats 2 --out /tmp/bp-$v-$i 2>&1 | grep -E "^\|" | head -12
done; done 2>&1 | tee $OUT/e2e-paper.txt
