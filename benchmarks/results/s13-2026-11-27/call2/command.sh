export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
R=$PWD; O=$R/.scratch/omain; export PYTHONPATH=$R:/tmp/site
for c in "--tile 96 --rois 86 --subpixel dft" "--tile 128 --rois 45 --mode window --max-shift 24 --subpixel dft" "--tile 128 --rois 45 --mode window --max-shift 24 --subpixel upsampled" "--tile 256 --rois 45 --mode window --max-shift 24 --patterns 20 --subpixel upsampled"; do
  echo "== $c"
  echo -n "main:   "; (cd $O && PYTHONPATH=$O:/tmp/site timeout 40 python3 benchmarks/fused_fft.py $c 2>&1 | grep -i "fused" | head -2)
  echo -n "branch: "; (cd $R && timeout 40 python3 benchmarks/fused_fft.py $c 2>&1 | grep -i "fused" | head -2)
done 2>&1 | tee $OUT/old-new.txt
timeout 60 python3 benchmarks/fused_dft_phases.py 96:0 128:24 2>&1 | tee $OUT/dft-phases.txt
timeout 60 python3 benchmarks/fused_upsampled_phases.py 128:24 2>&1 | tee $OUT/up-phases.txt
FAST=1 timeout 60 python3 benchmarks/fused_upsampled_phases.py 128:24 2>&1 | tee $OUT/up-phases-fast.txt
timeout 60 compute-sanitizer --tool racecheck python3 .scratch/san2.py 128x128 upsampled 0 24 2>&1 | tail -1 | tee $OUT/racecheck.txt
