pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev)"
python3 .scratch/s30/variants.py 512 256 2>&1 | grep -v Warning
python3 .scratch/s30/variants.py 256 1024 2>&1 | grep -v Warning
echo "=== compute-sanitizer memcheck, the new kernels"
timeout 300 compute-sanitizer --tool memcheck --print-limit 5 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_icgn.py -k "spline or fit_warp or iterations_match" 2>&1 | grep -v Benchmark | tail -6
