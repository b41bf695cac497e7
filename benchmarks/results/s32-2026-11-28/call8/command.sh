[ -d /tmp/kp/kikuchipy ] || { pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1; }
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev)"
for i in 1 2; do CUPY_CACHE_DIR=/tmp/cc8 timeout -s KILL 60 python3 .scratch/s32/compile_lowrank.py 2>&1 | grep -v Warn; done | tee $OUT/compile.txt
timeout -s KILL 220 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; tail -2 $OUT/gpu-suite.txt; grep -E "^(FAILED|ERROR)" $OUT/gpu-suite.txt | head -20
