export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
git log --oneline | head -1 > $OUT/rev.txt
timeout 240 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests 2>&1 | grep -v Warning | tail -6 | tee $OUT/gpu-suite.txt
for tool in racecheck memcheck; do timeout 80 compute-sanitizer --tool $tool python3 .scratch/s22/race.py 2>&1 | tail -2; done | tee $OUT/sanitizer.txt
timeout 150 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct --from-patterns --json $OUT/paper-512.json 2>&1 | grep -v "launch:" | tee $OUT/paper-512.txt
cd /tmp
for v in auto tensor fused; do P=$R/benchmarks/recipes/paper-86roi-96-w16-$v.toml; [ $v = auto ] && P=$R/.scratch/s22/paper-86roi-96-w16-auto.toml
  echo "== $v"; timeout 100 python3 -m ebsdxc bench --pipeline $P --patterns 50000 --repeats 2 --out /tmp/bp 2>&1 | grep -E "^\||batches of|profile"
done 2>&1 | tee $OUT/e2e.txt
