[ -d /tmp/kp/kikuchipy ] || { pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2; pip install -q --no-index --no-deps --target /tmp/kp .whl/kikuchipy*.whl 2>&1 | grep -v WARN | tail -1; }
export PYTHONPATH=$PWD:/tmp/site:/tmp/kp PYTHONUNBUFFERED=1
D=$PWD
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev) + working tree; old = 8059d7e in .scratch/base"
timeout 280 python3 -m pytest -n 15 -m gpu -q -p no:cacheprovider -rfE --tb=short tests > $OUT/gpu-suite.txt 2>&1; tail -3 $OUT/gpu-suite.txt; grep -E "FAILED|ERROR" $OUT/gpu-suite.txt | head
python3 -m pytest -m gpu -q -p no:cacheprovider tests/preprocess/test_fourier_frames.py 2>&1 | tail -1
python3 .scratch/s31/mut_centre.py 2>&1 | grep -v Warn | tail -2
for rnd in 1 2; do for t in old new; do
 if [ $t = old ]; then cd .scratch/base; export PYTHONPATH=$D/.scratch/base:/tmp/site:/tmp/kp; else cd $D; export PYTHONPATH=$D:/tmp/site:/tmp/kp; fi
 echo "=== round $rnd $t: preprocessing.py hrebsd-49roi-w24-dft 512 512"; python3 benchmarks/preprocessing.py benchmarks/recipes/hrebsd-49roi-w24-dft.toml 512 512 2>&1 | grep -v Warn | grep -i "dynamic\|none"
 [ $rnd = 1 ] && { echo "=== $t: preprocessing.py paper-86roi-96 256 1024"; python3 benchmarks/preprocessing.py pipelines/paper-86roi-96.toml 256 1024 2>&1 | grep -v Warn | grep -i "dynamic\|none"; }
 cd $D
done; done
export PYTHONPATH=$D:/tmp/site:/tmp/kp
