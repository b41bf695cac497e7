pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev)"
timeout 200 python3 -m pytest -n 8 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/test_icgn.py tests/test_icgn_quadratic.py tests/test_refine.py tests/test_dic.py tests/test_dic_propagation.py tests/test_pc_calibration.py tests/run/test_simulated_references.py 2>&1 | grep -v Benchmark | tail -4
