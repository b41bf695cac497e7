"""Reliability-guided propagation of DIC starts, masks and polygons: fields a per-subset search
with a small window cannot follow, islands of a mask, batch invariance, the CLI's mask options."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
from exact_warps import affine_pair

from ebsdxc import cli, dic
from ebsdxc import status as st

H, W = 200, 240


def _rotation(deg, shape=(H, W)):
    a = np.radians(deg)
    R = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    c = np.array([(shape[1] - 1) / 2, (shape[0] - 1) / 2])
    G, t = R - np.eye(2), c - R @ c  # x = R (X - c) + c
    ref, img = affine_pair(G, t, shape)
    return ref, img, G, t


def _truth(pts, G, t):
    return np.asarray(t) + pts @ np.asarray(G).T


def test_propagation_follows_a_rotation_the_search_cannot():
    """12 degrees about the centre: subsets 60 px out move 12 px, beyond a +-4 px search; the
    propagation carries each neighbour's rotation along and measures them all."""
    ref, img, G, t = _rotation(12.0)
    pts, inside = dic.subset_grid(ref.shape, subset=31, step=10)
    truth = _truth(pts.reshape(-1, 2), G, t)
    moved = pts.reshape(-1, 1, 2) + np.array([[-15, -15], [15, -15], [15, 15], [-15, 15]])
    moved = np.asarray(t) + moved + moved @ np.asarray(G).T
    stays = ((moved >= 0) & (moved <= [W - 1, H - 1])).all(axis=(1, 2))
    got = {}
    for guess in ("search", "propagate"):
        cfg = dic.DicConfig(subset=31, step=10, search=4, guess=guess)
        m = dic.match_subsets(ref, img, pts, config=cfg, valid=inside.reshape(-1))
        got[guess] = m
    s, p = got["search"], got["propagate"]
    assert (s.status[stays] != st.OK).sum() > 0.3 * stays.sum()  # the search loses the outer points
    np.testing.assert_array_equal(p.status == st.OK, stays)  # the propagation measures every one
    err = np.abs(p.displacement[stays] - truth[stays]).max()
    assert err < 0.01, err
    assert set(np.unique(p.started[stays])) == {1, 2} and (p.started[stays] == 2).sum() > 0.8 * stays.sum()


def test_islands_of_a_mask_get_their_own_seeds():
    ref, img, G, t = _rotation(3.0)
    mask = np.zeros((H, W), bool)
    mask[10:90, 10:110] = True
    mask[120:195, 140:235] = True
    pts, inside = dic.subset_grid(ref.shape, subset=21, step=8, mask=mask)
    cfg = dic.DicConfig(subset=21, step=8, search=6, seed_spacing=1000)  # one seed per island, none on the grid
    m = dic.match_subsets(ref, img, pts, config=cfg, valid=inside.reshape(-1))
    ok = m.status == st.OK
    np.testing.assert_array_equal(ok, inside.reshape(-1))
    assert (m.started == 1).sum() == 2  # a seed in each island, searched; the rest propagated
    assert np.abs(m.displacement[ok] - _truth(pts.reshape(-1, 2), G, t)[ok]).max() < 0.01


def test_results_do_not_depend_on_the_batch():
    ref, img, _, _ = _rotation(8.0)
    pts, inside = dic.subset_grid(ref.shape, subset=31, step=12)
    cfg = dic.DicConfig(subset=31, step=12, search=4)
    a = dic.match_subsets(ref, img, pts, config=cfg, valid=inside.reshape(-1))
    b = dic.match_subsets(ref, img, pts, config=cfg, valid=inside.reshape(-1), batch=5)
    np.testing.assert_array_equal(a.status, b.status)
    np.testing.assert_array_equal(a.displacement, b.displacement)


def test_polygon_mask_is_pixel_centres_inside():
    m = dic.polygon_mask((20, 30), [(2, 3), (12, 3), (12, 8), (2, 8)])
    want = np.zeros((20, 30), bool)
    want[3:9, 2:13] = True
    np.testing.assert_array_equal(m, want)
    with pytest.raises(ValueError, match="dic.polygon"):
        dic.DicConfig(polygon=[(0, 0), (1, 1)])
    with pytest.raises(ValueError, match="dic.guess"):
        dic.DicConfig(guess="nearest")


@pytest.fixture
def frames(tmp_path):
    ref, img, G, t = _rotation(2.0, shape=(160, 160))
    lo, hi = ref.min(), ref.max()
    scale = lambda a: np.clip((a - lo) / (hi - lo) * 60000 + 1000, 0, 65535).astype(np.uint16)  # noqa: E731
    tifffile.imwrite(tmp_path / "ref.tif", scale(ref))
    (tmp_path / "frames").mkdir()
    tifffile.imwrite(tmp_path / "frames" / "f1.tif", scale(img))
    return tmp_path, G, t


def test_cli_mask_and_polygon(frames):
    import h5py
    from PIL import Image

    d, G, t = frames
    mask = np.zeros((160, 160), np.uint8)
    mask[:, :90] = 255
    Image.fromarray(mask).save(d / "mask.png")
    out = d / "r.h5"
    assert cli.main(["process", str(d / "frames"), "--ref", str(d / "ref.tif"), "--mode", "dic", "--subset", "21",
                     "--step", "10", "--dic-mask", str(d / "mask.png"), "--dic-polygon", "0,0;159,0;159,120;0,120",
                     "-o", str(out), "-q"]) == 0
    with h5py.File(out, "r") as f:
        pts = f["ebsdxc/dic/points"][()]
        status = f["ebsdxc/dic/status"][0]
        disp = f["ebsdxc/dic/displacement"][0]
    corners = pts[..., None, :] + np.array([[-10, -10], [10, -10], [10, 10], [-10, 10]])
    moved = np.asarray(t) + corners + corners @ np.asarray(G).T
    stays = ((moved >= 0) & (moved <= 159)).all(axis=(-2, -1))  # the deformed subset is still in the frame
    inside = (pts[..., 0] + 10 <= 89) & (pts[..., 1] + 10 <= 120) & stays
    np.testing.assert_array_equal(status == st.OK, inside)
    assert (status[~inside] == st.OUTSIDE_MASK).all()
    err = np.abs(disp[inside] - _truth(pts[inside], G, t)).max()
    assert err < 0.05, err


@pytest.mark.parametrize("make, words", [
    (lambda d: None, "the DIC mask file is not there"),
    (lambda d: (d / "mask.png").write_bytes(b"not an image"), "cannot read the DIC mask"),
    (lambda d: tifffile.imwrite(d / "mask.png", np.ones((10, 12), np.uint8)), "the DIC mask is 12x10 px"),
    (lambda d: tifffile.imwrite(d / "mask.png", np.zeros((160, 160), np.uint8)), "leave no pixel"),
])
def test_cli_bad_mask_is_one_line(frames, capsys, make, words):
    d, _, _ = frames
    make(d)
    code = cli.main(["process", str(d / "frames"), "--ref", str(d / "ref.tif"), "--mode", "dic", "--subset", "21",
                     "--step", "10", "--dic-mask", str(d / "mask.png"), "-o", str(d / "r.h5"), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0], err
    assert not (d / "r.h5").exists()


@pytest.mark.gpu
def test_propagation_gpu_matches_cpu():
    cp = pytest.importorskip("cupy")
    ref, img, G, t = _rotation(12.0)
    pts, inside = dic.subset_grid(ref.shape, subset=31, step=10)
    cfg = dic.DicConfig(subset=31, step=10, search=4)
    host = dic.match_subsets(ref, img, pts, config=cfg, valid=inside.reshape(-1))
    dev = dic.match_subsets(cp.asarray(ref), cp.asarray(img), pts, config=cfg, valid=inside.reshape(-1))
    np.testing.assert_array_equal(dev.status, host.status)
    np.testing.assert_array_equal(dev.started, host.started)
    ok = host.status == st.OK
    np.testing.assert_allclose(dev.displacement[ok], host.displacement[ok], atol=2e-4)
