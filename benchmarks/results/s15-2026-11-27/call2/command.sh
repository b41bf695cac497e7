export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section InstructionStats --section Occupancy --section SourceCounters --section LaunchStats"
timeout 200 ncu --kernel-name regex:fused_maps --launch-skip 3 --launch-count 1 $S python3 benchmarks/fused_fft.py --tile 96 --rois 86 --subpixel quadratic > $OUT/ncu-maps-96full.txt 2>&1
timeout 200 ncu --kernel-name regex:fused_dft --launch-skip 3 --launch-count 1 $S python3 benchmarks/fused_fft.py --tile 96 --rois 86 --subpixel dft > $OUT/ncu-dft-96full.txt 2>&1
grep -E "Issue Slots Busy|Issued Ipc|Shared|Bank|Stall|Warp Cycles|Achieved Occupancy|Registers|Pipe|Executed Ipc|Duration|No Eligible|Eligible Warps|Active Warps" $OUT/ncu-maps-96full.txt | head -60
