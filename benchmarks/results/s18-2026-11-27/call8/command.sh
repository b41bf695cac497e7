export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; V=$R/.scratch/v
echo "== the whole GPU suite $(git rev-parse --short HEAD 2>/dev/null)" | tee $OUT/gpu-suite.txt
(PYTHONPATH=$R:/tmp/site:/tmp/kp timeout 330 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfEs --tb=line tests 2>&1 | grep -vE "^\s*$" | tail -40) | tee -a $OUT/gpu-suite.txt
for i in 1 2; do for b in o0 new; do
  T=$V/$b; [ $b = new ] && T=$R
  echo "== $b"; (cd $T && PYTHONPATH=$T:/tmp/site timeout 60 python3 benchmarks/fused_dft_phases.py 96:0 128:24 2>&1 | grep -vE "^\s+(row weights|window autocorr|barrier|nine sums)")
done; done 2>&1 | tee $OUT/phases.txt
for i in 1 2; do for b in o0 new; do
  T=$V/$b; [ $b = new ] && T=$R
  echo -n "$b: "; (cd $T && PYTHONPATH=$T:/tmp/site timeout 40 python3 benchmarks/fused_fft.py --subpixel dft 2>&1 | grep -E "^fused " | head -1)
done; done 2>&1 | tee $OUT/engine-alone.txt
