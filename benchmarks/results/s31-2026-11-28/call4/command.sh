nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
cd .scratch/s31/ub && nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/wf wgmma_fp8.cu 2>&1 | grep -v "Remark\|^$" | head -20
cuobjdump -sass /tmp/wf | grep -c "HGMMA" ; cuobjdump -sass /tmp/wf | grep "HGMMA" | head -4
/tmp/wf; /tmp/wf
