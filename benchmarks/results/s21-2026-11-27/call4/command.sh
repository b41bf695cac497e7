export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 200 python3 -m pytest -n 15 -q -p no:cacheprovider -rfE --tb=short tests/engines/test_tensor.py 2>&1 | grep -v Warning | tail -15 | tee $OUT/tests.txt
for i in 1 2; do
  timeout 60 python3 .scratch/s21/gemm.py 512
  (cd .scratch/base && PYTHONPATH=$PWD:/tmp/site timeout 60 python3 ../s21/gemm.py 512)
  timeout 60 python3 .scratch/s21/gemm.py 512 128,24,45
  (cd .scratch/base && PYTHONPATH=$PWD:/tmp/site timeout 60 python3 ../s21/gemm.py 512 128,24,45)
done 2>&1 | tee $OUT/gemm.txt
timeout 150 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct,fft --from-patterns --json $OUT/paper-512.json 2>&1 | grep -v "launch:" | tee $OUT/paper-512.txt
