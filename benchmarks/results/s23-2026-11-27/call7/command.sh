export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "f64cbe5 + tc_exact STAGE (working tree); base = f64cbe5 in .scratch/base" > $OUT/rev.txt
timeout 90 python3 .scratch/s23/peaks_stage.py paper 2>&1 | tee $OUT/peaks-paper.txt
timeout 60 python3 .scratch/s23/peaks_stage.py hrebsd 2>&1 | tee $OUT/peaks-hrebsd.txt
for tool in racecheck memcheck; do timeout 80 compute-sanitizer --tool $tool python3 .scratch/s22/race.py 2>&1 | tail -2; done | tee $OUT/sanitizer.txt
timeout 270 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests 2>&1 | grep -v Warning | tail -6 | tee $OUT/gpu-suite.txt
for tree in new base; do D=$R; [ $tree = base ] && D=$R/.scratch/base
  echo "== $tree"; (cd $D && PYTHONPATH=$D:/tmp/site timeout 100 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct --from-patterns 2>&1 | grep -E "tensor bf16 |match_rois|tile statistics|NVIDIA")
done 2>&1 | tee $OUT/paper-512.txt
