export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
(which nsys; ls -d /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems* 2>&1; nproc) | tee $OUT/tools.txt
timeout 240 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests 2>&1 | grep -v Warning | tail -6 | tee $OUT/gpu-suite.txt
cd /tmp
T=$R/benchmarks/recipes/paper-86roi-96-w16-tensor.toml; F=$R/benchmarks/recipes/paper-86roi-96-w16-fused.toml
timeout 120 python3 -m ebsdxc bench --pipeline $T --patterns 50000 --repeats 1 --out /tmp/bp 2>&1 | tail -16 | tee $OUT/bench-tensor.txt
S=$(ls /tmp/bp/bench-pipeline-50000*.h5); REF=/tmp/bp/bench-pipeline-ref.tif
for v in tensor fused tensor fused; do P=$T; [ $v = fused ] && P=$F
  echo "== $v"; timeout 60 python3 -m ebsdxc process $S --ref $REF --pipeline $P -o /tmp/r-$v.h5 --overwrite -q --profile 2>&1 | tail -20
done 2>&1 | tee $OUT/profile.txt
timeout 90 python3 -m cProfile -s tottime -m ebsdxc process $S --ref $REF --pipeline $T -o /tmp/r-cp.h5 --overwrite -q 2>&1 | head -60 > $OUT/cprofile-tensor.txt
timeout 90 python3 -m cProfile -s tottime -m ebsdxc process $S --ref $REF --pipeline $F -o /tmp/r-cpf.h5 --overwrite -q 2>&1 | head -45 > $OUT/cprofile-fused.txt
if which nsys >/dev/null 2>&1; then
  timeout 120 nsys profile -t cuda,nvtx -o /tmp/ns-tensor --force-overwrite true python3 -m ebsdxc process $S --ref $REF --pipeline $T -o /tmp/r-ns.h5 --overwrite -q >/dev/null 2>&1
  timeout 90 nsys stats -r cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum /tmp/ns-tensor.nsys-rep 2>&1 | head -80 > $OUT/nsys-tensor.txt
  timeout 60 nsys export -t sqlite -o /tmp/ns-tensor.sqlite /tmp/ns-tensor.nsys-rep >/dev/null 2>&1 && cp /tmp/ns-tensor.sqlite $OUT/ 2>/dev/null
fi
ls -la $OUT
