export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
R=$PWD; O=$R/.scratch/omain; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 200 python3 -m pytest -n 12 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py -k "upsampled" 2>&1 | tail -4 | tee $OUT/gpu-tests.txt
echo "== old tree (b58010d), 162 then 192"; (cd $O && PYTHONPATH=$O:/tmp/site timeout 80 python3 benchmarks/fused_grid_columns.py m3; cd $O && FAST=1 PYTHONPATH=$O:/tmp/site timeout 80 python3 -c "
import sys; sys.argv=['x','m3']; sys.path.insert(0,'benchmarks')
from ebsdxc.engines import fused; fused.FAST_GRID_MAX=100
import fused_grid_columns as m; m.main()") 2>&1 | tee $OUT/columns-old.txt
echo "== new, 162"; timeout 120 python3 benchmarks/fused_grid_columns.py m3,m3x2,m4x2,m6x2 2>&1 | tee $OUT/columns-new.txt
echo "== new, fast lengths"; FAST=1 timeout 120 python3 benchmarks/fused_grid_columns.py m3,m3x2,m4,m4x2,m6x2 2>&1 | tee $OUT/columns-new-fast.txt
timeout 60 python3 benchmarks/fused_upsampled_phases.py 128:24 2>&1 | tee $OUT/up-phases.txt
FAST=1 timeout 60 python3 benchmarks/fused_upsampled_phases.py 128:24 2>&1 | tee $OUT/up-phases-fast.txt
