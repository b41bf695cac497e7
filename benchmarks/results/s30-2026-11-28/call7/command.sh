pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp
D=$PWD
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev) + working tree"
timeout 200 python3 -m pytest -n 8 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/preprocess tests/test_icgn.py tests/run/test_preprocessing.py 2>&1 | grep -v Benchmark | tail -8
echo "=== new: python benchmarks/preprocessing.py pipelines/hrebsd.toml 512 512"
python3 benchmarks/preprocessing.py pipelines/hrebsd.toml 512 512 2>&1 | grep -v Warning
echo "=== base de05fa6: same"
(cd .scratch/base && PYTHONPATH=$D/.scratch/base:/tmp/site:/tmp/kp python3 benchmarks/preprocessing.py $D/pipelines/hrebsd.toml 512 512 2>&1 | grep -v Warning)
mkdir -p /tmp/b
echo "=== new: ebsdxc bench --pipeline .scratch/s30/hrebsd-mask.toml --patterns 6000 --pattern-size 512 --repeats 1"
python3 -m ebsdxc bench --pipeline .scratch/s30/hrebsd-mask.toml --patterns 6000 --pattern-size 512 --repeats 1 --out /tmp/b 2>&1 | grep -v Warning | tail -14
echo "=== base de05fa6: same"
(cd .scratch/base && PYTHONPATH=$D/.scratch/base:/tmp/site:/tmp/kp python3 -m ebsdxc bench --pipeline $D/.scratch/s30/hrebsd-mask.toml --patterns 6000 --pattern-size 512 --repeats 1 --out /tmp/b 2>&1 | grep -v Warning | tail -14)
