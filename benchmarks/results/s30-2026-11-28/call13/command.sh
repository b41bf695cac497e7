pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev)"
timeout 260 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; echo "suite rc=$?"; tail -2 $OUT/gpu-suite.txt
