export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONPATH=$PWD:/tmp/site
timeout 200 python3 .scratch/ub.py 2>&1 | tee $OUT/ub.txt
for ub in 1 4; do echo "UB=$ub"; timeout 60 python3 -c "
import sys; sys.argv=['x','128:24']; sys.path.insert(0,'benchmarks')
from ebsdxc.engines import fused; fused.GRID_ROWS_A_THREAD=$ub
import runpy; runpy.run_path('benchmarks/fused_upsampled_phases.py', run_name='__main__')" 2>&1 | grep -E "row sums|column sums|cycles per ROI|instrumented"; done | tee $OUT/phases.txt
