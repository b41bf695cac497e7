export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
R=$PWD; O=$R/.scratch/omain; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 200 python3 -m pytest -n 12 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py -k "upsampled" 2>&1 | tail -4 | tee $OUT/gpu-tests.txt
timeout 150 python3 benchmarks/fused_upsampled_lengths.py 2>&1 | tee $OUT/lengths.txt
M=l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed.sum,gpu__time_duration.sum
echo "== old tree, 162"; (cd $O && PYTHONPATH=$O:/tmp/site:$R/benchmarks timeout 90 ncu -k regex:fused_upsampled --launch-skip 2 -c 1 --metrics $M python3 $R/.scratch/ncu_up.py 2>&1 | grep -E "fused_|l1tex|smsp|gpu__|^\(") 2>&1 | tee $OUT/ncu-old.txt
echo "== new tree, 162"; FAST=0 timeout 90 ncu -k regex:fused_upsampled --launch-skip 2 -c 1 --metrics $M python3 .scratch/ncu_up.py 2>&1 | grep -E "fused_|l1tex|smsp|gpu__|^\(" | tee $OUT/ncu-new162.txt
echo "== new tree, default"; timeout 150 ncu -k regex:fused_upsampled --launch-skip 2 -c 1 --import-source no --section SourceCounters --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats --section Occupancy -o $OUT/up192 python3 .scratch/ncu_up.py 2>&1 | tail -3
ncu -i $OUT/up192.ncu-rep --page details 2>&1 | tee $OUT/up192-details.txt | head -150
ncu -i $OUT/up192.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/up192-sass.csv.gz; ls -la $OUT
