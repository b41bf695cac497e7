export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
timeout 200 python3 .scratch/s22/sweep.py 2>&1 | tee $OUT/sweep.txt
timeout 150 ncu --kernel-name regex:tc_exact --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis python3 .scratch/s22/sweep.py one 2>&1 | grep -v "^==PROF==" | tail -120 > $OUT/ncu-exact.txt
tail -100 $OUT/ncu-exact.txt
