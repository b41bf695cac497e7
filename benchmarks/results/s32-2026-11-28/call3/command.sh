[ -d /tmp/kp/kikuchipy ] || { pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1; }
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev); old = 275cf71 in .scratch/base"
timeout -s KILL 120 python3 -m pytest -n 8 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/preprocess > $OUT/preprocess-gpu.txt 2>&1; tail -3 $OUT/preprocess-gpu.txt; grep -E "^(FAILED|ERROR)" $OUT/preprocess-gpu.txt | head -20
timeout -s KILL 120 python3 .scratch/s32/blur_time.py 2>&1 | grep -v Warn > $OUT/blur-time.txt; cat $OUT/blur-time.txt
timeout -s KILL 200 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; tail -2 $OUT/gpu-suite.txt; grep -E "^(FAILED|ERROR)" $OUT/gpu-suite.txt | head -20
for t in old new old new; do
  if [ $t = old ]; then P=$PWD/.scratch/base:/tmp/site:/tmp/kp; else P=$PWD:/tmp/site:/tmp/kp; fi
  echo "##### $t hrebsd 512" >> $OUT/ab-hrebsd.txt
  REPS=2 PYTHONPATH=$P timeout -s KILL 50 python3 .scratch/s32/gap_probe.py pipelines/hrebsd.toml 10000 512 4x4 2>&1 | grep -v "pipeline = \|pipe = \|warn" >> $OUT/ab-hrebsd.txt
done
grep "#####\|===" $OUT/ab-hrebsd.txt
