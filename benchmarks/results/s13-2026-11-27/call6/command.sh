export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
R=$PWD; O=$R/.scratch/omain; export PYTHONPATH=$R:/tmp/site
for a in "128 24 50" "128 24 50 nomma" "128 24 30" "128 24 16" "256 24 16" "256 24 30" "96 0 16" "96 0 30" "64 16 50" "128 24 50 split1"; do
  echo -n "new: "; timeout 60 python3 .scratch/u50.py $a 2>&1 | tail -1
done | tee $OUT/u50-new.txt
for a in "128 24 50" "128 24 50 nomma" "256 24 30"; do
  echo -n "old (b58010d): "; (cd $O && PYTHONPATH=$O:/tmp/site timeout 60 python3 $R/.scratch/u50.py $a 2>&1 | tail -1)
done | tee $OUT/u50-old.txt
timeout 200 compute-sanitizer --tool racecheck python3 .scratch/u50.py 128 24 50 2>&1 | tail -4 | tee $OUT/race50.txt
timeout 200 compute-sanitizer --tool memcheck python3 .scratch/u50.py 128 24 50 2>&1 | grep -v "^=========     " | head -30 | tee $OUT/mem50.txt
