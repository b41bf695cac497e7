"""Command line: ``ebsdxc process``, ``ebsdxc strain``, ``ebsdxc info``, ``ebsdxc bench``.

Every failure the user can fix prints one line ``ebsdxc: error: FILE: problem`` and
exits with status 2; an interrupted run exits with 130 and can be continued with
``--resume``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import sys
import warnings

import numpy as np

from . import __version__, timing
from .errors import InputError

__all__ = ["main"]


def _whole_number(low):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"expected a number >= {low}, got {v}")
        return v
    return parse


_positive_int = _whole_number(1)
_nonneg_int = _whole_number(0)


def _nonneg_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return v


def _pair(text):
    try:
        vals = tuple(float(p) for p in text.replace(" ", "").split(","))
    except ValueError:
        vals = ()
    if len(vals) != 2 or not all(np.isfinite(vals)):
        raise argparse.ArgumentTypeError(f"expected two numbers X,Y, got {text!r}")
    return vals


def _polygon(text):
    """``X,Y;X,Y;...`` (at least three vertices, px)."""
    try:
        return tuple(_pair(v) for v in text.strip().strip(";").split(";"))
    except argparse.ArgumentTypeError:
        pass
    raise argparse.ArgumentTypeError(f"expected vertices X,Y;X,Y;X,Y..., got {text!r}")


def _numbers(text):
    """``A,B,...``: one or more numbers."""
    try:
        vals = tuple(float(p) for p in text.replace(" ", "").split(",") if p)
    except ValueError:
        vals = ()
    if not vals or not all(np.isfinite(vals)):
        raise argparse.ArgumentTypeError(f"expected numbers A,B,..., got {text!r}")
    return vals


def _scan_point(text):
    """``N`` or ``ROW,COL``: a scan point (``--ref-index``, ``plot --point``)."""
    parts = text.split(",")
    try:
        vals = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or ROW,COL, got {text!r}") from None
    if len(vals) == 1:
        return vals[0]
    if len(vals) == 2:
        return vals
    raise argparse.ArgumentTypeError(f"expected N or ROW,COL, got {text!r}")


def _grid_shape(text):
    from .io.source import parse_grid_shape

    try:
        return parse_grid_shape(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _scan_options(p):
    """``--dataset``, ``--format`` and ``--grid``: how to read a scan (process and info)."""
    from .io import SCAN_FORMATS

    p.add_argument("--dataset",
                   help="which patterns, when the file holds several: the HDF5 dataset "
                        "(e.g. /entry/patterns) or the h5ebsd/vendor scan group (e.g. 'Scan 2')")
    p.add_argument("--format", choices=SCAN_FORMATS, metavar="NAME",
                   help="force a reader instead of detecting the format from the file's content: "
                        + ", ".join(SCAN_FORMATS))
    p.add_argument("--grid", type=_grid_shape, metavar="ROWSxCOLS",
                   help="scan grid, for files that do not record one (EMsoft h5, EDAX .up1/.up2 "
                        "version 1, Oxford .ebsp version 0, image stacks, plain 3-D HDF5); must "
                        "agree with a file's own grid. Without it such patterns form one row")


_SCAN_HELP = ("the scan: kikuchipy h5ebsd, EDAX/TSL h5 or .up1/.up2, Bruker h5, Oxford h5oina or "
              ".ebsp, EMsoft h5, any HDF5 file with one pattern dataset, or an image stack (a folder "
              "of TIFF/PNG images, one per scan point, or a quoted glob such as 'frames/*.tif'); "
              "the format is detected from the content (see --format)")


def _triple(text):
    try:
        vals = tuple(float(p) for p in text.replace(" ", "").split(","))
    except ValueError:
        vals = ()
    if len(vals) != 3 or not all(np.isfinite(vals)):
        raise argparse.ArgumentTypeError(f"expected three numbers A,B,C, got {text!r}")
    return vals


def _strain_options(p, *, in_process):
    from .geometry import PC_CONVENTIONS
    from .hrebsd import PC_MAPS, PC_MODELS, SIMULATED_PC

    s = p.add_argument_group("strain (HR-EBSD)", "computed when a material is given" if in_process else None)
    s.add_argument("--material", metavar="NAME|cubic:C11,C12,C44|FILE",
                   help="crystal stiffness: Ni, Fe, Al, Cu, Si, cubic constants in GPa, or a 6x6 Voigt matrix file; "
                        "several phases: PHASE=MATERIAL,... (phase names as the orientation map gives them; separate "
                        "with ';' when a material holds commas)")
    s.add_argument("--pc", type=_triple, metavar="X,Y,Z",
                   help="pattern centre (of every point, or of the reference point with --pc-map extrapolate)")
    s.add_argument("--pc-ref", type=_triple, metavar="X,Y,Z", help="pattern centre of the reference pattern")
    s.add_argument("--pc-convention", choices=PC_CONVENTIONS, help="convention of --pc/--pc-ref (default bruker)")
    s.add_argument("--pc-map", choices=PC_MAPS,
                   help="PC per point: as stored in the scan (file), a plane fitted to those (plane), "
                        "extrapolated from --pc with the scan step (extrapolate) or one for all (constant); "
                        "auto (default): file when the scan stores PCs, else constant")
    s.add_argument("--master-pattern", metavar="FILE.h5",
                   help="EMsoft EBSD master pattern (HDF5) of the material: for --pc-calibrate and --ref simulated")
    s.add_argument("--pc-calibrate", action="store_true", default=None,
                   help="calibrate the pattern centre: refine PC and orientation at a grid of points against "
                        "patterns projected from --master-pattern, fit --pc-model to them; the strain uses it")
    s.add_argument("--pc-calibration-points", type=_grid_shape, metavar="ROWS,COLS",
                   help="grid of calibration points (default 5,5)")
    s.add_argument("--pc-model", choices=PC_MODELS,
                   help="PC over the scan from the calibration points: a plane (default), or the beam-shift "
                        "extrapolation with the scan step and --pixel-size")
    s.add_argument("--simulated-pc", choices=SIMULATED_PC,
                   help="--ref simulated: simulate each point's reference with the PC model's PC (model, default) "
                        "or refine each point's PC by NCC with simulations first (refine; it takes part of a "
                        "strain for a PC)")
    s.add_argument("--pixel-size", type=float, metavar="UM", help="detector pixel size in micrometres (unbinned)")
    s.add_argument("--binning", type=_positive_int, metavar="N", help="detector binning")
    s.add_argument("--orientation", type=_triple, metavar="PHI1,PHI,PHI2",
                   help="reference crystal orientation, Bunge Euler angles in degrees (default: from the scan file)")
    s.add_argument("--sample-tilt", type=float, metavar="DEG", help="sample tilt (default: scan file, else 70)")
    s.add_argument("--detector-tilt", type=float, metavar="DEG", help="detector tilt (default: scan file, else 0)")
    s.add_argument("--remap-threshold", type=float, metavar="DEG",
                   help="re-correlate against a rotated reference above this rotation (default 1 degree)")
    s.add_argument("--no-remap", action="store_true", help="never remap")
    s.add_argument("--min-peak-height", type=float, metavar="H",
                   help="ROIs with a lower correlation peak are not used (default 0.3)")
    s.add_argument("--step", type=float, metavar="UM|PX",
                   help="scan step in micrometres, for the GND density when the scan file records none; with "
                        "--mode dic: the spacing of the subsets in px (default 8)")
    s.add_argument("--no-gnd", action="store_true", help="no Nye tensor and GND density")
    s.add_argument("--slip-systems", metavar="FILE",
                   help="slip systems of an HCP material for the GND density (CSV of Miller-Bravais plane, "
                        "direction; default: pipelines/slip_systems_hcp_ti.csv); FCC and BCC use their own")


class _Parser(argparse.ArgumentParser):
    """Usage mistakes print one ``ebsdxc: error:`` line (``--help`` shows the usage)."""

    def error(self, message):
        self.exit(2, f"ebsdxc: error: {message} (see '{self.prog} --help')\n")


def _parser():
    from .engines import ENGINES
    from .engines.base import PEAK_PRECISIONS, PRECISIONS
    from .peaks import SUBPIXEL_METHODS
    from .refine import REFINE_METHODS

    p = _Parser(prog="ebsdxc", description="Fast cross-correlation of EBSD patterns.")
    p.add_argument("--version", action="version", version=f"ebsdxc {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    pp = sub.add_parser("process", help="correlate every pattern of a scan with a reference",
                        description="Correlate every pattern of SCAN with a reference pattern and write "
                                    "displacement maps to an HDF5 results file.")
    pp.add_argument("scan", nargs="+", help=_SCAN_HELP + ". Several scans (or a quoted glob of scan "
                    "files, e.g. 'campaign/*.h5') are a campaign: one results file each, beside each "
                    "scan or in the folder -o names")
    g = pp.add_mutually_exclusive_group(required=True)  # one reference, or one per grain
    g.add_argument("--ref", help="reference pattern image (TIFF, 8/16-bit or float); 'simulated': a reference per "
                                 "point simulated from --master-pattern at its orientation (--orientations, else the "
                                 "scan's) and PC, for absolute strain (needs --material)")
    g.add_argument("--ref-index", type=_scan_point, metavar="N|ROW,COL",
                   help="use this scan point as the reference")
    g.add_argument("--ref-per-grain", action="store_true", default=None,
                   help="a reference point per grain: grains from the orientations (--orientations, else the "
                        "scan file's), else from how neighbouring patterns correlate")
    gr = pp.add_argument_group("grains (with --ref-per-grain)")
    gr.add_argument("--orientations", metavar="FILE.ang|.ctf|.h5", help="orientation map of the scan")
    gr.add_argument("--grain-tolerance", type=float, metavar="DEG",
                    help="neighbours misoriented by less than this are one grain (default 5)")
    gr.add_argument("--min-grain-size", type=_positive_int, metavar="N",
                    help="grains of fewer points get no reference; their points are flagged (default 5)")
    gr.add_argument("--ref-rule", choices=("kam", "quality", "centre"),
                    help="each grain's reference: lowest kernel average misorientation among good patterns away "
                         "from the boundary (kam, default), best pattern quality (quality), nearest the grain's "
                         "centre (centre)")
    gr.add_argument("--grain-ids", metavar="FILE", help="grain ids (rows x cols: CSV, .npy or FILE.h5:/dataset) "
                                                         "instead of a segmentation")
    gr.add_argument("--grain-refs", metavar="FILE", help="one ROW,COL reference point per grain, one per line")
    pp.add_argument("-o", "--output", help="results file (default: SCAN_STEM.ebsdxc.h5 beside the scan); "
                                            "for a campaign, a folder")
    _scan_options(pp)
    cl = pp.add_argument_group("Dask cluster")
    cl.add_argument("--cluster", metavar="local|slurm|pbs|tcp://HOST:PORT",
                    help="run on Dask: local (one worker per GPU, else CPU worker processes), slurm/pbs "
                         "(dask-jobqueue with the [cluster] job settings of --pipeline, e.g. "
                         "cluster-slurm) or an existing scheduler's address")
    cl.add_argument("--workers", type=_positive_int, metavar="N",
                    help="local workers, or jobs for slurm/pbs (default: one per GPU / the recipe's)")
    cl.add_argument("--retries", type=_nonneg_int, metavar="N",
                    help="times a failed task is tried again (default 2)")
    cl.add_argument("--rows-per-task", type=_positive_int, metavar="N",
                    help="scan rows per task (default: about 2048 patterns)")
    pp.add_argument("--pipeline", metavar="RECIPE.toml",
                    help="recipe file, or the name of a shipped one (see 'ebsdxc recipes')")
    pp.add_argument("--roi-size", type=_positive_int, metavar="N", help="ROI side in px")
    pp.add_argument("--roi-grid", metavar="RxC", help="regular grid of R rows x C columns of ROIs")
    pp.add_argument("--roi-ring", type=_positive_int, metavar="N",
                    help="N ROIs on a ring about the pattern centre (plus one at the centre)")
    pp.add_argument("--roi-centres", metavar="FILE", help="ROI centres, one 'x y' per line")
    pp.add_argument("--max-shift", type=_positive_int, metavar="PX",
                    help="search only shifts up to PX (window mode); default: all shifts (full mode)")
    pp.add_argument("--subpixel", choices=SUBPIXEL_METHODS, help="subpixel peak method")
    pp.add_argument("--engine", choices=("auto", *ENGINES),
                    help="correlation engine: auto (default: fft on the CPU; on the GPU the engine measured "
                         "fastest for these subregions, counts and window), fft (CPU and GPU), direct "
                         "(definition-based kernels, GPU), fused (shared-memory FFT, GPU) or tensor (tensor cores, "
                         "window mode, GPU)")
    pp.add_argument("--precision", choices=("auto", *PRECISIONS),
                    help="inputs of the correlation products: auto (default: fp32, bf16 on the tensor engine) "
                         "or fp32, tf32, bf16, fp16 (below fp32: the tensor engine, window mode; its peaks are "
                         "re-evaluated exactly, so the precision only decides near-ties between lags)")
    pp.add_argument("--peak-precision", choices=PEAK_PRECISIONS,
                    help="sums of the tensor engine's re-evaluated peak neighbourhood: fp32 (default) or fp64")
    pp.add_argument("--kernel", metavar="NAME[:OPTS]",
                    help="definition-based kernel of the direct engine, e.g. grouped_overlap:g=4,kr=8 "
                         "(default: the fastest measured; see 'ebsdxc bench')")
    dg = pp.add_argument_group("DIC (--mode dic): SCAN is the frames, --ref the reference image")
    dg.add_argument("--mode", choices=("ebsd", "dic"), default="ebsd",
                    help="ebsd (default): ROIs of diffraction patterns; dic: subsets on a grid of images, "
                         "displacement and Green-Lagrange strain fields (/ebsdxc/dic)")
    dg.add_argument("--subset", type=_positive_int, metavar="PX", help="subset side, odd (default 31)")
    dg.add_argument("--search", type=_positive_int, metavar="PX",
                    help="integer search around the rigid shift, +- px (default 16)")
    dg.add_argument("--strain-window", type=_positive_int, metavar="N",
                    help="points on a side of the strain fit's window, odd (default 5)")
    dg.add_argument("--guess", choices=("propagate", "search"),
                    help="how IC-GN starts: propagate (default: reliability-guided, from seeds through "
                         "neighbours) or search (every subset's own integer search)")
    dg.add_argument("--incremental", action="store_true", default=None,
                    help="each frame against the one before (the first against --ref), increments "
                         "accumulated: for deformations too large for one step")
    dg.add_argument("--distortion", metavar="MODEL.json",
                    help="SEM distortion model ('ebsdxc distortion') to remove from the displacement fields")
    dg.add_argument("--frame-times", type=_numbers, metavar="T,T,...",
                    help="start time (s) of each frame's scan, for a distortion model with drift")
    dg.add_argument("--reference-time", type=float, metavar="S",
                    help="start time (s) of the reference image's scan (default 0)")
    dg.add_argument("--dic-mask", metavar="FILE",
                    help="image (TIFF/PNG) the size of the reference: subsets are measured where it is "
                         "nonzero over their whole area")
    dg.add_argument("--dic-polygon", type=_polygon, metavar="X,Y;X,Y;...",
                    help="measure only subsets wholly inside this polygon (px, x = column)")
    dg.add_argument("--tile", type=_nonneg_int, metavar="PX",
                    help="match images with a side longer than PX window by window, read lazily (default "
                         "8192; 0: always whole images)")
    dg.add_argument("--tile-margin", type=_nonneg_int, metavar="PX",
                    help="px a tile's window reaches beyond its subsets and their rigid shift (default 128)")
    dg.add_argument("--shape-function", choices=("affine", "quadratic"),
                    help="subset shape function of IC-GN: affine (default, 6 parameters) or quadratic (12: "
                         "follows displacement fields that curve over a subset)")
    pp.add_argument("--refine", choices=REFINE_METHODS,
                    help="icgn: refine every point by whole-pattern IC-GN (a homography, cubic B-spline "
                         "interpolation), started from the ROI matches; the ROI shifts become the homography's "
                         "(default none; settings in a recipe's [refine] table)")
    pp.add_argument("--dynamic-background", type=float, metavar="SIGMA",
                    help="divide each pattern by its Gaussian blur of SIGMA px")
    pp.add_argument("--static-background", metavar="FILE|mean|file",
                    help="subtract a static background: an image (TIFF), 'mean' (the mean pattern of "
                         "the scan) or 'file' (the background the vendor stored in the scan: Oxford "
                         "h5oina, Bruker h5, kikuchipy h5ebsd)")
    pp.add_argument("--bandpass", type=float, nargs=2, metavar=("LOW", "HIGH"),
                    help="Gaussian band-pass: smooth by LOW px, remove features broader than HIGH px")
    pp.add_argument("--bandpass-kind", choices=("gaussian", "erf"),
                    help="band-pass filter: gaussian (--bandpass sigmas) or erf (error-function edges, "
                         "--bandpass-cutoffs)")
    pp.add_argument("--bandpass-cutoffs", type=_nonneg_float, nargs=2, metavar=("LOW", "HIGH"),
                    help="erf band-pass: keep spatial frequencies between LOW and HIGH cycles/px "
                         "(period 1/f px; LOW 0 = no high-pass, HIGH 0 = no low-pass)")
    pp.add_argument("--bandpass-width", type=float, metavar="W",
                    help="erf band-pass edge width in cycles/px (default 0.01)")
    pp.add_argument("--pattern-binning", type=_positive_int, metavar="N",
                    help="average N x N pixel blocks of each pattern before anything else (the sides must "
                         "be multiples of N; ROI sizes then count binned pixels). Not the detector's "
                         "binning of the strain options (--binning)")
    pp.add_argument("--mask", choices=("circle", "none"),
                    help="detector mask: circle = round phosphor screen; off-screen pixels carry no contrast")
    pp.add_argument("--mask-radius", type=float, metavar="R",
                    help="screen radius in px of the stored patterns (default: half the smaller side)")
    pp.add_argument("--mask-centre", type=_pair, metavar="X,Y",
                    help="screen centre in px of the stored patterns, x = column (default: pattern centre)")
    pp.add_argument("--average-neighbours", type=_nonneg_int, metavar="N",
                    help="average each pattern with its scan neighbours in an N x N kernel (odd N; 0 = off)")
    pp.add_argument("--average-kernel", choices=("gaussian", "box", "circular"),
                    help="neighbour weights (default gaussian)")
    pp.add_argument("--average-sigma", type=float, metavar="S",
                    help="standard deviation of the gaussian neighbour kernel, in scan points (default 1)")
    pp.add_argument("--device", default=None, help="auto (default), cpu, cuda or cuda:N")
    pp.add_argument("--batch", type=_positive_int, metavar="N", help="patterns per batch (default: auto)")
    g2 = pp.add_mutually_exclusive_group()
    g2.add_argument("--resume", action="store_true", help="continue an interrupted run")
    g2.add_argument("--overwrite", action="store_true", help="replace an existing results file")
    pp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    pp.add_argument("--profile", action="store_true",
                    help="print busy and idle time per stage (read, transfer, preprocess, correlate, peaks, "
                         "refine, results, strain, write, other) and the stage that bounds the run; also kept in "
                         "the results file (attribute 'profile')")
    _strain_options(pp, in_process=True)

    ps = sub.add_parser("strain", help="strain and rotation from an existing results file",
                        description="Fit the deformation gradient, elastic strain and lattice rotation of every "
                                    "point of a displacement results file and add them to it.")
    ps.add_argument("results", help="results file written by 'ebsdxc process'")
    ps.add_argument("--scan", help="the scan (file, folder or quoted glob of images), if it is no longer "
                                   "where the results file says")
    ps.add_argument("--ref", help="the reference image, if it is no longer where the results file says")
    ps.add_argument("--pipeline", metavar="RECIPE.toml", help="recipe whose [strain] table gives the options")
    ps.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    ps.add_argument("--overwrite", action="store_true", help="replace strain results already in the file")
    ps.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    _strain_options(ps, in_process=False)

    pi = sub.add_parser("info", help="what a scan or results file holds",
                        description="Print the format, scan grid, pattern size and stored extras of a "
                                    "scan, or the summary of a results file.")
    pi.add_argument("file", help="a results file, or " + _SCAN_HELP)
    _scan_options(pi)
    pi.add_argument("--json", action="store_true", help="print JSON")

    pl = sub.add_parser("plot", help="draw the maps of a results file as PNG (or PDF, SVG) files",
                        description="Write the figures of a results file to a folder: ROI layout, displacement "
                                    "maps (|d|, dx, dy per ROI), a quiver plot at one point, peak height, status "
                                    "and, when the file holds them, strain and rotation maps, the grain map with each "
                                    "grain's reference, GND density and per-grain strain statistics.")
    pl.add_argument("results", help="results file written by 'ebsdxc process'")
    pl.add_argument("-o", "--out", required=True, metavar="DIR", help="folder for the figures (made if needed)")
    pl.add_argument("--format", default="png", metavar="FMT[,FMT]",
                    help="png (default), pdf, svg, or several separated by commas")
    pl.add_argument("--point", type=_scan_point, metavar="ROW,COL",
                    help="scan point of the quiver plot (default: the centre)")
    pl.add_argument("--dpi", type=_positive_int, default=150, help="resolution of PNG files (default 150)")
    pl.add_argument("--max-points", type=_positive_int, default=1_000_000, metavar="N",
                    help="largest number of scan points per map; larger scans are drawn every n-th point")
    pl.add_argument("--overwrite", action="store_true", help="replace figures already in the folder")

    pe = sub.add_parser("export", help="write the HR-EBSD orientations of a results file as .ang or .ctf",
                        description="Write each fitted point's crystal orientation (its reference's, turned by "
                                    "the measured lattice rotation) as an EDAX .ang or Oxford .ctf file, for "
                                    "MTEX, orix or the vendors' software.")
    pe.add_argument("results", help="results file with strain (ebsdxc process --material, or ebsdxc strain)")
    pe.add_argument("-o", "--out", required=True, metavar="FILE.ang|FILE.ctf", help="the file to write")
    pe.add_argument("--overwrite", action="store_true", help="replace the file if it exists")

    sub.add_parser("recipes", help="list the shipped recipes")

    pd = sub.add_parser("distortion", help="calibrate SEM spatial distortion and drift from image series",
                        description="Fit an SEM imaging-distortion model (after Sutton et al. 2007) from images "
                                    "of a rigid specimen translated between them (--translated: the spatial "
                                    "distortion) and/or of a static specimen at known times (--static with "
                                    "--times: the drift), each measured by DIC against --ref, and write it as "
                                    "JSON for 'ebsdxc process --mode dic --distortion MODEL.json'.")
    pd.add_argument("--ref", required=True, metavar="REF.tif", help="the image the others are measured against")
    pd.add_argument("--translated", metavar="FRAMES", help="images of the specimen translated (folder or glob)")
    pd.add_argument("--static", metavar="FRAMES", help="images of the static specimen over time (folder or glob)")
    pd.add_argument("--times", type=_numbers, metavar="T,T,...", help="start time (s) of each --static image")
    pd.add_argument("--reference-time", type=float, default=0.0, metavar="S",
                    help="start time (s) of --ref's scan (default 0)")
    pd.add_argument("--line-time", type=float, default=0.0, metavar="S", help="seconds per scan line")
    pd.add_argument("--dwell-time", type=float, default=0.0, metavar="S", help="seconds per pixel")
    pd.add_argument("--degree", type=_positive_int, default=3, metavar="N",
                    help="highest degree of the spatial-distortion polynomial (default 3)")
    pd.add_argument("--drift-degree", type=_positive_int, default=2, metavar="N",
                    help="degree of the drift polynomial in time (default 2)")
    pd.add_argument("--subset", type=_positive_int, default=31, metavar="PX", help="DIC subset (default 31)")
    pd.add_argument("--step", type=_positive_int, default=16, metavar="PX", help="DIC grid step (default 16)")
    pd.add_argument("--search", type=_positive_int, default=16, metavar="PX",
                    help="DIC integer search, +- px (default 16)")
    pd.add_argument("-o", "--out", required=True, metavar="MODEL.json", help="the model file to write")
    pd.add_argument("--overwrite", action="store_true", help="replace the model file if it exists")

    pb = sub.add_parser("bench", help="time the correlation engines on this GPU (the paper's Table 1)",
                        description="Time every engine and definition-based kernel on this GPU. Without "
                                    "options: the paper's Table 1 (forms 1-1 to 32-32, sizes 16 to 384, full "
                                    "mode), written as CSV and PNG, winners printed. --calibrate: also "
                                    "window-mode and EBSD cases, saved as this GPU's dispatch table.")
    pb.add_argument("--calibrate", action="store_true",
                    help="measure the dispatcher's table for this GPU and keep it in the user cache")
    pb.add_argument("--missing", action="store_true",
                    help="with --calibrate: measure only the cases this GPU's current table lacks (one an "
                         "older version measured) and add them to it, in the user cache")
    pb.add_argument("--quick", action="store_true", help="fewer, smaller cases (a minute or two)")
    pb.add_argument("--sizes", metavar="S,S,...", help="matrix sizes of Table 1 (default 16,32,64,128,256,384)")
    pb.add_argument("--out", default=".", metavar="DIR", help="folder for ebsdxc-bench-GPU.csv/.png (default .)")
    pb.add_argument("--from-csv", metavar="CSV", help="no GPU: rebuild the table and plot from an earlier CSV")
    pb.add_argument("--overwrite", action="store_true", help="replace existing output files")
    pb.add_argument("--device", default="cuda", help="cuda or cuda:N")
    pb.add_argument("--pipeline", nargs="?", const="paper-86roi-96", metavar="RECIPE",
                    help="time a whole run on a synthetic scan it writes (in --out) next to this machine's "
                         "bounds measured in the same run: reading the file, host-to-device copies, the engine "
                         "alone (recipe default paper-86roi-96; with --patterns, --pattern-size, --max-shift, "
                         "--repeats, --batch)")
    pb.add_argument("--patterns", type=_positive_int, default=50000, metavar="N",
                    help="--pipeline: patterns in the scan (default 50000)")
    pb.add_argument("--pattern-size", type=_positive_int, default=256, metavar="PX",
                    help="--pipeline: pattern side (default 256)")
    pb.add_argument("--max-shift", type=_positive_int, metavar="PX", help="--pipeline: window mode, +- PX")
    pb.add_argument("--repeats", type=_positive_int, default=3, metavar="N",
                    help="--pipeline: repeats of every measurement (default 3)")
    pb.add_argument("--batch", type=_positive_int, metavar="N", help="--pipeline: patterns per batch")
    pb.add_argument("--memory", action="store_true",
                    help="--pipeline: no file, patterns made on the fly (a scan larger than the disk), host RSS "
                         "and device memory sampled every second over the whole run")
    pb.add_argument("--chunk", type=_positive_int, default=64, metavar="N",
                    help="--pipeline: patterns per HDF5 chunk of the scan (default 64)")
    return p


# Every setting a flag gives, by its path in a recipe: the overrides the flags build and the
# names in error messages (the library names settings; the user typed flags).
_FLAGS = {
    "roi.size": "--roi-size", "roi.grid": "--roi-grid", "roi.n": "--roi-ring", "roi.centres": "--roi-centres",
    "preprocess.static_background": "--static-background",
    "preprocess.dynamic_background_sigma": "--dynamic-background",
    "preprocess.bandpass": "--bandpass", "preprocess.bandpass_kind": "--bandpass-kind",
    "preprocess.bandpass_cutoffs": "--bandpass-cutoffs", "preprocess.bandpass_width": "--bandpass-width",
    "preprocess.binning": "--pattern-binning", "preprocess.mask": "--mask", "preprocess.mask_radius": "--mask-radius",
    "preprocess.mask_centre": "--mask-centre", "preprocess.average_neighbours": "--average-neighbours",
    "preprocess.average_kernel": "--average-kernel", "preprocess.average_sigma": "--average-sigma",
    "correlation.engine": "--engine", "correlation.max_shift": "--max-shift", "correlation.subpixel": "--subpixel",
    "correlation.kernel": "--kernel", "correlation.precision": "--precision",
    "correlation.peak_precision": "--peak-precision", "refine.method": "--refine",
    "dic.subset": "--subset", "dic.search": "--search", "dic.strain_window": "--strain-window",
    "dic.shape_function": "--shape-function", "dic.guess": "--guess", "dic.mask": "--dic-mask",
    "dic.polygon": "--dic-polygon", "dic.incremental": "--incremental", "dic.distortion": "--distortion",
    "dic.frame_times": "--frame-times", "dic.reference_time": "--reference-time",
    "dic.step": "--step", "dic.tile": "--tile", "dic.tile_margin": "--tile-margin",
    "strain.material": "--material", "strain.pc": "--pc", "strain.pc_ref": "--pc-ref",
    "strain.pc_convention": "--pc-convention", "strain.pc_map": "--pc-map", "strain.pixel_size": "--pixel-size",
    "strain.binning": "--binning", "strain.orientation": "--orientation", "strain.sample_tilt": "--sample-tilt",
    "strain.detector_tilt": "--detector-tilt", "strain.remap_threshold_deg": "--remap-threshold",
    "strain.min_peak_height": "--min-peak-height", "strain.master_pattern": "--master-pattern",
    "strain.pc_calibrate": "--pc-calibrate", "strain.pc_calibration_points": "--pc-calibration-points",
    "strain.pc_model": "--pc-model", "strain.simulated_pc": "--simulated-pc",
    "strain.step": "--step", "strain.slip_systems": "--slip-systems",
    "grains.per_grain": "--ref-per-grain", "grains.tolerance_deg": "--grain-tolerance",
    "grains.min_size": "--min-grain-size", "grains.rule": "--ref-rule",
    "run.device": "--device", "run.batch": "--batch",
    "cluster.address": "--cluster", "cluster.workers": "--workers", "cluster.retries": "--retries",
    "cluster.rows_per_task": "--rows-per-task",
}
_SETTING = re.compile(r"\b(?:" + "|".join(sorted({k.split(".")[0] for k in _FLAGS})) + r")\.\w+")


# Settings with a value that a flag of its own sets.
_FLAG_VALUES = {"strain.remap_threshold_deg = 0": "--no-remap", "strain.gnd": "--no-gnd"}


def _flag_names(text, keep=()):
    """``text`` with the settings it names (``preprocess.binning``) named by their flags
    (``--pattern-binning``), but for those in ``keep``."""
    for phrase, flag in _FLAG_VALUES.items():
        if phrase.split(" ")[0] not in keep:
            text = text.replace(phrase, flag)

    def flag(m):
        name = m.group(0)
        return _FLAGS[name] if name in _FLAGS and name not in keep else name
    return _SETTING.sub(flag, text)


def _overrides(a) -> dict:
    """The settings the flags of ``a`` give, in a recipe's shape (for :func:`ebsdxc.config.load_config`)."""
    from .rois import parse_grid

    out = {}

    def put(key, value):
        table, name = key.split(".")
        out.setdefault(table, {})[name] = value

    for key, flag in _FLAGS.items():
        value = getattr(a, flag[2:].replace("-", "_"), None)
        if value is not None:
            put(key, list(value) if isinstance(value, tuple) else value)
    # --step is the GND scan step (um) for EBSD and the subset spacing (px) for DIC
    dic = getattr(a, "mode", "ebsd") == "dic"
    if dic:
        put("dic.enabled", True)
        step = out.get("strain", {}).pop("step", None)
        if not out.get("strain"):
            out.pop("strain", None)
        if step is not None:
            if step != int(step) or step < 1:
                raise InputError(f"--step with --mode dic is the subset spacing in whole pixels, got {step:g}")
            put("dic.step", int(step))
    elif "dic" in out:
        out["dic"].pop("step", None)
        if out["dic"]:
            raise InputError(f"{_FLAGS['dic.' + next(iter(out['dic']))]} applies with --mode dic")
        out.pop("dic")
    layouts = [x for x in (getattr(a, "roi_grid", None), getattr(a, "roi_ring", None),
                           getattr(a, "roi_centres", None)) if x]
    if len(layouts) > 1:
        raise InputError("give only one of --roi-grid, --roi-ring, --roi-centres")
    roi = out.get("roi", {})
    if "grid" in roi:
        try:
            roi["grid"] = list(parse_grid(roi["grid"]))
        except ValueError as e:
            raise InputError(f"--roi-grid: {e}") from None
        roi["layout"] = "grid"
    elif "n" in roi:
        roi["layout"] = "ring"
    elif "centres" in roi:
        roi["layout"] = "file"
    if "max_shift" in out.get("correlation", {}):
        out["correlation"]["mode"] = "window"
    pre = out.get("preprocess", {})
    # What a flag alone means: --bandpass is the Gaussian band-pass, --bandpass-cutoffs the erf
    # one, --mask-radius / --mask-centre the circle (whether they fit is PreprocessConfig's to say).
    if "bandpass_kind" not in pre and ("bandpass" in pre) != ("bandpass_cutoffs" in pre):
        pre["bandpass_kind"] = "gaussian" if "bandpass" in pre else "erf"
    if "mask" not in pre and ("mask_radius" in pre or "mask_centre" in pre):
        pre["mask"] = "circle"
    if getattr(a, "no_remap", False):
        put("strain.remap_threshold_deg", 0.0)
    if getattr(a, "no_gnd", False):
        put("strain.gnd", False)
    if getattr(a, "cluster", None):
        put("run.executor", "dask")
    return out


def _recipe_only(a, overrides) -> set[str]:
    """The settings that ``--pipeline``'s recipe gives and no flag replaces: errors name those
    as the recipe does, every other setting by its flag."""
    if not a.pipeline:
        return set()
    from .config import read_recipe

    try:
        _, doc = read_recipe(a.pipeline)
    except InputError:
        return set()
    given = {f"{t}.{k}" for t, values in overrides.items() for k in values}
    return {f"{t}.{k}" for t, values in doc.items() if isinstance(values, dict) for k in values} - given


# Keyword arguments of the library (ebsdxc.open_scan, ebsdxc.run.process) that errors name, and
# the flags that give them.
_ARGUMENT_FLAGS = {"grid_shape ": "--grid ", "overwrite=True": "--overwrite", "resume=True": "--resume",
                   "orientations is": "--orientations is", "grain_ids is": "--grain-ids is",
                   "grain_refs is": "--grain-refs is", "excludes ref and ref_index": "excludes --ref and --ref-index"}


def _arguments_as_flags(error: InputError) -> InputError:
    problem = error.problem
    for name, flag in _ARGUMENT_FLAGS.items():
        problem = problem.replace(name, flag)
    return error if problem == error.problem else InputError(problem, error.path)


def _named_by_flags(error: InputError, keep) -> InputError:
    """``error`` with the settings it names named by their flags (but those in ``keep``)."""
    problem = _flag_names(error.problem, keep)
    return error if problem == error.problem else InputError(problem, error.path)


def _load_config(a, overrides):
    """(ProcessConfig, RunConfig) of ``--pipeline`` and the flags; errors about the flags name them."""
    from .config import load_config

    try:
        return load_config(a.pipeline, overrides)
    except InputError as e:
        if e.path is None:  # the flags' settings (a recipe's errors name its keys)
            raise _named_by_flags(e, _recipe_only(a, overrides)) from None
        raise


def _config_from_args(a):
    """(ProcessConfig, RunConfig) of ``ebsdxc process``'s flags."""
    overrides = _overrides(a)
    cfg, run = _load_config(a, overrides)
    if overrides.get("strain") and not cfg.strain.enabled:
        raise InputError("strain options need --material (e.g. --material Ni)")
    cluster_flags = [f for f in ("--workers", "--retries", "--rows-per-task")
                     if getattr(a, f[2:].replace("-", "_"), None) is not None]
    if cluster_flags and run.executor != "dask":
        raise InputError("--workers, --retries and --rows-per-task apply to a Dask run: add --cluster")
    return cfg, run


def _campaign(scans) -> list[str]:
    """The scans named on the command line: a quoted glob of scan files becomes its matches (in
    natural order); a glob of TIFF/PNG images stays one image-stack scan."""
    import glob

    from .io.image_stack import natural_key

    out = []
    for text in scans:
        if any(ch in text for ch in "*?[") and not os.path.exists(text):
            matches = sorted(glob.glob(text, recursive=True), key=natural_key)
            if matches and not all(m.lower().endswith((".tif", ".tiff", ".png")) for m in matches):
                out.extend(matches)
                continue
        out.append(text)
    return out


def _cmd_process(a, argv):
    from .progress import BarProgress, NullProgress
    from .run import process

    cfg, run = _config_from_args(a)
    keep = _recipe_only(a, _overrides(a))
    scans = _campaign(a.scan)
    outputs = [a.output] * len(scans)
    if len(scans) > 1 and a.output:
        os.makedirs(a.output, exist_ok=True)
        names = [os.path.splitext(os.path.basename(os.path.normpath(s)))[0] for s in scans]
        if len(set(names)) != len(names):
            raise InputError("several scans of the campaign have the same name; give no -o (results go "
                             "beside each scan)", a.output)
        outputs = [os.path.join(a.output, f"{n}.ebsdxc.h5") for n in names]
    client = cluster = executor = None
    failed = 0
    try:
        if run.executor == "dask":
            from .cluster import DaskExecutor, connect

            client, cluster = connect(run.cluster)
            executor = DaskExecutor(client, run.cluster)
        for scan, output in zip(scans, outputs):
            profile = timing.StageProfile() if a.profile else None
            try:
                out = process(scan, ref=a.ref, ref_index=a.ref_index, output=output, config=cfg, run=run,
                              orientations=a.orientations, grain_ids=a.grain_ids, grain_refs=a.grain_refs,
                              executor=executor, dataset=a.dataset, format=a.format, grid_shape=a.grid,
                              resume=a.resume, overwrite=a.overwrite,
                              progress=NullProgress() if a.quiet else BarProgress(),
                              command_line=shlex.join(["ebsdxc", *argv]), profile=profile)
            except InputError as e:
                e = _named_by_flags(e, keep)
                if len(scans) == 1:
                    raise e from None
                # the campaign goes on with the next scan
                _stderr_line(f"ebsdxc: error: {_arguments_as_flags(e)}")
                failed += 1
                continue
            _print_summary(out, cfg)
            if profile is not None:
                _stderr_line(timing.format_report(profile.last_report))
    except InputError as e:
        raise _named_by_flags(e, keep) from None
    finally:
        if executor is not None:
            executor.close()
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    if failed:
        _stderr_line(f"ebsdxc: {failed} of {len(scans)} scans failed")
        return 1
    return 0


def _print_summary(out, cfg):
    from .io.results import read_summary

    s = read_summary(out)
    if s["points_measured"] > 0:
        matches = f"{s['ok_fraction']:.1%} of matches ok, median peak height {s['median_peak_height']:.3f}"
    else:
        matches = "no point had a pattern and a reference to correlate"
    skipped = [f"{s[k]} {what}" for k, what in (("points_missing", "without a pattern"),
                                                ("points_without_reference", "without a reference")) if s[k]]
    print(f"{out}: {s['points_done']}/{s['points']} points" + (f" ({', '.join(skipped)})" if skipped else "")
          + f", {s['n_roi']} ROIs, {matches} ({s['device']})")
    if "grains" in s:
        gr = s["grains"]
        print(f"{out}: {gr['count']} grains, {gr['with_reference']} with a reference point; "
              f"{s['points_without_reference']} points without a reference")
    if "pc_calibration" in s:
        c = s["pc_calibration"]
        print(f"{out}: pattern centre calibrated at {c['used']} of {c['points']} points")
    if "simulated_reference" in s:
        r = s["simulated_reference"]
        print(f"{out}: references simulated for {r['points']} points, {r['median_simulations']:.0f} per point "
              f"(median), rotation left {r['median_rotation_left_deg']:.4f} deg (median)")
    if "icgn" in s:
        r = s["icgn"]
        print(f"{out}: IC-GN converged at {r['converged']}/{r['points']} points, {r['median_iterations']:.0f} "
              f"iterations and whole-pattern ZNCC {r['median_zncc']:.3f} (medians)")
    if s["stale"]:
        print(f"{out}: {' and '.join(s['stale'])} results are stale (fitted before the displacement changed): "
              "run 'ebsdxc strain --overwrite' on it")
    if cfg.strain.enabled:
        _print_strain(out)
        if "gnd_points" in s:
            print(f"{out}: Nye tensor and GND density at {s['gnd_points']}/{s['points']} points")


def _print_strain(path):
    from .io.results import read_strain

    d = read_strain(path)
    ok = d["fit_status"] == 0
    res = d["fit_residual"][ok]
    print(f"{path}: strain at {int(ok.sum())}/{ok.size} points ({int(d['remapped'].sum())} remapped), "
          f"median fit residual {np.median(res) if res.size else float('nan'):.3f} px, "
          f"median ROIs used {np.median(d['rois_used'][ok]) if res.size else 0:.0f}")


def _cmd_strain(a, argv):
    from .progress import BarProgress, NullProgress
    from .run import strain

    overrides = _overrides(a)
    cfg, run = _load_config(a, overrides)
    if not cfg.strain.enabled:
        raise InputError("ebsdxc strain needs --material (e.g. --material Ni)")
    try:
        strain(a.results, config=cfg.strain, scan=a.scan, ref=a.ref, device=run.device, overwrite=a.overwrite,
               progress=NullProgress() if a.quiet else BarProgress())
    except InputError as e:
        raise _named_by_flags(e, _recipe_only(a, overrides)) from None
    _print_strain(a.results)
    return 0


def _cmd_info(a, argv):
    from .io import describe_file, open_scan
    from .io.results import check_not_damaged

    check_not_damaged(a.file)
    if a.format:
        # describe_file detects the format itself (and recognises results files): a forced
        # reader opens the scan directly.
        with open_scan(a.file, dataset=a.dataset, format=a.format, grid_shape=a.grid) as src:
            d = src.describe()
    else:
        d = describe_file(a.file, dataset=a.dataset, grid_shape=a.grid)
    if a.json:
        print(json.dumps(_no_nan(d), indent=2, default=_json_default, allow_nan=False))
    else:
        _print_tree(d)
    return 0


def _no_nan(x):
    # Strict JSON has no NaN: missing values become null.
    if isinstance(x, dict):
        return {k: _no_nan(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_no_nan(v) for v in x]
    if isinstance(x, (float, np.floating)) and not np.isfinite(x):
        return None
    if isinstance(x, np.ndarray):
        return _no_nan(x.tolist())
    return x


def _json_default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def _print_tree(d, indent=0):
    for k, v in d.items():
        if isinstance(v, dict):
            print(" " * indent + f"{k}:")
            _print_tree(v, indent + 2)
        else:
            if isinstance(v, (list, tuple, np.ndarray)):
                a = np.asarray(v, dtype=object)
                if a.size > 12 and a.dtype == object:
                    try:
                        f = np.asarray(v, dtype=np.float64)
                        v = f"array {f.shape}, from {np.nanmin(f):.6g} to {np.nanmax(f):.6g}"
                    except (TypeError, ValueError):
                        v = f"{len(v)} items"
                else:
                    v = json.dumps(_short_floats(v), default=_json_default)
            elif isinstance(v, (float, np.floating)):
                v = f"{v:.6g}"
            print(" " * indent + f"{k}: {v}")


def _short_floats(v):
    # Six significant digits are plenty on screen (--json keeps full precision).
    if isinstance(v, (float, np.floating)):
        return float(f"{v:.6g}")
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_short_floats(x) for x in v]
    return v


def _cmd_export(a, argv):
    from .exports import export_orientations

    out = export_orientations(a.results, a.out, overwrite=a.overwrite)
    print(f"{out}: HR-EBSD orientations of {a.results}")
    return 0


def _cmd_plot(a, argv):
    import matplotlib

    matplotlib.use("Agg")  # files only: never a window, also without a display
    from .plot import write_figures

    if not os.path.isfile(a.results):
        raise InputError("no such file", a.results)
    try:
        written = write_figures(a.results, a.out, formats=[f.strip() for f in a.format.split(",") if f.strip()],
                                point=a.point, dpi=a.dpi, overwrite=a.overwrite, max_points=a.max_points)
    except InputError:
        raise
    except FileExistsError as e:
        raise InputError("already exists; pass --overwrite to replace it", e.filename) from None
    except ValueError as e:
        raise InputError(str(e), a.results) from None
    print(f"{a.results}: {len(written)} figures in {a.out}")
    return 0


def _cmd_distortion(a, argv):
    from .dic import DicConfig
    from .io import open_scan
    from .io.image import read_tiff
    from .sem_distortion import DistortionModel, fit_drift, fit_spatial_distortion, measure_series

    if not (a.translated or a.static):
        raise InputError("give --translated images (spatial distortion) and/or --static ones (drift)")
    if a.static and not a.times:
        raise InputError("--static images need --times: the start time of each one's scan")
    if os.path.exists(a.out) and not a.overwrite:
        raise InputError("already exists; pass --overwrite to replace it", a.out)
    if not os.path.isfile(a.ref):
        raise InputError("no such file", a.ref)
    ref = read_tiff(a.ref).astype(np.float32)
    try:
        cfg = DicConfig(subset=a.subset, step=a.step, search=a.search)
    except ValueError as e:
        raise InputError(str(e)) from None

    def frames(spec):
        with open_scan(spec) as src:
            imgs = src.read(0, src.n_patterns).astype(np.float32)
        if imgs.shape[1:] != ref.shape:
            raise InputError(f"the images are {imgs.shape[2]}x{imgs.shape[1]} px; --ref is "
                             f"{ref.shape[1]}x{ref.shape[0]}", spec)
        return imgs

    model = DistortionModel(ref.shape)
    notes = []
    try:
        if a.translated:
            pts, disp = measure_series(ref, frames(a.translated), config=cfg)
            model, T = fit_spatial_distortion(pts, disp, shape=ref.shape, degree=a.degree)
            notes.append(f"spatial distortion of degree {a.degree} from {len(T)} translated images "
                         f"(residual {model.residual_px['spatial']:.4f} px, largest |S| "
                         f"{np.nanmax(np.abs(model.spatial_at(pts.reshape(-1, 2)))):.2f} px)")
        if a.static:
            imgs = frames(a.static)
            if len(a.times) != len(imgs):
                raise InputError(f"--times gives {len(a.times)} times for {len(imgs)} images", a.static)
            pts, disp = measure_series(ref, imgs, config=cfg)
            model = fit_drift(pts, disp, shape=ref.shape, starts=a.times, reference_start=a.reference_time,
                              line_time=a.line_time, dwell_time=a.dwell_time, degree=a.drift_degree, base=model)
            notes.append(f"drift of degree {a.drift_degree} from {len(imgs)} static images "
                         f"(residual {model.residual_px['drift']:.4f} px)")
    except ValueError as e:
        raise InputError(str(e)) from None
    tmp = a.out + ".part"
    with open(tmp, "w") as f:
        f.write(model.to_json())
    os.replace(tmp, a.out)
    print(f"{a.out}: " + "; ".join(notes))
    return 0


def _cmd_recipes(a, argv):
    from .config import shipped_recipes

    for name, path in sorted(shipped_recipes().items()):
        with open(path) as f:
            first = f.readline().strip().lstrip("# ")
        print(f"{name:24s} {first}")
    return 0


def _cmd_bench_pipeline(a):
    import dataclasses

    from .config import RunConfig, load_config
    from .run.bench_pipeline import format_table, measure

    cfg = load_config(a.pipeline)[0]
    if a.max_shift:
        cfg = cfg.replace(correlation=dataclasses.replace(cfg.correlation, mode="window", max_shift=a.max_shift))
    run = RunConfig(device=a.device, batch=a.batch)
    if a.memory:
        from .run.bench_pipeline import format_memory, memory_over_time

        print(format_memory(memory_over_time(cfg, run, patterns=a.patterns, shape=(a.pattern_size, a.pattern_size),
                                             workdir=a.out)))
        return 0
    result = measure(cfg, run, patterns=a.patterns, shape=(a.pattern_size, a.pattern_size), workdir=a.out,
                     repeats=a.repeats, chunk=a.chunk)
    print(format_table(result))
    return 0


def _cmd_bench(a, argv):
    import os

    from . import bench

    if a.pipeline:
        return _cmd_bench_pipeline(a)
    if a.missing and not a.calibrate:
        raise InputError("--missing adds cases to a dispatch table: it goes with --calibrate")

    sizes = bench.TABLE1_SIZES
    if a.sizes:
        try:
            sizes = tuple(int(v) for v in a.sizes.split(","))
        except ValueError:
            raise InputError(f"--sizes: expected comma-separated integers, got {a.sizes!r}") from None
        if not sizes or min(sizes) < 1:
            raise InputError(f"--sizes: sizes must be positive, got {a.sizes!r}")
    if a.from_csv:
        if not os.path.isfile(a.from_csv):
            raise InputError("no such file", a.from_csv)
        try:
            results = bench.read_csv(a.from_csv)
        except (KeyError, ValueError) as e:
            raise InputError(f"not an 'ebsdxc bench' CSV ({e})", a.from_csv) from None
        stem = os.path.splitext(a.from_csv)[0]
        png = stem + ".png"
        _refuse_existing([png], a.overwrite)
        print(bench.table1_markdown(results))
        bench.plot_table1(results, png)
        print(f"plot: {png}")
        return 0
    from .backend import select_backend
    from .engines.dispatch import cache_path, gpu_model, gpu_slug, load_table

    backend = select_backend(a.device)
    if not backend.is_gpu:
        raise InputError("'ebsdxc bench' needs a CUDA GPU (CuPy); use --from-csv to plot earlier results")
    import cupy as cp

    with cp.cuda.Device(backend.device_id):
        gpu = gpu_model()
        stem = os.path.join(a.out, f"ebsdxc-bench-{gpu_slug(gpu)}" + ("-calibration" if a.calibrate else ""))
        csv_path, png = stem + ".csv", stem + ".png"
        _refuse_existing([csv_path, png], a.overwrite)
        os.makedirs(a.out, exist_ok=True)
        cases = (bench.calibration_cases(quick=a.quick) if a.calibrate
                 else bench.table1_cases((16, 32, 64, 128) if a.quick and not a.sizes else sizes))
        base = None
        if a.missing:
            base = load_table(gpu)
            if base is None:
                raise InputError("--missing: no dispatch table for this GPU to add to; run --calibrate alone")
            cases = bench.missing_cases(cases, base)
            if not cases:
                _stderr_line(f"{gpu}: the table has every case already")
                return 0
        _stderr_line(f"{gpu}: {len(cases)} cases")
        done = [0]

        def progress(m):
            if m.choice.engine == "fft":
                done[0] += 1
                c = m.case
                _stderr_line(f"  [{done[0]}/{len(cases)}] {c.form} {c.n_left}-{c.n_right} {c.h}x{c.w} {c.mode}"
                             f"{' r=' + str(c.max_shift) if c.max_shift else ''}{' peaks' if c.peaks else ''}")

        results = bench.run_cases(cases, progress=progress)
        bench.write_csv(results, csv_path)
        print(bench.table1_markdown(results))
        try:
            bench.plot_table1(results, png)
            print(f"times: {csv_path}\nplot: {png}")
        except ImportError:
            print(f"times: {csv_path} (no matplotlib here: plot later with --from-csv)")
        if a.calibrate:
            path = cache_path(gpu)
            meta = {"command": shlex.join(["ebsdxc", *argv])}
            table = (bench.to_table(results, gpu, meta) if base is None
                     else bench.extended_table(base, results, meta))
            table.save(path)
            print(f"dispatch table for {gpu}: {path}")
    return 0


def _refuse_existing(paths, overwrite):
    import os

    for p in paths:
        if os.path.exists(p) and not overwrite:
            raise InputError("exists; pass --overwrite to replace it", p)


@contextlib.contextmanager
def _cli_warnings():
    """Within the CLI's main: each UserWarning (the readers' "holds 4 of 6 patterns ...")
    once, as one line ``ebsdxc: warning: message`` on stderr, without Python's source lines.
    Other warnings keep Python's format. Filters and ``showwarning`` are restored on exit."""
    with warnings.catch_warnings():
        original = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if not issubclass(category, UserWarning):
                return original(message, category, filename, lineno, file, line)
            text = _flag_names(" ".join(str(message).split()))  # settings by the flags that set them
            with contextlib.suppress(OSError, ValueError):  # stderr closed: a warning is never fatal
                print(f"ebsdxc: warning: {text}", file=file if file is not None else sys.stderr)

        warnings.simplefilter("default", UserWarning)
        warnings.showwarning = show
        yield


def _quiet_broken_pipe():
    """The reader of stdout went away (``ebsdxc info FILE | head -1``): stop quietly.

    Python would flush stdout again at exit and print a second BrokenPipeError; point
    stdout at devnull so that flush has nowhere to fail.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (tests, notebooks)
        pass
    return 141  # 128 + SIGPIPE, as a shell reports a command killed by a broken pipe


def _stderr_line(text: str) -> None:
    """``text`` and its newline to stderr in one write: Python's stderr writes through, so
    print's separate newline let another process sharing the stream (a job script's Dask
    scheduler) put its log inside an ``ebsdxc:`` line, where tools reading the log miss it."""
    sys.stderr.write(text + "\n")


class _Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a batch system's cancel or time limit): the run stops as on Ctrl-C."""


def _stop_on_sigterm() -> None:
    import signal

    def ignore(signum, frame):
        pass

    def stop(signum, frame):
        # Once: SLURM signals every process of a job and its script may forward the signal too;
        # a second TERM must not break the clean-up the first one started (KILL still ends it).
        signal.signal(signal.SIGTERM, ignore)
        raise _Terminated()

    signal.signal(signal.SIGTERM, stop)


def main(argv=None) -> int:
    as_program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if as_program:
        import atexit
        import gc

        # the process ends after the command: skip the collector's last sweep over every object
        atexit.register(gc.freeze)
        _stop_on_sigterm()
    try:
        try:
            with _cli_warnings():
                return _main(argv)
        finally:  # also after --help's SystemExit
            if sys.stdout is not None:
                sys.stdout.flush()  # a closed pipe fails here, not in Python's flush at exit
    except BrokenPipeError:
        return _quiet_broken_pipe()


def _main(argv) -> int:
    a = _parser().parse_args(argv)
    try:
        commands = {"process": _cmd_process, "strain": _cmd_strain, "info": _cmd_info, "plot": _cmd_plot,
                    "export": _cmd_export, "recipes": _cmd_recipes, "bench": _cmd_bench,
                    "distortion": _cmd_distortion}
        return commands[a.command](a, argv)
    except InputError as e:
        _stderr_line(f"ebsdxc: error: {_arguments_as_flags(e)}")
        return 2
    except KeyboardInterrupt as e:
        if isinstance(e, _Terminated):
            _stderr_line("ebsdxc: cancelled (SIGTERM); the results file is marked incomplete; --resume continues")
            return 143  # 128 + SIGTERM, as a shell reports a command ended by it
        _stderr_line("ebsdxc: interrupted; the results file is marked incomplete, continue with --resume")
        return 130
    except MemoryError as e:  # host memory, or CuPy's OutOfMemoryError (a MemoryError subclass)
        _stderr_line(f"ebsdxc: error: out of memory ({e}); try a smaller --batch, then --resume")
        return 1


if __name__ == "__main__":
    sys.exit(main())
