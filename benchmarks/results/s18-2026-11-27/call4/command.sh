export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; V=$R/.scratch/v
for i in 1 2; do for b in new nopred noload noref; do
  T=$V/$b; [ $b = new ] && T=$R
  echo "== $b"; (cd $T && PYTHONPATH=$T:/tmp/site timeout 60 python3 benchmarks/fused_dft_phases.py 96:0 2>&1 | grep -E "correlate|cycles per ROI|instrumented")
done; done 2>&1 | tee $OUT/phases.txt
cd $R
PYTHONPATH=$R:/tmp/site timeout 200 ncu --kernel-name regex:fused_dft --launch-skip 3 --launch-count 1 --section WarpStateStats --section SourceCounters --import-source no -o /tmp/dft python3 benchmarks/fused_fft.py --tile 96 --rois 86 --subpixel dft > /dev/null 2>&1
ncu -i /tmp/dft.ncu-rep --page source --csv --print-source sass > $OUT/ncu-sass.csv 2>&1; ls -la $OUT/ncu-sass.csv; head -3 $OUT/ncu-sass.csv | cut -c1-400
