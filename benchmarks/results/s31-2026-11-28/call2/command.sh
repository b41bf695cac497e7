[ -d /tmp/kp/kikuchipy ] || { pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1; }
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev)"
python3 .scratch/s31/sums_v.py 512 256 2>&1 | grep -v Warning
python3 .scratch/s31/sums_v.py 256 1024 2>&1 | grep -v Warning
timeout 200 ncu -k regex:'^icgn_sums$' --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats --section MemoryWorkloadAnalysis python3 .scratch/s31/sums_v.py 512 256 2>&1 | grep -v "Warning\|==PROF==" | tail -120
