export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 100 python3 .scratch/s22/peaks.py paper 2>&1 | tee $OUT/peaks-paper.txt
timeout 100 python3 .scratch/s22/peaks.py hrebsd 2>&1 | tee $OUT/peaks-hrebsd.txt
timeout 200 python3 -m pytest -n 12 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_tensor.py tests/engines/test_match_rois.py tests/run/test_subpixel_real.py tests/engines/test_gpu_engines.py 2>&1 | grep -v Warning | tail -8 | tee $OUT/tests.txt
timeout 150 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct --from-patterns --json $OUT/paper-512.json 2>&1 | grep -v "launch:" | tee $OUT/paper-512.txt
cd /tmp
timeout 100 python3 -m ebsdxc bench --pipeline $R/benchmarks/recipes/paper-86roi-96-w16-tensor.toml --patterns 50000 --repeats 3 --out /tmp/bp 2>&1 | grep -E "^\||batches of|profile" | tee $OUT/e2e.txt
