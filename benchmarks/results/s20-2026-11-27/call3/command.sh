export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
(cd .scratch/base && PYTHONPATH=$PWD:/tmp/site timeout 60 python3 $R/.scratch/s20/ab.py 512) 2>&1 | tee -a $OUT/ab.txt
timeout 150 python3 .scratch/s20/peaks_var.py 512 2>&1 | tee $OUT/peaks.txt
(cd .scratch/base && PYTHONPATH=$PWD:/tmp/site timeout 60 python3 $R/.scratch/s20/ab.py 512 128,24,45) 2>&1 | tee -a $OUT/ab.txt
timeout 150 python3 .scratch/s20/peaks_var.py 512 128,24,45 2>&1 | tee -a $OUT/peaks.txt
