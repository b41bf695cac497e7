for rnd in 1 2; do head then new: remap_ab.py 600 1024; done (kikuchipy from call 5 still in /tmp/kp)
