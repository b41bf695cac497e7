// Window-mode cross-correlation on tensor cores (implicit GEMM), and its exact peaks.
//
//   C[dy, dx] = sum_{y, x} L[y, x] * R[y + dy, x + dx]      |dy| <= ry, |dx| <= rx
//
// as the definition-based kernels (definition.cu: same pairings, same circular map layout),
// written as one GEMM per left matrix a:
//
//   rows    m = (b, iy): right matrix b of the pairing, lag dy = iy - ry
//   columns n = ix:      lag dx = ix - rx
//   depth   k = (y, x'): every row y of L, every column x' of R
//   A[(b, iy), (y, x')] = R_b[y + dy, x']        (Hankel in y: rows of the staged R tiles)
//   B[(y, x'), ix]      = L[y, x' - dx]          (Toeplitz in x: built from one row of L)
//
// so A . B = sum_y sum_x' R_b[y + dy, x'] L[y, x' - dx] = C_b[dy, dx]. Neither operand exists in
// memory: a block stages YC rows of L and the rows of its right matrices those YC rows meet,
// converted to the input precision, in shared memory, and every fragment is gathered from there
// (the A rows of a fragment are any staged rows, the B columns shifted copies of an L row).
// Rows of m cross matrix boundaries freely, so a block of 16-row tiles wastes no lanes on
// 2 ry + 1 lags that are not a multiple of 16; columns are padded to 8-lane tiles.
//
// Precision (PREC): fp16 and bf16 use mma.m16n8k16, tf32 mma.m16n8k8, all with fp32
// accumulation; fp32 splits each tf32 operand into a high and a low part and adds three
// products (big*big + big*small + small*big: fp32-accurate products, the "3xTF32" scheme).
// fp16 inputs are scaled per matrix (scale arrays) into its range; the map is scaled back.
//
// tc_exact then finds each map's integer maximum and re-evaluates the 3x3 neighbourhood from
// the float32 matrices (right ones as tiles, or prepared from the patterns as they are read) (sums in float per thread, in double across threads; all in double with
// EXACT64), climbing to the exact local maximum when a neighbour beats the centre, and tc_fit
// makes the 3x3 fits of peaks.cu: the subpixel offsets and peak heights never see tensor-core
// rounding.
#include "peaks.cu"

#define P_FP32 0
#define P_TF32 1
#define P_BF16 2
#define P_FP16 3

// Two floats as one register of two 16-bit values, lo in the low half (the lower k index).
template <int PREC>
__device__ __forceinline__ unsigned pack_pair(float lo, float hi) {
    unsigned d;
    if (PREC == P_BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned d;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(d) : "f"(x));
    return d;
}

template <int PREC>
__device__ __forceinline__ void mma_k16(float c[4], const unsigned a[4], const unsigned b[2]) {
    if (PREC == P_BF16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_k8(float c[4], const unsigned a[4], const unsigned b[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// High and low tf32 parts of x (x = hi + lo to about 2^-22 relative).
__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo) {
    hi = to_tf32(x);
    lo = to_tf32(x - __uint_as_float(hi));
}

// Packed operands, written once per call (right matrices) or per reference set (left):
//   right: (T, h + 2 ry, wp) elements, row y + ry holding row y of the matrix, zero rows above
//          and below (the lags that leave it) and zero columns past w; fp16/bf16 elements two
//          to a 32-bit word, fp32/tf32 one;
//   left:  (na, h, lwt) words, word j of row y holding L[y, c] (and L[y, c + 1] in the high
//          half for fp16/bf16), c = j + cmin, zero outside the matrix: the shifted copies a B
//          fragment reads, one aligned word each.
// fp16 matrices are scaled to unit RMS first (tc_scale; all-zero: 1).

// Where right matrix r's values come from. RAW 0: float32 tiles, matrix r at p + r frame, rows
// `row` apart. RAW 1: the ROIs of whole patterns of IN values (the runner's patterns, no tile
// written): tile t = r, or with sel pattern sel[r / n] and ROI r % n, is the ROI of pattern
// t / n at offsets[t % n] (frame: the pattern's size, row: its width), each value centred and
// windowed by tiles.cu's expression from that pass's float mean, and zero where its status
// rejects the tile: bit for bit the tile prepare_tiles writes (as fftcorr.cu's TileIn).
template <typename IN, int RAW>
struct RightMatrix {
    const IN* p;
    int row, w;
    const float* win;
    float mean;
    bool zero;
    __device__ __forceinline__ float at(int y, int x) const { return row_at(y, x).at(0); }
    // Row y, for loops that read several values of one row: at(y, x) == row_at(y).at(x).
    struct Row {
        const IN* p;
        const float* win;
        float mean;
        bool zero;
        __device__ __forceinline__ float at(int x) const {
            if (!RAW) return (float)p[x];
            return zero ? 0.0f : (exact_float(p[x]) - mean) * win[x];
        }
        // on to the next row of m (pointers may pass the tile's last row: not read then)
        __device__ __forceinline__ void next(const RightMatrix& m) {
            p += m.row;
            if (RAW) win += m.w;
        }
    };
    // (column x of row y as the row's column 0: loads at constant offsets from it)
    __device__ __forceinline__ Row row_at(int y, int x = 0) const {
        return Row{p + (long long)y * row + x, RAW ? win + y * w + x : nullptr, mean, zero};
    }
};

template <typename IN, int RAW>
struct RightSource {
    const IN* p;
    long long frame;
    int row;
    const int* offsets;
    const float* mean;
    const unsigned char* status;
    const float* win;
    int n;
    const int* sel;
    // (tiles of a batch fit an int, as the tile pass's grid: 32-bit divisions, not 64-bit ones)
    __device__ __forceinline__ RightMatrix<IN, RAW> matrix(long long r, int w) const {
        if (!RAW) return RightMatrix<IN, RAW>{p + r * frame, row, w, nullptr, 0.0f, false};
        const int ri = (int)r, t = sel == nullptr ? ri : sel[ri / n] * n + ri % n;
        return RightMatrix<IN, RAW>{p + (long long)(t / n) * frame + offsets[t % n], row, w, win, mean[t],
                                    status[t] != 0};
    }
};

// The right source's kernel arguments: tiles (RAW 0, frame h w, row w, the rest null) or ROIs.
#define RIGHT_ARGS(IN)                                                                                  \
    const IN *__restrict__ src, long long frame, int row, const int *__restrict__ offsets,               \
        const float *__restrict__ mean, const unsigned char *__restrict__ status,                        \
        const float *__restrict__ win, int n_roi, const int *__restrict__ sel
#define RIGHT_SOURCE(IN, RAW) (RightSource<IN, RAW>{src, frame, row, offsets, mean, status, win, n_roi, sel})

// scale[t] = 1 / RMS of matrix t (h x w values), one block per matrix: left matrices (RAW 0),
// or right ones from either source (the same values in the same order: the same scale).
template <typename IN, int RAW>
__global__ void tc_scale(RIGHT_ARGS(IN), int h, int w, float* __restrict__ scale) {
    __shared__ double red[32];
    const RightMatrix<IN, RAW> m = RIGHT_SOURCE(IN, RAW).matrix(blockIdx.x, w);
    const int n = h * w;
    double acc = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const double v = m.at(i / w, i % w);
        acc += v * v;
    }
    const double ss = block_sum(acc, red);
    if (threadIdx.x == 0) scale[blockIdx.x] = ss > 0.0 ? (float)rsqrt(ss / n) : 1.0f;
}

template <int PREC>
__device__ __forceinline__ unsigned pack_word(const float* v, float s) {
    if (PREC >= P_BF16) return pack_pair<PREC>(v[0] * s, v[1] * s);
    return PREC == P_TF32 ? to_tf32(v[0]) : __float_as_uint(v[0]);
}

// Left operand, one block per matrix (few matrices: a reference set).
template <int PREC>
__global__ void tc_pack_left(const float* __restrict__ src, unsigned* __restrict__ dst,
                             const float* __restrict__ scale, int h, int w, int lwt, int cmin) {
    constexpr int EPW = PREC >= P_BF16 ? 2 : 1;
    const long long t = blockIdx.x;
    const float* m = src + t * h * w;
    const float s = scale ? scale[t] : 1.0f;
    unsigned* d = dst + t * h * lwt;
    for (int i = threadIdx.x; i < h * lwt; i += blockDim.x) {
        const int y = i / lwt, c = i % lwt + cmin;
        float v[2];
#pragma unroll
        for (int e = 0; e < EPW; ++e) v[e] = (c + e >= 0 && c + e < w) ? m[y * w + c + e] : 0.0f;
        d[i] = pack_word<PREC>(v, s);
    }
}

// Right operand, four words a thread over all rows of all matrices, one pass at memory speed
// (as fast as a block per matrix, on an H100: both are bound by reading the float32 tiles).
// Rows of a launch and their words fit an int (the caller splits larger sets; `first` is the
// launch's first matrix). VEC: w and row_words multiples of 4, so that rows start on 16 bytes
// (vector loads from float32 tiles, vector stores).
template <int PREC, int VEC, typename IN, int RAW>
__global__ void tc_pack_right(RIGHT_ARGS(IN), long long first, unsigned* __restrict__ dst,
                              const float* __restrict__ scale, int items, int h, int w, int pad, int row_words) {
    constexpr int EPW = PREC >= P_BF16 ? 2 : 1;
    const int chunks = (row_words + 3) >> 2, rows = h + 2 * pad;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= items) return;
    const int rr = i / chunks, k = i - rr * chunks;  // output row over the launch's matrices, its chunk
    const int t = rr / rows, yy = rr - t * rows - pad;
    const int c0 = 4 * EPW * k;
    float v[4 * EPW];
    if (yy >= 0 && yy < h) {
        const RightMatrix<IN, RAW> m = RIGHT_SOURCE(IN, RAW).matrix(first + t, w);
        if (!RAW && VEC && c0 + 4 * EPW <= w) {
            const float* row_p = reinterpret_cast<const float*>(m.p) + (long long)yy * m.row;
#pragma unroll
            for (int q = 0; q < EPW; ++q) {
                const float4 f = *reinterpret_cast<const float4*>(row_p + c0 + 4 * q);
                v[4 * q] = f.x; v[4 * q + 1] = f.y; v[4 * q + 2] = f.z; v[4 * q + 3] = f.w;
            }
        } else {
#pragma unroll
            for (int e = 0; e < 4 * EPW; ++e) v[e] = c0 + e < w ? m.at(yy, c0 + e) : 0.0f;
        }
    } else {
#pragma unroll
        for (int e = 0; e < 4 * EPW; ++e) v[e] = 0.0f;
    }
    const float s = scale ? scale[t] : 1.0f;
    unsigned wd[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) wd[j] = pack_word<PREC>(v + EPW * j, s);
    unsigned* d = dst + (long long)rr * row_words + 4 * k;
    if (VEC) {
        *reinterpret_cast<uint4*>(d) = make_uint4(wd[0], wd[1], wd[2], wd[3]);
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (4 * k + j < row_words) d[j] = wd[j];
    }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const void* smem) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// Staged rows of right matrix q of a block (q = 0 its first): the block's rows m0 .. m1 - 1
// meet lags iy_lo(q) .. iy_hi(q) of it, hence packed rows y0 + iy_lo .. y0 + iy_hi + yc - 1 of
// each chunk of yc L rows; they start at staged row rowoff(q).
__device__ __forceinline__ int stage_rowoff(int q, int yc, int My, int iy_lo0) {
    return q == 0 ? 0 : q * (yc + My - 1) - iy_lo0;
}

// Maps of window mode for pairs (a, b) from packed operands: grid (na, row blocks, column
// blocks), blockDim.x = 32 * warps, each warp MTW 16-row tiles by NT 8-column tiles. Chunks of
// yc L rows and the right rows they meet are copied to shared memory by cp.async: with two
// stages of `stage` words the next chunk while the tensor cores work on this one, with one
// stage in turn (half the memory: more blocks per SM overlap each other instead).
// rs: staged row stride in elements (fp16/bf16: = 8 mod 16, fp32/tf32: = 4 mod 32: fragment
// loads without bank conflicts); lw: staged L row length in words; lwt: packed L row length.
template <int PREC, int MTW, int NT>
__global__ void __launch_bounds__(256) tc_maps(const unsigned* __restrict__ Lp, const unsigned* __restrict__ Rp,
                        float* __restrict__ out, const float* __restrict__ sl, const float* __restrict__ sr,
                        int h, int w, int ry, int rx, int na, int nb, int rs_a, int rs_b, int os_a, int os_b,
                        int rs, int lw, int lwt, int yc, int stage, int nstages) {
    extern __shared__ __align__(16) unsigned char tc_smem[];
    constexpr bool HALF = PREC >= P_BF16;
    constexpr int KS = HALF ? 16 : 8;
    constexpr int EPW = HALF ? 2 : 1;  // elements per 32-bit word
    const int My = 2 * ry + 1, Mx = 2 * rx + 1;
    const int wp = (w + KS - 1) / KS * KS;
    const int hp = h + 2 * ry;
    const int warps = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int BM = warps * MTW * 16;
    const int a = blockIdx.x;
    const int Mrows = nb * My;
    const int m0 = blockIdx.y * BM, m1 = min(m0 + BM, Mrows);
    const int n0 = blockIdx.z * NT * 8;
    const int col_blocks = gridDim.z;
    const int p_first = m0 / My, span = (m1 - 1) / My - p_first + 1;
    const int iy_lo0 = m0 % My;
    // The block's L columns start at word (col_blocks - 1 - z) NT 8 of a packed row.
    const unsigned* Lm = Lp + (long long)a * h * lwt + (col_blocks - 1 - blockIdx.z) * NT * 8;
    const int rsw = rs / EPW;  // staged row stride in words
    const int wpw = wp / EPW;  // packed row length in words

    // Per-thread A rows at chunk row 0: the fragment rows g and g + 8 (scalar loads) or the row
    // this lane addresses for ldmatrix. Rows past the last map compute garbage never written.
    int base[MTW][2];
    const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8;  // ldmatrix: lanes 8i..8i+7 address matrix i
    for (int i = 0; i < MTW; ++i)
        for (int hlf = 0; hlf < 2; ++hlf) {
            const int within = HALF ? (hlf ? 0 : lrow) : g + 8 * hlf;
            const int m = min(m0 + (warp * MTW + i) * 16 + within, Mrows - 1);
            const int q = m / My - p_first, iy = m % My;
            base[i][hlf] = stage_rowoff(q, yc, My, iy_lo0) + iy - (q == 0 ? iy_lo0 : 0);
        }

    float acc[MTW][NT][4];
#pragma unroll
    for (int i = 0; i < MTW; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    auto stage_chunk = [&](int y0, unsigned* buf) {
        unsigned* Ls = buf;
        unsigned* Rs = buf + yc * lw;
        const int lw4 = lw / 4;
        for (int i = threadIdx.x; i < yc * lw4; i += blockDim.x) {
            const int r = i / lw4, k = i % lw4;
            if (y0 + r < h) cp_async16(Ls + r * lw + 4 * k, Lm + (long long)(y0 + r) * lwt + 4 * k);
        }
        const int per_row = wpw / 4;
        for (int q = 0; q < span; ++q) {
            const int b = p_first + q;
            const int iy_lo = q == 0 ? iy_lo0 : 0;
            const int iy_hi = q == span - 1 ? (m1 - 1) % My : My - 1;
            const int cnt = yc + iy_hi - iy_lo;
            const unsigned* Rm = Rp + ((long long)a * rs_a + (long long)b * rs_b) * hp * wpw;
            unsigned* dst = Rs + stage_rowoff(q, yc, My, iy_lo0) * rsw;
            for (int i = threadIdx.x; i < cnt * per_row; i += blockDim.x) {
                const int s = i / per_row, k = i % per_row;
                const int yy = y0 + iy_lo + s;  // packed row
                if (yy < hp) cp_async16(dst + s * rsw + 4 * k, Rm + (long long)yy * wpw + 4 * k);
            }
        }
        cp_async_commit();
    };

    unsigned* smem = reinterpret_cast<unsigned*>(tc_smem);
    const int nchunks = (h + yc - 1) / yc;
    if (nstages == 2) stage_chunk(0, smem);
    for (int c = 0; c < nchunks; ++c) {
        if (nstages == 1) stage_chunk(c * yc, smem);
        cp_async_wait_all();
        __syncthreads();
        if (nstages == 2 && c + 1 < nchunks) stage_chunk((c + 1) * yc, smem + ((c + 1) & 1) * stage);
        const unsigned* Ls = smem + (nstages == 2 ? (c & 1) * stage : 0);
        const unsigned* Rs = Ls + yc * lw;
        const int rows = min(yc, h - c * yc);
        for (int r = 0; r < rows; ++r) {
            const unsigned* Lrow = Ls + r * lw;
#pragma unroll 2
            for (int x0 = 0; x0 < wp; x0 += KS) {
                if (HALF) {
                    unsigned bf[NT][2];
#pragma unroll
                    for (int j = 0; j < NT; ++j) {
                        // column ix = n0 + 8 j + g, k = 2t (+8): L[y, x0 + k - ix + rx] and the next
                        const int jj = x0 + 2 * t - 8 * j - g + NT * 8 - 1;
                        bf[j][0] = Lrow[jj];
                        bf[j][1] = Lrow[jj + 8];
                    }
#pragma unroll
                    for (int i = 0; i < MTW; ++i) {
                        unsigned af[4];
                        ldmatrix_x4(af, Rs + (base[i][0] + r) * rsw + (x0 >> 1) + (lane >> 4) * 4);
#pragma unroll
                        for (int j = 0; j < NT; ++j) mma_k16<PREC>(acc[i][j], af, bf[j]);
                    }
                } else {
                    unsigned bh[NT][2], bl[NT][2];
#pragma unroll
                    for (int j = 0; j < NT; ++j) {
                        const int jj = x0 + t - 8 * j - g + NT * 8 - 1;
                        if (PREC == P_TF32) {
                            bh[j][0] = Lrow[jj];
                            bh[j][1] = Lrow[jj + 4];
                        } else {
                            split_tf32(__uint_as_float(Lrow[jj]), bh[j][0], bl[j][0]);
                            split_tf32(__uint_as_float(Lrow[jj + 4]), bh[j][1], bl[j][1]);
                        }
                    }
#pragma unroll
                    for (int i = 0; i < MTW; ++i) {
                        const unsigned* r0 = Rs + (base[i][0] + r) * rs + x0 + t;
                        const unsigned* r1 = Rs + (base[i][1] + r) * rs + x0 + t;
                        if (PREC == P_TF32) {
                            const unsigned af[4] = {r0[0], r1[0], r0[4], r1[4]};
#pragma unroll
                            for (int j = 0; j < NT; ++j) mma_k8(acc[i][j], af, bh[j]);
                        } else {
                            unsigned ah[4], al[4];
                            split_tf32(__uint_as_float(r0[0]), ah[0], al[0]);
                            split_tf32(__uint_as_float(r1[0]), ah[1], al[1]);
                            split_tf32(__uint_as_float(r0[4]), ah[2], al[2]);
                            split_tf32(__uint_as_float(r1[4]), ah[3], al[3]);
#pragma unroll
                            for (int j = 0; j < NT; ++j) {
                                mma_k8(acc[i][j], al, bh[j]);
                                mma_k8(acc[i][j], ah, bl[j]);
                                mma_k8(acc[i][j], ah, bh[j]);
                            }
                        }
                    }
                }
            }
        }
        __syncthreads();  // this stage is read before the next chunk's copies overwrite it
    }

    const float s_l = sl ? sl[a] : 1.0f;
#pragma unroll
    for (int i = 0; i < MTW; ++i)
#pragma unroll
        for (int hlf = 0; hlf < 2; ++hlf) {
            const int m = m0 + (warp * MTW + i) * 16 + g + 8 * hlf;
            if (m >= m1) continue;
            const int b = m / My, iy = m % My;
            const int oy = iy - ry < 0 ? iy - ry + My : iy - ry;
            const long long ri = (long long)a * rs_a + (long long)b * rs_b;
            const float unscale = (sl && sr) ? 1.0f / (s_l * sr[ri]) : 1.0f;
            float* o = out + ((long long)a * os_a + (long long)b * os_b) * My * Mx + (long long)oy * Mx;
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int ix = n0 + 8 * j + 2 * t + e;
                    if (ix >= Mx) continue;
                    const int ox = ix - rx < 0 ? ix - rx + Mx : ix - rx;
                    o[ox] = acc[i][j][2 * hlf + e] * unscale;
                }
        }
}

// Exact correlation at the 3x3 lags around (ly, lx) into sv[9] (row-major), every thread
// taking part: each warp walks a band of R rows, each lane some columns, keeping the three L
// rows its pixels meet in registers (one new L row per R row); per-thread sums in ACC, the
// block's sums in double. Lm: L zero-padded (tc_exact's lp), rows lw apart.
template <typename ACC, int NJ, typename IN, int RAW>
__device__ void exact_3x3(const float* __restrict__ Lm, int lw, const RightMatrix<IN, RAW>& Rm, int h, int w,
                          int ly, int lx, double* sv, double* red) {
    // R is walked, not L: each R value is read and prepared once (from the patterns: two loads,
    // the centring and the window), the L values, plain loads from the zero-padded copy without
    // tests, NJ + 2 times for NJ columns. The other way round took about 130 instructions a row
    // of three columns, 27 of them the sums.
    ACC acc[9];
#pragma unroll
    for (int k = 0; k < 9; ++k) acc[k] = 0;
    const int nwarps = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // rows of R that meet a row of L at some lag ly - 1 .. ly + 1, split into bands
    const int y_lo = max(0, ly - 1), y_hi = min(h, h + ly + 1);
    const int band = (y_hi - y_lo + nwarps - 1) / nwarps;
    const int yb = y_lo + warp * band, ye = min(y_hi, yb + band);
    // R at (Y, X) meets L at (Y - ly + 1 - v, X - lx + 1 - q) for lag (ly + v - 1, lx + q - 1):
    // a lane's NJ consecutive columns X = xr + j meet the NJ + 2 L columns xl + u (u = j - q + 2)
    // of three L rows (rows -2 .. h + 1, columns -rx - 1 .. the last walk's + rx + 1: padding).
    for (int x0 = 0; x0 < w && yb < ye; x0 += 32 * NJ) {
        const int xr = x0 + NJ * lane;
        bool r_in[NJ];  // the same in every row
#pragma unroll
        for (int j = 0; j < NJ; ++j) r_in[j] = xr + j < w;
        // L rows Y - ly - 1, Y - ly, Y - ly + 1 (lags ly + 1, ly, ly - 1) in la, lb, lc, three
        // rows a round so that no register moves: each step loads its newest row over the oldest.
        ACC la[NJ + 2], lb[NJ + 2], lc[NJ + 2];
        const float* lp = Lm + (long long)(yb - ly - 1) * lw + (xr - lx - 1);
#pragma unroll
        for (int u = 0; u < NJ + 2; ++u) {
            la[u] = (ACC)lp[u];
            lb[u] = (ACC)lp[lw + u];
        }
        lp += 2 * lw;
        auto rr = Rm.row_at(yb, xr);
        auto step = [&](const ACC(&l0)[NJ + 2], const ACC(&l1)[NJ + 2], ACC(&l2)[NJ + 2]) {
#pragma unroll
            for (int u = 0; u < NJ + 2; ++u) l2[u] = (ACC)lp[u];
            ACC r[NJ];
#pragma unroll
            for (int j = 0; j < NJ; ++j) r[j] = r_in[j] ? (ACC)rr.at(j) : (ACC)0;
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
                for (int q = 0; q < 3; ++q) {
                    acc[q] += l2[j - q + 2] * r[j];
                    acc[3 + q] += l1[j - q + 2] * r[j];
                    acc[6 + q] += l0[j - q + 2] * r[j];
                }
            rr.next(Rm);
            lp += lw;
        };
        int y = yb;
        for (; y + 3 <= ye; y += 3) {
            step(la, lb, lc);
            step(lb, lc, la);
            step(lc, la, lb);
        }
        if (y < ye) step(la, lb, lc);
        if (y + 1 < ye) step(lb, lc, la);
    }
    // The nine sums at once: one barrier for the warps' partial sums (double), nine threads add them.
    __syncthreads();  // red and sv may still be read by a previous call
#pragma unroll
    for (int k = 0; k < 9; ++k) {
        const double s = warp_sum((double)acc[k]);
        if (lane == 0) red[9 * warp + k] = s;
    }
    __syncthreads();
    if (threadIdx.x < 9) {
        double s = 0.0;
        for (int q = 0; q < nwarps; ++q) s += red[9 * q + threadIdx.x];
        sv[threadIdx.x] = s;
    }
    __syncthreads();
}

// Peaks of tc_maps maps in two kernels. tc_exact, one block per pair (a, b) (threads a
// multiple of 32): integer maximum of the map, exact 3x3 around it, up to max_moves steps to
// a neighbour inside the window that beats the centre; its lag and nine sums to lag[2 t],
// sums[9 t] (t the pair's map). tc_fit, a thread per map: window compensation and the 3x3 fit
// of find_peaks. Apart, the walk's block keeps only the registers of its sums (the fit's
// double arithmetic on one thread set them for all: fewer blocks an SM, each waiting on memory).
// Window autocorrelation tables wy (nwy,), wx (nwx,) by lag mod nwy / nwx reach one lag past
// the window (nwy = 2 ry + 3). IN, RAW: where the right matrices come from (RightSource).
// lp: the left matrices zero-padded, (na, h + 4, lw), L[y, x] at row y + 2, column x + lc
// (exact_3x3 reads two rows past L and rx + 1 columns past each walk).
template <int EXACT64, int NJ, int MINB, typename IN, int RAW>
__global__ void __launch_bounds__(128, MINB) tc_exact(const float* __restrict__ maps, const float* __restrict__ lp,
                                                      int lw, int lc, RIGHT_ARGS(IN), int h, int w, int ry, int rx,
                                                      int na, int nb, int rs_a, int rs_b, int os_a, int os_b,
                                                      int max_moves, int* __restrict__ lag,
                                                      double* __restrict__ sums) {
    __shared__ float sval[32];
    __shared__ int sidx[32];
    __shared__ double red[9 * 32], sv[9];  // red: nine sums a warp
    __shared__ int sl[3];  // ly, lx, done
    const int a = blockIdx.x % na, b = blockIdx.x / na;
    const long long tmap = (long long)a * os_a + (long long)b * os_b;
    const int My = 2 * ry + 1, Mx = 2 * rx + 1;
    const float* Lm = lp + ((long long)a * (h + 4) + 2) * lw + lc;  // L[0, 0]
    const RightMatrix<IN, RAW> Rm = RIGHT_SOURCE(IN, RAW).matrix((long long)a * rs_a + (long long)b * rs_b, w);

    float best;
    int bi;
    if (block_lag_argmax(maps + tmap * My * Mx, My, Mx, Mx, ry, rx, sval, sidx, best, bi)) {
        sl[0] = bi / Mx - ry;
        sl[1] = bi % Mx - rx;
    }
    __syncthreads();
    for (int move = 0;; ++move) {
        const int ly = sl[0], lx = sl[1];
        if (EXACT64) exact_3x3<double, NJ, IN, RAW>(Lm, lw, Rm, h, w, ly, lx, sv, red);
        else exact_3x3<float, NJ, IN, RAW>(Lm, lw, Rm, h, w, ly, lx, sv, red);
        if (threadIdx.x == 0) {
            int k_best = 4;
            for (int k = 0; k < 9; ++k) {
                const int yy = ly + k / 3 - 1, xx = lx + k % 3 - 1;
                if (abs(yy) <= ry && abs(xx) <= rx && sv[k] > sv[k_best]) k_best = k;
            }
            sl[2] = (k_best == 4 || move >= max_moves) ? 1 : 0;
            if (!sl[2]) {
                sl[0] = ly + k_best / 3 - 1;
                sl[1] = lx + k_best % 3 - 1;
            }
        }
        __syncthreads();
        if (sl[2]) break;
    }
    if (threadIdx.x < 9) sums[9 * tmap + threadIdx.x] = sv[threadIdx.x];
    if (threadIdx.x < 2) lag[2 * tmap + threadIdx.x] = sl[threadIdx.x];
}

template <int METHOD>
__global__ void tc_fit(const int* __restrict__ lag, const double* __restrict__ sums, int n, int ry, int rx,
                       const double* __restrict__ wy, const double* __restrict__ wx, int nwy, int nwx, int comp,
                       double* __restrict__ out_y, double* __restrict__ out_x, float* __restrict__ out_value,
                       unsigned char* __restrict__ out_border) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const int ly = lag[2 * t], lx = lag[2 * t + 1];
    const double* sv = sums + 9LL * t;
    double v[3][3], wv[3][3];
    for (int u = 0; u < 3; ++u) {
        const int yy = ((ly + u - 1) % nwy + nwy) % nwy;
        for (int q = 0; q < 3; ++q) {
            const int xx = ((lx + q - 1) % nwx + nwx) % nwx;
            wv[u][q] = wy[yy] * wx[xx];
            v[u][q] = comp ? sv[3 * u + q] / wv[u][q] : sv[3 * u + q];
        }
    }
    double dy = 0.0, dx = 0.0;
    if (METHOD != M_NONE) {
        fit_3x3<METHOD>(v, dy, dx);
        drop_loose(comp && barely_concave(v, wv), dy, dx);
    }
    out_value[t] = (float)sv[4];
    out_border[t] = ((ry > 0 && abs(ly) == ry) || (rx > 0 && abs(lx) == rx)) ? 1 : 0;
    out_y[t] = ly + dy;
    out_x[t] = lx + dx;
}
