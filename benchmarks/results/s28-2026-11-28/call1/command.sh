export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) (working tree = HEAD); old = b65b7c8 in .scratch/old" > $OUT/rev.txt
cp .scratch/s28/call1.sh $OUT/command.sh
timeout 260 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; tail -3 $OUT/gpu-suite.txt
for rnd in 1 2; do
 for size in 256 512; do
  n=4000; [ $size = 512 ] && n=2000
  echo "round $rnd old b65b7c8:"; (cd .scratch/old && PYTHONPATH=$PWD:/tmp/site:/tmp/kp timeout 100 python3 $R/.scratch/s27/remap_ab.py $n $size 2>&1 | grep -v Warn | tail -1)
  echo "round $rnd new:"; timeout 100 python3 .scratch/s27/remap_ab.py $n $size 2>&1 | grep -v Warn | tail -1
 done
 T=benchmarks/recipes/paper-86roi-96-w16-tensor.toml
 echo "round $rnd old b65b7c8:"; (cd .scratch/old && PYTHONPATH=$PWD:/tmp/site:/tmp/kp timeout 100 python3 $R/.scratch/s27/remap_ab.py 4000 256 $T 2>&1 | grep -v Warn | tail -1)
 echo "round $rnd new:"; timeout 100 python3 .scratch/s27/remap_ab.py 4000 256 $T 2>&1 | grep -v Warn | tail -1
done 2>&1 | tee $OUT/ab.txt
