[ -d /tmp/kp/kikuchipy ] || { pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1; }
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp PYTHONUNBUFFERED=1
D=$PWD
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev); old = 275cf71 in .scratch/base"
timeout -s KILL 200 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; tail -2 $OUT/gpu-suite.txt; grep -E "^(FAILED|ERROR)" $OUT/gpu-suite.txt | head -20
mkdir -p /tmp/b
for rec in pipelines/hrebsd.toml .scratch/s31/hrebsd-icgn.toml; do for t in old new; do
  if [ $t = old ]; then export PYTHONPATH=$D/.scratch/base:/tmp/site:/tmp/kp; else export PYTHONPATH=$D:/tmp/site:/tmp/kp; fi
  echo "=== $t: ebsdxc bench --pipeline $rec --patterns 20000 --pattern-size 512 --repeats 2" | tee -a $OUT/bench.txt
  timeout -s KILL 100 python3 -m ebsdxc bench --pipeline $rec --patterns 20000 --pattern-size 512 --repeats 2 --out /tmp/b 2>&1 | grep -v -i warn | tail -13 >> $OUT/bench.txt
done; done
rm -rf /tmp/b
grep -E "===|end to end|engine bound|profile" $OUT/bench.txt
export PYTHONPATH=$D:/tmp/site:/tmp/kp
for a in "4000 256" "2000 512"; do echo "=== remap_ab $a" >> $OUT/remap.txt; timeout -s KILL 90 python3 .scratch/s27/remap_ab.py $a 2>&1 | grep -v Warn | tail -3 >> $OUT/remap.txt; done; cat $OUT/remap.txt
