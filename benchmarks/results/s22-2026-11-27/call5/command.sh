export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
git log --oneline | head -1 > $OUT/rev.txt
timeout 240 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests 2>&1 | grep -v Warning | tail -6 | tee $OUT/gpu-suite.txt
for tool in racecheck memcheck; do timeout 80 compute-sanitizer --tool $tool python3 .scratch/s22/race.py 2>&1 | tail -4; done | tee $OUT/sanitizer.txt
timeout 150 python3 benchmarks/tensor_engine.py --patterns 50 --skip direct,fft,fused --accuracy 20x50 2>&1 | grep -A8 "accuracy" | tee $OUT/accuracy.txt
