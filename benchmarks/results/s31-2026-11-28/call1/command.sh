pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev)"
export CUPY_CACHE_DIR=/tmp/cc1
for i in 1 2; do echo "=== process $i (CUPY_CACHE_DIR fresh before 1)"; python3 .scratch/s31/compile_probe.py process sample_data/scan.h5 --ref sample_data/ref.tif --material Ni -o /tmp/p$i.h5 --pipeline .scratch/s31/hrebsd-icgn.toml 2>&1 | grep -v Warning | tail -14; done
ls /tmp/cc1 | wc -l
unset CUPY_CACHE_DIR
mkdir -p /tmp/b
for rp in 0 4x4; do for rec in pipelines/hrebsd.toml .scratch/s31/hrebsd-icgn.toml; do
echo "=== EBSDXC_READER_PROCESSES=$rp bench $rec 512 x 7000"
EBSDXC_READER_PROCESSES=$rp python3 -m ebsdxc bench --pipeline $rec --patterns 7000 --pattern-size 512 --repeats 1 --out /tmp/b 2>&1 | grep -v Warning | tail -12
rm -f /tmp/b/*.h5
done; done
