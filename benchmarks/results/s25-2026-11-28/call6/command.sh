export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) (working tree = HEAD)" > $OUT/rev.txt
timeout 280 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests 2>&1 | grep -v Warning | tail -6 | tee $OUT/gpu-suite.txt
timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short tests/run/test_engine_choice_sets.py 2>&1 | tail -2 | tee $OUT/engine-choice.txt
