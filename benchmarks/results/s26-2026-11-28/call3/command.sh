export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) + working tree" > $OUT/rev.txt
timeout 150 python3 .scratch/remap_prof.py 4000 hrebsd > $OUT/remap-prof-hrebsd.txt 2>&1; grep -A30 "Ordered by: internal" $OUT/remap-prof-hrebsd.txt | head -36; grep "points of\|Error" $OUT/remap-prof-hrebsd.txt
timeout 150 python3 .scratch/remap_prof.py 4000 benchmarks/recipes/paper-86roi-96-w16-tensor.toml > $OUT/remap-prof-tensor.txt 2>&1; grep "points of\|Error" $OUT/remap-prof-tensor.txt; grep -A16 "Ordered by: internal" $OUT/remap-prof-tensor.txt
