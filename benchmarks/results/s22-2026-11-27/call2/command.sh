export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
timeout 100 python3 .scratch/s22/gap.py 2>&1 | tee $OUT/gap.txt
cd /tmp
T=$R/benchmarks/recipes/paper-86roi-96-w16-tensor.toml; F=$R/benchmarks/recipes/paper-86roi-96-w16-fused.toml
for c in "T 512" "T 1024" "T 2048" "T 4096" "F 0" "F 1024" "F 2048" "T 0"; do set -- $c; P=$T; [ $1 = F ] && P=$F
  bb="--batch $2"; [ $2 = 0 ] && bb=""
  echo "== $1 batch $2"; timeout 100 python3 -m ebsdxc bench --pipeline $P --patterns 50000 --repeats 2 $bb --out /tmp/bp 2>&1 | grep -E "streaming|engine bound|profile"
done 2>&1 | tee $OUT/batch.txt
