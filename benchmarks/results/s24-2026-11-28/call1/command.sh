export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
echo "fef6ef2 + exact_3x3 walking R rows, padded L (working tree); base = fef6ef2 in .scratch/base" > $OUT/rev.txt
timeout 150 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_tensor.py tests/engines/test_match_rois.py 2>&1 | grep -v Warning | tail -8 | tee $OUT/tensor-tests.txt
for lay in paper hrebsd; do for tree in new base; do D=$R; [ $tree = base ] && D=$R/.scratch/base
  echo "== $lay $tree"; (cd $D && PYTHONPATH=$D:/tmp/site timeout 100 python3 $R/.scratch/s24/peaks.py $lay /tmp/$lay-$tree.npz 2>&1)
done; python3 .scratch/s24/cmp.py /tmp/$lay-new.npz /tmp/$lay-base.npz; done 2>&1 | tee $OUT/peaks.txt
rm -rf /tmp/mut && mkdir /tmp/mut && cp -r ebsdxc kernels tests pyproject.toml /tmp/mut/ && sed -i 's/lp = cp.zeros((na, h + 4, lw)/lp = cp.ones((na, h + 4, lw)/' /tmp/mut/ebsdxc/engines/tensor.py && grep -c "cp.ones((na, h + 4" /tmp/mut/ebsdxc/engines/tensor.py
(cd /tmp/mut && PYTHONPATH=/tmp/mut:/tmp/site timeout 100 python3 -m pytest -n 8 -m gpu -q -p no:cacheprovider --tb=no tests/engines/test_tensor.py -k "window_edge or every_width or match_cpu" 2>&1 | tail -3) | tee $OUT/mutation-ones-padding.txt
for tool in memcheck racecheck; do timeout 100 compute-sanitizer --tool $tool python3 .scratch/s22/race.py 2>&1 | tail -2; done | tee $OUT/sanitizer.txt
timeout 100 compute-sanitizer --tool memcheck python3 -m pytest -q -p no:cacheprovider --tb=short tests/engines/test_tensor.py -k window_edge 2>&1 | tail -3 | tee -a $OUT/sanitizer.txt
for tree in new base; do D=$R; [ $tree = base ] && D=$R/.scratch/base
  echo "== $tree"; (cd $D && PYTHONPATH=$D:/tmp/site timeout 100 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct --from-patterns 2>&1 | grep -E "tensor bf16 |match_rois|tile statistics|NVIDIA")
done 2>&1 | tee $OUT/paper-512.txt
