# The bound script ran as .scratch/tcdft.py; it is kept here as scripts/tcdft.py.txt (path below updated).
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site
echo "$(cat .scratch/rev) (working tree = HEAD)" > $OUT/rev.txt
timeout 200 python3 benchmarks/results/s25-2026-11-28/scripts/tcdft.py.txt --patterns 512 2>&1 | tail -12 | tee $OUT/tcdft.txt
timeout 150 python3 benchmarks/fused_dft_phases.py 96:0 2>&1 | tail -25 | tee $OUT/fused-phases.txt
timeout 150 python3 benchmarks/fused_fft.py --subpixel dft 2>&1 | tail -12 | tee $OUT/fused-engine.txt
