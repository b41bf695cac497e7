export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
echo "$(cat .scratch/rev) (working tree = HEAD)" > $OUT/rev.txt
timeout 240 python3 benchmarks/reference_sets.py --patterns 2048 --sets 1,4,16,64,256,2048 2>&1 | tail -16 | tee $OUT/reference-sets.txt
