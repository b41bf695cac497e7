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
// partial row each, summed by the caller in a fixed order, so results do not depend on the
// order threads finish (no atomics).
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


extern "C" __global__ void icgn_sums(
    const float* __restrict__ coef, const int height, const int width,
    const float* __restrict__ tu, const float* __restrict__ tv, const float* __restrict__ tf,
    const float* __restrict__ tfu, const float* __restrict__ tfv, const float* __restrict__ tw,
    const double* __restrict__ origin, const double* __restrict__ scale, const int n_pix,
    const int* __restrict__ tidx, const int* __restrict__ midx, const double* __restrict__ warp,
    double* __restrict__ partial) {
    __shared__ double smem[32];
    const int p = blockIdx.y;
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
