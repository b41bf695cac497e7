export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=$PWD:/tmp/site
for r in upsampled dft; do timeout 200 python3 -m ebsdxc bench --pipeline benchmarks/recipes/hrebsd-49roi-w24-$r.toml --patterns 10000 --pattern-size 512 --repeats 2 2>&1 | tail -14; done | tee $OUT/e2e512.txt
