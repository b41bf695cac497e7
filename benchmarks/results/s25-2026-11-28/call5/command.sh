export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) (working tree = HEAD)" > $OUT/rev.txt
timeout 150 python3 benchmarks/reference_sets.py --patterns 2048 --sets 1,4,16,64,256,2048 > $OUT/reference-sets.txt 2>&1; grep -v "^ " $OUT/reference-sets.txt | tail -3; grep "K =" $OUT/reference-sets.txt
timeout 280 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests 2>&1 | grep -v Warning | tail -6 | tee $OUT/gpu-suite.txt
