export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
R=$PWD; O=$R/.scratch/o0; export PYTHONPATH=$R:/tmp/site
timeout 150 python3 benchmarks/fused_grid_nodes.py 2>&1 | tee $OUT/nodes.txt
cd /tmp
for t in "hrebsd-49roi-w24-upsampled.toml --patterns 10000 --pattern-size 512" "paper-86roi-96-upsampled.toml --patterns 20000 --pattern-size 256"; do
  set -- $t
  echo "== 9a4b980 $t"; PYTHONPATH=$O:/tmp/site timeout 100 python3 -m ebsdxc bench --pipeline $O/benchmarks/recipes/$t --repeats 2 2>&1 | tail -13
  echo "== now $t"; timeout 100 python3 -m ebsdxc bench --pipeline $R/benchmarks/recipes/$t --repeats 2 2>&1 | tail -13
done 2>&1 | tee $OUT/e2e.txt
