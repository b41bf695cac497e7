// One IC-GN iteration's sums, fused: warp every template pixel into its image, sample the
// image's cubic B-spline there and accumulate the weighted sums the Gauss-Newton step needs.
// Mirrors ebsdxc/icgn.py (_sums_host); tests compare the two in float64.
//
// Prelude: NPARAM (6 affine, 8 homography, 12 quadratic). NSUM = NPARAM + 4:
//   [0] sum w g   [1] sum w g^2   [2 .. 2+NPARAM) sum w J_k g   [2+NPARAM] sum w f g
//   [3+NPARAM] sum w (pixels that left the image)
// Pixels warped off the image are left out of every sum but the last; the caller restricts
// the template's own constants to the same pixels (ebsdxc.icgn._inside_constants).
// One block row per problem (blockIdx.y); the blocks of a row split its pixels and write one
// partial row each, summed in a fixed order (by icgn_update, or by the caller), so results do
// not depend on the order threads finish (no atomics). Problems whose ``active`` flag is 0 are
// skipped (``active`` may be null: all run).
//
// icgn_update (3x3 warps only) is the rest of an iteration, one thread per problem: the
// Gauss-Newton step from the sums, the inverse-compositional update, the convergence test and
// the problem's status; it mirrors ebsdxc/icgn.py (_step). A problem with pixels off the image
// needs its template's constants over the pixels still inside (ebsdxc.icgn._inside_constants):
// it is flagged in ``needs_inside`` and left to the caller.
#include "common.cuh"
#include "bspline.cuh"

#define NSUM (NPARAM + 4)
// A 3x3 warp is read as its 9 entries; a quadratic one as the 12 entries of the rows of its
// 6x6 matrix that give u' and v' from (u^2, u v, v^2, u, v, 1) (ebsdxc.icgn._kernel_warp).
#if NPARAM == 12
#define WARP_STRIDE 12
#else
#define WARP_STRIDE 9
#endif


// 64 registers (8 blocks of 128 per SM): twice the resident warps of the 106 it takes unbounded,
// and 1.4x faster at 512x512 (H200, benchmarks/results/s30-2026-11-28/call4).
extern "C" __global__ void __launch_bounds__(128, 8) icgn_sums(
    const float* __restrict__ coef, const int height, const int width,
    const float* __restrict__ tu, const float* __restrict__ tv, const float* __restrict__ tf,
    const float* __restrict__ tfu, const float* __restrict__ tfv, const float* __restrict__ tw,
    const double* __restrict__ origin, const double* __restrict__ scale, const int n_pix,
    const int* __restrict__ tidx, const int* __restrict__ midx, const double* __restrict__ warp,
    const unsigned char* __restrict__ active, double* __restrict__ partial) {
    __shared__ double smem[32];
    const int p = blockIdx.y;
    if (active != nullptr && !active[p]) return;  // the whole block: no barrier is left waiting
    const long long t = tidx[p];
    const float* img = coef + (long long)midx[p] * height * width;
    const double* h = warp + (long long)WARP_STRIDE * p;
    const double ox = origin[2 * t], oy = origin[2 * t + 1], sc = scale[t];
    double acc[NSUM];
#pragma unroll
    for (int k = 0; k < NSUM; ++k) acc[k] = 0.0;

    const long long base = t * n_pix;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pix; i += gridDim.x * blockDim.x) {
        const double w = tw[base + i];
        if (w == 0.0) continue;
        const double u = tu[base + i], v = tv[base + i];
#if NPARAM == 12
        const double uu = u * u, uv = u * v, vv = v * v;
        const double up = h[0] * uu + h[1] * uv + h[2] * vv + h[3] * u + h[4] * v + h[5];
        const double vp = h[6] * uu + h[7] * uv + h[8] * vv + h[9] * u + h[10] * v + h[11];
#else
        const double den = h[6] * u + h[7] * v + h[8];
        const double up = (h[0] * u + h[1] * v + h[2]) / den;
        const double vp = (h[3] * u + h[4] * v + h[5]) / den;
#endif
        double x = ox + sc * up, y = oy + sc * vp;
        if (!(x >= 0.0 && x <= width - 1.0 && y >= 0.0 && y <= height - 1.0)) {
            acc[3 + NPARAM] += w;  // NaN coordinates land here too
            continue;
        }
        const double g = bspline_sample(img, x, y, height, width);
        const double fu = tfu[base + i], fv = tfv[base + i];
        const double wg = w * g;
        acc[0] += wg;
        acc[1] += wg * g;
        // J = grad f . dW/dp at the identity (ebsdxc.icgn._jacobian)
        acc[2] += wg * fu * u;
        acc[3] += wg * fu * v;
        acc[4] += wg * fu;
        acc[5] += wg * fv * u;
        acc[6] += wg * fv * v;
        acc[7] += wg * fv;
#if NPARAM == 8
        const double radial = fu * u + fv * v;
        acc[8] -= wg * radial * u;
        acc[9] -= wg * radial * v;
#elif NPARAM == 12
        acc[8] += wg * fu * 0.5 * uu;
        acc[9] += wg * fu * uv;
        acc[10] += wg * fu * 0.5 * vv;
        acc[11] += wg * fv * 0.5 * uu;
        acc[12] += wg * fv * uv;
        acc[13] += wg * fv * 0.5 * vv;
#endif
        acc[2 + NPARAM] += wg * (double)tf[base + i];
    }
    double* dst = partial + ((long long)p * gridDim.x + blockIdx.x) * NSUM;
#pragma unroll
    for (int k = 0; k < NSUM; ++k) {
        const double s = block_sum(acc[k], smem);
        if (threadIdx.x == 0) dst[k] = s;
    }
}


#if NPARAM != 12
// ebsdxc.icgn status codes
#define ICGN_CONVERGED 0
#define ICGN_FAILED 2

// (x, y) of the normalised point (u, v) under the 3x3 warp h (row-major).
__device__ __forceinline__ void warp_point(const double* h, double u, double v, double& x, double& y) {
    const double den = h[6] * u + h[7] * v + h[8];
    x = (h[0] * u + h[1] * v + h[2]) / den;
    y = (h[3] * u + h[4] * v + h[5]) / den;
}

extern "C" __global__ void icgn_update(
    const double* __restrict__ partial, const int n_blocks, const int* __restrict__ tidx, const int n_problems,
    const double* __restrict__ sum_w, const double* __restrict__ delta_f, const double* __restrict__ ta,
    const double* __restrict__ tc, const double* __restrict__ hinv, const double* __restrict__ corners,
    const double* __restrict__ scale, const double tolerance, double* __restrict__ warp,
    unsigned char* __restrict__ status, short* __restrict__ iterations, double* __restrict__ zncc,
    double* __restrict__ outside, unsigned char* __restrict__ active, unsigned char* __restrict__ needs_inside,
    int* __restrict__ counts) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n_problems || !active[p]) return;
    double S[NSUM];
#pragma unroll
    for (int k = 0; k < NSUM; ++k) S[k] = 0.0;
    for (int b = 0; b < n_blocks; ++b) {
        const double* row = partial + ((long long)p * n_blocks + b) * NSUM;
#pragma unroll
        for (int k = 0; k < NSUM; ++k) S[k] += row[k];
    }
    const int t = tidx[p];
    const double sw = sum_w[t];
    const double out = S[3 + NPARAM] / sw;
    if (out > 0.0) {  // constants over the pixels left inside: the caller's step
        needs_inside[p] = 1;
        atomicAdd(counts + 1, 1);
        return;
    }
    const double df = delta_f[t];
    const double gbar = S[0] / sw;
    const double dg = sqrt(fmax(S[1] - sw * gbar * gbar, 0.0));
    zncc[p] = S[2 + NPARAM] / (df * dg);
    outside[p] = out;
    double b[NPARAM];
#pragma unroll
    for (int k = 0; k < NPARAM; ++k) b[k] = ta[t * NPARAM + k] - (df / dg) * (S[2 + k] - gbar * tc[t * NPARAM + k]);
    double dp[NPARAM];
    bool finite = true;
#pragma unroll
    for (int i = 0; i < NPARAM; ++i) {
        const double* hi = hinv + ((long long)t * NPARAM + i) * NPARAM;
        double s = 0.0;
#pragma unroll
        for (int k = 0; k < NPARAM; ++k) s += hi[k] * b[k];
        dp[i] = -s;
        finite = finite && isfinite(dp[i]);
    }
    double* h = warp + 9LL * p;
    double hn[9];
    bool bad = !finite;
    if (finite) {
        // dH of the step (ebsdxc.icgn.parameters_to_warp), its inverse by the adjugate, H dH^-1
        const double d00 = 1.0 + dp[0], d01 = dp[1], d02 = dp[2], d10 = dp[3], d11 = 1.0 + dp[4], d12 = dp[5];
#if NPARAM == 8
        const double d20 = dp[6], d21 = dp[7];
#else
        const double d20 = 0.0, d21 = 0.0;
#endif
        const double d22 = 1.0;
        const double c00 = d11 * d22 - d12 * d21, c01 = d02 * d21 - d01 * d22, c02 = d01 * d12 - d02 * d11;
        const double c10 = d12 * d20 - d10 * d22, c11 = d00 * d22 - d02 * d20, c12 = d02 * d10 - d00 * d12;
        const double c20 = d10 * d21 - d11 * d20, c21 = d01 * d20 - d00 * d21, c22 = d00 * d11 - d01 * d10;
        const double det = d00 * c00 + d01 * c10 + d02 * c20;
        const double inv[9] = {c00 / det, c01 / det, c02 / det, c10 / det, c11 / det, c12 / det,
                               c20 / det, c21 / det, c22 / det};
#pragma unroll
        for (int i = 0; i < 3; ++i)
#pragma unroll
            for (int j = 0; j < 3; ++j)
                hn[3 * i + j] = h[3 * i] * inv[j] + h[3 * i + 1] * inv[3 + j] + h[3 * i + 2] * inv[6 + j];
        const double n22 = hn[8];
#pragma unroll
        for (int k = 0; k < 9; ++k) {
            hn[k] /= n22;
            bad = bad || !isfinite(hn[k]);
        }
    }
    double move = 0.0;
    if (!bad) {
        const double* cn = corners + 8LL * t;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            double x1, y1, x0, y0;
            warp_point(hn, cn[2 * k], cn[2 * k + 1], x1, y1);
            warp_point(h, cn[2 * k], cn[2 * k + 1], x0, y0);
            move = fmax(move, hypot(x1 - x0, y1 - y0));  // fmax drops a NaN: tested below
            bad = bad || !isfinite(x1) || !isfinite(y1) || !isfinite(x0) || !isfinite(y0);
        }
        move *= scale[t];
    }
    bad = bad || !isfinite(move) || !(dg > 0.0) || !(df > 0.0);
    iterations[p] += 1;
    if (bad) {
        status[p] = ICGN_FAILED;
        active[p] = 0;
        return;
    }
#pragma unroll
    for (int k = 0; k < 9; ++k) h[k] = hn[k];
    if (move < tolerance) {
        status[p] = ICGN_CONVERGED;
        active[p] = 0;
        return;
    }
    atomicAdd(counts, 1);
}
#endif
