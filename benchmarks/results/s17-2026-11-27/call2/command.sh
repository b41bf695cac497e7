export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
timeout 150 ncu --kernel-name regex:fused_dft --launch-skip 3 --launch-count 1 --section WarpStateStats --section SourceCounters --section InstructionStats -o /tmp/dft python3 benchmarks/fused_fft.py --tile 96 --rois 86 --subpixel dft > $OUT/ncu-run.txt 2>&1
ncu -i /tmp/dft.ncu-rep --page raw --csv > $OUT/ncu-raw.csv 2>&1
ncu -i /tmp/dft.ncu-rep --page source --csv --print-source sass > $OUT/ncu-sass.csv 2>&1  # condensed here to ncu-sass-stalls.txt
ls -la $OUT
timeout 200 python3 -m pytest -n 14 -m gpu -q -p no:cacheprovider -rfE --tb=short tests/engines/test_fused.py tests/engines/test_gpu_engines.py tests/run/test_subpixel_real.py tests/engines/test_dispatch_measured.py 2>&1 | tail -8 | tee $OUT/gpu-tests.txt
