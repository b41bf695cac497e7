export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "dd37be5 + test_gpu_remapping_on_a_real_pattern's bounds for the fused engine (working tree)" > $OUT/rev.txt
cp .scratch/s28/call4.sh $OUT/command.sh
timeout 100 python3 .scratch/s28/real_gpu.py 2>&1 | grep -v Warn | tee $OUT/real-gpu.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -m gpu tests/hrebsd tests/test_strain.py -k "real or remap" 2>&1 | tail -4 | tee $OUT/gpu-remap-tests.txt
