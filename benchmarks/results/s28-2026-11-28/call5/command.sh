export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "working tree = 994231c + the remapping batches read into pinned buffers (hrebsd._PinnedPair.read, inputs.read_points(out=)); head = 4a6c52c's code (= 994231c's) in .scratch/head" > $OUT/rev.txt
cp .scratch/s28/call5.sh $OUT/command.sh
T=tests/hrebsd/test_remap_batches.py::test_batches_reach_the_device_as_read_while_copies_wait
rm -rf /tmp/mut && mkdir /tmp/mut && cp -r ebsdxc kernels tests pyproject.toml sample_data /tmp/mut/ 2>/dev/null
sed -i '732s/self._copied\[slot\].synchronize()/pass/' /tmp/mut/ebsdxc/hrebsd.py; sed -n 730,733p /tmp/mut/ebsdxc/hrebsd.py
(cd /tmp/mut && PYTHONPATH=/tmp/mut:/tmp/site:/tmp/kp timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu --tb=line $T 2>&1 | tail -4) | tee $OUT/mutation.txt
timeout 280 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; tail -2 $OUT/gpu-suite.txt
for rnd in 1 2; do
 for size in 256 512; do
  n=4000; [ $size = 512 ] && n=2000
  echo "round $rnd head:"; (cd .scratch/head && PYTHONPATH=$PWD:/tmp/site:/tmp/kp timeout 50 python3 $R/.scratch/s27/remap_ab.py $n $size 2>&1 | grep -v Warn | tail -1)
  echo "round $rnd new:"; timeout 50 python3 .scratch/s27/remap_ab.py $n $size 2>&1 | grep -v Warn | tail -1
 done
 P=benchmarks/recipes/paper-86roi-96-w16-tensor.toml
 echo "round $rnd head:"; (cd .scratch/head && PYTHONPATH=$PWD:/tmp/site:/tmp/kp timeout 50 python3 $R/.scratch/s27/remap_ab.py 4000 256 $P 2>&1 | grep -v Warn | tail -1)
 echo "round $rnd new:"; timeout 50 python3 .scratch/s27/remap_ab.py 4000 256 $P 2>&1 | grep -v Warn | tail -1
done 2>&1 | tee $OUT/ab.txt
