[ -d /tmp/kp/kikuchipy ] || { pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1; }
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev); nowb = the same without write-behind"
timeout -s KILL 150 python3 .scratch/s32/products_bench.py 2>&1 | grep -v Warn > $OUT/products.txt; cat $OUT/products.txt
for ms in 5 20; do for t in nowb new nowb new; do
  if [ $t = nowb ]; then P=$PWD/.scratch/nowb:/tmp/site:/tmp/kp; else P=$PWD:/tmp/site:/tmp/kp; fi
  echo "##### $t icgn 512, writes + $ms ms" >> $OUT/ab-slow-write.txt
  SLOW_WRITE_MS=$ms REPS=1 PYTHONPATH=$P timeout -s KILL 60 python3 .scratch/s32/gap_probe.py .scratch/s31/hrebsd-icgn.toml 10000 512 4x4 2>&1 | grep -v "pipeline = \|pipe = \|warn" >> $OUT/ab-slow-write.txt
done; done
grep "#####\|===" $OUT/ab-slow-write.txt
