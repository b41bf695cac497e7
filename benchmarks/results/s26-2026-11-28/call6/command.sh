export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD
echo "$(cat .scratch/rev) (working tree = HEAD); old = 11ecd6d in .scratch/old" > $OUT/rev.txt
for round in 1 2; do for tree in old new; do
  D=$R; [ $tree = old ] && D=$R/.scratch/old
  echo "== $tree round $round"; (cd $D && PYTHONPATH=$D:/tmp/site:/tmp/kp timeout 120 python3 $R/.scratch/remap_speed.py 2>&1 | grep -v Warn)
done; done | tee $OUT/remap-speed.txt
export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 150 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct --from-patterns --json $OUT/paper-512.json > $OUT/tensor-engine.txt 2>&1; grep -v "launch:" $OUT/tensor-engine.txt | tail -30
