export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) (working tree = HEAD)" > $OUT/rev.txt
cp .scratch/s27/call1.sh $OUT/command.sh
timeout 240 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; grep -v Warning $OUT/gpu-suite.txt | tail -12
timeout 150 python3 .scratch/remap_prof.py 2000 hrebsd cuda 512 > $OUT/remap-prof-512.txt 2>&1; head -40 $OUT/remap-prof-512.txt
timeout 120 python3 .scratch/remap_prof.py 4000 hrebsd cuda 256 > $OUT/remap-prof-256.txt 2>&1; head -40 $OUT/remap-prof-256.txt
