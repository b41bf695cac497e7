export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
echo "call 5's tree with the read-ahead test's batches as arrays of points (the test's fault in call 5)" > $OUT/rev.txt
cp .scratch/s28/call6.sh $OUT/command.sh
T=tests/hrebsd/test_remap_batches.py
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu -rfE --tb=short $T 2>&1 | tail -3 | tee $OUT/read-ahead-tests.txt
rm -rf /tmp/mut && mkdir /tmp/mut && cp -r ebsdxc kernels tests pyproject.toml /tmp/mut/ 2>/dev/null
sed -i '732s/self._copied\[slot\].synchronize()/pass/' /tmp/mut/ebsdxc/hrebsd.py; sed -n 730,733p /tmp/mut/ebsdxc/hrebsd.py
(cd /tmp/mut && PYTHONPATH=/tmp/mut:/tmp/site timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu --tb=line $T 2>&1 | tail -5) | tee $OUT/mutation.txt
