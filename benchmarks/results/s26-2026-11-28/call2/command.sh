export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
echo "$(cat .scratch/rev) + working tree (group_min attribute, --paths, match for engines without match_rois)" > $OUT/rev.txt
timeout 100 python3 .scratch/remap_prof.py 4000 hrebsd > $OUT/remap-prof-hrebsd.txt 2>&1; grep -B2 -A28 "Ordered by: internal" $OUT/remap-prof-hrebsd.txt | head -40; grep "points of" $OUT/remap-prof-hrebsd.txt
timeout 100 python3 .scratch/remap_prof.py 4000 benchmarks/recipes/paper-86roi-96-w16-tensor.toml > $OUT/remap-prof-tensor.txt 2>&1; grep "points of\|Error" $OUT/remap-prof-tensor.txt
timeout 60 python3 benchmarks/reference_sets.py --patterns 32 --sets 1,32 --engines tensor,fused,fft,direct > $OUT/remap-batch.txt 2>&1; grep "K =\|Error" $OUT/remap-batch.txt
timeout 100 python3 benchmarks/reference_sets.py --patterns 512 --sets 1,8,16,32,64 --engines direct --paths sets,pairs > $OUT/group-min-direct.txt 2>&1; grep "K =\|Error" $OUT/group-min-direct.txt
timeout 120 python3 benchmarks/reference_sets.py --patterns 2048 --sets 80,112,160,192 --engines tensor --paths sets,pairs > $OUT/group-min-tensor-2.txt 2>&1; grep "K =\|Error" $OUT/group-min-tensor-2.txt
