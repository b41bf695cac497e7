export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
timeout 200 python3 -m pytest -n 8 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_tensor.py tests/run/test_bench_pipeline.py tests/run/test_gpu_run.py tests/run/test_process.py tests/run/test_gpu_faults.py 2>&1 | grep -v Warning | tail -12 | tee $OUT/tests.txt
cd /tmp
T=$R/benchmarks/recipes/paper-86roi-96-w16-tensor.toml; F=$R/benchmarks/recipes/paper-86roi-96-w16-fused.toml; H=$R/.scratch/s22/hrebsd-49roi-w24-tensor.toml
for c in "T new 256 50000" "T base 256 50000" "F new 256 50000" "F base 256 50000" "H new 512 20000" "H base 512 20000" "T new 256 50000" "T base 256 50000"; do set -- $c
  P=$T; [ $1 = F ] && P=$F; [ $1 = H ] && P=$H; PP=$R; [ $2 = base ] && PP=$R/.scratch/base
  echo "== $1 $2 $3"; PYTHONPATH=$PP:/tmp/site timeout 150 python3 -m ebsdxc bench --pipeline $P --patterns $4 --pattern-size $3 --repeats 3 --out /tmp/bp$3 2>&1 | grep -E "^\||batches of|profile"
done 2>&1 | tee $OUT/e2e.txt
