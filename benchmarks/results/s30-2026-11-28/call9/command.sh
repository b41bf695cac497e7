pip install -q --no-index --no-deps --target /tmp/site $(ls .whl/*.whl | grep -v kikuchipy) 2>&1 | grep -v WARN | tail -2
D=$PWD
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; echo "rev $(cat .scratch/rev)"
for round in 1 2; do
echo "=== base de05fa6 ($round)"; (cd .scratch/base && PYTHONPATH=$D/.scratch/base:/tmp/site timeout 100 python3 $D/.scratch/s30/dic_parts.py 2>&1 | grep -v Warning)
echo "=== new ($round)"; PYTHONPATH=$D:/tmp/site timeout 100 python3 .scratch/s30/dic_parts.py 2>&1 | grep -v Warning
done
