export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline -1 | cut -c1-60
export PYTHONPATH=$PWD:/tmp/site
for k in $(seq 0 11); do timeout 400 python3 .scratch/sweep.py $k 12 240 > $OUT/sweep-$k.txt 2>&1 & done; wait
cat $OUT/sweep-*.txt | sort > $OUT/sweep.txt; grep -c "^ok" $OUT/sweep.txt; grep -c "^SKIP" $OUT/sweep.txt; grep -v "^ok\|^SKIP" $OUT/sweep.txt | head -40
