export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; O=$R/.scratch/o0; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 150 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py tests/engines/test_gpu_engines.py tests/run/test_subpixel_real.py tests/engines/test_dispatch_measured.py 2>&1 | tail -6 | tee $OUT/gpu-tests.txt
timeout 40 python3 benchmarks/fused_dft_phases.py 96:0 128:24 2>&1 | tee $OUT/phases.txt
echo "== racecheck 96 0 16 0 dft" | tee $OUT/racecheck.txt; timeout 40 compute-sanitizer --tool racecheck python3 .scratch/race2.py 96 0 16 0 dft 2>&1 | tail -2 | tee -a $OUT/racecheck.txt
for i in 1 2; do
  echo -n "481f16b: "; (cd $O && PYTHONPATH=$O:/tmp/site timeout 30 python3 benchmarks/fused_fft.py --subpixel dft 2>&1 | grep "^fused " | head -1)
  echo -n "now:     "; (cd $R && timeout 30 python3 benchmarks/fused_fft.py --subpixel dft 2>&1 | grep -E "^fused |^fused vs" | head -2)
done 2>&1 | tee $OUT/old-new.txt
cd /tmp
for v in old new; do
  if [ $v = old ]; then P=$O:/tmp/site; else P=$R:/tmp/site; fi
  echo "== paper dft $v"; PYTHONPATH=$P timeout 60 python3 -m ebsdxc bench --pipeline --patterns 50000 --repeats 2 --out /tmp/bp-$v 2>&1 | grep -E "^\| (end to end, streaming|engine bound)" | head -4
done 2>&1 | tee $OUT/e2e-paper.txt
