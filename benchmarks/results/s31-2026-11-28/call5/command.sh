[ -d /tmp/kp/kikuchipy ] || { pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1; }
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev)"
python3 .scratch/s31/lowpass_gemm.py 512 512 2>&1 | grep -v Warn
python3 .scratch/s31/lowpass_gemm.py 256 1024 2>&1 | grep -v Warn
python3 .scratch/s31/lowpass_gemm.py 1024 128 2>&1 | grep -v Warn
