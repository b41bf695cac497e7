// Cut ROIs out of a batch of patterns and prepare them for the FFT in one pass
// over the data: zero mean, window, energy, status. The output is the FFT input
// buffer itself (tiles of h x w inside Ny x Nx frames whose padding the caller keeps
// at zero), so no separate padding copy is made. Without an output (out == nullptr) only
// the statistics are made, and each tile's mean: the fused engine then reads the patterns
// and prepares each value as it loads it (fftcorr.cu, FC_RAW), from the same float mean.
// prepare_tiles_shaped does the same for integer tiles of one shape, from a copy of the tile in
// shared memory (ebsdxc.engines.gpu_ops picks one kernel per size and dtype for both uses). Either also
// writes each prepared value in bf16 where `packed` is given: the tensor engine's right
// operand (tensorcorr.cu's packed layout), so that it need not read float32 tiles back.
#include "common.cuh"

// Where the bf16 copy of tile t goes: (h + 2 pad) rows of `row` 16-bit values each, value
// (y, x) at row y + pad; the rest (columns past w, rows of padding) the caller keeps zero.
struct Packed {
    unsigned short* p;
    int row, pad;
    __device__ __forceinline__ unsigned short* tile(long long t, int h) const {
        return p == nullptr ? nullptr : p + (t * (h + 2 * pad) + pad) * row;
    }
};

// bf16 of a finite float, rounded to nearest even (cvt.rn.bf16 without needing sm_80).
__device__ __forceinline__ unsigned short bf16_bits(float v) {
    const unsigned u = __float_as_uint(v);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Status codes, as ebsdxc/status.py.
#define ST_OK 0
#define ST_CONSTANT 2
#define ST_NOT_FINITE 3

// A lane's values x0, x0 + 32, x0 + 64, x0 + 96 of tile row r (0 past its width w), all
// loaded before any is used.
template <typename T>
__device__ __forceinline__ void lane_values(const T* __restrict__ r, int x0, int w, float (&v)[4]) {
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = x0 + 32 * u < w ? exact_float(r[x0 + 32 * u]) : 0.0f;
}

// The first value of the block's tile t (ROI t % n_roi of pattern t / n_roi; rows W apart). t is
// a block index, so an int: a 32-bit division, not a 64-bit one.
template <typename T>
__device__ __forceinline__ const T* tile_start(const T* __restrict__ patterns, int H, int W,
                                               const int* __restrict__ origins, int n_roi, int t) {
    const int b = t / n_roi, k = t - b * n_roi;
    return patterns + (long long)b * H * W + (long long)origins[2 * k + 1] * W + origins[2 * k];
}

// After the energy's block sum, in every thread: the status (the rule of
// ebsdxc.preprocess.prepare_tiles: only rounding noise left after the mean), zeros in the output
// frame o of an unusable tile (correlate zeros, as the NumPy path does), and from thread 0 the
// tile's energy, status and mean.
__device__ __forceinline__ void finish_tile(float* __restrict__ o, int w, int Nx, int npx, double e, float mean,
                                            float bad, long long t, float* __restrict__ energy,
                                            unsigned char* __restrict__ status, float* __restrict__ mean_out,
                                            unsigned short* __restrict__ pk = nullptr, int pk_row = 0) {
    const bool constant = e <= 1e-10 * (double)npx * (double)mean * mean + 1e-30;
    const unsigned char code = bad > 0.0f ? ST_NOT_FINITE : (constant ? ST_CONSTANT : ST_OK);
    if (code != ST_OK && (o != nullptr || pk != nullptr)) {
        for (int i = threadIdx.x; i < npx; i += blockDim.x) {
            const int yy = i / w, xx = i - yy * w;
            if (o != nullptr) o[yy * Nx + xx] = 0.0f;
            if (pk != nullptr) pk[yy * pk_row + xx] = 0;
        }
    }
    if (threadIdx.x == 0) {
        energy[t] = (float)e;
        status[t] = code;
        if (mean_out != nullptr) mean_out[t] = mean;
    }
}

template <typename T>
__global__ void prepare_tiles(const T* __restrict__ patterns, int H, int W,
                              const int* __restrict__ origins,  // (n_roi, 2): x0, y0
                              int n_roi, int h, int w,
                              const float* __restrict__ window,  // (h, w)
                              float* __restrict__ out, int Ny, int Nx,  // (B * n_roi, Ny, Nx)
                              float* __restrict__ energy,  // (B * n_roi,)
                              unsigned char* __restrict__ status,
                              float* __restrict__ mean_out,  // (B * n_roi,) or nullptr
                              unsigned short* __restrict__ packed_out, int packed_row, int packed_pad) {
    const Packed packed{packed_out, packed_row, packed_pad};
    __shared__ double sred[32];
    __shared__ float fred[32];
    const int t = blockIdx.x;
    const T* p = tile_start(patterns, H, W, origins, n_roi, t);
    float* o = out != nullptr ? out + (long long)t * Ny * Nx : nullptr;
    unsigned short* pk = packed.tile(t, h);
    const int npx = h * w;

    // A warp per tile row, its lanes' values four at a time (lane_values): a flat loop over
    // i = y w + x (a division per value, one load in flight) waited on memory latency (H100:
    // 1.25 ms for 512 patterns x 49 ROIs of 128x128, about 40% of the memory bandwidth).
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    double s = 0.0;
    float bad = 0.0f;
    for (int yy = warp; yy < h; yy += nwarps) {
        const T* r = p + (long long)yy * W;
        for (int x0 = lane; x0 < w; x0 += 4 * 32) {
            float v[4];
            lane_values(r, x0, w, v);
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                if (isfinite(v[u])) { s += v[u]; } else { bad = 1.0f; }
            }
        }
    }
    s = block_sum(s, sred);
    bad = block_max(bad, fred);
    const float mean = (float)(s / npx);

    double e = 0.0;
    for (int yy = warp; yy < h; yy += nwarps) {
        const T* r = p + (long long)yy * W;
        const float* wr = window + yy * w;
        for (int x0 = lane; x0 < w; x0 += 4 * 32) {
            float v[4];
            lane_values(r, x0, w, v);
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int xx = x0 + 32 * u;
                if (xx < w) {
                    const float q = bad > 0.0f ? 0.0f : (v[u] - mean) * wr[xx];
                    if (out != nullptr) o[yy * Nx + xx] = q;
                    if (pk != nullptr) pk[yy * packed.row + xx] = bf16_bits(q);
                    e += (double)q * q;
                }
            }
        }
    }
    e = block_sum(e, sred);
    finish_tile(o, w, Nx, npx, e, mean, bad, t, energy, status, mean_out, pk, packed.row);
}

// prepare_tiles for integer tiles of a shape fixed when compiling (TH x TW, NT threads, RU rows
// of a warp in flight), the tile read from global memory once: the mean's pass keeps it in shared
// memory (TH * TW values of T, the launch's dynamic shared memory) and the energy's pass reads it
// there. Overlapping ROIs of large patterns made a second global pass miss the L2 (H100, 128
// patterns of 1024x1024 x 49 ROIs of 256x256 uint16, statistics only: 1.19 ms with
// prepare_tiles, 0.75 ms from shared memory). With the bounds constant, the loops keep no
// per-value predicates or index sums: a version taking the shape at run time spent most of its
// instructions on them (Nsight Compute, H100, 512 x 86 uint16 tiles of 96x96: 14.3k warp
// instructions a tile, the ALU pipe the busiest, 91% of issue slots busy; about 7k here).
// The mean's sum runs in int per lane (exact, as the double sums of integers below 2^53 it
// replaces, so the same bits in any order; at most STAGED_TILE_MAX / 2 values of 16 bits in a
// block of 128 or more threads stay under 2^31 a lane), divided once a block. The energy adds the
// exact double squares of the float values, as prepare_tiles does, in the order of the lanes'
// values and the block's sum; no value of an integer tile can be NaN or infinite.
template <typename T, int TH, int TW, int NT, int RU>
__global__ void __launch_bounds__(NT) prepare_tiles_shaped(
    const T* __restrict__ patterns, int H, int W, const int* __restrict__ origins, int n_roi, int h, int w,
    const float* __restrict__ window, float* __restrict__ out, int Ny, int Nx, float* __restrict__ energy,
    unsigned char* __restrict__ status, float* __restrict__ mean_out, unsigned short* __restrict__ packed_out,
    int packed_row, int packed_pad) {
    static_assert(T(0.5) == T(0), "integer values");
    constexpr int NW = NT / 32, KU = (TW + 31) / 32, ROWS = (TH + NW - 1) / NW;
    const Packed packed{packed_out, packed_row, packed_pad};
    extern __shared__ __align__(16) unsigned char staged_bytes[];
    T* tile = reinterpret_cast<T*>(staged_bytes);
    __shared__ double sred[32];
    __shared__ float smean;
    const int t = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const T* p = tile_start(patterns, H, W, origins, n_roi, t);
    float* o = out != nullptr ? out + (long long)t * Ny * Nx : nullptr;
    unsigned short* pk = packed.tile(t, TH);
    // (row, column) of a lane's value q, u of a round: inside the tile (constant where TH, TW divide)
    auto inside = [&](int yy, int xx) { return (TH % NW == 0 || yy < TH) && (TW % 32 == 0 || xx < TW); };

    int si = 0;
#pragma unroll 1
    for (int i0 = 0; i0 < ROWS; i0 += RU) {
        T v[RU][KU];
#pragma unroll
        for (int q = 0; q < RU; ++q)
#pragma unroll
            for (int u = 0; u < KU; ++u) {
                const int yy = warp + NW * (i0 + q), xx = lane + 32 * u;
                v[q][u] = (i0 + q < ROWS && inside(yy, xx)) ? p[yy * W + xx] : T(0);
            }
#pragma unroll
        for (int q = 0; q < RU; ++q)
#pragma unroll
            for (int u = 0; u < KU; ++u) {
                const int yy = warp + NW * (i0 + q), xx = lane + 32 * u;
                if (i0 + q < ROWS && inside(yy, xx)) tile[yy * TW + xx] = v[q][u];
                si += v[q][u];
            }
    }
    const double s = block_sum((double)si, sred);  // its barriers also make the staged tile visible
    if (threadIdx.x == 0) smean = (float)(s / (TH * TW));
    __syncthreads();
    const float mean = smean;

    double e = 0.0;
#pragma unroll 1
    for (int i0 = 0; i0 < ROWS; i0 += RU) {
        float tv[RU][KU], wv[RU][KU];
#pragma unroll
        for (int q = 0; q < RU; ++q)
#pragma unroll
            for (int u = 0; u < KU; ++u) {
                const int yy = warp + NW * (i0 + q), xx = lane + 32 * u;
                const bool in = i0 + q < ROWS && inside(yy, xx);
                tv[q][u] = in ? exact_float(tile[yy * TW + xx]) : 0.0f;
                wv[q][u] = in ? window[yy * TW + xx] : 0.0f;
            }
#pragma unroll
        for (int q = 0; q < RU; ++q) {
            const int yy = warp + NW * (i0 + q);
#pragma unroll
            for (int u = 0; u < KU; ++u) {
                const int xx = lane + 32 * u;
                if (i0 + q < ROWS && inside(yy, xx)) {
                    const float qv = (tv[q][u] - mean) * wv[q][u];
                    if (o != nullptr) o[yy * Nx + xx] = qv;
                    if (pk != nullptr) pk[yy * packed.row + xx] = bf16_bits(qv);
                    e += (double)qv * qv;
                }
            }
        }
    }
    e = block_sum(e, sred);
    finish_tile(o, TW, Nx, TH * TW, e, mean, 0.0f, t, energy, status, mean_out, pk, packed.row);
}
