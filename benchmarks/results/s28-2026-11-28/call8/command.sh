pip install kikuchipy wheel to /tmp/kp; for rnd in 1 2; do head (.scratch/head) then new: python3 .scratch/s27/remap_ab.py 600 1024; done
