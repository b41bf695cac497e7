export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
echo "7132ffa + .scratch/s23/tiles_variant.cu (EMODE)" > $OUT/rev.txt
python3 .scratch/s23/tiles_probe.py 2>&1 | tee $OUT/probe.txt
timeout 200 ncu --kernel-name regex:prepare_tiles --launch-count 6 --section ComputeWorkloadAnalysis --section InstructionStats --section SpeedOfLight --print-details all python3 .scratch/s23/tiles_probe.py --ncu > $OUT/ncu.txt 2>&1; echo ncu rc $?
grep -E "void prepare|Duration|Executed Ipc A|Issue Slots Busy|Executed Instructions  |pipe|Pipe|utiliz" $OUT/ncu.txt | cut -c1-220 | head -80
