export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
timeout 200 python3 -m pytest -n 8 -q -p no:cacheprovider -rfE --tb=line tests/engines/test_tensor.py 2>&1 | tail -12 | tee $OUT/tests.txt
for B in 512 50; do timeout 100 python3 .scratch/s19/split.py $B bf16 2>&1 | tee -a $OUT/split.txt; done
timeout 100 python3 .scratch/s19/split.py 512 bf16 x 256,24,45 2>&1 | tee -a $OUT/split.txt
timeout 200 ncu --target-processes all -k regex:tg_maps -c 1 --section SpeedOfLight --section WarpStateStats --section SourceCounters -o /tmp/rep python3 .scratch/s19/split.py 512 bf16 1,128 > $OUT/ncu-run.txt 2>&1
ncu -i /tmp/rep.ncu-rep --print-details all > $OUT/ncu.txt 2>&1; ncu -i /tmp/rep.ncu-rep --page source --csv --print-source sass > $OUT/sass.csv 2>&1
grep -i "Duration\|Tensor Cycles\|Issued Ipc" $OUT/ncu.txt | head
