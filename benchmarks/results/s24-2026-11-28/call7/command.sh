export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) (working tree = HEAD); base = fef6ef2 in .scratch/base" > $OUT/rev.txt
timeout 280 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests 2>&1 | grep -v Warning | tail -6 | tee $OUT/gpu-suite.txt
for tree in new base; do D=$R; [ $tree = base ] && D=$R/.scratch/base
  echo "== $tree"; (cd $D && PYTHONPATH=$D:/tmp/site timeout 100 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct --from-patterns 2>&1 | grep -E "tensor bf16 |match_rois|NVIDIA|cuFFT|fft")
done 2>&1 | tee $OUT/paper-512.txt
(timeout 150 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct 2>&1 | tail -25) | tee $OUT/paper-512-all-engines.txt
cd /tmp
for tree in new base; do D=$R; [ $tree = base ] && D=$R/.scratch/base
  echo "== $tree"; PYTHONPATH=$D:/tmp/site timeout 120 python3 -c "import ebsdxc; print(ebsdxc.__file__)"
  PYTHONPATH=$D:/tmp/site timeout 120 python3 -m ebsdxc bench --pipeline $R/benchmarks/recipes/paper-86roi-96-w16-tensor.toml --patterns 50000 --repeats 2 --out /tmp/bp-$tree 2>&1 | tail -14
done 2>&1 | tee $OUT/pipeline-tensor.txt
