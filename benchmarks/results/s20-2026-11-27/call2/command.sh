export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD
for tree in base main; do
  d=$R; [ $tree = base ] && d=$R/.scratch/base
  (cd $d && PYTHONPATH=$d:/tmp/site timeout 200 ncu --target-processes all -k regex:tc_peaks -c 2 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats -o /tmp/rep-$tree python3 $R/.scratch/s20/peaks_only.py > $OUT/ncu-run-$tree.txt 2>&1)
  ncu -i /tmp/rep-$tree.ncu-rep --print-details all > $OUT/ncu-$tree.txt 2>&1
done
grep -E "tc_peaks|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Warp Cycles Per Issued|Stall (Wait|Barrier|Long|Short|Not Sel|Math|MIO|LG|No Inst|Dispatch)|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput" $OUT/ncu-*.txt
