export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; git log --oneline | head -1 > $OUT/rev.txt
(PYTHONPATH=$R:/tmp/site:/tmp/kp timeout 300 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfEs --tb=short tests 2>&1 | grep -vE "^\s*$" | tail -40) | tee $OUT/gpu-suite.txt
export PYTHONPATH=$R:/tmp/site
timeout 100 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct --json $OUT/paper-512.json 2>&1 | grep -v "launch:" | tee $OUT/paper-512.txt
(cd .scratch/base && PYTHONPATH=$PWD:/tmp/site timeout 100 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct,fft 2>&1 | grep -v "launch:" | tee $OUT/paper-512-base.txt)
timeout 150 python3 benchmarks/tensor_engine.py --patterns 50 --skip direct --accuracy 20x50 --json $OUT/paper-50.json 2>&1 | grep -v "launch:" | tee $OUT/paper-50.txt
timeout 90 python3 benchmarks/tensor_engine.py --tile 128 --rois 45 --max-shift 24 --patterns 512 --skip direct --json $OUT/t128-512.json 2>&1 | grep -v "launch:" | tee $OUT/t128-512.txt
