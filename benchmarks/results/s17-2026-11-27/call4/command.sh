export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; V=$R/.scratch/v
for i in 1 2; do for b in main f0 f1 f2; do
  T=$V/$b; [ $b = main ] && T=$R
  echo "== $b"; (cd $T && PYTHONPATH=$T:/tmp/site timeout 40 python3 benchmarks/fused_dft_phases.py 96:0 128:24 2>&1 | grep -vE "^\s+(row weights|window autocorr|barrier|nine sums)")
done; done 2>&1 | tee $OUT/phases.txt
for b in f2 f1; do A=$V/$b; cp -r $R/sample_data $A/; echo "== tests $b"; (cd $A && PYTHONPATH=$A:/tmp/site:/tmp/kp timeout 170 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py tests/engines/test_gpu_engines.py tests/run/test_subpixel_real.py tests/engines/test_dispatch_measured.py 2>&1 | tail -6); done | tee $OUT/gpu-tests.txt
for a in "f2 96 0 16 0 dft" "f2 96 0 16 2 dft" "f2 64 16 16 0 dft" "f2 96 0 16 0 upsampled" "f1 96 0 16 0 dft"; do set -- $a; A=$V/$1; shift; echo "== racecheck $A $*"; (cd $A && PYTHONPATH=$A:/tmp/site timeout 40 compute-sanitizer --tool racecheck python3 $R/.scratch/race2.py $* 2>&1 | tail -2); done | tee $OUT/racecheck.txt
cd /tmp
for i in 1 2; do for v in main f2; do
  if [ $v = main ]; then P=$R:/tmp/site; else P=$V/f2:/tmp/site; fi
  echo "== paper dft $v"; PYTHONPATH=$P timeout 60 python3 -m ebsdxc bench --pipeline --patterns 50000 --repeats 2 --out /tmp/bp-$v-$i 2>&1 | grep -E "^\|" | head -12
done; done 2>&1 | tee $OUT/e2e-paper.txt
