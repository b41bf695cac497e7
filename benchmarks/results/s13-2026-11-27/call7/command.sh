export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
R=$PWD; export PYTHONPATH=$R:/tmp/site
for a in "128 24 16 split2" "128 24 30 split2" "128 24 40" "256 24 20" "112 24 16 split2" "96 0 50"; do
  echo -n "new: "; timeout 60 python3 .scratch/u50.py $a 2>&1 | tail -1
done | tee $OUT/u-split.txt
timeout 240 compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 12 python3 .scratch/lineinfo.py .scratch/u50.py 128 24 50 2>&1 | grep -v "^=========     #\|^=========         " | head -120 > $OUT/race50-lines.txt; tail -5 $OUT/race50-lines.txt
