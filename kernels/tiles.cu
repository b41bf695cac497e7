// Cut ROIs out of a batch of patterns and prepare them for the FFT in one pass
// over the data: zero mean, window, energy, status. The output is the FFT input
// buffer itself (tiles of h x w inside Ny x Nx frames whose padding the caller keeps
// at zero), so no separate padding copy is made.
#include "common.cuh"

// Status codes, as ebsdxc/status.py.
#define ST_OK 0
#define ST_CONSTANT 2
#define ST_NOT_FINITE 3

template <typename T>
__global__ void prepare_tiles(const T* __restrict__ patterns, int H, int W,
                              const int* __restrict__ origins,  // (n_roi, 2): x0, y0
                              int n_roi, int h, int w,
                              const float* __restrict__ window,  // (h, w)
                              float* __restrict__ out, int Ny, int Nx,  // (B * n_roi, Ny, Nx)
                              float* __restrict__ energy,  // (B * n_roi,)
                              unsigned char* __restrict__ status) {
    __shared__ double sred[32];
    __shared__ float fred[32];
    const long long t = blockIdx.x;
    const int b = (int)(t / n_roi), k = (int)(t % n_roi);
    const int x0 = origins[2 * k], y0 = origins[2 * k + 1];
    const T* p = patterns + (long long)b * H * W + (long long)y0 * W + x0;
    float* o = out + t * (long long)Ny * Nx;
    const int npx = h * w;

    double s = 0.0;
    float bad = 0.0f;
    for (int i = threadIdx.x; i < npx; i += blockDim.x) {
        const int yy = i / w, xx = i - yy * w;
        const float v = (float)p[yy * W + xx];
        if (isfinite(v)) { s += v; } else { bad = 1.0f; }
    }
    s = block_sum(s, sred);
    bad = block_max(bad, fred);
    const float mean = (float)(s / npx);

    double e = 0.0;
    for (int i = threadIdx.x; i < npx; i += blockDim.x) {
        const int yy = i / w, xx = i - yy * w;
        const float v = bad > 0.0f ? 0.0f : ((float)p[yy * W + xx] - mean) * window[i];
        o[yy * Nx + xx] = v;
        e += (double)v * v;
    }
    e = block_sum(e, sred);
    // Same rule as ebsdxc.preprocess.prepare_tiles: only rounding noise left after the mean.
    const bool constant = e <= 1e-10 * (double)npx * (double)mean * mean + 1e-30;
    const unsigned char code = bad > 0.0f ? ST_NOT_FINITE : (constant ? ST_CONSTANT : ST_OK);
    if (code != ST_OK) {  // unusable tile: correlate zeros, as the NumPy path does
        for (int i = threadIdx.x; i < npx; i += blockDim.x) {
            const int yy = i / w, xx = i - yy * w;
            o[yy * Nx + xx] = 0.0f;
        }
    }
    if (threadIdx.x == 0) {
        energy[t] = (float)e;
        status[t] = code;
    }
}
