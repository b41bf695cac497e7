export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) + working tree (group_min attribute, --paths)" > $OUT/rev.txt
timeout 290 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; grep -v Warning $OUT/gpu-suite.txt | tail -4
timeout 150 python3 benchmarks/reference_sets.py --patterns 2048 --sets 1,16,32,48,64,96,128,256,512 --engines tensor --paths sets,pairs > $OUT/group-min-tensor.txt 2>&1; cat $OUT/group-min-tensor.txt | tail -20
timeout 60 python3 benchmarks/reference_sets.py --patterns 32 --sets 1,32 --engines tensor,fused,fft,direct > $OUT/remap-batch.txt 2>&1; cat $OUT/remap-batch.txt | tail -12
timeout 120 python3 benchmarks/reference_sets.py --patterns 512 --sets 1,8,16,32,64,128 --engines direct --paths sets,pairs > $OUT/group-min-direct.txt 2>&1; cat $OUT/group-min-direct.txt | tail -14
