export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD
for k in 1 2; do for v in new base; do P=$R; [ $v = base ] && P=$R/.scratch/base2
  PYTHONPATH=$P:/tmp/site timeout 100 python3 .scratch/s22/sweep.py x $v-$k; done; done 2>&1 | tee $OUT/sweep.txt
PYTHONPATH=$R:/tmp/site timeout 200 python3 -m pytest -n 12 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_tensor.py tests/engines/test_match_rois.py 2>&1 | grep -v Warning | tail -4 | tee $OUT/tests.txt
