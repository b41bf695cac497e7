[ -d /tmp/kp/kikuchipy ] || { pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1; }
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev)"
timeout -s KILL 150 python3 .scratch/s32/products_bench.py 2>&1 | grep -v Warn > $OUT/products.txt; cat $OUT/products.txt
timeout -s KILL 120 python3 -m pytest -n 8 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/preprocess > $OUT/preprocess-gpu.txt 2>&1; tail -2 $OUT/preprocess-gpu.txt; grep -E "^(FAILED|ERROR)" $OUT/preprocess-gpu.txt | head -20
timeout -s KILL 60 python3 .scratch/s32/blur_time.py 2>&1 | grep -v Warn > $OUT/blur-time.txt; cat $OUT/blur-time.txt
