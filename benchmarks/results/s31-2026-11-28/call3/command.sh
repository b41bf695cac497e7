[ -d /tmp/kp/kikuchipy ] || { pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1; }
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev)"
timeout 280 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; tail -3 $OUT/gpu-suite.txt
grep -c collinear $OUT/gpu-suite.txt; python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_icgn.py -k collinear 2>&1 | tail -1
for rnd in 1 2; do
 timeout 100 python3 .scratch/s27/remap_ab.py 4000 256 2>&1 | grep -v Warn | tail -1
 timeout 100 python3 .scratch/s27/remap_ab.py 2000 512 2>&1 | grep -v Warn | tail -1
done
