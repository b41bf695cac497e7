export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
echo "7132ffa + kernels/tiles.cu prepare_tiles_shaped (uncommitted)" > $OUT/rev.txt
python3 .scratch/s23/tiles_probe2.py 96 2>&1 | tee $OUT/probe96.txt
python3 .scratch/s23/tiles_probe2.py 256 2>&1 | tee $OUT/probe256.txt
python3 .scratch/s23/tiles_probe2.py 128 2>&1 | tee $OUT/probe128.txt
timeout 200 ncu --kernel-name regex:prepare_tiles --launch-count 4 --section ComputeWorkloadAnalysis --section InstructionStats --section SpeedOfLight --section SchedulerStats --print-details all python3 .scratch/s23/tiles_probe2.py 96 --ncu > $OUT/ncu.txt 2>&1; echo ncu rc $?
grep -E "void prepare|Duration|Issue Slots Busy|Executed Instructions  |highest-utilized|DRAM Throughput|L2 Cache Throughput" $OUT/ncu.txt | cut -c1-160 | head -40
