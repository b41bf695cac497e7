"""Regenerate the figures under docs/figures/ from the sample data (what the README shows).

    python docs/make_figures.py

Processes sample_data/scan.h5 with strain (Ni) into a temporary folder, then writes the
figures of `ebsdxc plot` and one point-detail figure. Runs on the CPU in about a minute.
"""

import os
import tempfile

import ebsdxc
from ebsdxc import plot

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "..", "sample_data")
OUT = os.path.join(HERE, "figures")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        cfg = ebsdxc.load_config("hrebsd")[0].replace(strain=ebsdxc.StrainConfig(material="Ni"))
        results = ebsdxc.process(os.path.join(SAMPLE, "scan.h5"), ref=os.path.join(SAMPLE, "ref.tif"),
                                 config=cfg, run=ebsdxc.RunConfig(device="cpu"),
                                 output=os.path.join(tmp, "scan.ebsdxc.h5"))
        written = plot.write_figures(results, OUT, point=(4, 6), dpi=90, overwrite=True)
        path = os.path.join(OUT, "point_detail.png")
        plot.point_detail(results, (4, 6), roi=12).savefig(path, dpi=90)
        for p in [*written, path]:
            print(os.path.relpath(p, os.path.join(HERE, "..")))


if __name__ == "__main__":
    main()
