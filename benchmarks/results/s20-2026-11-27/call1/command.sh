export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
timeout 200 python3 -m pytest -n 12 -q -p no:cacheprovider -rfE --tb=short tests/engines/test_tensor.py tests/engines/test_gpu_engines.py 2>&1 | grep -v Warning | tail -15 | tee $OUT/tests.txt
timeout 90 python3 .scratch/s20/split.py 512 2>&1 | tee $OUT/split.txt
for i in 1 2; do
  (cd .scratch/base && PYTHONPATH=$PWD:/tmp/site timeout 60 python3 $R/.scratch/s20/ab.py 512) 2>&1 | tee -a $OUT/ab.txt
  timeout 60 python3 .scratch/s20/ab.py 512 2>&1 | tee -a $OUT/ab.txt
done
(cd .scratch/base && PYTHONPATH=$PWD:/tmp/site timeout 60 python3 $R/.scratch/s20/ab.py 512 128,24,45) 2>&1 | tee -a $OUT/ab.txt
timeout 60 python3 .scratch/s20/ab.py 512 128,24,45 2>&1 | tee -a $OUT/ab.txt
timeout 100 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct --json $OUT/paper-512.json 2>&1 | grep -v "launch:" | tee $OUT/paper-512.txt
