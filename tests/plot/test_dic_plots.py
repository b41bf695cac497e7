"""DIC figures (ebsdxc.plot.dic) of a real DIC results file made through the CLI: a frame under a
known uniform strain, the data behind every panel checked against the file and the truth."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import tifffile
from exact_warps import affine_pair

from ebsdxc import cli
from ebsdxc import status as st
from ebsdxc.plot import dic_displacement_fields, dic_fields, dic_frame_series, dic_strain_fields, dic_vectors
from ebsdxc.plot.figures import figure_jobs

G = np.array([[4e-3, 0.0], [0.0, -2e-3]])
T = (1.3, -0.6)


@pytest.fixture(scope="module")
def dic_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("dicplot")
    ref, img = affine_pair(G, T, (160, 160))
    lo, hi = ref.min(), ref.max()
    to16 = lambda a: np.clip((a - lo) / (hi - lo) * 60000 + 2000, 0, 65535).astype(np.uint16)  # noqa: E731
    tifffile.imwrite(d / "ref.tif", to16(ref))
    (d / "frames").mkdir()
    tifffile.imwrite(d / "frames" / "f1.tif", to16(img))
    tifffile.imwrite(d / "frames" / "f2.tif", to16(affine_pair(2 * G, T, (160, 160))[1]))
    out = d / "r.h5"
    assert cli.main(["process", str(d / "frames"), "--ref", str(d / "ref.tif"), "--mode", "dic", "--subset", "21",
                     "--step", "10", "-o", str(out), "-q"]) == 0
    return out


def rendered(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()


def _image_arrays(ax):
    return [im.get_array() for im in ax.get_images()]


def test_displacement_fields_show_the_file_over_the_reference(dic_file):
    d = dic_fields(dic_file, frame=0)
    with h5py.File(dic_file, "r") as f:
        disp = f["ebsdxc/dic/displacement"][0]
        status = f["ebsdxc/dic/status"][0]
    fig = dic_displacement_fields(dic_file, frame=0)
    axes = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(axes) == 2
    for ax, k in zip(axes, (0, 1)):
        ref_img, field = _image_arrays(ax)
        assert ref_img.shape == (160, 160)  # the reference under the field
        want = np.where(status == st.OK, disp[..., k], np.nan)
        np.testing.assert_array_equal(np.ma.filled(field.astype(float), np.nan), want)
        # each cell centred on its subset: the field's extent is the points' +- half a step
        ext = ax.get_images()[1].get_extent()
        pts = d["points"]
        assert ext[0] == pts[0, 0, 0] - 5 and ext[1] == pts[-1, -1, 0] + 5 and ext[3] == pts[0, 0, 1] - 5
    # the truth: u = t + G X at the points
    truth = np.asarray(T) + d["points"] @ G.T
    ok = d["status"] == st.OK
    assert ok.sum() > 100 and np.abs(d["displacement"][ok] - truth[ok]).max() < 0.02
    rendered(fig)


def test_strain_fields_symmetric_limits_and_values(dic_file):
    fig = dic_strain_fields(dic_file, frame=0)
    axes = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert [ax.get_title().split(" (")[0] for ax in axes] == ["Exx", "Eyy", "Exy"]
    E = 0.5 * ((np.eye(2) + G).T @ (np.eye(2) + G) - np.eye(2))
    for ax, (i, j) in zip(axes, ((0, 0), (1, 1), (0, 1))):
        im = ax.get_images()[1]
        lo, hi = im.get_clim()
        assert lo == pytest.approx(-hi)
        vals = np.ma.filled(im.get_array().astype(float), np.nan)
        assert np.nanmedian(vals) == pytest.approx(E[i, j] * 1e3, abs=0.05)
    with pytest.raises(ValueError, match="components"):
        dic_strain_fields(dic_file, components=("Ezz",))
    with pytest.raises(ValueError, match="frame"):
        dic_strain_fields(dic_file, frame=5)
    rendered(fig)


def test_vectors_and_frame_series(dic_file):
    fig = dic_vectors(dic_file, frame=1, max_arrows=8)
    q = [c for c in fig.axes[0].collections if hasattr(c, "U")][0]
    d = dic_fields(dic_file, frame=1)
    assert len(q.U) <= 8 * 8 + 16 and len(q.U) > 10  # subsampled
    k = float(q.get_label().split("x")[1])
    longest = np.nanmax(np.abs(d["displacement"][::2, ::2]))
    assert np.max(np.abs(np.r_[q.U, q.V])) == pytest.approx(longest * k, rel=1e-6)
    fig2 = dic_frame_series(dic_file)
    lines = fig2.axes[1].get_lines()
    exx = lines[0].get_ydata()
    E1 = 0.5 * ((np.eye(2) + G).T @ (np.eye(2) + G) - np.eye(2))[0, 0] * 1e3
    E2 = 0.5 * ((np.eye(2) + 2 * G).T @ (np.eye(2) + 2 * G) - np.eye(2))[0, 0] * 1e3
    np.testing.assert_allclose(exx, [E1, E2], atol=0.05)
    rendered(fig)
    rendered(fig2)


def test_plot_command_writes_the_dic_figures(dic_file, tmp_path, capsys):
    assert [j[0] for j in figure_jobs(dic_file)] == ["dic_displacement", "dic_strain", "dic_vectors", "dic_frames"]
    assert cli.main(["plot", str(dic_file), "-o", str(tmp_path / "figs")]) == 0
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == [
        "dic_displacement.png", "dic_frames.png", "dic_strain.png", "dic_vectors.png"]
