pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp
D=$PWD
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev) + working tree"
timeout 200 python3 -m pytest -n 8 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/test_icgn.py tests/test_icgn_quadratic.py tests/test_refine.py tests/test_subset_icgn.py tests/test_dic.py tests/test_dic_propagation.py tests/test_pc_calibration.py tests/run/test_simulated_references.py 2>&1 | grep -v Benchmark | tail -8
echo "=== new, parts"; python3 .scratch/s30/icgn_prof.py 256 1024 3 2>&1 | grep -v Warning
python3 .scratch/s30/icgn_prof.py 512 256 3 2>&1 | grep -v Warning
mkdir -p /tmp/b
for size_n in "512 4000" "256 16000"; do set -- $size_n
echo "=== new: ebsdxc bench --pipeline .scratch/s30/hrebsd-icgn.toml --patterns $2 --pattern-size $1 --repeats 1"
python3 -m ebsdxc bench --pipeline .scratch/s30/hrebsd-icgn.toml --patterns $2 --pattern-size $1 --repeats 1 --out /tmp/b 2>&1 | grep -v Warning | tail -22
echo "=== base de05fa6: same"
(cd .scratch/base && PYTHONPATH=$D/.scratch/base:/tmp/site:/tmp/kp python3 -m ebsdxc bench --pipeline $D/.scratch/s30/hrebsd-icgn.toml --patterns $2 --pattern-size $1 --repeats 1 --out /tmp/b 2>&1 | grep -v Warning | tail -22)
rm -f /tmp/b/*.h5
done
