pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp
D=$PWD
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev)"; git status --short 2>/dev/null | head -3
timeout 260 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; echo "suite rc=$?"; grep -v Benchmark $OUT/gpu-suite.txt | tail -12
echo "=== new: python benchmarks/dic_accuracy.py --device cuda --skip-accuracy --speed 4096"
timeout 120 python3 benchmarks/dic_accuracy.py --device cuda --skip-accuracy --speed 4096 2>&1 | grep -v Warning | tail -12
echo "=== base de05fa6: same"
cp benchmarks/dic_accuracy.py .scratch/base/benchmarks/ 2>/dev/null
(cd .scratch/base && PYTHONPATH=$D/.scratch/base:/tmp/site:/tmp/kp timeout 120 python3 benchmarks/dic_accuracy.py --device cuda --skip-accuracy --speed 4096 2>&1 | grep -v Warning | tail -12)
