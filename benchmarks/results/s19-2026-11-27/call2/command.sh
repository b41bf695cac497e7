export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
timeout 100 python3 .scratch/s19/split.py 512 bf16 2>&1 | tee $OUT/split.txt
timeout 60 python3 .scratch/s19/split.py 64 bf16 2>&1 | tee -a $OUT/split.txt
timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short tests/engines/test_tensor.py -k "default_for_many" 2>&1 | tail -3 | tee $OUT/tests.txt
timeout 300 ncu --target-processes all -k regex:tg_maps -c 3 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section Occupancy --section LaunchStats python3 .scratch/s19/split.py 512 bf16 ncu > $OUT/ncu.txt 2>&1
grep -v "^==PROF==" $OUT/ncu.txt | grep -i "tg_maps\|Duration\|Throughput\|Pipe\|Stall\|Warp Cycles\|Issued\|Bank\|Conflict\|Registers\|Achieved\|Eligible\|No Eligible\|One or More\|Active Warps\|Shared" | head -120
timeout 200 ncu --target-processes all -k regex:tg_maps -c 1 --section SourceCounters --section InstructionStats --metrics smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_dispatch_stall,smsp__pcsamp_warps_issue_stalled_sleeping,smsp__pcsamp_warps_issue_stalled_membar,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_misc,smsp__pcsamp_warps_issue_stalled_branch_resolving,smsp__pcsamp_warps_issue_stalled_drain,smsp__pcsamp_warps_issue_stalled_imc_miss,smsp__pcsamp_warps_issue_stalled_no_instructions,smsp__pcsamp_warps_issue_stalled_tex_throttle python3 .scratch/s19/split.py 64 bf16 ncu > $OUT/ncu-src.txt 2>&1
grep -v "^==PROF==" $OUT/ncu-src.txt | grep "pcsamp\|Stall\|stall" | head -60
