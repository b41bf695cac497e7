// Least-squares warps from point correspondences with outliers rejected one at a time, one
// thread per problem: ebsdxc/icgn.py's fit_warp (the NumPy/CuPy rule this mirrors; tests
// compare the two in float64).
//
// Prelude: NPARAM (6 affine, 8 homography), MAXM (>= the number of points m).
// Per problem: the normal equations of the linearised fit over the used points (a problem
// with too few gets the identity added, so the solve stays finite; its warp is NaN in the
// end), solved by Gaussian elimination with partial pivoting; the residuals; their median
// over the used points (as _masked_median: the sorted row with unused points as +inf, NaN
// last); the worst used point (the first NaN, else the first largest) dropped while its
// residual exceeds max(reject * median / 1.1774, floor) and more than NEED + 1 points are left.

#define NEED (NPARAM == 8 ? 4 : 3)
#define FIT_INF (__longlong_as_double(0x7ff0000000000000LL))
#define FIT_NAN (__longlong_as_double(0x7ff8000000000000LL))

// a < b with NaN after everything (+inf included), as NumPy's sort orders them.
__device__ __forceinline__ bool before(double a, double b) {
    if (isnan(a)) return false;
    if (isnan(b)) return true;
    return a < b;
}

extern "C" __global__ void fit_warp(const double* __restrict__ uv, const double* __restrict__ moved,
                                    const unsigned char* __restrict__ valid, const int n_problems, const int m,
                                    const double reject, const double floor_, double* __restrict__ warp,
                                    unsigned char* __restrict__ used_out) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n_problems) return;
    const double* q = moved + 2LL * m * p;
    bool used[MAXM];
    double res[MAXM];
    int count = 0;
    for (int i = 0; i < m; ++i) {
        used[i] = valid[(long long)m * p + i] && isfinite(q[2 * i]) && isfinite(q[2 * i + 1]);
        count += used[i];
    }
    const bool enough = count >= NEED;
    double H[9];
    for (int round = 0; round < m; ++round) {
        // normal equations N x = r of rows (u, v, 1, 0, 0, 0, -u' u, -u' v) . x = u' - u and
        // (0, 0, 0, u, v, 1, -v' u, -v' v) . x = v' - v
        double N[NPARAM][NPARAM + 1];
        for (int i = 0; i < NPARAM; ++i)
            for (int j = 0; j <= NPARAM; ++j) N[i][j] = (!enough && i == j) ? 1.0 : 0.0;
        for (int k = 0; k < m; ++k) {
            if (!used[k]) continue;
            const double u = uv[2 * k], v = uv[2 * k + 1], qu = q[2 * k], qv = q[2 * k + 1];
            for (int row = 0; row < 2; ++row) {
                double a[NPARAM];
                const double t = row == 0 ? qu : qv;
                a[0] = row == 0 ? u : 0.0;
                a[1] = row == 0 ? v : 0.0;
                a[2] = row == 0 ? 1.0 : 0.0;
                a[3] = row == 0 ? 0.0 : u;
                a[4] = row == 0 ? 0.0 : v;
                a[5] = row == 0 ? 0.0 : 1.0;
#if NPARAM == 8
                a[6] = -t * u;
                a[7] = -t * v;
#endif
                const double b = t - (row == 0 ? u : v);
                for (int i = 0; i < NPARAM; ++i) {
                    for (int j = 0; j < NPARAM; ++j) N[i][j] += a[i] * a[j];
                    N[i][NPARAM] += a[i] * b;
                }
            }
        }
        // Gaussian elimination with partial pivoting
        for (int c = 0; c < NPARAM; ++c) {
            int piv = c;
            for (int r = c + 1; r < NPARAM; ++r)
                if (fabs(N[r][c]) > fabs(N[piv][c])) piv = r;
            if (piv != c)
                for (int j = 0; j <= NPARAM; ++j) {
                    const double s = N[c][j];
                    N[c][j] = N[piv][j];
                    N[piv][j] = s;
                }
            for (int r = c + 1; r < NPARAM; ++r) {
                const double f = N[r][c] / N[c][c];
                for (int j = c; j <= NPARAM; ++j) N[r][j] -= f * N[c][j];
            }
        }
        double x[NPARAM];
        for (int r = NPARAM - 1; r >= 0; --r) {
            double s = N[r][NPARAM];
            for (int j = r + 1; j < NPARAM; ++j) s -= N[r][j] * x[j];
            x[r] = s / N[r][r];
        }
        H[0] = 1.0 + x[0]; H[1] = x[1]; H[2] = x[2];
        H[3] = x[3]; H[4] = 1.0 + x[4]; H[5] = x[5];
#if NPARAM == 8
        H[6] = x[6]; H[7] = x[7];
#else
        H[6] = 0.0; H[7] = 0.0;
#endif
        H[8] = 1.0;
        if (!enough) break;  // nothing is dropped: the warp is NaN
        for (int k = 0; k < m; ++k) {
            const double u = uv[2 * k], v = uv[2 * k + 1];
            const double den = H[6] * u + H[7] * v + H[8];
            const double du = (H[0] * u + H[1] * v + H[2]) / den - (used[k] ? q[2 * k] : 0.0);
            const double dv = (H[3] * u + H[4] * v + H[5]) / den - (used[k] ? q[2 * k + 1] : 0.0);
            res[k] = hypot(du, dv);
        }
        // median of the used residuals: the row sorted with the unused ones as +inf
        double s[MAXM];
        for (int k = 0; k < m; ++k) {
            const double val = used[k] ? res[k] : FIT_INF;
            int j = k;
            while (j > 0 && before(val, s[j - 1])) {
                s[j] = s[j - 1];
                --j;
            }
            s[j] = val;
        }
        const double med = count > 0 ? 0.5 * (s[max((count - 1) / 2, 0)] + s[max(count / 2, 0)]) : 0.0;
        const double a = reject * (med / 1.1774100225154747);
        const double thr = isnan(a) ? a : fmax(a, floor_);  // NaN stays NaN, as xp.maximum
        int worst = 0;
        double worst_res = -1.0;
        for (int k = 0; k < m; ++k) {
            const double val = used[k] ? res[k] : -1.0;
            if (isnan(val)) { worst = k; worst_res = val; break; }
            if (val > worst_res) { worst = k; worst_res = val; }
        }
        if (!(worst_res > thr && count > NEED + 1)) break;
        used[worst] = false;
        --count;
    }
    // A singular system (every used point on one line) leaves NaN in the solution: no warp.
    bool ok = enough;
    for (int k = 0; k < 9; ++k) ok = ok && isfinite(H[k]);
    double* h = warp + 9LL * p;
    for (int k = 0; k < 9; ++k) h[k] = ok ? H[k] : FIT_NAN;
    for (int k = 0; k < m; ++k) used_out[(long long)m * p + k] = used[k] && ok;
}
