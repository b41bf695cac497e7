export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 240 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests 2>&1 | grep -v Warning | tail -8 | tee $OUT/gpu-suite.txt
for tool in racecheck memcheck; do timeout 60 compute-sanitizer --tool $tool python3 .scratch/s21/race.py 2>&1 | tail -6; done | tee $OUT/sanitizer.txt
timeout 150 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct --from-patterns --json $OUT/paper-512.json 2>&1 | grep -v "launch:" | tee $OUT/paper-512.txt
cd /tmp
for v in new base; do
  P=$R; [ $v = base ] && P=$R/.scratch/base
  echo "== tensor w16 $v"; PYTHONPATH=$P:/tmp/site timeout 100 python3 -m ebsdxc bench --pipeline $R/benchmarks/recipes/paper-86roi-96-w16-tensor.toml --patterns 50000 --repeats 2 --out /tmp/bp-$v 2>&1 | grep -E "^\|" | head -14
done 2>&1 | tee $OUT/e2e.txt
