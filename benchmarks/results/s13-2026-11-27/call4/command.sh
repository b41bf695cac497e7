export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
R=$PWD; export PYTHONPATH=$R:/tmp/site
echo "== new, 162"; timeout 150 python3 benchmarks/fused_grid_columns.py m3,m3x2,m4x2,m6x2,m3 2>&1 | tee $OUT/columns-new.txt
echo "== new, fast lengths"; FAST=1 timeout 150 python3 benchmarks/fused_grid_columns.py m3,m3x2,m4,m4x2,m6x2,m3 2>&1 | tee $OUT/columns-new-fast.txt
