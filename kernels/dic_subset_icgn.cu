// The whole IC-GN of DIC subsets with the affine shape function, one block per subset, in one
// launch: the template (reference values at the subset's pixels, their gradients from the
// reference's cubic B-spline), its constants and Hessian, then the iterations (warp, sample the
// frame's B-spline, ZNSSD step, inverse-compositional update, convergence) without leaving the
// kernel. Mirrors ebsdxc/icgn.py (make_templates + register, affine, weights 1, max_outside 0);
// tests compare the two (tests/test_subset_icgn.py).
//
// Prelude: HALF (subset = 2 HALF + 1 px). Sums in double, pixel data in shared memory (float).
// Reductions go through block_sum: a fixed tree, so results do not depend on timing.
#include "common.cuh"
#include "bspline.cuh"

#define SIDE (2 * HALF + 1)
#define NPIX (SIDE * SIDE)

// status codes as ebsdxc.icgn (ICGN_*), plus NO_CONTRAST for a constant reference subset
#define S_CONVERGED 0
#define S_MAX_ITERATIONS 1
#define S_FAILED 2
#define S_LEFT_IMAGE 3
#define S_NO_CONTRAST 5

__device__ __forceinline__ float coef_at(const float* __restrict__ c, int y, int x, int h, int w) {
    return __ldg(c + (long long)mirror(y, h) * w + mirror(x, w));
}

extern "C" __global__ void dic_subset_icgn(
    const float* __restrict__ ref, const float* __restrict__ ref_coef, const float* __restrict__ coef,
    const int height, const int width, const int* __restrict__ centre, const double* __restrict__ origin,
    const double scale, const double* __restrict__ initial, const int max_iterations, const double tolerance,
    double* __restrict__ out_params, float* __restrict__ out_zncc, short* __restrict__ out_iterations,
    unsigned char* __restrict__ out_status) {
    extern __shared__ float pix[];  // u, v, f (zero-mean), fu, fv: NPIX each
    float* su = pix;
    float* sv = pix + NPIX;
    float* sf = pix + 2 * NPIX;
    float* sfu = pix + 3 * NPIX;
    float* sfv = pix + 4 * NPIX;
    __shared__ double red[32];
    __shared__ double hinv[36], a[6], cJ[6], p[6], dfs, stop_flag;

    const int t = blockIdx.x;
    const int cx = centre[2 * t], cy = centre[2 * t + 1];
    const double ox = origin[2 * t], oy = origin[2 * t + 1];

    // ---- template: values, exact B-spline gradients at the nodes (ebsdxc.icgn._gradients)
    double sum_f = 0.0;
    for (int i = threadIdx.x; i < NPIX; i += blockDim.x) {
        const int x = cx + i % SIDE - HALF, y = cy + i / SIDE - HALF;
        const float f = ref[(long long)y * width + x];
        double sm[2], sn[2];
        for (int k = 0; k < 2; ++k) {
            const int d = 2 * k - 1;
            sm[k] = ((double)coef_at(ref_coef, y - 1, x + d, height, width) +
                     4.0 * coef_at(ref_coef, y, x + d, height, width) +
                     coef_at(ref_coef, y + 1, x + d, height, width)) / 6.0;
            sn[k] = ((double)coef_at(ref_coef, y + d, x - 1, height, width) +
                     4.0 * coef_at(ref_coef, y + d, x, height, width) +
                     coef_at(ref_coef, y + d, x + 1, height, width)) / 6.0;
        }
        su[i] = (float)((x - ox) / scale);
        sv[i] = (float)((y - oy) / scale);
        sfu[i] = (float)((sm[1] - sm[0]) / 2.0 * scale);
        sfv[i] = (float)((sn[1] - sn[0]) / 2.0 * scale);
        sf[i] = f;
        sum_f += f;
    }
    const double fbar = block_sum(sum_f, red) / NPIX;
    // zero-mean in float32 as make_templates rounds it, then the mean of the rounded values removed
    double s2 = 0.0;
    for (int i = threadIdx.x; i < NPIX; i += blockDim.x) {
        sf[i] = (float)(sf[i] - fbar);
        s2 += sf[i];
    }
    const double fbar2 = block_sum(s2, red) / NPIX;
    double acc[33];
    for (int k = 0; k < 33; ++k) acc[k] = 0.0;
    for (int i = threadIdx.x; i < NPIX; i += blockDim.x) {
        sf[i] = (float)((double)sf[i] - fbar2);
        const double u = su[i], v = sv[i], fu = sfu[i], fv = sfv[i], fc = sf[i];
        const double J[6] = {fu * u, fu * v, fu, fv * u, fv * v, fv};
        int k = 0;
        for (int r = 0; r < 6; ++r)
            for (int c = r; c < 6; ++c) acc[k++] += J[r] * J[c];
        for (int r = 0; r < 6; ++r) {
            acc[21 + r] += J[r] * fc;
            acc[27 + r] += J[r];
        }
    }
    double dff = 0.0;
    for (int i = threadIdx.x; i < NPIX; i += blockDim.x) dff += (double)sf[i] * sf[i];
    const double df2 = block_sum(dff, red);
    double tot[33];
    for (int k = 0; k < 33; ++k) tot[k] = block_sum(acc[k], red);

    if (threadIdx.x == 0) {
        dfs = sqrt(df2);
        stop_flag = 0.0;
        // Gauss-Jordan inverse of the symmetric 6x6 Hessian
        double m[6][12];
        int k = 0;
        for (int r = 0; r < 6; ++r)
            for (int c = r; c < 6; ++c) { m[r][c] = tot[k]; m[c][r] = tot[k]; ++k; }
        for (int r = 0; r < 6; ++r)
            for (int c = 0; c < 6; ++c) m[r][6 + c] = (r == c) ? 1.0 : 0.0;
        bool singular = false;
        for (int col = 0; col < 6; ++col) {
            int piv = col;
            for (int r = col + 1; r < 6; ++r)
                if (fabs(m[r][col]) > fabs(m[piv][col])) piv = r;
            if (!(fabs(m[piv][col]) > 0.0)) { singular = true; break; }
            if (piv != col)
                for (int c = 0; c < 12; ++c) { const double tmp = m[col][c]; m[col][c] = m[piv][c]; m[piv][c] = tmp; }
            const double d = m[col][col];
            for (int c = 0; c < 12; ++c) m[col][c] /= d;
            for (int r = 0; r < 6; ++r) {
                if (r == col) continue;
                const double fct = m[r][col];
                for (int c = 0; c < 12; ++c) m[r][c] -= fct * m[col][c];
            }
        }
        for (int r = 0; r < 6; ++r)
            for (int c = 0; c < 6; ++c) hinv[6 * r + c] = m[r][6 + c];
        for (int r = 0; r < 6; ++r) { a[r] = tot[21 + r]; cJ[r] = tot[27 + r]; p[r] = initial[6 * t + r]; }
        if (!(dfs > 0.0)) stop_flag = 2.0;            // no contrast
        else if (singular) stop_flag = 3.0;           // no gradient
        else if (!isfinite(p[0] + p[1] + p[2] + p[3] + p[4] + p[5])) stop_flag = 4.0;  // no start
    }
    __syncthreads();
    if (stop_flag != 0.0) {
        if (threadIdx.x == 0) {
            for (int r = 0; r < 6; ++r) out_params[6 * t + r] = nan("");
            out_zncc[t] = nanf("");
            out_iterations[t] = 0;
            out_status[t] = stop_flag == 2.0 ? S_NO_CONTRAST : (stop_flag == 3.0 ? S_FAILED : 4);
        }
        return;
    }
    // the template's bounding box, where convergence is measured
    const double u0 = (cx - HALF - ox) / scale, u1 = (cx + HALF - ox) / scale;
    const double v0 = (cy - HALF - oy) / scale, v1 = (cy + HALF - oy) / scale;

    unsigned char status = S_MAX_ITERATIONS;
    double zncc = nan("");
    int it = 0;
    for (; it < max_iterations; ++it) {
        const double p0 = p[0], p1 = p[1], p2 = p[2], p3 = p[3], p4 = p[4], p5 = p[5];
        double g1 = 0.0, g2 = 0.0, gJ[6] = {0, 0, 0, 0, 0, 0}, gf = 0.0, out = 0.0;
        for (int i = threadIdx.x; i < NPIX; i += blockDim.x) {
            const double u = su[i], v = sv[i];
            const double x = ox + scale * ((1.0 + p0) * u + p1 * v + p2);
            const double y = oy + scale * (p3 * u + (1.0 + p4) * v + p5);
            if (!(x >= 0.0 && x <= width - 1.0 && y >= 0.0 && y <= height - 1.0)) {
                out += 1.0;
                continue;
            }
            const double g = bspline_sample(coef, x, y, height, width);
            const double fu = sfu[i], fv = sfv[i];
            g1 += g;
            g2 += g * g;
            gJ[0] += g * fu * u; gJ[1] += g * fu * v; gJ[2] += g * fu;
            gJ[3] += g * fv * u; gJ[4] += g * fv * v; gJ[5] += g * fv;
            gf += g * (double)sf[i];
        }
        const double n_out = block_sum(out, red);
        const double S0 = block_sum(g1, red), S1 = block_sum(g2, red), Sf = block_sum(gf, red);
        double SJ[6];
        for (int k = 0; k < 6; ++k) SJ[k] = block_sum(gJ[k], red);
        if (threadIdx.x == 0) {
            stop_flag = 0.0;
            const double gbar = S0 / NPIX;
            const double dg = sqrt(fmax(S1 - NPIX * gbar * gbar, 0.0));
            zncc = Sf / (dfs * dg);
            if (n_out > 0.0) {
                stop_flag = 3.0;  // left the image (max_outside 0): the warp stays where it was
            } else {
                double b[6], dp[6];
                for (int r = 0; r < 6; ++r) b[r] = a[r] - (dfs / dg) * (SJ[r] - gbar * cJ[r]);
                for (int r = 0; r < 6; ++r) {
                    double s = 0.0;
                    for (int c = 0; c < 6; ++c) s += hinv[6 * r + c] * b[c];
                    dp[r] = -s;
                }
                // H <- H dH^-1 for affine warps: A x + t with A = I + [[dp0 dp1][dp3 dp4]], t = (dp2, dp5)
                const double A00 = 1.0 + dp[0], A01 = dp[1], A10 = dp[3], A11 = 1.0 + dp[4];
                const double det = A00 * A11 - A01 * A10;
                const double I00 = A11 / det, I01 = -A01 / det, I10 = -A10 / det, I11 = A00 / det;
                const double it0 = -(I00 * dp[2] + I01 * dp[5]), it1 = -(I10 * dp[2] + I11 * dp[5]);
                const double H00 = 1.0 + p0, H01 = p1, H10 = p3, H11 = 1.0 + p4;
                const double N00 = H00 * I00 + H01 * I10, N01 = H00 * I01 + H01 * I11;
                const double N10 = H10 * I00 + H11 * I10, N11 = H10 * I01 + H11 * I11;
                const double n2 = H00 * it0 + H01 * it1 + p2, n5 = H10 * it0 + H11 * it1 + p5;
                // the largest move of a corner of the template's bounding box, px
                double move = 0.0;
                const double cu[4] = {u0, u1, u1, u0}, cv[4] = {v0, v0, v1, v1};
                for (int k = 0; k < 4; ++k) {
                    const double xo = H00 * cu[k] + H01 * cv[k] + p2, yo = H10 * cu[k] + H11 * cv[k] + p5;
                    const double xn = N00 * cu[k] + N01 * cv[k] + n2, yn = N10 * cu[k] + N11 * cv[k] + n5;
                    move = fmax(move, sqrt((xn - xo) * (xn - xo) + (yn - yo) * (yn - yo)));
                }
                move *= scale;
                const bool finite = isfinite(N00 + N01 + N10 + N11 + n2 + n5) && isfinite(move) && dg > 0.0;
                if (!finite) {
                    stop_flag = 2.0;
                } else {
                    p[0] = N00 - 1.0; p[1] = N01; p[2] = n2; p[3] = N10; p[4] = N11 - 1.0; p[5] = n5;
                    if (move < tolerance) stop_flag = 1.0;
                }
            }
        }
        __syncthreads();
        const double sf_ = stop_flag;
        if (sf_ != 0.0) {
            status = sf_ == 1.0 ? S_CONVERGED : (sf_ == 2.0 ? S_FAILED : S_LEFT_IMAGE);
            ++it;
            break;
        }
    }
    if (threadIdx.x == 0) {
        const bool nan_warp = status == S_FAILED || status == S_LEFT_IMAGE;
        for (int r = 0; r < 6; ++r) out_params[6 * t + r] = nan_warp ? nan("") : p[r];
        out_zncc[t] = (float)zncc;
        out_iterations[t] = (short)it;
        out_status[t] = status;
    }
}
