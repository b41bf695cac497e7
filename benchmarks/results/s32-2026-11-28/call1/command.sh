[ -d /tmp/kp/kikuchipy ] || { pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1; }
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev)"; nproc
F="grep -v -i warn"
timeout -s KILL 250 python3 .scratch/s32/gap_probe.py pipelines/hrebsd.toml 10000 512 4x4,4x3,4x2,2x4,2x2,8x1 2>&1 | grep -v "pipeline = \|pipe = \|warn" > $OUT/hrebsd-512.txt; tail -3 $OUT/hrebsd-512.txt
timeout -s KILL 170 python3 .scratch/s32/gap_probe.py .scratch/s31/hrebsd-icgn.toml 10000 512 4x4,4x2,2x4 2>&1 | grep -v "pipeline = \|pipe = \|warn" > $OUT/icgn-512.txt; tail -3 $OUT/icgn-512.txt
rm -rf /tmp/gp
timeout -s KILL 150 python3 .scratch/s32/gap_probe.py pipelines/hrebsd.toml 2500 1024 4x4,4x2,2x4 2>&1 | grep -v "pipeline = \|pipe = \|warn" > $OUT/hrebsd-1024.txt; tail -3 $OUT/hrebsd-1024.txt
