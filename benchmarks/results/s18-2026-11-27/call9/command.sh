export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; V=$R/.scratch/v
for i in 1 2 3 4 5; do PYTHONPATH=$R:/tmp/site timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/run/test_transfer.py 2>&1 | tail -1; done | tee $OUT/transfer-tests.txt
cd /tmp
for i in 1 2; do for b in o0 new; do
  T=$V/$b; [ $b = new ] && T=$R
  echo "== paper dft $b"; PYTHONPATH=$T:/tmp/site timeout 70 python3 -m ebsdxc bench --pipeline --patterns 50000 --repeats 2 --out /tmp/bp-$b-$i 2>&1 | grep -E "^\|" | head -12
done; done 2>&1 | tee $OUT/e2e-paper.txt
cd $R
cat > /tmp/stats.py <<'PY'
import cupy as cp, numpy as np
from ebsdxc.engines.gpu_ops import tile_statistics
from ebsdxc.rois import layout_for
from ebsdxc.config import load_config
cfg = load_config("benchmarks/results/s18-2026-11-27/call1/paper-dft.toml")[0]
lay = layout_for(cfg.roi, (256, 256))
pats = cp.asarray(np.random.default_rng(0).integers(0, 4000, (512, 256, 256)).astype(np.uint16))
o = cp.asarray(lay.origins, dtype=cp.int32)
from ebsdxc.preprocess import window_2d
w = cp.asarray(window_2d((96, 96)), dtype=cp.float32)
for _ in range(4): tile_statistics(pats, o, (96, 96), w)
cp.cuda.Device().synchronize()
PY
PYTHONPATH=$R:/tmp/site timeout 120 ncu --kernel-name regex:prepare_tiles --launch-skip 2 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats python3 /tmp/stats.py 2>&1 | grep -vE "^==PROF==" | tail -80 | tee $OUT/ncu-stats.txt
