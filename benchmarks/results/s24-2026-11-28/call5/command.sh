nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/device.txt
cd .scratch/s24/ub && nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/hankel hankel.cu 2>&1 | grep -v "set but never used\|^$\|Remark" | head -20
/tmp/hankel 2>&1 | tee $OUT/hankel.txt
