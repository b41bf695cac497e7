export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD
echo "fef6ef2 + exact_3x3 walking R rows, padded L, columns rule, fp64 8 blocks (working tree); base = fef6ef2 in .scratch/base" > $OUT/rev.txt
prof() {
  (cd $R && PYTHONPATH=$R:/tmp/site timeout 60 ncu -k regex:tc_exact --launch-skip 3 --launch-count 1 --section SpeedOfLight \
     python3 $R/.scratch/s24/one.py "$@" 2>&1) | grep -E "Duration" | sed "s/^/[$*] /"
}
for args in "paper fp32 patterns 3 10" "paper fp32 patterns 3 8" "paper fp32 patterns 2 10" "paper fp32 patterns 1 10" \
            "paper fp32 tiles 3 10" "paper fp32 tiles 3 8" "paper fp32 tiles 2 10" \
            "hrebsd fp32 patterns 2 10" "hrebsd fp32 patterns 2 8" "hrebsd fp32 patterns 1 10" "hrebsd fp32 tiles 2 10" "hrebsd fp32 tiles 2 8" \
            "paper fp64 patterns 1 8" "paper fp64 patterns 1 10" "paper fp64 tiles 1 8" "paper fp64 tiles 1 10" \
            "hrebsd fp64 patterns 1 8" "hrebsd fp64 patterns 1 10" "hrebsd fp64 tiles 1 8" "hrebsd fp64 tiles 1 10"; do
  prof $args
done 2>&1 | tee $OUT/ncu-sweep.txt
export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 280 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests 2>&1 | grep -v Warning | tail -6 | tee $OUT/gpu-suite.txt
for tree in new base new base; do D=$R; [ $tree = base ] && D=$R/.scratch/base
  echo "== $tree"; (cd $D && PYTHONPATH=$D:/tmp/site timeout 100 python3 benchmarks/tensor_engine.py --patterns 512 --skip direct --from-patterns 2>&1 | grep -E "tensor bf16 |match_rois|NVIDIA")
done 2>&1 | tee $OUT/paper-512.txt
