export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
echo "7132ffa + .scratch/s23/tiles_variant.cu" > $OUT/rev.txt
python3 .scratch/s23/tiles_probe.py 2>&1 | tee $OUT/probe.txt
python3 .scratch/s23/tiles_probe.py 2>&1 | tail -8 | tee $OUT/probe2.txt
timeout 200 ncu --kernel-name regex:prepare_tiles --launch-count 12 --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --section MemoryWorkloadAnalysis python3 .scratch/s23/tiles_probe.py --ncu > $OUT/ncu.txt 2>&1; echo ncu rc $?
grep -E "prepare_tiles|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issued Ipc|No Eligible|Memory Throughput|L2 Cache Throughput|Compute \(SM\)|Warp Cycles Per Issued|Block Limit" $OUT/ncu.txt | head -120
