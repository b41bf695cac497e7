[ -d /tmp/kp/kikuchipy ] || { pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1; }
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev)"
timeout -s KILL 250 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; tail -4 $OUT/gpu-suite.txt
G="grep -v pipeline\ =\|pipe\ =\|warn"
for t in old new old new; do
  if [ $t = old ]; then P=$PWD/.scratch/base:/tmp/site:/tmp/kp; else P=$PWD:/tmp/site:/tmp/kp; fi
  echo "##### $t icgn" >> $OUT/ab-icgn.txt
  REPS=2 PYTHONPATH=$P timeout -s KILL 70 python3 .scratch/s32/gap_probe.py .scratch/s31/hrebsd-icgn.toml 10000 512 4x4 2>&1 | grep -v "pipeline = \|pipe = \|warn" >> $OUT/ab-icgn.txt
  echo "##### $t hrebsd" >> $OUT/ab-hrebsd.txt
  REPS=2 PYTHONPATH=$P timeout -s KILL 50 python3 .scratch/s32/gap_probe.py pipelines/hrebsd.toml 10000 512 4x4 2>&1 | grep -v "pipeline = \|pipe = \|warn" >> $OUT/ab-hrebsd.txt
done
grep "===" $OUT/ab-*.txt
rm -f /tmp/gp/scan-10000-512.h5
REPS=1 timeout -s KILL 150 python3 .scratch/s32/gap_probe.py pipelines/hrebsd.toml 40000 512 4x4 2>&1 | grep -v "pipeline = \|pipe = \|warn" > $OUT/long-hrebsd.txt; grep "===" $OUT/long-hrebsd.txt
