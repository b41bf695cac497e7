[ -d /tmp/kp/kikuchipy ] || { pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1; }
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp PYTHONUNBUFFERED=1
D=$PWD
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev) + working tree; old = 8059d7e in .scratch/base"
timeout -s KILL 75 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/preprocess tests/hrebsd/test_end_to_end.py tests/run/test_preprocessing.py > $OUT/gpu-tests.txt 2>&1; tail -2 $OUT/gpu-tests.txt; grep -E "^(FAILED|ERROR)" $OUT/gpu-tests.txt | head
for t in new old; do
 if [ $t = old ]; then cd .scratch/base; export PYTHONPATH=$D/.scratch/base:/tmp/site:/tmp/kp; else cd $D; export PYTHONPATH=$D:/tmp/site:/tmp/kp; fi
 echo "=== $t"; timeout -s KILL 30 python3 $D/.scratch/s31/prep_time.py 2>&1 | grep -v Warn
 cd $D
done
