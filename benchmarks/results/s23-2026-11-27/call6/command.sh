export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD
echo "new = f64cbe5 (prepare_tiles_shaped, committed); base = 7132ffa in .scratch/base" > $OUT/rev.txt
cd /tmp
for v in tensor fused; do for tree in new base; do D=$R; [ $tree = base ] && D=$R/.scratch/base
  echo "== $v $tree"; PYTHONPATH=$D:/tmp/site timeout 120 python3 -m ebsdxc bench --pipeline $D/benchmarks/recipes/paper-86roi-96-w16-$v.toml --patterns 50000 --repeats 2 --out /tmp/bp 2>&1 | grep -E "^\||batches of|profile"
done; done 2>&1 | tee $OUT/e2e.txt
