"""Fused shared-memory FFT engine: a NumPy model of its index scheme (CPU) and the CUDA kernel
against float64 oracles, FFTEngine and find_peaks (GPU, ``pytest -m gpu``)."""

from __future__ import annotations

import numpy as np
import pytest
from roi_patterns import (
    assert_spoiled_rejected,
    patterns_and_origins,
    reference_from,
    rois_both_ways,
    spoil,
    two_reference_sets,
    with_reference,
)

from ebsdxc.engines.fused import (
    LENGTH_MAX,
    axis_factors,
    fast_length,
    fft_length,
    fused_plan,
    skew,
    step_table,
    supports,
)

# ------------------------------------------------------------------ NumPy model of the kernel
# The functions below do, index for index, what kernels/fftcorr.cu does (one thread's
# registers are an array slice, the shared spectrum is an array of rows x ld complex).


def reg_dft(v, d):
    """Dft<R, d>: in-register DFT of the last axis (R <= 5 direct, else R = A * B recursion)."""
    R = v.shape[-1]
    if R <= 5:
        k = np.arange(R)
        return v @ np.exp(d * 2j * np.pi * np.outer(k, k) / R)
    A = 4 if R % 4 == 0 else (3 if R % 3 == 0 else (2 if R % 2 == 0 else 5))
    B = R // A
    t = np.empty_like(v)
    for b in range(B):
        u = reg_dft(v[..., b + B * np.arange(A)], d)
        for ka in range(A):
            t[..., b + B * ka] = u[..., ka] * np.exp(d * 2j * np.pi * b * ka / R)
    out = np.empty_like(v)
    for ka in range(A):
        u = reg_dft(t[..., ka * B + np.arange(B)], d)
        out[..., ka + A * np.arange(B)] = u
    return out


def team_fft(load, buf, n1, n2, d, sigma=None):
    """Four-step FFT of one line: load(idx) gives inputs, buf (>= N slots) is the exchange
    space; returns U with U[k1, k2] = X[k1 + N1 k2] (thread k1's registers after stage B)."""
    N = n1 * n2
    sigma = sigma or (lambda a, b: skew(a, b, n1, n2))
    # stage A, thread n2 = q2: every thread loads before any writes (a team barrier)
    V = [reg_dft(load(q2 + n2 * np.arange(n1)), d) * np.exp(d * 2j * np.pi * q2 * np.arange(n1) / N)
         for q2 in range(n2)]
    for q2 in range(n2):
        for k1 in range(n1):
            buf[sigma(q2, k1)] = V[q2][k1]
    U = np.empty((n1, n2), complex)
    for k1 in range(n1):                                   # stage B, thread k1
        U[k1] = reg_dft(np.array([buf[sigma(q2, k1)] for q2 in range(n2)]), d)
    return U


def model_correlate(scan, ref_spec, plan, all_rows=True):
    """The kernel's map (Ny, Nx) float64 for a tile (h, w) and the engine's reference
    spectrum layout (Nx//2+1, Ny), pre-scaled by 1 / (Ny Nx) and conjugated; a split plan's
    map is that of its blocks' rows put together."""
    if plan.split == 1:
        return model_block(scan, ref_spec, plan, all_rows, 0)
    if plan.cols > 1:
        return model_column_split(scan, ref_spec, plan)
    out = np.empty(plan.fft)
    for s in range(plan.split):
        out[s::plan.split] = model_block(scan, ref_spec, plan, all_rows, s)
    return out


def model_split_columns(S, ref_spec, plan, s):
    """fc::columns_split of block s: forward FFT, stage B in two rounds, fold, half inverse."""
    (h, _), (ny, nx), ld = plan.tile, plan.fft, plan.ld
    (n1y, n2y), K, n2h = plan.fy, plan.fy[0] // 2, plan.fy[1] // 2
    for c in range(nx // 2 + 1):
        col = S[c::ld][:plan.rows]

        def load(idx, col=col):
            z = np.zeros(len(idx), complex)
            ok = idx < h
            z[ok] = col[idx[ok]]
            return z

        V = [reg_dft(load(q2 + n2y * np.arange(n1y)), -1) * np.exp(-2j * np.pi * q2 * np.arange(n1y) / ny)
             for q2 in range(n2y)]
        U = np.empty((n1y, n2y), complex)
        for r in range(2):                                 # the exchange holds half the k1 at a time
            for q2 in range(n2y):
                for k1 in range(K):
                    col[skew(q2, k1, n1y, n2y)] = V[q2][r * K + k1]
            for k1 in range(r * K, (r + 1) * K):
                U[k1] = reg_dft(np.array([col[skew(q2, k1 - r * K, n1y, n2y)] for q2 in range(n2y)]), -1)
        Q = np.empty((n1y, n2h), complex)
        for k1 in range(n1y):
            P = U[k1] * ref_spec[c, k1 + n1y * np.arange(n2y)]
            k = k1 + n1y * np.arange(n2h)
            Q[k1] = P[:n2h] + P[n2h:] if s == 0 else (P[:n2h] - P[n2h:]) * np.exp(2j * np.pi * k / ny)

        def sig2(a, b, n1y=n1y, n2h=n2h):
            return skew(a, b, n2h, n1y)

        for k1 in range(n1y):                              # inverse of length ny / 2 = n1y x n2h
            v = reg_dft(Q[k1], +1) * np.exp(2j * np.pi * k1 * np.arange(n2h) / (ny // 2))
            for kk in range(n2h):
                col[sig2(k1, kk)] = v[kk]
        W = [reg_dft(np.array([col[sig2(q, kk)] for q in range(n1y)]), +1) for kk in range(n2h)]
        for kk in range(n2h):
            col[kk + n2h * np.arange(n1y)] = W[kk]


def model_row_pair(scan, p, plan, L):
    """Row pass of tile rows 2p, 2p+1 packed as one complex row, in the line L (>= Nx slots):
    the two half spectra (A, B)."""
    (h, w), (n1x, n2x), nx = plan.tile, plan.fx, plan.fft[1]
    b_row = scan[2 * p + 1] if 2 * p + 1 < h else np.zeros(w)

    def load(idx):
        z = np.zeros(len(idx), complex)
        ok = idx < w
        z[ok] = scan[2 * p][idx[ok]] + 1j * b_row[idx[ok]]
        return z

    U = team_fft(load, L, n1x, n2x, -1)
    for k1 in range(n1x):
        L[k1 + n1x * np.arange(n2x)] = U[k1]
    Z = L[:nx].copy()                                      # unpack (all reads, then writes)
    m = np.arange(nx // 2 + 1)
    Zp = np.conj(Z[(nx - m) % nx])
    A, D = (Z[m] + Zp) / 2, Z[m] - Zp
    return A, (D.imag - 1j * D.real) / 2


def model_column(col, ref_col, plan):
    """Column pass of one column (a view of ny rows): forward FFT (rows >= h are zero),
    product with the reference column, inverse FFT."""
    h, (n1y, n2y), ny = plan.tile[0], plan.fy, plan.fft[0]

    def load(idx):
        z = np.zeros(len(idx), complex)
        ok = idx < h
        z[ok] = col[idx[ok]]
        return z

    U = team_fft(load, col, n1y, n2y, -1)
    for k1 in range(n1y):
        U[k1] = U[k1] * ref_col[k1 + n1y * np.arange(n2y)]

    # inverse, roles swapped: N = N2 x N1 with thread n2' = k1 holding n1' = k2
    def sig2(a, b):
        return skew(a, b, n2y, n1y)

    for k1 in range(n1y):
        v = reg_dft(U[k1], +1) * np.exp(2j * np.pi * k1 * np.arange(n2y) / ny)
        for kk in range(n2y):
            col[sig2(k1, kk)] = v[kk]
    W = [reg_dft(np.array([col[sig2(q, kk)] for q in range(n1y)]), +1) for kk in range(n2y)]
    for kk in range(n2y):                                  # (after a team barrier)
        col[kk + n2y * np.arange(n1y)] = W[kk]


def model_inverse_rows(S, mld, nyl, pairs, plan):
    """Inverse row pass: half spectra of map rows 2q, 2q+1 (rows of mld complex) packed; the
    real map rows overwrite the pair's line. Returns the block's map (nyl, Nx)."""
    nx, (n1x, n2x) = plan.fft[1], plan.fx
    M = S.view(np.float64).reshape(-1, 2 * mld)            # map row j = floats [j, :nx]
    for q in pairs:
        L = S[2 * q * mld:(2 * q + 2) * mld]

        def load(idx, q=q):
            m = np.where(idx <= nx // 2, idx, nx - idx)
            a = S[2 * q * mld + m].copy()
            b = S[(2 * q + 1) * mld + m].copy() if 2 * q + 1 < nyl else np.zeros(len(idx), complex)
            edge = (m == 0) | (2 * m == nx)
            a[edge], b[edge] = a[edge].real, b[edge].real
            far = idx > nx // 2
            a[far], b[far] = np.conj(a[far]), np.conj(b[far])
            return a + 1j * b

        U = team_fft(load, L, n1x, n2x, +1)
        z = np.empty(nx, complex)
        for k1 in range(n1x):
            z[k1 + n1x * np.arange(n2x)] = U[k1]
        M[2 * q, :nx] = z.real
        M[2 * q + 1, :nx] = z.imag
    return M[:nyl, :nx].copy()


def model_block(scan, ref_spec, plan, all_rows, s):
    """One block's map rows y = split j + s (j < Ny / split)."""
    (h, _), (ny, nx), (ry, _) = plan.tile, plan.fft, plan.max_lag
    nyl = ny // plan.split
    ld = plan.ld
    nxh = nx // 2 + 1
    S = np.full(plan.rows * ld, np.nan, complex)           # shared spectrum, rows x ld
    # 1. row pass: rows 2p, 2p+1 packed as one complex row; the pair's two rows are the line
    for p in range((h + 1) // 2):
        L = S[2 * p * ld:(2 * p + 2) * ld]                 # a view: writes land in S
        A, B = model_row_pair(scan, p, plan, L)
        L[:nxh] = A
        L[ld:ld + nxh] = B
    # 2. column pass: forward FFT (rows >= h are zero), product, inverse FFT
    if plan.split > 1:
        model_split_columns(S, ref_spec, plan, s)
    for c in range(nxh if plan.split == 1 else 0):
        model_column(S[c::ld][:ny], ref_spec[c], plan)
    # 3. inverse row pass: rows y, y+1 packed; the real map rows overwrite the pair's line
    pairs = range((nyl + 1) // 2) if all_rows or plan.split > 1 else row_pairs(ny, ry)
    return model_inverse_rows(S, ld, nyl, pairs, plan)


def model_column_split(scan, ref_spec, plan):
    """Both blocks of a column split (plan.cols == 2): block s transforms its half of the row
    pairs (in a line of its own) and writes each column to the block that owns it, does the
    column pass of its own columns, then takes the peer's columns of its map rows y = 2 j + s
    into its rows 2 j + 1 - s, so that map row j's half spectrum is one row of 2 ld."""
    (h, _), (ny, nx), ld = plan.tile, plan.fft, plan.ld
    nxh, nyl = nx // 2 + 1, ny // 2
    first, count = (0, ld), (ld, nxh - ld)
    S = [np.full(plan.rows * ld, np.nan, complex) for _ in range(2)]
    items = (h + 1) // 2
    mine = (items + 1) // 2
    for s in range(2):
        for p in range(s * mine, min(items, (s + 1) * mine)):
            A, B = model_row_pair(scan, p, plan, np.full(nx, np.nan, complex))
            for b in range(2):
                cols = slice(first[b], first[b] + count[b])
                S[b][2 * p * ld:2 * p * ld + count[b]] = A[cols]
                S[b][(2 * p + 1) * ld:(2 * p + 1) * ld + count[b]] = B[cols]
    for s in range(2):
        for c in range(count[s]):
            model_column(S[s][c::ld][:ny], ref_spec[first[s] + c], plan)
    before = [x.copy() for x in S]                         # a round's reads precede its writes
    for s in range(2):
        n = count[1 - s]
        for j in range(nyl):
            S[s][(2 * j + 1 - s) * ld:(2 * j + 1 - s) * ld + n] = before[1 - s][(2 * j + s) * ld:(2 * j + s) * ld + n]
    out = np.empty((ny, nx))
    for s in range(2):
        out[s::2] = model_inverse_rows(S[s], 2 * ld, nyl, range((nyl + 1) // 2), plan)
    return out


def row_pairs(ny, ry):
    """Row pairs q (rows 2q, 2q+1) the inverse row pass needs for lags |dy| <= ry + 1."""
    lo = (ny - ry - 1) // 2
    first = (ry + 3) // 2
    if lo <= first:
        return list(range((ny + 1) // 2))
    return list(range(first)) + list(range(lo, (ny + 1) // 2))


def ref_spectrum(ref, fft):
    ny, nx = fft
    return (np.conj(np.fft.rfft2(ref.astype(np.float64), s=(ny, nx))) / (ny * nx)).T


def definition_map(scan, ref, fft):
    """Zero-padded linear correlation c[dy, dx] = sum scan[y+dy, x+dx] ref[y, x], circular layout."""
    h, w = ref.shape
    ny, nx = fft
    out = np.zeros(fft)
    s, r = scan.astype(np.float64), ref.astype(np.float64)
    for dy in range(-(h - 1), h):
        for dx in range(-(w - 1), w):
            y0, y1, x0, x1 = max(0, -dy), min(h, h - dy), max(0, -dx), min(w, w - dx)
            v = (s[y0 + dy:y1 + dy, x0 + dx:x1 + dx] * r[y0:y1, x0:x1]).sum()
            if abs(dy) < ny and abs(dx) < nx:
                out[dy % ny, dx % nx] += v
    return out


# ------------------------------------------------------------------ CPU tests


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 15, 16, 18, 20, 24, 25, 27, 30, 32])
@pytest.mark.parametrize("d", [-1, 1])
def test_register_dft_matches_numpy(rng, n, d):
    v = rng.standard_normal((3, n)) + 1j * rng.standard_normal((3, n))
    want = np.fft.fft(v) if d < 0 else np.fft.ifft(v) * n
    np.testing.assert_allclose(reg_dft(v, d), want, atol=1e-10 * n)


@pytest.mark.parametrize("n", [1, 2, 5, 6, 9, 16, 25, 27, 40, 48, 72, 80, 100, 128, 160, 162, 192, 216, 243, 576, 1024])
@pytest.mark.parametrize("d", [-1, 1])
def test_team_fft_matches_numpy(rng, n, d):
    n1, n2 = axis_factors(n)
    x = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    buf = np.full(n, np.nan, complex)
    U = team_fft(lambda idx: x[idx], buf, n1, n2, d)
    X = np.empty(n, complex)
    for k1 in range(n1):
        X[k1 + n1 * np.arange(n2)] = U[k1]
    want = np.fft.fft(x) if d < 0 else np.fft.ifft(x) * n
    np.testing.assert_allclose(X, want, atol=1e-9 * n)


@pytest.mark.parametrize("n", [6, 48, 72, 80, 100, 120, 160, 162, 192, 243, 576])
def test_skew_is_a_bijection_without_bank_conflicts(n):
    n1, n2 = axis_factors(n)
    slots = np.array([[skew(a, b, n1, n2) for b in range(n1)] for a in range(n2)])
    assert sorted(slots.ravel()) == list(range(n))
    # 64-bit accesses: 16 lanes per wavefront; slots (stride 1 or an odd row stride) map to
    # banks by slot mod 16. Writers of one k1 (lanes n2) and readers of one n2 (lanes k1).
    worst = max(max(np.bincount(g[i:i + 16] % 16).max() for i in range(0, len(g), 16))
                for g in [slots[:, k] for k in range(n1)] + [slots[a, :] for a in range(n2)])
    assert worst <= (1 if n in (48, 160, 192) else 3)


def test_radix_5_splits_are_16_lane_teams_without_a_factor_of_15():
    # 15 slots a row are -1 mod 16: the skew's rotation cancels and a team's readers share a
    # bank; and radix 5 runs only in 16-lane teams (fused.RADIX5_FACTOR_MAX says why)
    from ebsdxc.engines.fused import RADIX5_FACTOR_MAX, SKEW_CONFLICTS_MAX, _skew_conflicts

    assert _skew_conflicts(15, 15) == 15 and _skew_conflicts(15, 16) == 15
    assert _skew_conflicts(10, 16) <= 2 and _skew_conflicts(27, 27) == SKEW_CONFLICTS_MAX
    assert axis_factors(160) == (10, 16) and axis_factors(80) == (8, 10)
    assert axis_factors(225) is None and axis_factors(240) is None  # 9 x 25, 12 x 20: 32-lane teams
    for n in range(1, LENGTH_MAX + 1):
        f = axis_factors(n)
        assert f is None or (15 not in f and _skew_conflicts(*f) <= SKEW_CONFLICTS_MAX)
        assert f is None or n % 5 or max(f) <= RADIX5_FACTOR_MAX == 16


@pytest.mark.parametrize("tile,mode,shift", [((1, 1), "full", None), ((5, 7), "full", None),
                                             ((13, 6), "full", None), ((6, 13), "window", 3),
                                             ((9, 4), "window", 2), ((16, 12), "full", None),
                                             ((11, 8), "window", 20), ((24, 10), "full", None),
                                             ((11, 11), "window", 6)])
@pytest.mark.parametrize("split", [None, 2])
def test_kernel_model_equals_definition(rng, tile, mode, shift, split):
    plan = fused_plan(tile, mode, shift, split=split)
    assert plan.split == (split or 1)
    assert plan.cols == (2 if split and mode == "window" else 1)  # window mode splits by columns
    h, w = tile
    scan, ref = rng.standard_normal((2, h, w))
    got = model_correlate(scan, ref_spectrum(ref, plan.fft), plan)
    want = definition_map(scan, ref, plan.fft)
    ry, rx = plan.max_lag
    iy, ix = np.arange(-ry, ry + 1) % plan.fft[0], np.arange(-rx, rx + 1) % plan.fft[1]
    if mode == "full":
        np.testing.assert_allclose(got, want, atol=1e-9)
    else:  # only the searched lags are linear correlations
        np.testing.assert_allclose(got[np.ix_(iy, ix)], want[np.ix_(iy, ix)], atol=1e-9)
    if mode == "window":  # the rows the peak search reads are all computed with the row subset
        part = model_correlate(scan, ref_spectrum(ref, plan.fft), plan, all_rows=False)
        rows = np.arange(-ry - 1, ry + 2) % plan.fft[0]
        np.testing.assert_allclose(part[rows], got[rows], atol=1e-12)


def test_fft_lengths_are_smallest_usable_2a3b5c():
    assert fft_length(191) == 192
    assert fft_length(1) == 1
    assert fft_length(65) == 72
    assert fft_length(39) == 40
    assert fft_length(159) == 160
    assert fft_length(161) == 162
    assert fft_length(25) == 25
    assert fft_length(960) == 1024  # 960 = 30 x 32: radix 5 in 32-lane teams; 972 = 4 x 243: no split
    assert fft_length(961) == 1024  # 972 = 4 x 243 and 1000 = 8 x 125: no split into factors <= 32
    assert fft_length(LENGTH_MAX + 1) is None
    assert axis_factors(192) == (12, 16)
    assert axis_factors(160) == (10, 16)
    assert axis_factors(972) is None and axis_factors(1000) is None


def test_fast_lengths_fill_the_teams():
    # the smallest length where its factors fill the teams; a longer one where they leave most
    # of a 32-lane team idle and a longer length fills 16-lane teams
    for need, want in [(24, 24), (39, 40), (80, 81), (81, 81), (96, 96), (99, 108), (112, 128), (144, 144),
                       (152, 160), (159, 160), (161, 192), (176, 192), (192, 192), (200, 256), (243, 256), (280, 288)]:
        assert fast_length(need) == want, need
        assert fast_length(need) >= fft_length(need) and fast_length(need) <= max(1.5 * need, fft_length(need))
    # window mode 128x128 at +-24 (the 512x512 HR-EBSD case): 160 (10 x 16), smaller and cheaper
    # than 192 (12 x 16); at +-34, 192 rather than 162 (9 x 18)
    assert fused_plan((128, 128), "window", 24, grid=3).fft == (160, 160)
    assert fused_plan((128, 128), "window", 34, grid=3).fft == (192, 192)
    # where the cheaper length does not fit and the smallest does, the smallest
    p = fused_plan((128, 128), "window", 34, grid=3, smem_limit=160 * 1024)
    assert p.fft == (162, 162) and p.split == 1
    # the upsampled grid's sums grow with the map: the cheapest lengths for grids summed at up
    # to FAST_GRID_MAX lags a side (the default factor's 24: 192 took 128x128 +-24 from 32.7k to
    # 37.3k patterns/s on an H100), the smallest for larger ones; a larger grid is summed at
    # GRID_NODES nodes, so the cheapest lengths where they fit (128x128 at +-34: upsample 24 and 30
    # at 192, 50 at 162)
    from ebsdxc.engines import fused

    assert fused.FAST_GRID_MAX >= 24 and fused.GRID_NODES <= fused.FAST_GRID_MAX
    assert fused_plan((128, 128), "window", 34, grid=24).fft == (192, 192)
    assert fused_plan((128, 128), "window", 34, grid=36).fft == (192, 192)
    assert fused_plan((128, 128), "window", 34, grid=45).fft == (192, 192)
    assert fused_plan((128, 128), "window", 34, grid=75).fft == (162, 162)
    assert fused_plan((128, 128), "window", 24, grid=24).fft == (160, 160)
    saved = fused.GRID_NODES
    try:
        fused.GRID_NODES = 100  # every lag summed
        assert fused_plan((128, 128), "window", 34, grid=fused.FAST_GRID_MAX + 1).fft == (162, 162)
    finally:
        fused.GRID_NODES = saved


def test_upsampled_plans_sum_the_widest_chunk_of_grid_columns_that_fits():
    # fc::CW: by default 4 columns a pass with the row sums on the FP64 tensor cores (the fastest
    # measured), 3 where 4 do not fit; of wider choices the widest whose scratch fits (128x128
    # +-24: 8, 176 KB; 96x96 full: 6, 216 KB; 256x256 +-24: 4); on the FP64 pipes (sm_80 kernels without them, or asked
    # for): 6 where a piece holds one map row, 3 where shared memory is short
    from ebsdxc.engines import fused

    for shape, mode, shift in (((128, 128), "window", 24), ((96, 96), "full", None), ((256, 256), "window", 24)):
        p = fused_plan(shape, mode, shift, grid=24)
        assert (p.grid_cw, p.grid_mma) == (4, True)
        assert dict(p.defines())["FC_GRID_CW"] == 4 and dict(p.defines())["FC_GRID_MMA"] == 1
    p = fused_plan((128, 128), "window", 24, grid=3)
    assert (p.grid_cw, p.grid_mma) == (3, False)  # dft: the stencil's three
    saved = fused.GRID_MMA_COLUMNS, fused.FAST_GRID_MAX
    try:
        fused.FAST_GRID_MAX = 0  # 128x128 +-34 at FFT 162
        fused.GRID_MMA_COLUMNS = (8, 6, 4, 3)
        p = fused_plan((128, 128), "window", 34, grid=24)
        assert (p.grid_cw, p.grid_mma) == (8, True) and p.grid_smem + 512 <= 232448
        assert fused_plan((96, 96), "full", grid=24).grid_cw == 6
        assert fused_plan((256, 256), "window", 24, grid=24).grid_cw == 4
        assert fused_plan((64, 64), "window", 16, grid=5).grid_cw == 4  # upsample 3: 5 columns
        # on the FP64 pipes (benchmarks/fused_grid_columns.py)
        fused.GRID_MMA_COLUMNS = ()
        assert (fused_plan((128, 128), "window", 34, grid=24).grid_cw,
                fused_plan((128, 128), "window", 34, grid=24).grid_mma) == (6, False)
        assert fused_plan((45, 60), "full", grid=24).grid_cw == 3  # NX 128: four rows a piece
        assert fused_plan((128, 128), "window", 34, grid=24, smem_limit=170 * 1024).grid_cw == 6
        assert fused_plan((128, 128), "window", 34, grid=24, smem_limit=160 * 1024).grid_cw == 3
    finally:
        fused.GRID_MMA_COLUMNS, fused.FAST_GRID_MAX = saved


@pytest.mark.parametrize("up", [9, 16, 24, 50])
def test_upsampled_grid_from_its_nodes_matches_the_exact_grid(up):
    # fc::grid_finish: an upsampled grid of R lags a side from its values at GRID_NODES Chebyshev
    # nodes, against the exact grid (ebsdxc.peaks.dft_grid, float64) of white-noise maps with a
    # peak (a spectrum flat to the Nyquist frequency: the interpolant's worst case) and centres
    # off the peak, both axes' spectra (all frequencies down, the half spectrum across)
    from ebsdxc.engines import fused
    from ebsdxc.peaks import dft_grid

    rng = np.random.default_rng(up)
    ny, nx = 96, 90
    R = fused.grid_side("upsampled", up)
    q = fused.grid_nodes(R)
    assert q == fused.GRID_NODES < R
    nodes, lerp = fused.grid_interpolation(up, q)
    assert lerp.shape == (R, q) and np.allclose(lerp.sum(1), 1.0)
    lags = (np.arange(R) - R // 2) / up
    assert nodes.min() > lags[0] and nodes.max() < lags[-1]  # first-kind nodes: inside the span

    def at_nodes(cps, cy, cx, offsets):
        # the exact interpolant at (cy + o_u, cx + o_v): one-point grids
        k = offsets.size
        yy = np.repeat(cy + offsets, k)
        xx = np.tile(cx + offsets, k)
        return dft_grid(np.broadcast_to(cps, (k * k,) + cps.shape), yy, xx, spacing=1.0, size=1,
                        shape=(ny, nx)).reshape(k, k)

    worst = {}
    for trial in range(4):
        m = rng.standard_normal((ny, nx))
        m[5, -7] += 25.0
        cps = np.fft.rfft2(m)
        cy, cx = 5.0 - trial % 2, -7.0 + trial // 2
        want = dft_grid(cps[None], np.array([cy]), np.array([cx]), spacing=1.0 / up, size=R, shape=(ny, nx))[0]
        for k in (q, q - 2):
            o, lk = fused.grid_interpolation(up, k)
            got = lk @ at_nodes(cps, cy, cx, o) @ lk.T
            worst[k] = max(worst.get(k, 0.0), np.abs(got - want).max() / np.abs(want).max())
    assert worst[q] < 1e-8  # measured 2e-9 to 4e-9
    assert worst[q - 2] > 1e-8  # two nodes fewer fall short: the bound is what the nodes buy
    # grids up to GRID_NODES lags are summed at their own lags
    lags4, none = fused.grid_interpolation(4, fused.grid_nodes(6))
    assert none is None and np.array_equal(lags4, (np.arange(6) - 3) / 4)


@pytest.mark.parametrize("split", [None, 2])
def test_every_plan_has_room_for_its_map(split):
    # the inverse row pass writes map rows 2q, 2q+1 as one complex row of NX from float2
    # 2 q MLD (fc::MLD: 2 LD in a column split, else LD); the last pair must end inside the
    # ROWS x LD spectrum, before the twiddles (a column split of FFT 162 = 2 x 81 wrote past it)
    checked = 0
    for h, w in [(n, n) for n in range(4, 260, 3)] + [(11, 64), (17, 70), (45, 60), (128, 96), (200, 210)]:
        for mode, shift in [("full", None), ("window", 3), ("window", 16), ("window", 24)]:
            for grid in (0, 3, 24, 75):
                try:
                    p = fused_plan((h, w), mode, shift, grid=grid, split=split)
                except ValueError:
                    continue
                nyl, nx = p.fft[0] // p.split, p.fft[1]
                mld = 2 * p.ld if p.cols > 1 else p.ld
                assert 2 * mld * ((nyl - 1) // 2) + nx <= p.rows * p.ld, (h, w, mode, shift, grid, p)
                assert p.rows % 2 == 0 and p.rows >= (p.fft[0] if p.split == 1 or p.cols > 1 else nyl)
                checked += 1
    assert checked > 500


def test_plans_and_refusals():
    p = fused_plan((96, 96), "full")
    assert p.fft == (192, 192) and p.ld == 97 and p.smem < 160 * 1024 and p.threads == 512
    assert p.max_lag == (95, 95)
    w = fused_plan((96, 80), "window", 16)
    assert w.fft == (128, 96) and w.max_lag == (16, 16)
    assert fused_plan((1, 1), "full").fft == (1, 1)
    assert supports((96, 96), "full") and supports((128, 128), "window", 8)
    # 128x128 in full mode: the map's rows split over a two-block cluster (sm_90)
    for grid in (0, 3, 24):
        p = fused_plan((128, 128), "full", grid=grid)
        assert p.split == 2 and p.fft == (256, 256) and p.rows == 128 and p.grid_smem + 512 <= 232448
        assert dict(p.defines())["FC_SPLIT"] == 2
    assert fused_plan((96, 96), "full").split == 1
    # upsampled at 132 to 144 px: the split's sum of the 12 x 12 nodes shares the row sums' space
    # (4 columns a pass: 222 KB of the 227)
    for t in ((132, 132), (144, 144), (136, 144)):
        p = fused_plan(t, "full", grid=24)
        assert p.split == 2 and p.fft == (288, 288) and p.grid_smem == 227400 and p.grid_cw == 4
    # 112 rows: 243 (3^5) has odd factors; the split takes the next length two blocks can share,
    # and the rows 256 too: 243 = 9 x 27 leaves most of a 32-lane team idle (fast_length)
    assert fused_plan((112, 112), "full", grid=3).fft == (256, 256)
    assert fused_plan((112, 112), "full", grid=3, split=2).fft == (256, 256)
    assert not supports((128, 128), "full", clusters=False)
    with pytest.raises(ValueError, match="shared memory: use the fft engine"):
        fused_plan((128, 128), "full", clusters=False)
    with pytest.raises(ValueError, match="split over two blocks, the spectrum and subpixel grid need 243 KB"):
        fused_plan((160, 160), "full", grid=3)
    # window mode: the tile fills more than half the column FFT, so a split shares the forward
    # transform by spectrum columns: block 0 owns an odd number of them, and map row j's half
    # spectrum is then rows 2j, 2j+1 of that stride
    for grid in (0, 3, 24):
        p = fused_plan((256, 256), "window", 24, grid=grid)
        assert (p.split, p.cols, p.fft, p.ld, p.rows) == (2, 2, (288, 288), 73, 288)
        assert p.grid_smem + 512 <= 232448 and dict(p.defines())["FC_COLS"] == 2
    p = fused_plan((16, 16), "window", 4, split=2)
    assert (p.split, p.cols, p.ld) == (2, 2, 7) and 2 * p.ld >= p.fft[1] // 2 + 1
    assert fused_plan((200, 200), "window", 24).cols == 2
    assert fused_plan((128, 128), "window", 24).split == 1
    assert fused_plan((70, 8), "window", 11).fft[0] == 81
    assert fused_plan((70, 8), "window", 11, split=2).fft[0] == 90  # even, not 81
    with pytest.raises(ValueError, match="without thread-block clusters"):
        fused_plan((16, 16), "window", 4, split=2, clusters=False)
    with pytest.raises(ValueError, match="split over two blocks by columns"):
        fused_plan((600, 600), "window", 24)
    with pytest.raises(ValueError, match="split must be"):
        fused_plan((16, 16), "full", split=3)
    with pytest.raises(ValueError, match="up to 1024"):
        fused_plan((600, 4), "full")
    with pytest.raises(ValueError, match="not 'circular'"):
        fused_plan((8, 8), "circular")
    assert not supports((8, 8), "window", None)


def test_engine_refuses_cpu_and_spectrum_methods():
    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, make_engine
    from ebsdxc.errors import InputError

    with pytest.raises(InputError, match="CUDA GPU only"):
        make_engine("fused", select_backend("cpu"), (8, 8), EngineConfig(subpixel="quadratic"))


# ------------------------------------------------------------------ GPU tests

SIZES = [(1, 1), (5, 7), (13, 6), (33, 20), (64, 64), (96, 96), (96, 80)]
SPLIT_SIZES = [(1, 1), (5, 7), (13, 6), (45, 60), (96, 96)]  # a two-block split forced


def _fft_oracle(scan, ref, fft):
    """float64 zero-padded linear correlation (exact: the FFT size leaves no wrap-around)."""
    h, w = ref.shape[-2:]
    s = (2 * h - 1, 2 * w - 1)
    c = np.fft.irfft2(np.fft.rfft2(scan.astype(np.float64), s=s) * np.conj(np.fft.rfft2(ref.astype(np.float64), s=s)),
                      s=s)
    out = np.zeros(scan.shape[:-2] + tuple(fft))
    ly, lx = np.arange(-(h - 1), h), np.arange(-(w - 1), w)
    keep_y, keep_x = np.abs(ly) < fft[0], np.abs(lx) < fft[1]
    np.add.at(out, (..., (ly[keep_y] % fft[0])[:, None], (lx[keep_x] % fft[1])[None, :]),
              c[..., ly[keep_y] % s[0], :][..., lx[keep_x] % s[1]])
    return out


def _engine(tile, mode, shift=None, method="none", compensate=True, window=True, split=None):
    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, make_engine
    from ebsdxc.engines.fused import FusedFFTEngine
    from ebsdxc.preprocess import window_1d

    h, w = tile
    win = (window_1d(h), window_1d(w)) if window else None
    cfg = EngineConfig(mode=mode, max_shift=shift, subpixel=method, compensate=compensate)
    if split:  # a split plan forced on tiles that fit one block
        eng = FusedFFTEngine(select_backend("cuda"), tile, cfg, window_1d=win, split=split)
        assert eng.plan.split == split
        return eng, win
    return make_engine("fused", select_backend("cuda"), tile, cfg, window_1d=win), win


def _float64_peaks(eng, win, scan, ref, method, *, compensate=True, upsample=16):
    """ebsdxc.peaks.locate_peaks in float64 on the cross-power spectrum of the engine's FFT size
    (in window mode the interpolant of a circular correlation depends on its size): (y, x, value)."""
    from ebsdxc.peaks import locate_peaks, window_power_spectrum

    B, n = scan.shape[:2]
    fft = eng.fft_shape
    cps = (np.fft.rfft2(scan.astype(np.float64), s=fft) * np.conj(np.fft.rfft2(ref.astype(np.float64), s=fft))[None])
    cps = cps.reshape(B * n, fft[0], fft[1] // 2 + 1)
    spectra = (window_power_spectrum(win[0], fft[0]), window_power_spectrum(win[1], fft[1])) if compensate else None
    return locate_peaks(np.fft.irfft2(cps, s=fft), max_lag=eng.max_lag, method=method, cross_power=cps,
                        window_spectra=spectra, upsample=upsample)


def _shifted_tiles(rng, B, n, tile, shift=2.3, sigma=2.0):
    """Smooth random reference tiles and scan tiles of the same content moved by ~shift px
    (``sigma``: the smoothing, px; broad correlation peaks, as of EBSD patterns, need more)."""
    from scipy import ndimage

    h, w = tile
    big = ndimage.gaussian_filter(rng.standard_normal((n, h + 16, w + 16)), (0, sigma, sigma))
    ref = big[:, 8:8 + h, 8:8 + w]
    scan = np.empty((B, n, h, w))
    for b in range(B):
        d = rng.uniform(-shift, shift, 2)
        moved = ndimage.shift(big, (0, d[0], d[1]), order=3, mode="wrap")
        scan[b] = moved[:, 8:8 + h, 8:8 + w] + 0.05 * rng.standard_normal((n, h, w))
    return scan.astype(np.float32), ref.astype(np.float32)


@pytest.mark.gpu
def test_oracle_is_the_definition(rng):
    scan, ref = rng.standard_normal((2, 6, 5))
    np.testing.assert_allclose(_fft_oracle(scan, ref, (12, 9)), definition_map(scan, ref, (12, 9)), atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("tile,mode,shift,split", [(t, m, s, None) for t in SIZES
                                                   for m, s in [("full", None), ("window", 3), ("window", 16)]]
                         + [(t, "full", None, 2) for t in SPLIT_SIZES] + [((128, 128), "full", None, None)]
                         + [(t, "window", s, 2) for t in SPLIT_SIZES for s in (3, 16)]
                         + [((256, 256), "window", 24, None), ((200, 210), "window", 24, None),
                            ((128, 128), "window", 24, None), ((112, 112), "full", None, None),
                            ((128, 128), "window", 24, 2), ((11, 11), "window", 6, 2)])  # odd NY / 2
def test_maps_match_float64_definition(rng, tile, mode, shift, split):
    import cupy as cp

    eng, _ = _engine(tile, mode, shift, split=split)
    if tile in ((256, 256), (200, 210)) or (tile == (128, 128) and mode == "full"):
        assert eng.plan.split == 2
    assert eng.plan.cols == (2 if eng.plan.split == 2 and mode == "window" else 1)
    h, w = tile
    B, n = 2, 3
    ref = rng.standard_normal((n, h, w)).astype(np.float32)
    scan = (rng.standard_normal((B, n, h, w)) + 0.3).astype(np.float32)
    eng.set_reference(cp.asarray(ref), np.ones(n), np.zeros(n, np.uint8))
    got = eng.correlation_maps(cp.asarray(scan)).get()
    ny, nx = eng.fft_shape
    assert got.shape == (B, n, ny, nx)
    want = _fft_oracle(scan, ref[None], (ny, nx))
    ry, rx = eng.max_lag
    if mode == "window":
        iy, ix = np.arange(-ry, ry + 1) % ny, np.arange(-rx, rx + 1) % nx
        got, want = got[..., iy, :][..., ix], want[..., iy, :][..., ix]
    peak = np.abs(want).max()
    assert np.abs(got - want).max() <= 1e-5 * peak
    # a padded frame (tile at the top-left) is read in place
    frames = np.zeros((B, n, h + 3, w + 5), np.float32)
    frames[..., :h, :w] = scan
    again = eng.correlation_maps(cp.asarray(frames)).get()
    if mode == "window":
        again = again[..., iy, :][..., ix]
    np.testing.assert_array_equal(again, got)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["none", "parabolic", "gaussian", "quadratic"])
@pytest.mark.parametrize("tile,mode,shift,split", [((96, 96), "full", None, None), ((33, 20), "full", None, None),
                                                   ((64, 64), "window", 8, None), ((13, 6), "window", 3, None),
                                                   ((1, 1), "full", None, None), ((128, 128), "full", None, None),
                                                   ((33, 20), "full", None, 2), ((5, 7), "full", None, 2),
                                                   ((33, 20), "window", 8, 2), ((5, 7), "window", 2, 2),
                                                   ((256, 256), "window", 24, None)])
@pytest.mark.parametrize("compensate", [False, True])
def test_peaks_equal_find_peaks_on_the_maps(rng, method, tile, mode, shift, split, compensate):
    import cupy as cp

    from ebsdxc.engines.gpu_ops import find_peaks

    eng, _ = _engine(tile, mode, shift, method, compensate, split=split)
    B, n = 3, 4
    scan, ref = _shifted_tiles(rng, B, n, tile)
    scan[0, 0] = 0.0  # a flagged (all-zero) tile: ties everywhere, first lag wins
    eng.set_reference(cp.asarray(ref), np.ones(n), np.zeros(n, np.uint8))
    dev = cp.asarray(scan)
    y, x, v, b = (a.get() for a in eng.locate(dev))
    maps = eng.correlation_maps(dev).reshape(B * n, *eng.fft_shape)
    wy, wx, vv, bb, _, _ = find_peaks(maps, eng.max_lag, method, eng._lags)
    np.testing.assert_array_equal(v, vv.get())
    np.testing.assert_array_equal(b, bb.get())
    np.testing.assert_allclose(y, wy.get(), atol=1e-9)
    np.testing.assert_allclose(x, wx.get(), atol=1e-9)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["none", "parabolic", "gaussian", "quadratic", "dft", "upsampled"])
@pytest.mark.parametrize("tile,mode,shift", [((96, 96), "full", None), ((96, 80), "window", 16),
                                             ((33, 20), "full", None), ((128, 128), "full", None),
                                             ((256, 256), "window", 24)])
def test_peaks_match_fft_engine(rng, method, tile, mode, shift):
    import cupy as cp

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, make_engine

    eng, win = _engine(tile, mode, shift, method)
    fft = make_engine("fft", select_backend("cuda"), tile,
                      EngineConfig(mode=mode, max_shift=shift, subpixel=method), window_1d=win)
    B, n = 4, 5
    scan, ref = _shifted_tiles(rng, B, n, tile)
    for e in (eng, fft):
        e.set_reference(cp.asarray(ref), np.ones(n), np.zeros(n, np.uint8))
    dev = cp.asarray(scan)
    got = [a.get() for a in eng.locate(dev)]
    want = [a.get() for a in fft.locate(dev)]
    np.testing.assert_allclose(got[2], want[2], rtol=1e-5, atol=1e-5 * np.abs(want[2]).max())
    np.testing.assert_array_equal(got[3], want[3])
    if method in ("dft", "upsampled") and eng.fft_shape != fft.fft_shape:
        # window mode, FFT sizes of their own (2^a 3^b here, any fast size there): two
        # interpolants of two circular correlations, equal at the integer lags (the test
        # above holds the kernel to the oracle of its own size)
        both = ~(np.isnan(got[0]) | np.isnan(want[0]))
        assert both.mean() > 0.9
        d = np.concatenate([got[0][both] - want[0][both], got[1][both] - want[1][both]])
        assert np.sqrt((d ** 2).mean()) < 2e-3 and np.abs(d).max() < 0.02
        return
    np.testing.assert_allclose(got[0], want[0], atol=2e-3)
    np.testing.assert_allclose(got[1], want[1], atol=2e-3)


@pytest.mark.gpu
def test_engine_match_and_refusals():
    import cupy as cp

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, make_engine
    from ebsdxc.errors import InputError

    with pytest.raises(InputError, match="correlation.circular"):
        make_engine("fused", select_backend("cuda"), (16, 16),
                    EngineConfig(mode="window", max_shift=4, subpixel="dft", circular=True))
    with pytest.raises(InputError, match="shared memory"):
        _engine((160, 160), "full", method="dft")
    eng, _ = _engine((32, 32), "window", 4, "quadratic")
    rng = np.random.default_rng(1)
    scan, ref = _shifted_tiles(rng, 2, 3, (32, 32), shift=1.5)
    e = (ref.astype(np.float64) ** 2).sum((-2, -1))
    eng.set_reference(cp.asarray(ref), e, np.zeros(3, np.uint8))
    res = eng.match(cp.asarray(scan), cp.asarray((scan.astype(np.float64) ** 2).sum((-2, -1)), dtype=cp.float32),
                    cp.zeros((2, 3), cp.uint8))
    assert res.displacement.shape == (2, 3, 2) and bool((res.peak_height > 0.5).all())


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["dft", "upsampled"])
@pytest.mark.parametrize("compensate", [True, False])
@pytest.mark.parametrize("tile,mode,shift,sigma,split", [
    ((96, 96), "full", None, 2.0, None), ((64, 64), "window", 16, 2.0, None), ((45, 60), "full", None, 2.0, None),
    ((31, 40), "window", 6, 2.0, None), ((7, 9), "full", None, 2.0, None), ((96, 96), "full", None, 6.0, None),
    ((64, 64), "window", 16, 6.0, None), ((128, 128), "full", None, 2.0, None), ((128, 128), "full", None, 6.0, None),
    ((45, 60), "full", None, 2.0, 2), ((7, 9), "full", None, 2.0, 2), ((96, 96), "full", None, 6.0, 2),
    ((144, 144), "full", None, 2.0, None), ((132, 140), "full", None, 6.0, None),
    ((64, 64), "window", 16, 6.0, 2), ((31, 40), "window", 6, 2.0, 2), ((7, 9), "window", 4, 2.0, 2),
    ((256, 256), "window", 24, 2.0, None), ((256, 256), "window", 24, 6.0, None),
    ((128, 128), "window", 24, 6.0, None)])
def test_grid_methods_in_the_kernel_match_the_float64_oracle(rng, tile, mode, shift, sigma, split, compensate,
                                                             method):
    """The dft and upsampled methods evaluated from the map in shared memory (its
    trigonometric interpolant) against ebsdxc.peaks.locate_peaks in float64 on the cross-power
    spectrum of the same FFT size (in window mode the interpolant of a circular correlation
    depends on its size)."""
    import cupy as cp


    eng, win = _engine(tile, mode, shift, method, compensate=compensate, split=split)
    B, n = 6, 7
    scan, ref = _shifted_tiles(rng, B, n, tile, shift=min(2.3, (min(tile) - 1) / 3), sigma=sigma)
    eng.set_reference(cp.asarray(ref), np.ones(n), np.zeros(n, np.uint8))
    got = [a.get() for a in eng.locate(cp.asarray(scan))]
    want = _float64_peaks(eng, win, scan, ref, method, compensate=compensate)
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]))
    ok = ~np.isnan(want[0])
    assert ok.mean() > 0.9 if min(tile) >= 16 else ok.any()  # 7x9 tiles: most peaks run off
    d = np.concatenate([got[0][ok] - want[0][ok], got[1][ok] - want[1][ok]])
    if sigma <= 2:
        assert np.abs(d).max() < 2e-4
    else:
        # Broad peaks (as of EBSD patterns): the finest stencils differ by 1e-4 of the peak, and
        # the map the kernel interpolates is its float32 inverse FFT (measured on an H100:
        # up to 2e-4 px RMS, 1.5e-3 max; the cuFFT engine's spectrum path stays near 1e-5)
        assert np.sqrt((d ** 2).mean()) < 3e-4 and np.abs(d).max() < 3e-3
    np.testing.assert_allclose(got[2], want[2], rtol=1e-4, atol=1e-4 * np.abs(want[2]).max())


@pytest.mark.gpu
@pytest.mark.parametrize("tile,mode,shift,up", [((64, 64), "window", 16, 16), ((45, 60), "full", None, 7),
                                               ((31, 40), "window", 6, 10), ((96, 96), "full", None, 16)])
def test_upsampled_tables_match_float64_sums(tile, mode, shift, up):
    # fused_upsampled_tables: the grid's Dirichlet weights (full spectrum down, Hermitian half
    # across) and window autocorrelations at every remainder m of a whole-pixel centre, against
    # the sums they close, in float64

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig
    from ebsdxc.engines.fused import FusedFFTEngine
    from ebsdxc.preprocess import window_1d

    win = (window_1d(tile[0]), window_1d(tile[1]))
    cfg = EngineConfig(mode=mode, max_shift=shift, subpixel="upsampled", upsample=up)
    eng = FusedFFTEngine(select_backend("cuda"), tile, cfg, window_1d=win)
    from ebsdxc.engines.fused import grid_interpolation
    from ebsdxc.kernel_loader import NULL_POINTER

    tables = eng._upsampled_tables()
    wy, wx, acy, acx = (a.get() for a in tables[:4])
    ny, nx = eng.fft_shape
    R = (3 * up + 1) // 2
    q = int(tables[5])
    assert q == min(R, 12) and (tables[4] is NULL_POINTER) == (q == R)
    nodes, _ = grid_interpolation(up, q)  # the weights at the nodes, the autocorrelations at the lags
    lags = (np.arange(R) - R // 2) / up
    ty = np.arange(ny)[None, :] + nodes[:, None]  # (q, ny)
    tx = np.arange(nx)[None, :] + nodes[:, None]
    ky = np.fft.fftfreq(ny) * ny
    kx = np.arange(nx // 2 + 1)
    hx = np.full(kx.size, 2.0)
    hx[0] = 1.0
    if nx % 2 == 0:
        hx[-1] = 1.0
    want_wy = np.exp(2j * np.pi * ty[..., None] * ky / ny).sum(-1)
    want_wx = (hx * np.exp(2j * np.pi * tx[..., None] * kx / nx)).sum(-1)
    np.testing.assert_allclose(wy, want_wy, atol=4e-6 * ny)
    np.testing.assert_allclose(wx, want_wx, atol=4e-6 * nx)
    sy, sx = (s.get() for s in eng._spectra)
    ty = np.arange(ny)[None, :] + lags[:, None]  # (R, ny)
    tx = np.arange(nx)[None, :] + lags[:, None]
    want_acy = (sy * np.cos(2 * np.pi * ty.T[..., None] * ky / ny)).sum(-1) / sy.sum()  # (ny, R)
    want_acx = (sx[:kx.size] * hx * np.cos(2 * np.pi * tx.T[..., None] * kx / nx)).sum(-1) / sx.sum()
    np.testing.assert_allclose(acy, want_acy, atol=1e-12)
    np.testing.assert_allclose(acx, want_acx, atol=1e-12)
    assert np.abs(want_acy).max() > 0.5 and np.abs(want_wy).max() > 0.9 * ny  # the sums are not trivial


@pytest.mark.gpu
@pytest.mark.parametrize("tile,mode,shift,split,up", [
    ((64, 64), "window", 16, None, 7), ((45, 60), "full", None, 2, 10), ((96, 96), "full", None, None, 5),
    ((128, 128), "window", 34, 2, 50), ((96, 96), "full", None, None, 24), ((256, 256), "window", 24, None, 24)])
def test_upsampled_factors_other_than_16_match_the_float64_oracle(rng, tile, mode, shift, split, up):
    # grids of odd side (7: 11 points, chunks of 3, 3, 3, 2) and steps no power of two (1/7,
    # 1/10), about centres on either side of zero, read rotated from the tables; grids of 15, 36
    # and 75 lags from 12 x 12 nodes (256x256 +-24 at 24: refused before the nodes, its scratch
    # too large); 128x128 +-34 as a column split of FFT 162 (81 map rows a block: the last one's
    # complex row ran into the twiddles before the plan gave it room)
    import cupy as cp

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig
    from ebsdxc.engines.fused import FusedFFTEngine
    from ebsdxc.preprocess import window_1d

    win = (window_1d(tile[0]), window_1d(tile[1]))
    cfg = EngineConfig(mode=mode, max_shift=shift, subpixel="upsampled", upsample=up)
    eng = FusedFFTEngine(select_backend("cuda"), tile, cfg, window_1d=win, split=split)
    if up == 50:
        assert (eng.plan.cols, eng.plan.fft[0] // 2 % 2) == (2, 1)
    B, n = 6, 7
    scan, ref = _shifted_tiles(rng, B, n, tile, shift=2.3, sigma=2.0)
    eng.set_reference(cp.asarray(ref), np.ones(n), np.zeros(n, np.uint8))
    got = [a.get() for a in eng.locate(cp.asarray(scan))]
    want = _float64_peaks(eng, win, scan, ref, "upsampled", upsample=up)
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]))
    ok = ~np.isnan(want[0])
    assert ok.mean() > 0.9
    assert (want[0][ok] < -0.5).any() and (want[0][ok] > 0.5).any()  # centres on both sides of zero
    d = np.concatenate([got[0][ok] - want[0][ok], got[1][ok] - want[1][ok]])
    assert np.abs(d).max() < 2e-4


@pytest.mark.gpu
@pytest.mark.parametrize("tile,mode,shift,split", [((128, 128), "window", 24, None), ((96, 96), "full", None, None),
                                                   ((64, 64), "window", 16, None), ((45, 60), "full", None, 2)])
def test_upsampled_row_sums_on_the_fp64_pipes_match_the_float64_oracle(rng, monkeypatch, tile, mode, shift, split):
    # fc::row_sums_pipes, the row sums of GPUs before sm_80: every sm_80+ plan takes the tensor
    # cores (fc::row_sums_mma), so the pipes are forced here (no tensor-core width offered)
    import cupy as cp

    from ebsdxc.engines import fused

    monkeypatch.setattr(fused, "GRID_MMA_COLUMNS", ())
    eng, win = _engine(tile, mode, shift, "upsampled", split=split)
    assert not eng.plan.grid_mma and eng.plan.grid_cw in (3, 6)
    B, n = 6, 7
    scan, ref = _shifted_tiles(rng, B, n, tile, shift=2.3, sigma=2.0)
    eng.set_reference(cp.asarray(ref), np.ones(n), np.zeros(n, np.uint8))
    got = [a.get() for a in eng.locate(cp.asarray(scan))]
    want = _float64_peaks(eng, win, scan, ref, "upsampled")
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]))
    ok = ~np.isnan(want[0])
    assert ok.mean() > 0.9
    d = np.concatenate([got[0][ok] - want[0][ok], got[1][ok] - want[1][ok]])
    assert np.abs(d).max() < 2e-4


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["quadratic", "dft", "upsampled"])
@pytest.mark.parametrize("mode,shift", [("full", None), ("window", 8)])  # the CPU engine's FFT size too
def test_real_patterns_split_or_not_match_the_cpu_engine(method, mode, shift):
    # kikuchipy's 3x3 Ni scan (real patterns, 60x60): nine 24 px ROIs against point 0, the
    # kernel in one block and split over a two-block cluster (full mode: by map rows; window
    # mode: by spectrum columns), against the float64 FFT engine on the CPU.
    import cupy as cp
    from real_patterns import ni_tiles

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, make_engine
    from ebsdxc.preprocess import window_1d

    size = 24
    tp, en, status = ni_tiles(size)
    win = (window_1d(size), window_1d(size))
    cfg = EngineConfig(mode=mode, max_shift=shift, subpixel=method)
    cpu = make_engine("fft", select_backend("cpu"), (size, size), cfg, window_1d=win)
    cpu.set_reference(tp[0], en[0], status[0])
    r = cpu.match(tp, en, status)
    want = (r.displacement, r.peak_height, r.status)
    assert (want[2] == 0).mean() > 0.7
    assert np.nanmax(np.abs(want[0])) > 0.1  # the points do move against point 0
    got = {}
    for split in (1, 2):
        eng, _ = _engine((size, size), mode, shift, method, split=split)
        assert eng.plan.split == split
        eng.set_reference(cp.asarray(tp[0]), cp.asarray(en[0]), cp.asarray(status[0]))
        r = eng.match(cp.asarray(tp), cp.asarray(en), cp.asarray(status))
        got[split] = [a.get() for a in (r.displacement, r.peak_height, r.status)]
        np.testing.assert_array_equal(got[split][2], want[2])
        # float32 maps (quadratic: 1.1e-4 px from float64 measured on the H100); dft and upsampled
        # the map's interpolant (BENCHMARKS.md: up to 2e-3 px on broad EBSD peaks)
        np.testing.assert_allclose(got[split][0], want[0], atol=5e-4 if method == "quadratic" else 2e-3,
                                   equal_nan=True, err_msg=f"split {split}: {got[split][0]} against {want[0]}")
        np.testing.assert_allclose(got[split][1], want[1], atol=1e-5, equal_nan=True)
    np.testing.assert_allclose(got[2][0], got[1][0], atol=1e-4 if method == "quadratic" else 1e-3, equal_nan=True)


def test_the_engine_offers_what_the_current_device_can_run(monkeypatch):
    # "auto" asks FusedFFTEngine.supports; on an A100 (163 KB of shared memory per block, no
    # thread-block clusters) it must not offer plans that only an sm_90 runs, or the engine it
    # picks would refuse. Here (no GPU) the limits are those of sm_90; the A100's are set.
    from ebsdxc.engines import EngineConfig, fused

    full_q, full_dft = EngineConfig(subpixel="quadratic"), EngineConfig(subpixel="dft")
    if fused.device_limits() == (fused.SMEM_OPTIN, True):
        assert fused.FusedFFTEngine.supports((128, 128), full_q) and fused.FusedFFTEngine.supports((96, 96), full_dft)
    monkeypatch.setattr(fused, "device_limits", lambda: (166912, False))
    assert not fused.FusedFFTEngine.supports((128, 128), full_q)
    assert "shared memory" in fused.FusedFFTEngine.refusal((128, 128), full_q)
    assert fused.FusedFFTEngine.supports((96, 96), full_q)        # 151 KB
    assert not fused.FusedFFTEngine.supports((96, 96), full_dft)  # 178 KB with the stencil's scratch


def _model_geometric_small(t, a, n, N, ends=None):
    """fc::geometric_small (kernels/fftcorr.cu), line for line."""
    def power_sum(x, p):
        s1 = 0.5 * x * (x - 1.0)
        return [x, s1, (x - 1.0) * x * (2.0 * x - 1.0) / 6.0, s1 * s1,
                (x - 1.0) * x * (2.0 * x - 1.0) * (3.0 * x * x - 3.0 * x - 1.0) / 30.0][p]

    th = 6.283185307179586476925 * t / N
    m = [power_sum(float(a + n), p) - power_sum(float(a), p) for p in range(5)]
    if ends is not None:
        if n == 1:
            return complex(ends[0], 0.0)
        pa = pb = 1.0
        b = float(a + n - 1)
        for p in range(5):
            m[p] = 2.0 * m[p] - (2.0 - ends[0]) * pa - (2.0 - ends[1]) * pb
            pa *= a
            pb *= b
    t2 = th * th
    return complex(m[0] - 0.5 * t2 * m[2] + t2 * t2 / 24.0 * m[4], th * m[1] - th * t2 / 6.0 * m[3])


@pytest.mark.parametrize("N", [1, 7, 96, 192, 243, 256, 1024])
@pytest.mark.parametrize("half", [False, True])
def test_small_lag_dirichlet_sums_equal_direct_summation(N, half):
    # The kernel's Dirichlet weights fall back to this series where |sin(pi t / N)| < 1e-6: the
    # full spectrum (k = -N/2 .. N/2 - 1, weights 1) or the half spectrum (k = 0 .. N/2, weights
    # 1 at the ends where N is even, else 1 and 2, and 2 between), held to the direct sum.
    if half:
        a, n, ends = 0, N // 2 + 1, (1.0, 2.0 if N % 2 else 1.0)
        k = np.arange(a, a + n)
        w = np.full(n, 2.0)
        w[0], w[-1] = ends if n > 1 else (ends[0], ends[0])
    else:
        a, n, ends = -(N // 2), N, None
        k = np.arange(a, a + n)
        w = np.ones(n)
    for t in (0.0, 1e-9, -3e-8, 1e-6 * N / np.pi * 0.99):
        want = (w * np.exp(2j * np.pi * k * t / N)).sum()
        got = _model_geometric_small(t, a, n, N, ends)
        assert abs(got - want) <= 1e-12 * max(1.0, abs(want)), (t, got, want)


def _model_stencil_weights(y, x, N, f):
    # fc::stencil_tables for an even N (cot_even and the constants kc), every map row (column)
    # j = 0..N-1, with f rounding to the kernel's float where it rounds (identity: float64)
    def red2(v):
        return v - 2.0 * np.rint(0.5 * v)

    j = np.arange(N)
    p = j & 1

    def cot(c):
        t = c - j
        t = t - N * np.rint(t / N)
        ph = f(t / N)
        return t, f(f(np.cos(np.pi * ph)) / f(np.sin(np.pi * ph)))

    t, ct = cot(y)
    row = f(f(np.sin(np.pi * f(red2(y - p)))) * ct)  # kc[2 u + p]
    a = 0.5 * (x - p)
    a = f(a - np.rint(a))
    sn, cs = f(np.sin(np.pi * a)), f(np.cos(np.pi * a))
    tx, ct = cot(x)
    col = f(f(2.0 * f(sn * cs)) * ct) + 1j * f(f(2.0 * f(sn * sn)) * ct)  # kc[6 + ...], kc[7 + ...]
    return t, row, tx, col


@pytest.mark.parametrize("N", [16, 20, 160, 192, 288])
def test_even_length_stencil_weights_equal_direct_summation(N):
    # The `dft` stencil's weights at even lengths: Re Dy(t) = sin(pi t) cot(pi t / N) and
    # Dx(t) = cot(pi t / N) (sin(pi t), 1 - cos(pi t)) with sin(pi t) and 1 - cos(pi t) from
    # constants per parity of the map row (column), held to the direct sums over the full
    # spectrum (k = -N/2 .. N/2 - 1) and the Hermitian half (1, 2, ..., 2, 1); in float32 within
    # the old closed forms' 2.3e-7 of N (float32 emulation, max over these lags: 1.9e-7), near
    # whole lags too, where a constant from an unreduced argument lost most of the largest weight.
    rng = np.random.default_rng(N)
    kf = np.arange(-(N // 2), N - N // 2)
    kh = np.arange(N // 2 + 1)
    wh = np.where((kh == 0) | (kh == N // 2), 1.0, 2.0)

    def f32(v):
        return np.asarray(v, dtype=np.float64).astype(np.float32).astype(np.float64)

    for y, x in list(rng.uniform(-N / 2, N / 2, (20, 2))) + [(3.0 + 1e-4, -7.0 - 3e-5), (1.0 + 2e-3, 2.0 - 1e-3)]:
        for f, tol in ((lambda v: v, 1e-11), (f32, 3e-7)):
            t, row, tx, col = _model_stencil_weights(y, x, N, f)
            ok = np.abs(np.sin(np.pi * t / N)) >= 1e-6  # the kernel takes the series below there
            dy = np.exp(2j * np.pi * np.outer(t, kf) / N).sum(1)
            dx = (wh * np.exp(2j * np.pi * np.outer(tx, kh) / N)).sum(1)
            assert np.abs(row - dy.real)[ok].max() <= tol * N, (y, x)
            okx = np.abs(np.sin(np.pi * tx / N)) >= 1e-6
            assert np.abs(col - dx)[okx].max() <= tol * N, (y, x)


@pytest.mark.parametrize("shape", [(16, 20), (96, 64), (192, 160)])
def test_stencil_pass_from_real_weights_and_alternating_sums_equals_the_matrix_dft(shape):
    # fc::stencil_values for even lengths, in float64: each column's sums of c[j][k] Re Dy_u(j)
    # and its alternating sum (-1)^j c[j][k] (for Im Dy_u(j) = -(-1)^j sin(pi y_u)), then across
    # the columns Re Dx_v and Im Dx_v (cot forms of _model_stencil_weights), held to the matrix
    # DFT of the map's spectrum (ebsdxc.peaks.dft_grid) at a 3x3 stencil
    from ebsdxc.peaks import dft_grid

    ny, nx = shape
    rng = np.random.default_rng(ny + nx)
    c = rng.standard_normal(shape)
    spec = np.fft.rfft2(c)[None]
    h = 0.25
    for yc, xc in rng.uniform(-min(shape) / 2, min(shape) / 2, (5, 2)):
        g = np.empty((3, 3))
        for u in range(3):
            _, wy, _, _ = _model_stencil_weights(yc + (u - 1) * h, 0.5, ny, lambda v: v)  # x unused
            col_re = wy @ c  # (nx,) sum over rows of c[j][k] Re Dy_u(j)
            alt = ((-1.0) ** np.arange(ny)) @ c
            sy = np.sin(np.pi * (yc + (u - 1) * h))
            for v in range(3):
                _, _, _, dx = _model_stencil_weights(0.5, xc + (v - 1) * h, nx, lambda v: v)  # y unused
                g[u, v] = (col_re @ dx.real + sy * (alt @ dx.imag)) / (ny * nx)
        want = dft_grid(spec, np.array([yc]), np.array([xc]), spacing=h, size=3, shape=shape)[0]
        np.testing.assert_allclose(g, want, rtol=0, atol=1e-10 * np.abs(c).sum() / (ny * nx))


def test_step_table_holds_the_phases_of_each_step():
    steps = (0.25, 0.05)
    tab = step_table(steps, (192, 160))
    assert tab.shape == (2, 97 + 81, 2)
    for i, h in enumerate(steps):
        ky, kx = np.arange(97), np.arange(81)
        want = np.concatenate([np.exp(2j * np.pi * ky * h / 192), np.exp(2j * np.pi * kx * h / 160)])
        np.testing.assert_allclose(tab[i, :, 0] + 1j * tab[i, :, 1], want, rtol=0, atol=1e-14)


def test_the_phase_benchmark_finds_every_phase_of_the_dft_kernel():
    # benchmarks/fused_dft_phases.py stamps the kernel's phases at anchors in its text; a phase
    # whose anchor an edit of kernels/fftcorr.cu removed would read 0 cycles without a word.
    import importlib.util
    import re
    from pathlib import Path

    from ebsdxc.kernel_loader import kernel_source

    spec = importlib.util.spec_from_file_location(
        "ebsdxc_fused_dft_phases", Path(__file__).resolve().parents[2] / "benchmarks" / "fused_dft_phases.py")
    phases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(phases)
    src = phases.instrument(kernel_source("fftcorr.cu"))
    found = {int(i) for i in re.findall(r"atomicAdd\(&fc_phase\[(\d+)\]", src)}
    assert found == {0, 1, 4, 5, 6, 9, 10, 11, 12, 13, 14, phases.PASSES}
    body = src[src.index("fused_dft(const FC_IN*"):src.index("fused_upsampled(const FC_IN*")]
    assert body.count("atomicAdd(&fc_phase[") >= 5  # correlate, start, step, step barrier, end


def test_the_phase_benchmark_finds_every_phase_of_the_upsampled_kernel():
    # benchmarks/fused_upsampled_phases.py, the same for fused_upsampled (its anchors are asserted)
    import importlib.util
    import re
    import sys
    from pathlib import Path

    from ebsdxc.kernel_loader import kernel_source

    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    sys.path.insert(0, str(bench))
    try:
        spec = importlib.util.spec_from_file_location("ebsdxc_fused_upsampled_phases",
                                                      bench / "fused_upsampled_phases.py")
        phases = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(phases)
    finally:
        sys.path.remove(str(bench))
    src = phases.instrument(kernel_source("fftcorr.cu"))
    found = {int(i) for i in re.findall(r"atomicAdd\(&fc_phase\[(\d+)\]", src)}
    assert found == set(range(len(phases.NAMES))) | {phases.PASSES}
    body = src[src.index("fused_upsampled(const FC_IN*"):]
    assert body.count("atomicAdd(&fc_phase[") >= 5


# ------------------------------------------------ ROIs read from whole patterns (match_rois)

@pytest.mark.gpu
@pytest.mark.parametrize("tile,mode,shift,split,method", [
    ((33, 20), "full", None, None, "none"), ((33, 20), "full", None, None, "upsampled"),
    ((64, 64), "window", 16, None, "dft"), ((45, 60), "full", None, 2, "quadratic"),
    ((31, 40), "window", 6, 2, "dft"), ((128, 128), "full", None, None, "dft"),
    ((256, 256), "window", 24, None, "dft"), ((256, 256), "window", 24, None, "quadratic")])
def test_rois_from_patterns_are_the_prepared_tiles_bit_for_bit(rng, tile, mode, shift, split, method):
    """match_rois prepares each value as it loads it, from prepare_tiles' own float mean: the
    FFT sees the same floats, so every result equals match() on prepare_tiles_padded's tiles
    exactly, for one-block plans, row splits and column splits."""
    import cupy as cp

    from ebsdxc.preprocess import window_2d

    eng, _ = _engine(tile, mode, shift, method, split=split)
    window = window_2d(tile, xp=cp)
    pats, origins = patterns_and_origins(rng, 3, 5, tile, np.uint16)
    eng.set_reference(*reference_from(eng, pats, origins, window))
    got, want = rois_both_ways(eng, pats, origins, window)
    assert (want[2] == 0).mean() > 0.5  # most peaks found: the comparison is not of NaNs
    for g, wnt in zip(got, want):
        np.testing.assert_array_equal(g, wnt)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.int32, np.float32, np.float64, np.int64])
def test_rois_from_patterns_of_every_dtype(rng, dtype):
    """Each pattern dtype has its own kernel (int64, which has none, is read as float32);
    tiles that prepare_tiles rejects (a NaN, a constant area) come back with its status
    and NaN, K = 2 reference sets picked per pattern."""
    tile = (24, 20)
    eng, _ = _engine(tile, "window", 6, "dft")
    pats, origins, window = with_reference(eng, rng, 4, 6, tile, dtype, side=64)
    spoil(pats, origins, tile)
    got, want = rois_both_ways(eng, pats, origins, window, index=np.array([0, 1, 1, 0]),
                               references=two_reference_sets(eng, pats, origins, window))
    for g, wnt in zip(got, want):
        np.testing.assert_array_equal(g, wnt)
    assert_spoiled_rejected(got[2], got[0], 16, nan=np.dtype(dtype).kind == "f")


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["quadratic", "dft", "upsampled"])
def test_rois_from_real_patterns_match_the_cpu_float64_engine(method):
    """kikuchipy's real Ni patterns in their stored uint8, nine 24 px ROIs read straight from
    the patterns by the kernel, against the float64 FFT engine on the CPU's prepared tiles."""
    import cupy as cp
    from real_patterns import ni_patterns

    from ebsdxc.backend import select_backend
    from ebsdxc.engines import EngineConfig, make_engine
    from ebsdxc.preprocess import prepare_tiles, window_1d, window_2d
    from ebsdxc.rois import extract_tiles, grid_layout

    size = 24
    pats = ni_patterns()
    layout = grid_layout(pats.shape[1:], grid=(3, 3), size=size)
    tp, en, status = prepare_tiles(extract_tiles(pats.astype(np.float32), layout, dtype=np.float32),
                                   window_2d((size, size)))
    cfg = EngineConfig(mode="window", max_shift=8, subpixel=method)
    cpu = make_engine("fft", select_backend("cpu"), (size, size), cfg, window_1d=(window_1d(size), window_1d(size)))
    cpu.set_reference(tp[0], en[0], status[0])
    want = cpu.match(tp, en, status)
    eng, _ = _engine((size, size), "window", 8, method)
    eng.set_reference(cp.asarray(tp[0]), cp.asarray(en[0]), cp.asarray(status[0]))
    got = eng.match_rois(cp.asarray(pats), np.asarray(layout.origins, dtype=np.int32),
                         window_2d((size, size), xp=cp))
    np.testing.assert_array_equal(got.status.get(), want.status)
    assert (want.status == 0).mean() > 0.7 and np.nanmax(np.abs(want.displacement)) > 0.1
    np.testing.assert_allclose(got.displacement.get(), want.displacement,
                               atol=5e-4 if method == "quadratic" else 2e-3, equal_nan=True)
    np.testing.assert_allclose(got.peak_height.get(), want.peak_height, atol=1e-5, equal_nan=True)
