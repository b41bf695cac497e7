export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "7132ffa + prepare_tiles_shaped (working tree); base = 7132ffa in .scratch/base" > $OUT/rev.txt
timeout 260 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests 2>&1 | grep -v Warning | tail -6 | tee $OUT/gpu-suite.txt
for tool in racecheck memcheck; do timeout 60 compute-sanitizer --tool $tool python3 .scratch/s23/race_tiles.py 2>&1 | tail -2; done | tee $OUT/sanitizer.txt
timeout 60 python3 benchmarks/tile_pass.py 2>&1 | tee $OUT/tile_pass.txt
for tree in new base; do D=$R; [ $tree = base ] && D=$R/.scratch/base
  echo "== $tree"; (cd $D && PYTHONPATH=$D:/tmp/site timeout 100 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct --from-patterns --json $OUT/paper-512-$tree.json 2>&1 | grep -v "launch:")
done 2>&1 | tee $OUT/paper-512.txt
