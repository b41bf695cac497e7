export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD
echo "fef6ef2 + exact_3x3 walking R rows, padded L (working tree); base = fef6ef2 in .scratch/base; ncu of tc_exact" > $OUT/rev.txt
prof() {  # tree label args...
  D=$R; [ $1 = base ] && D=$R/.scratch/base; shift
  (cd $D && PYTHONPATH=$D:/tmp/site timeout 60 ncu -k regex:tc_exact --launch-skip 3 --launch-count 1 \
     --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section InstructionStats \
     python3 $R/.scratch/s24/one.py "$@" 2>&1) | grep -E "tc_exact<|Duration|Executed Instructions  |Registers Per|Achieved Occupancy|Theoretical Occ|Issue Slots Busy|Stall Long|Warp Cycles Per Issued|Local Memory|L1/TEX Hit|Memory Throughput|Compute \(SM\)|Block Limit Reg" | sed "s/^/[$*] /"
}
for lay in paper hrebsd; do for pp in fp32 fp64; do for src in patterns tiles; do
  for tree in new base; do echo "== $tree $lay $pp $src"; prof $tree $lay $pp $src; done
done; done; done 2>&1 | tee $OUT/ncu.txt
for cfg in "4 8" "2 8" "2 10" "3 8"; do echo "== new hrebsd fp32 patterns nj/minb $cfg"; prof new hrebsd fp32 patterns $cfg; done 2>&1 | tee $OUT/ncu-variants.txt
