export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) + working tree (REMAP_PIXELS constant, pipeline_throughput size=)" > $OUT/rev.txt
timeout 200 python3 .scratch/remap_size.py 512 2>&1 | grep -v Warn | tee $OUT/remap-512.txt
nvidia-smi --query-gpu=memory.total --format=csv,noheader >> $OUT/device.txt
