export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/h5py*.whl .whl/tifffile*.whl .whl/tqdm*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/device.txt
R=$PWD; O=$R/.scratch/o0
for c in "--tile 50 --rois 86 --subpixel quadratic" "--tile 20 --rois 86 --subpixel quadratic" "--tile 84 --rois 86 --mode window --max-shift 16 --subpixel dft"; do
  echo "== $c"
  for i in 1 2; do
  echo -n "c8f8dde: "; (cd $O && PYTHONPATH=$O:/tmp/site timeout 25 python3 benchmarks/fused_fft.py $c 2>&1 | grep "^fused " | head -1)
  echo -n "now:     "; (cd $R && PYTHONPATH=$R:/tmp/site timeout 25 python3 benchmarks/fused_fft.py $c 2>&1 | grep "^fused " | head -1)
  done
done 2>&1 | tee $OUT/old-new-small.txt
