export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kp .whl/kikuchipy*.whl >/dev/null 2>&1
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader | tee $OUT/device.txt
R=$PWD; export PYTHONPATH=$R:/tmp/site:/tmp/kp
echo "$(cat .scratch/rev) (working tree = HEAD); prev = 73b6b60 (before the reference ROIs' tile kernel) in .scratch/prev" > $OUT/rev.txt
cp .scratch/s27/call8.sh $OUT/command.sh
for rnd in 1 2; do
  echo "round $rnd prev 73b6b60:"; (cd .scratch/prev && PYTHONPATH=$PWD:/tmp/site:/tmp/kp timeout 60 python3 $R/.scratch/s27/remap_ab.py 2000 512 2>&1 | grep -v Warn | tail -1)
  echo "round $rnd new:"; timeout 60 python3 .scratch/s27/remap_ab.py 2000 512 2>&1 | grep -v Warn | tail -1
done 2>&1 | tee $OUT/ab-512.txt
(cd .scratch/prev && PYTHONPATH=$PWD:/tmp/site:/tmp/kp timeout 60 python3 $R/.scratch/s27/remap_stages.py 2000 512 2>&1 | grep -v Warn | grep -v upload | sed 's/^/prev /') | tee $OUT/stages-512.txt
timeout 60 python3 .scratch/s27/remap_stages.py 2000 512 2>&1 | grep -v Warn | grep -v upload | sed 's/^/new /' | tee -a $OUT/stages-512.txt
