// Peak search and 3x3 subpixel fit fused in one kernel: one block per correlation
// map, so the maps never leave the device. Mirrors ebsdxc/peaks.py (integer_peak,
// neighbourhood, window compensation, fit_3x3); tests compare the two.
#include "common.cuh"

#define M_NONE 0
#define M_PARABOLIC 1
#define M_GAUSSIAN 2
#define M_QUADRATIC 3

__device__ __forceinline__ double parabolic(double cm, double c0, double cp) {
    const double den = cm - 2.0 * c0 + cp;
    return den < 0.0 ? 0.5 * (cm - cp) / den : 0.0;
}

__device__ __forceinline__ double clip1(double d) {
    if (!isfinite(d)) return 0.0;
    return d < -1.0 ? -1.0 : (d > 1.0 ? 1.0 : d);
}

template <int METHOD>
__global__ void find_peaks(const float* __restrict__ corr, int Ny, int Nx, int ry, int rx,
                           const double* __restrict__ wy,  // (Ny,) window autocorrelation by lag mod Ny, or null
                           const double* __restrict__ wx,  // (Nx,)
                           double* __restrict__ out_y, double* __restrict__ out_x,
                           float* __restrict__ out_value, unsigned char* __restrict__ out_border,
                           long long* __restrict__ out_ly, long long* __restrict__ out_lx) {
    __shared__ float sval[32];
    __shared__ int sidx[32];
    const long long t = blockIdx.x;
    const float* c = corr + t * (long long)Ny * Nx;
    const int rw = 2 * rx + 1, n = (2 * ry + 1) * rw;

    // First maximum in row-major order over the searched lags, as numpy.argmax.
    float best = EBSDXC_NEG_INF;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int iy = i / rw, ix = i - iy * rw;
        int yy = iy - ry, xx = ix - rx;
        yy += yy < 0 ? Ny : 0;
        xx += xx < 0 ? Nx : 0;
        const float v = c[yy * Nx + xx];
        if (v > best || (v == best && i < bi)) { best = v; bi = i; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float v2 = __shfl_down_sync(0xffffffffu, best, o);
        const int i2 = __shfl_down_sync(0xffffffffu, bi, o);
        if (v2 > best || (v2 == best && i2 < bi)) { best = v2; bi = i2; }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { sval[warp] = best; sidx[warp] = bi; }
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int wi = 1; wi < (int)(blockDim.x >> 5); ++wi) {
        if (sval[wi] > best || (sval[wi] == best && sidx[wi] < bi)) { best = sval[wi]; bi = sidx[wi]; }
    }
    const int ly = bi / rw - ry, lx = bi % rw - rx;
    out_value[t] = best;
    out_border[t] = (abs(ly) == ry || abs(lx) == rx) ? 1 : 0;
    out_ly[t] = ly;
    out_lx[t] = lx;
    double dy = 0.0, dx = 0.0;
    if (METHOD != M_NONE) {
        double v[3][3];
        for (int a = 0; a < 3; ++a) {
            const int yy = ((ly + a - 1) % Ny + Ny) % Ny;
            for (int q = 0; q < 3; ++q) {
                const int xx = ((lx + q - 1) % Nx + Nx) % Nx;
                double val = c[yy * Nx + xx];
                if (wy != nullptr) val /= wy[yy] * wx[xx];
                v[a][q] = val;
            }
        }
        dx = parabolic(v[1][0], v[1][1], v[1][2]);
        dy = parabolic(v[0][1], v[1][1], v[2][1]);
        if (METHOD == M_GAUSSIAN) {
            bool pos = v[1][0] > 0 && v[1][1] > 0 && v[1][2] > 0 && v[0][1] > 0 && v[2][1] > 0;
            if (pos) {
                dx = parabolic(log(v[1][0]), log(v[1][1]), log(v[1][2]));
                dy = parabolic(log(v[0][1]), log(v[1][1]), log(v[2][1]));
            }
        } else if (METHOD == M_QUADRATIC) {
            // Least-squares quadratic a + b x + c y + d x^2 + e xy + f y^2 on the 3x3 grid.
            double sx = 0, sy = 0, sxy = 0, sxx = 0, syy = 0, s = 0;
            for (int a = 0; a < 3; ++a)
                for (int q = 0; q < 3; ++q) {
                    const double val = v[a][q];
                    const int x = q - 1, y = a - 1;
                    s += val; sx += x * val; sy += y * val; sxy += x * y * val;
                    sxx += x * x * val; syy += y * y * val;
                }
            const double b = sx / 6.0, cc = sy / 6.0, e = sxy / 4.0;
            const double d = sxx / 2.0 - s / 3.0, f = syy / 2.0 - s / 3.0;
            const double det = 4.0 * d * f - e * e;
            if (det > 0.0 && d < 0.0) {
                const double qx = (e * cc - 2.0 * f * b) / det, qy = (e * b - 2.0 * d * cc) / det;
                if (fabs(qx) <= 1.0 && fabs(qy) <= 1.0) { dx = qx; dy = qy; }
            }
        }
        dx = clip1(dx);
        dy = clip1(dy);
    }
    out_y[t] = ly + dy;
    out_x[t] = lx + dx;
}
