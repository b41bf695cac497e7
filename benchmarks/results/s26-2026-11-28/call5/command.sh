export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) (working tree = HEAD)" > $OUT/rev.txt
timeout 290 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; grep -v Warning $OUT/gpu-suite.txt | tail -3
for tool in memcheck racecheck; do timeout 60 compute-sanitizer --tool $tool python3 .scratch/s24/race_tiles.py 2>&1 | tail -2; done | tee $OUT/sanitizer.txt
timeout 100 python3 .scratch/remap_prof.py 4000 hrebsd > $OUT/remap-prof-hrebsd.txt 2>&1; grep "points of\|Error" $OUT/remap-prof-hrebsd.txt
timeout 100 python3 .scratch/remap_prof.py 4000 benchmarks/recipes/paper-86roi-96-w16-tensor.toml > $OUT/remap-prof-tensor.txt 2>&1; grep "points of\|Error" $OUT/remap-prof-tensor.txt
