"""Regenerate the figures under docs/figures/ from the sample data (what the README shows).

    python docs/make_figures.py

- processes sample_data/scan.h5 with strain (Ni) into a temporary folder and writes the
  figures of `ebsdxc plot` and one point-detail figure;
- processes the polycrystal sample (sample_data/polycrystal/) with a reference per grain
  and writes its grain map, GND density and per-grain strain statistics as
  ``polycrystal_*.png``;
- draws the seed paper's 86 ROIs of 96 x 96 px (pipelines/paper-86roi-96.toml) on a
  simulated 480 x 480 nickel pattern: ``roi_layout_paper.png``, where the ROIs overlap.

Runs on the CPU in well under a minute.
"""

import os
import tempfile

import numpy as np

import ebsdxc
from ebsdxc import plot

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "..", "sample_data")
OUT = os.path.join(HERE, "figures")
DPI = 90


def sample_figures(tmp):
    cfg = ebsdxc.load_config("hrebsd")[0].replace(strain=ebsdxc.StrainConfig(material="Ni"))
    results = ebsdxc.process(os.path.join(SAMPLE, "scan.h5"), ref=os.path.join(SAMPLE, "ref.tif"),
                             config=cfg, run=ebsdxc.RunConfig(device="cpu"),
                             output=os.path.join(tmp, "scan.ebsdxc.h5"))
    written = plot.write_figures(results, OUT, point=(4, 6), dpi=DPI, overwrite=True)
    path = os.path.join(OUT, "point_detail.png")
    plot.point_detail(results, (4, 6), roi=12).savefig(path, dpi=DPI)
    return [*written, path]


def polycrystal_figures(tmp):
    from ebsdxc.config import GrainsConfig

    folder = os.path.join(SAMPLE, "polycrystal")
    cfg = ebsdxc.load_config("hrebsd")[0].replace(strain=ebsdxc.StrainConfig(material="Ni"),
                                                  grains=GrainsConfig(per_grain=True))
    results = ebsdxc.process(os.path.join(folder, "scan.h5"), config=cfg, run=ebsdxc.RunConfig(device="cpu"),
                             orientations=os.path.join(folder, "scan.ang"),
                             output=os.path.join(tmp, "polycrystal.ebsdxc.h5"))
    written = []
    for name, draw in (("grain_map", plot.grain_map), ("gnd_density", plot.gnd_density_map),
                       ("grain_strain_statistics", plot.grain_strain_statistics)):
        path = os.path.join(OUT, f"polycrystal_{name}.png")
        draw(results).savefig(path, dpi=DPI)
        written.append(path)
    return written


def paper_layout_figure(tmp):
    from ebsdxc.io import ScanGrid
    from ebsdxc.io.results import ResultsWriter
    from ebsdxc.rois import layout_for
    from ebsdxc.simulate import load_nickel_master_pattern, simulate_pattern

    shape = (480, 480)
    layout = layout_for(ebsdxc.load_config("paper-86roi-96")[0].roi, shape)
    path = os.path.join(tmp, "paper-layout.h5")
    w = ResultsWriter.create(path, grid=ScanGrid(1, 1), centres=layout.centres, roi_size=layout.size,
                             parameters={"scan": None}, inputs=[])
    w.set_attr("pattern_shape", np.asarray(shape))
    w.close()
    pattern = simulate_pattern(load_nickel_master_pattern(), shape=shape, pc=(0.5, 0.45, 0.6), orientation=np.eye(3))
    out = os.path.join(OUT, "roi_layout_paper.png")
    plot.roi_layout(path, reference=pattern).savefig(out, dpi=DPI)
    return [out]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        written = sample_figures(tmp) + polycrystal_figures(tmp) + paper_layout_figure(tmp)
    for p in written:
        print(os.path.relpath(p, os.path.join(HERE, "..")))


if __name__ == "__main__":
    main()
