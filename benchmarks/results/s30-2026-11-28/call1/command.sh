set -x
pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp
nvidia-smi --query-gpu=name,power.limit --format=csv
cat .scratch/rev
python3 .scratch/s30/icgn_prof.py 256 1024 3 2>&1 | grep -v Warning
python3 .scratch/s30/icgn_prof.py 512 256 3 2>&1 | grep -v Warning
