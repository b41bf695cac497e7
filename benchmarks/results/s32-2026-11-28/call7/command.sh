[ -d /tmp/kp/kikuchipy ] || { pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1; }
export PYTHONUNBUFFERED=1
D=$PWD
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev); old = 275cf71 in .scratch/base"
for t in old new old new; do
  if [ $t = old ]; then export PYTHONPATH=$D/.scratch/base:/tmp/site:/tmp/kp; else export PYTHONPATH=$D:/tmp/site:/tmp/kp; fi
  echo "=== $t remap_ab 4000 256" >> $OUT/remap-ab.txt
  timeout -s KILL 60 python3 .scratch/s27/remap_ab.py 4000 256 2>&1 | grep -v Warn | tail -1 >> $OUT/remap-ab.txt
done
cat $OUT/remap-ab.txt
mkdir -p /tmp/b; cd /tmp
for t in old new; do
  if [ $t = old ]; then export PYTHONPATH=$D/.scratch/base:/tmp/site:/tmp/kp; else export PYTHONPATH=$D:/tmp/site:/tmp/kp; fi
  echo "=== $t (cwd /tmp): ebsdxc bench --pipeline pipelines/hrebsd.toml --patterns 10000 --pattern-size 512 --repeats 2" >> $OUT/bench-ab.txt
  python3 -c "import ebsdxc, sys; print(ebsdxc.__file__)" >> $OUT/bench-ab.txt
  timeout -s KILL 80 python3 -m ebsdxc bench --pipeline $D/pipelines/hrebsd.toml --patterns 10000 --pattern-size 512 --repeats 2 --out /tmp/b 2>&1 | grep -v -i warn | tail -13 >> $OUT/bench-ab.txt
done
grep -E "===|ebsdxc/__init__|end to end|engine bound" $OUT/bench-ab.txt
