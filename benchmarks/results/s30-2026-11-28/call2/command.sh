pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp
D=$PWD
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev) + working tree"
timeout 200 python3 -m pytest -n 8 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/test_icgn.py tests/test_icgn_quadratic.py tests/test_refine.py tests/test_subset_icgn.py tests/test_dic.py tests/test_pc_calibration.py tests/run/test_simulated_references.py 2>&1 | tail -25
echo "=== new"; python3 .scratch/s30/icgn_prof.py 256 1024 3 2>&1 | grep -v Warning
python3 .scratch/s30/icgn_prof.py 512 256 3 2>&1 | grep -v Warning
echo "=== base de05fa6"; cd .scratch/base && PYTHONPATH=$D/.scratch/base:/tmp/site:/tmp/kp python3 $D/.scratch/s30/icgn_prof.py 512 256 3 2>&1 | grep -v Warning
