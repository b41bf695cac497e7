export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
timeout 100 python3 -m pytest -n 8 -q -p no:cacheprovider -rfE --tb=short tests/engines/test_tensor.py -k "peak or pack" 2>&1 | grep -v Warning | tail -5 | tee $OUT/tests.txt
(cd .scratch/base && PYTHONPATH=$PWD:/tmp/site timeout 60 python3 $R/.scratch/s20/ab.py 512) 2>&1 | tee -a $OUT/ab.txt
timeout 150 python3 .scratch/s20/peaks_var.py 512 2>&1 | tee $OUT/peaks.txt
(cd .scratch/base && PYTHONPATH=$PWD:/tmp/site timeout 60 python3 $R/.scratch/s20/ab.py 512 128,24,45) 2>&1 | tee -a $OUT/ab.txt
timeout 150 python3 .scratch/s20/peaks_var.py 512 128,24,45 2>&1 | tee -a $OUT/peaks.txt
(cd .scratch/base && PYTHONPATH=$PWD:/tmp/site timeout 60 python3 $R/.scratch/s20/ab.py 50) 2>&1 | tee -a $OUT/ab.txt
timeout 150 python3 .scratch/s20/peaks_var.py 50 2>&1 | tee -a $OUT/peaks.txt
