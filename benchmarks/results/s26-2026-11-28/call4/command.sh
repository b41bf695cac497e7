export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) + working tree (tensor group_min 16, pairs engine, read_points runs, REMAP_BATCH 256)" > $OUT/rev.txt
timeout 290 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; grep -v Warning $OUT/gpu-suite.txt | tail -15
timeout 100 python3 .scratch/remap_prof.py 4000 hrebsd > $OUT/remap-prof-hrebsd.txt 2>&1; grep "points of\|Error" $OUT/remap-prof-hrebsd.txt; grep -A14 "Ordered by: cumulative" $OUT/remap-prof-hrebsd.txt | cut -c1-150
timeout 100 python3 .scratch/remap_prof.py 4000 benchmarks/recipes/paper-86roi-96-w16-tensor.toml > $OUT/remap-prof-tensor.txt 2>&1; grep "points of\|Error" $OUT/remap-prof-tensor.txt
timeout 60 python3 benchmarks/reference_sets.py --patterns 256 --sets 1,256 --engines tensor,fused > $OUT/remap-batch-256.txt 2>&1; grep "K =\|Error" $OUT/remap-batch-256.txt
timeout 60 python3 benchmarks/reference_sets.py --patterns 512 --sets 128 --engines direct --paths sets,pairs > $OUT/group-min-direct-4.txt 2>&1; grep "K =\|Error" $OUT/group-min-direct-4.txt
