export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
cp .scratch/s22/nvidia-h200.json ebsdxc/calibration/
timeout 120 python3 .scratch/s22/small.py 2>&1 | tail -12 | tee $OUT/small.txt
