export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD
echo "14fa158 (working tree); base = fef6ef2 in .scratch/base" > $OUT/rev.txt
for tree in new base; do D=$R; [ $tree = base ] && D=$R/.scratch/base
  echo "== $tree"
  (cd $D && PYTHONPATH=$D:/tmp/site timeout 90 ncu --nvtx --nvtx-include "prof/" --section SpeedOfLight python3 $R/.scratch/s24/timeline.py 2>&1 | grep -E "^  [a-zA-Z_].*\(|Duration" | sed -E 's/\(const .*//; s/^ +//' | paste - - | awk '{printf "%-70s %s %s\n", $0, "", ""}')
  (cd $D && PYTHONPATH=$D:/tmp/site timeout 60 python3 $R/.scratch/s24/timeline.py median 2>&1 | tail -1)
done 2>&1 | tee $OUT/timeline.txt
cd /tmp
for tree in new base; do D=$R; [ $tree = base ] && D=$R/.scratch/base
  echo "== $tree"; PYTHONPATH=$D:/tmp/site timeout 120 python3 -c "import ebsdxc; print(ebsdxc.__file__)"
  PYTHONPATH=$D:/tmp/site timeout 120 python3 -m ebsdxc bench --pipeline $R/benchmarks/recipes/paper-86roi-96-w16-tensor.toml --patterns 50000 --repeats 2 --out /tmp/bp-$tree 2>&1 | tail -6
done 2>&1 | tee $OUT/pipeline-tensor.txt
