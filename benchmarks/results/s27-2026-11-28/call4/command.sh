export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) (working tree = HEAD)" > $OUT/rev.txt
cp .scratch/s27/call4.sh $OUT/command.sh
for size in 256 512; do
  n=4000; [ $size = 512 ] && n=2000
  timeout 100 python3 .scratch/s27/remap_stages.py $n $size 2>&1 | grep -v Warn
done 2>&1 | tee $OUT/stages.txt
timeout 100 python3 .scratch/s27/remap_stages.py 4000 256 benchmarks/recipes/paper-86roi-96-w16-tensor.toml 2>&1 | grep -v Warn | tee $OUT/stages-tensor.txt
