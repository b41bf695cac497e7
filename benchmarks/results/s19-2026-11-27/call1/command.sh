export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 240 python3 .scratch/s19/probe.py 512 2>&1 | tee $OUT/probe.txt
if grep -q "swap 1: nan 0 worst/bound 0\.\|swap 1: nan 0 worst/bound [0-9]e-" $OUT/probe.txt && ! grep -q "swap 0: nan 0 worst/bound 0\.\|swap 0: nan 0 worst/bound [0-9]e-" $OUT/probe.txt; then echo "SWAPPING" | tee -a $OUT/probe.txt; sed -i 's/const unsigned lbo = swap_lbo ? 128u/const unsigned lbo = !swap_lbo ? 128u/; s/const unsigned sbo = swap_lbo ?/const unsigned sbo = !swap_lbo ?/' kernels/tensorgemm.cu; fi
timeout 200 python3 -m pytest -n 8 -q -p no:cacheprovider -rfE --tb=short tests/engines/test_tensor.py 2>&1 | tail -15 | tee $OUT/tests.txt
timeout 120 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct --sweep 2>&1 | grep -v "warps=" | tee $OUT/bench-96-512.txt
