// Cubic B-spline coefficients of images (mirror boundaries), one axis per launch: the
// interpolation prefilter of scipy.ndimage.spline_filter1d(order=3, mode="mirror"), which
// ebsdxc/icgn.py (spline_coefficients) runs on the CPU.
//
// The exact prefilter is the infinite filter c[i] = sqrt(3) * sum_j z^|j| s[i + j] with
// z = sqrt(3) - 2 over the mirror-extended signal (the inverse of the sampled B-spline
// [1, 4, 1] / 6). Its taps fall as 0.268^|j|: cut at |j| <= TAPS = 14, the terms left out sum
// to under 1e-8 of the largest value, below float32's rounding, so this FIR gives the
// recursive filter's result; unlike the recursion, every output is independent, and a thread
// computes one. Accumulated in float64.
#include "bspline.cuh"

#define TAPS 14
#define SQRT3 1.7320508075688772
#define POLE (-0.2679491924311228)  // sqrt(3) - 2

// in, out: (n_images, height, width) row-major. Each thread computes QUAD consecutive outputs
// along the filter's axis from the QUAD + 2 TAPS inputs around them, held in registers (a
// quarter of the loads of one output a thread). along_x: filter each row (else each column;
// then a warp's threads take neighbouring columns, and every load is coalesced).
#define QUAD 4
#define SPAN (QUAD + 2 * TAPS)

template <typename T, typename U>
__global__ void spline_prefilter(const T* __restrict__ in, U* __restrict__ out, const long long n_quads,
                                 const int height, const int width, const int along_x) {
    const int n = along_x ? width : height;  // the filtered axis
    const int quads = (n + QUAD - 1) / QUAD;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n_quads;
         e += (long long)gridDim.x * blockDim.x) {
        long long line0;  // offset of the line's first element
        long long stride;
        int q;
        if (along_x) {
            q = (int)(e % quads);
            line0 = (e / quads) * width;
            stride = 1;
        } else {
            const int x = (int)(e % width);
            const long long r = e / width;
            q = (int)(r % quads);
            line0 = (r / quads) * height * width + x;
            stride = width;
        }
        const int p0 = q * QUAD;  // first output along the line
        double win[SPAN];
        if (p0 >= TAPS && p0 + QUAD + TAPS <= n) {
#pragma unroll
            for (int k = 0; k < SPAN; ++k) win[k] = (double)in[line0 + (p0 - TAPS + k) * stride];
        } else {
#pragma unroll
            for (int k = 0; k < SPAN; ++k) win[k] = (double)in[line0 + mirror(p0 - TAPS + k, n) * stride];
        }
#pragma unroll
        for (int o = 0; o < QUAD; ++o) {
            if (p0 + o >= n) break;
            double acc = win[TAPS + o], zj = 1.0;
#pragma unroll
            for (int j = 1; j <= TAPS; ++j) {
                zj *= POLE;
                acc += zj * (win[TAPS + o - j] + win[TAPS + o + j]);
            }
            out[line0 + (long long)(p0 + o) * stride] = (U)(SQRT3 * acc);
        }
    }
}
