// The dynamic background's Gaussian blur as four float32 matrix products per pattern,
// Gy (Fy X Fx^T) Gx^T, each axis's operator (reflect pad, Gaussian, crop) of low rank
// (ebsdxc/preprocess.py, _LowRankBlur and _lowpass_factors).
//
// Why not cuBLAS: it chooses its kernels, and so its rounding, by a product's sizes, so a
// pattern's blur depended on the batch it came in (BENCHMARKS.md, session 31), and a run's
// results must be the same bits whatever its batches (halved after running out of memory, Dask
// tasks). Here every output is one thread's sum over k in increasing order, and every pattern's
// mean one block's fixed sequence: nothing depends on the batch or on a pattern's place in it.

// Each pattern's mean, one block per pattern: thread t sums elements t, t + 256, ... in double
// (exact for integer patterns), then a fixed tree. Returned as float32.
template <typename T>
__global__ void __launch_bounds__(256) pattern_means(const T* __restrict__ x, const long long size,
                                                     float* __restrict__ mean) {
    __shared__ double part[256];
    const T* p = x + (long long)blockIdx.x * size;
    double s = 0.0;
    for (long long i = threadIdx.x; i < size; i += 256) s += (double)p[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) mean[blockIdx.x] = (float)(part[0] / (double)size);
}

// C[b] = (A[b] - shift[b]) B[b], row-major, for b = blockIdx.z; a batch stride of 0 shares an
// operand between patterns; shift (one value per pattern) may be null. M x K times K x N.
// Tiles of 128 x BN outputs (BN 128, or 64 for the narrow products of small patterns: 256 px,
// rank 61, 1.26 -> 1.03 ms for the blur of 1024) over steps of 8 in k, 256 threads of 8 x BN/16
// outputs each (rows ty*4 + {0..3} and 64 + ty*4 + {0..3}, columns in fours likewise: float4
// reads of shared memory without bank conflicts). Out-of-range elements load as zeros, so any
// M, N, K. (Steps of 16 with the next step's elements loaded into registers were slower: BENCHMARKS.md.)
#define BM 128
#define BK 8
template <typename TA, int BN>
__global__ void __launch_bounds__(256) batched_products(const TA* __restrict__ A, const long long sA, const int lda,
                                                        const float* __restrict__ shift,
                                                        const float* __restrict__ Bm, const long long sB,
                                                        const int ldb, float* __restrict__ C, const long long sC,
                                                        const int ldc, const int M, const int N, const int K) {
    constexpr int TN = BN / 16;  // columns a thread
    constexpr int LB = BN / 32;  // elements of B's tile a thread loads
    __shared__ __align__(16) float As[BK][BM];
    __shared__ __align__(16) float Bs[BK][BN];
    const int b = blockIdx.z;
    const TA* a = A + b * sA;
    const float* bm = Bm + b * sB;
    float* c = C + b * sC;
    const float s = shift != nullptr ? shift[b] : 0.0f;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int t = threadIdx.x, tx = t % 16, ty = t / 16;
    // loads: A's tile, row t / 2 and k (t % 2) * 4 + {0..3}; B's tile, k t / 32 and columns (t % 32) * LB + {0..LB-1}
    const int ar = t / 2, ak = (t % 2) * 4;
    const int bk = t / 32, bc = (t % 32) * LB;
    float acc[8][TN];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const int row = m0 + ar;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int k = k0 + ak + q;
            As[ak + q][ar] = (row < M && k < K) ? (float)a[(long long)row * lda + k] - s : 0.0f;
        }
        const int kk = k0 + bk;
#pragma unroll
        for (int q = 0; q < LB; ++q) {
            const int col = n0 + bc + q;
            Bs[bk][bc + q] = (kk < K && col < N) ? bm[(long long)kk * ldb + col] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float av[8], bv[TN];
            *(float4*)&av[0] = *(const float4*)&As[k][ty * 4];
            *(float4*)&av[4] = *(const float4*)&As[k][64 + ty * 4];
#pragma unroll
            for (int q = 0; q < TN; q += 4) *(float4*)&bv[q] = *(const float4*)&Bs[k][q * 16 + tx * 4];
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
        if (row >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = n0 + (j / 4) * 64 + tx * 4 + j % 4;
            if (col < N) c[(long long)row * ldc + col] = acc[i][j];
        }
    }
}
