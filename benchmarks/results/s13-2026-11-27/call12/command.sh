export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=$PWD:/tmp/site
for a in "128x128 upsampled 0 24" "128x128 upsampled 0 24 50" "96x96 upsampled 0 0" "256x256 upsampled 0 24"; do echo "$a"; timeout 100 compute-sanitizer --tool racecheck python3 .scratch/san2.py $a 2>&1 | tail -1; done | tee $OUT/racecheck.txt
timeout 100 compute-sanitizer --tool memcheck python3 .scratch/san2.py 128x128 upsampled 0 24 50 2>&1 | tail -1 | tee $OUT/memcheck.txt
