export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; V=$R/.scratch/v
for i in 1 2; do for b in new nocol96 refpf; do
  T=$V/$b; [ $b = new ] && T=$R
  echo "== $b"; (cd $T && PYTHONPATH=$T:/tmp/site timeout 60 python3 benchmarks/fused_dft_phases.py 96:0 128:24 2>&1 | grep -E "correlate|cycles per ROI|instrumented")
done; done 2>&1 | tee $OUT/phases.txt
