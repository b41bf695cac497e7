// Cubic B-spline sampling helpers shared by the IC-GN kernels (icgn.cu, dic_subset_icgn.cu);
// they mirror ebsdxc/icgn.py (_mirror, _bspline_weights).
#pragma once

// Mirror an index about the edge pixels (scipy.ndimage's "mirror": -1 -> 1, n -> n - 2).
__device__ __forceinline__ int mirror(int i, int n) {
    if (n == 1) return 0;
    const int period = 2 * (n - 1);
    i = i % period;
    if (i < 0) i += period;
    return i < n ? i : period - i;
}

// Cubic B-spline basis weights of the four taps at i0 - 1 .. i0 + 2 for fraction t.
__device__ __forceinline__ void bspline_weights(double t, double w[4]) {
    const double t2 = t * t, t3 = t2 * t, s = 1.0 - t;
    w[0] = s * s * s / 6.0;
    w[1] = (3.0 * t3 - 6.0 * t2 + 4.0) / 6.0;
    w[2] = (-3.0 * t3 + 3.0 * t2 + 3.0 * t + 1.0) / 6.0;
    w[3] = t3 / 6.0;
}

// The cubic B-spline of coefficients c (height x width, row-major) at (x, y), inside the image.
__device__ __forceinline__ double bspline_sample(const float* __restrict__ c, double x, double y, int height,
                                                 int width) {
    const double fx = floor(x), fy = floor(y);
    double wx[4], wy[4];
    bspline_weights(x - fx, wx);
    bspline_weights(y - fy, wy);
    const int ix = (int)fx - 1, iy = (int)fy - 1;
    int cols[4], rows[4];
    if (ix >= 0 && iy >= 0 && ix + 3 < width && iy + 3 < height) {  // most pixels: no mirroring
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            cols[a] = ix + a;
            rows[a] = iy + a;
        }
    } else {
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            cols[a] = mirror(ix + a, width);
            rows[a] = mirror(iy + a, height);
        }
    }
    double g = 0.0;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
        const float* row = c + (long long)rows[b] * width;
        double r = 0.0;
#pragma unroll
        for (int a = 0; a < 4; ++a) r += wx[a] * (double)__ldg(row + cols[a]);
        g += wy[b] * r;
    }
    return g;
}
