// Fused FFT cross-correlation in shared memory (ebsdxc/engines/fused.py): one block per
// (pattern, ROI) pair does the real 2-D FFT of the zero-padded scan tile, the product with
// the conjugate reference spectrum, the inverse 2-D FFT and the peak search of find_peaks
// (peaks.cu), without any pass through global memory.
//
// Sizes are compile-time (#define prelude from FusedPlan.defines): tile FC_H x FC_W, FFT
// FC_NY x FC_NX, FFT lengths split as N = N1 * N2 (FC_N1Y/FC_N2Y, FC_N1X/FC_N2X).
// A 1-D FFT is a four-step pass of one team of FC_TY or FC_TX (a power of two <= 32) threads
// of one warp: stage A, thread n2 < N2 takes x[n2 + N2 n1] (n1 < N1), does an N1-point DFT in
// registers and twiddles by W_N^(n2 k1); the values go through shared memory in the skewed
// slots of skew(); stage B, thread k1 < N1 takes them back, does an N2-point DFT and holds
// X[k1 + N1 k2]. Team barriers are __syncwarp(): every lane of a warp runs every barrier.
// tests/engines/test_fused.py holds a NumPy model of this scheme, index for index.
#include "peaks.cu"

#ifndef FC_H  // a default plan (96x96 tiles, full mode) so that the file compiles on its own
#define FC_H 96
#define FC_W 96
#define FC_NY 192
#define FC_NX 192
#define FC_RY 95
#define FC_RX 95
#define FC_N1Y 12
#define FC_N2Y 16
#define FC_N1X 12
#define FC_N2X 16
#define FC_TY 16
#define FC_TX 16
#define FC_LD 97
#define FC_ROWS 192
#define FC_NT 512
#endif
#ifndef FC_SPLIT  // blocks per tile pair: 2 splits the map's rows over a thread-block cluster
#define FC_SPLIT 1
#endif
#ifndef FC_COLS  // 2: the split's blocks share the forward transform by spectrum columns
#define FC_COLS 1
#endif
#ifndef FC_RAW  // 1: tiles are the ROIs of whole patterns of FC_IN values, prepared as loaded (TileIn)
#define FC_RAW 0
#endif
#ifndef FC_IN
#define FC_IN float
#endif
#if FC_SPLIT > 1
#define FC_CLUSTER __cluster_dims__(FC_SPLIT, 1, 1)
#else
#define FC_CLUSTER
#endif

namespace fc {

constexpr int H = FC_H, W = FC_W, NY = FC_NY, NX = FC_NX, RY = FC_RY, RX = FC_RX;
constexpr int N1Y = FC_N1Y, N2Y = FC_N2Y, N1X = FC_N1X, N2X = FC_N2X;
constexpr int LD = FC_LD, ROWS = FC_ROWS, NT = FC_NT, NXH = NX / 2 + 1;
constexpr int NWARPS = NT / 32;
// Split (FC_SPLIT = 2, full mode, spectra too big for one block): the two blocks of a cluster
// each hold half the map, rows y = SPLIT j + s in local row j of block s (its cluster rank).
// Since tile rows >= NY / 2 are zero, each block computes the whole forward transform itself
// and folds the spectrum to the NY / 2 frequencies of its rows: map[2 j + s] is the inverse
// FFT of length NY / 2 of Q_s[k] = (P[k] + (-1)^s P[k + NY/2]) exp(2 pi i k s / NY). The peak
// search and the subpixel sums combine the two halves through distributed shared memory.
constexpr int SPLIT = FC_SPLIT, NYL = NY / SPLIT;
// Column split (FC_COLS = 2, window mode: tile rows fill more than half the column FFT, so the
// fold above does not apply): block s transforms half the tile's row pairs and sends every
// spectrum column to the block that owns it (columns [s C0, s C0 + C0) of the half spectrum,
// NY of the ROWS rows of LD; where NYL is odd, ROWS leaves room for the last map row's complex
// row); each block does the full column FFTs, product and inverse of its own columns; then the
// blocks swap the other block's columns of their own map rows y = 2 j + s, so that map row j's
// half spectrum lies in rows 2 j, 2 j + 1: a row of MLD = 2 LD complex, the layout of the row
// split from there on (map row j at floats [2 MLD j, 2 MLD j + NX)).
// Block 0 owns C0 = LD columns (odd: no bank conflicts down a column), block 1 the rest.
constexpr int COLS = FC_COLS, C0 = COLS > 1 ? LD : NXH;
constexpr int MLD = COLS > 1 ? 2 * LD : LD;
static_assert(SPLIT == 1 || (SPLIT == 2 && NY % 2 == 0 &&
                             (COLS == 2 ? (2 * LD >= NXH && ROWS >= NY) : (H <= NYL && N1Y % 2 == 0 && N2Y % 2 == 0))),
              "a split needs an even column FFT, and the row split even factors and tiles of at most NY / 2 rows");
// The inverse row pass writes map rows 2 q, 2 q + 1 as one complex row of NX from float2 2 q MLD
static_assert(2 * MLD * ((NYL - 1) / 2) + NX <= ROWS * LD, "the last pair of map rows fits in ROWS rows");
static_assert(COLS == 1 || SPLIT == 2, "the column split is a two-block split");
static_assert(N1Y * N2Y == NY && N1X * N2X == NX, "FFT length splits");
static_assert(NT % 32 == 0 && 32 % FC_TY == 0 && 32 % FC_TX == 0, "teams inside warps");
static_assert(FC_TY >= N1Y && FC_TY >= N2Y && FC_TX >= N1X && FC_TX >= N2X, "team sizes");

__device__ __forceinline__ float2 cadd(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float2 csub(float2 a, float2 b) { return make_float2(a.x - b.x, a.y - b.y); }
__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
    return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
// a * b (D < 0) or a * conj(b) (D > 0)
template <int D>
__device__ __forceinline__ float2 cmul_dir(float2 a, float2 b) {
    return D < 0 ? cmul(a, b) : make_float2(a.x * b.x + a.y * b.y, a.y * b.x - a.x * b.y);
}
// i * a * D (multiplication by D i)
template <int D>
__device__ __forceinline__ float2 mul_i(float2 a) {
    return D > 0 ? make_float2(-a.y, a.x) : make_float2(a.y, -a.x);
}

// ------------------------------------------------------------ clusters (FC_SPLIT > 1)
__device__ __forceinline__ int cluster_rank() {
#if FC_SPLIT > 1
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return (int)r;
#else
    return 0;
#endif
}
// Every thread of both blocks: shared-memory writes before it are seen by the peer after it.
__device__ __forceinline__ void cluster_sync() {
#if FC_SPLIT > 1
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
    __syncthreads();
#endif
}
// The same shared-memory object in block `rank` of the cluster (a generic address).
template <class T>
__device__ __forceinline__ T* peer(T* p, int rank) {
#if FC_SPLIT > 1
    unsigned long long a;
    asm volatile("mapa.u64 %0, %1, %2;" : "=l"(a) : "l"(p), "r"(rank));
    return reinterpret_cast<T*>(a);
#else
    return p;
#endif
}

// ------------------------------------------------------------ compile-time twiddles
__host__ __device__ constexpr double ksin(double x) {
    double term = x, sum = x;
    for (int i = 1; i < 40; ++i) {
        term *= -x * x / ((2.0 * i) * (2.0 * i + 1.0));
        sum += term;
    }
    return sum;
}
__host__ __device__ constexpr double kcos(double x) {
    double term = 1.0, sum = 1.0;
    for (int i = 1; i < 40; ++i) {
        term *= -x * x / ((2.0 * i - 1.0) * (2.0 * i));
        sum += term;
    }
    return sum;
}
__host__ __device__ constexpr float snap(double v) { return (v < 1e-12 && v > -1e-12) ? 0.0f : (float)v; }

template <int R>
struct Tw {
    float c[R];
    float s[R];
};
// exp(D 2 pi i m / R), m < R
template <int R, int D>
__host__ __device__ constexpr Tw<R> make_tw() {
    Tw<R> t{};
    for (int m = 0; m < R; ++m) {
        const int mm = 2 * m > R ? m - R : m;  // angle in [-pi, pi] for the series
        const double a = 2.0 * 3.14159265358979323846 * mm / R;
        t.c[m] = snap(kcos(a));
        t.s[m] = snap(D * ksin(a));
    }
    return t;
}

// ------------------------------------------------------------ DFTs in registers
// Dft<R, D>::run(v): v[k] <- sum_n v[n] exp(D 2 pi i n k / R), in place, natural order; R a
// product of radices 2, 3, 4 and 5 (fused.axis_factors: 2^a 3^b 5^c).
template <int R, int D>
struct Dft {
    static constexpr int A = R % 4 == 0 ? 4 : (R % 3 == 0 ? 3 : (R % 2 == 0 ? 2 : 5));
    static constexpr int B = R / A;
    __device__ static __forceinline__ void run(float2* v) {
        constexpr Tw<R> tw = make_tw<R, D>();
        float2 t[R];
#pragma unroll
        for (int b = 0; b < B; ++b) {
            float2 u[A];
#pragma unroll
            for (int a = 0; a < A; ++a) u[a] = v[b + B * a];
            Dft<A, D>::run(u);
#pragma unroll
            for (int ka = 0; ka < A; ++ka) {
                const int m = b * ka;
                t[b + B * ka] = m == 0 ? u[ka] : cmul(u[ka], make_float2(tw.c[m], tw.s[m]));
            }
        }
#pragma unroll
        for (int ka = 0; ka < A; ++ka) {
            float2 u[B];
#pragma unroll
            for (int b = 0; b < B; ++b) u[b] = t[ka * B + b];
            Dft<B, D>::run(u);
#pragma unroll
            for (int kb = 0; kb < B; ++kb) v[ka + A * kb] = u[kb];
        }
    }
};
template <int D>
struct Dft<1, D> {
    __device__ static __forceinline__ void run(float2*) {}
};
template <int D>
struct Dft<2, D> {
    __device__ static __forceinline__ void run(float2* v) {
        const float2 a = v[0], b = v[1];
        v[0] = cadd(a, b);
        v[1] = csub(a, b);
    }
};
template <int D>
struct Dft<3, D> {
    __device__ static __forceinline__ void run(float2* v) {
        const float s3 = 0.86602540378443864676f;
        const float2 a = v[0], s = cadd(v[1], v[2]), d = csub(v[1], v[2]);
        const float2 t = make_float2(a.x - 0.5f * s.x, a.y - 0.5f * s.y);
        const float2 r = mul_i<D>(make_float2(s3 * d.x, s3 * d.y));
        v[0] = cadd(a, s);
        v[1] = cadd(t, r);
        v[2] = csub(t, r);
    }
};
template <int D>
struct Dft<4, D> {
    __device__ static __forceinline__ void run(float2* v) {
        const float2 s02 = cadd(v[0], v[2]), d02 = csub(v[0], v[2]);
        const float2 s13 = cadd(v[1], v[3]), d13 = mul_i<D>(csub(v[1], v[3]));
        v[0] = cadd(s02, s13);
        v[1] = cadd(d02, d13);
        v[2] = csub(s02, s13);
        v[3] = csub(d02, d13);
    }
};

// The symmetric pairs (1, 4) and (2, 3): X_k, X_{5-k} = v0 + (cosines) -+ D i (sines).
template <int D>
struct Dft<5, D> {
    __device__ static __forceinline__ void run(float2* v) {
        const float c1 = 0.30901699437494742410f, c2 = -0.80901699437494742410f;  // cos 2pi/5, cos 4pi/5
        const float s1 = 0.95105651629515357212f, s2 = 0.58778525229247312917f;   // sin 2pi/5, sin 4pi/5
        const float2 a = v[0];
        const float2 p1 = cadd(v[1], v[4]), m1 = csub(v[1], v[4]);
        const float2 p2 = cadd(v[2], v[3]), m2 = csub(v[2], v[3]);
        const float2 r1 = make_float2(a.x + c1 * p1.x + c2 * p2.x, a.y + c1 * p1.y + c2 * p2.y);
        const float2 r2 = make_float2(a.x + c2 * p1.x + c1 * p2.x, a.y + c2 * p1.y + c1 * p2.y);
        const float2 i1 = mul_i<D>(make_float2(s1 * m1.x + s2 * m2.x, s1 * m1.y + s2 * m2.y));
        const float2 i2 = mul_i<D>(make_float2(s2 * m1.x - s1 * m2.x, s2 * m1.y - s1 * m2.y));
        v[0] = make_float2(a.x + p1.x + p2.x, a.y + p1.y + p2.y);
        v[1] = cadd(r1, i1);
        v[4] = csub(r1, i1);
        v[2] = cadd(r2, i2);
        v[3] = csub(r2, i2);
    }
};

// Slot of the intermediate (n2, k1) of an N1 x N2 four-step FFT (fused.skew).
template <int N2>
__device__ __forceinline__ int skew(int n2, int k1) {
    return k1 * N2 + (n2 + k1) % N2;
}

// Stage A after the loads: N1-point DFT, then the twiddles W_N^(D n2 k1) from the table
// tw[m] = exp(-2 pi i m / (STEP N)).
template <int N1, int D, int STEP = 1>
__device__ __forceinline__ void stage_a(float2* v, int n2, const float2* tw) {
    Dft<N1, D>::run(v);
#pragma unroll
    for (int k1 = 1; k1 < N1; ++k1) v[k1] = cmul_dir<D>(v[k1], tw[STEP * n2 * k1]);
}

// Teams of T threads inside warps; items are handed out so that every lane of a warp runs
// the same number of rounds (its barriers), idle teams with valid = false.
template <int T>
struct Teams {
    static constexpr int PER_WARP = 32 / T;
    int lane, first, step;
    __device__ Teams() {
        lane = threadIdx.x % T;
        first = (threadIdx.x >> 5) * PER_WARP;
        step = NWARPS * PER_WARP;
    }
    __device__ int item(int base) const { return base + (threadIdx.x & 31) / T; }
};

// Inverse row pass: row pairs q needed for lags |dy| <= RY + 1 (all pairs for maps).
constexpr int NPAIRS = (NY + 1) / 2;
constexpr int PAIR_FIRST = (RY + 3) / 2;
constexpr int PAIR_LO = (NY - RY - 1) / 2;
constexpr bool PAIRS_ALL = PAIR_LO <= PAIR_FIRST;
constexpr int PAIR_ITEMS = PAIRS_ALL ? NPAIRS : PAIR_FIRST + (NPAIRS - PAIR_LO);

// Wide windows (full mode): the inverse row pass keeps the largest of the values each thread
// writes, so the peak search reads no map of its own (a pass over up to 37k values); only the
// threads that hold the block's maximum look for its index, in the round that gave it
// (tracked_argmax). Keeping the index in the pass cost 12% of the transform (H100, 2026-11-27).
// Narrow windows keep the search over their lags, which are a few of the values written.
constexpr bool TRACK = 2 * (2 * RX + 1) >= NX;
// A thread's largest value written at a lag of the search (NaN never taken), where TRACK, and
// the round (loop base of its team) of the pass that first gave it, or -1 where two rounds did.
struct Peak {
    float best;
    int at;
};
// The inverse row pass's row pairs: item it of `items` is pair q(it), map rows 2 q, 2 q + 1;
// all of them where the rows are all needed, else those of lags |dy| <= RY + 1.
struct RowPairs {
    bool every;
    int items;
    __device__ explicit RowPairs(bool all_rows)
        : every(all_rows || PAIRS_ALL || SPLIT > 1), items(every ? (NYL + 1) / 2 : PAIR_ITEMS) {}
    __device__ int q(int it) const { return (every || it < PAIR_FIRST) ? it : PAIR_LO + it - PAIR_FIRST; }
};
// Index of lag row (column) y of the circular map in the search's row-major order over
// |dy| <= RY, or -1 outside; where the window wraps onto itself the lower index, which is
// the one the search over lags keeps on a tie.
__device__ __forceinline__ int lag_row(int y) { return y >= NY - RY ? y - NY + RY : (y <= RY ? y + RY : -1); }
__device__ __forceinline__ int lag_col(int x) { return x >= NX - RX ? x - NX + RX : (x <= RX ? x + RX : -1); }

// Stage A of a column's forward FFT: lane n2 < N2Y takes rows n2 + N2Y n1 (zero from H on).
__device__ __forceinline__ void column_stage_a(const float2* col, int lane, const float2* twy, float2 (&v)[N1Y]) {
#pragma unroll
    for (int n1 = 0; n1 < N1Y; ++n1) {
        const int m = lane + N2Y * n1;
        v[n1] = (N2Y * n1 < H && m < H) ? col[m * LD] : make_float2(0.0f, 0.0f);
    }
    stage_a<N1Y, -1>(v, lane, twy);
}

// Stage B of a column's inverse FFT of length N1Y x NB (after its stage A wrote the skewed
// slots and a team barrier): lane k1 < NB (act) ends with rows k1 + NB k of the column.
template <int NB>
__device__ __forceinline__ void column_inverse_b(float2* col, int lane, bool act) {
    float2 w[N1Y];
    if (act) {
#pragma unroll
        for (int n = 0; n < N1Y; ++n) w[n] = col[skew<N1Y>(n, lane) * LD];
        Dft<N1Y, 1>::run(w);
    }
    __syncwarp();
    if (act) {
#pragma unroll
        for (int k = 0; k < N1Y; ++k) col[(lane + NB * k) * LD] = w[k];
    }
}

// The column pass of a split (block s of the pair): forward FFT of length NY from the H
// nonzero rows, stage B in two rounds of N1Y / 2 threads (the exchange space is NY / 2 rows),
// product with the reference, fold to Q_s (thread k1 holds k and k + NY / 2), inverse FFT of
// length NY / 2 = N1Y x N2Y / 2 with the roles of N1 and N2 swapped, twiddles every other one
// of the NY table.
#if FC_SPLIT > 1
__device__ __forceinline__ void columns_split(float2* S, const float2* twy, const float2* __restrict__ R, int s) {
    constexpr int K = N1Y / 2, N2H = N2Y / 2;
    Teams<FC_TY> tm;
    for (int base = tm.first; base < NXH; base += tm.step) {
        const int c = tm.item(base);
        const bool valid = c < NXH;
        float2* col = S + c;
        float2 v[N1Y];
        const bool act_a = valid && tm.lane < N2Y;
        if (act_a) column_stage_a(col, tm.lane, twy, v);
        float2 u[N2Y];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            __syncwarp();
            if (act_a) {
#pragma unroll
                for (int k1 = 0; k1 < K; ++k1) col[skew<N2Y>(tm.lane, k1) * LD] = v[r * K + k1];
            }
            __syncwarp();
            if (valid && tm.lane >= r * K && tm.lane < (r + 1) * K) {
#pragma unroll
                for (int n2 = 0; n2 < N2Y; ++n2) u[n2] = col[skew<N2Y>(n2, tm.lane - r * K) * LD];
            }
        }
        const bool act_b = valid && tm.lane < N1Y;
        float2 q[N2H];
        if (act_b) {
            Dft<N2Y, -1>::run(u);
            const float2* rc = R + (long long)c * NY;
#pragma unroll
            for (int k2 = 0; k2 < N2Y; ++k2) u[k2] = cmul(u[k2], __ldg(rc + tm.lane + N1Y * k2));
#pragma unroll
            for (int k2 = 0; k2 < N2H; ++k2) {
                q[k2] = s == 0 ? cadd(u[k2], u[k2 + N2H])
                               : cmul_dir<1>(csub(u[k2], u[k2 + N2H]), twy[tm.lane + N1Y * k2]);
            }
            stage_a<N2H, 1, 2>(q, tm.lane, twy);
        }
        __syncwarp();
        if (act_b) {
#pragma unroll
            for (int k = 0; k < N2H; ++k) col[skew<N1Y>(tm.lane, k) * LD] = q[k];
        }
        __syncwarp();
        column_inverse_b<N2H>(col, tm.lane, valid && tm.lane < N2H);
    }
}
#endif

#if FC_COLS > 1
// After the column pass of a column split: the peer's columns of this block's map rows
// y = 2 j + s (row y of the peer's S) into row 2 j + 1 - s of S, whose own columns the peer reads
// at the same time, in rounds of KS values a thread: a round's reads, a cluster barrier, its
// writes (the next round reads other rows). Block b's columns of map row j then lie in row
// 2 j + b: the half spectrum of map row j is the row of MLD = 2 LD complex from 2 j LD.
__device__ __forceinline__ void swap_columns(float2* S, int s) {
    constexpr int KS = 8, ALL = NYL * LD;
    const int n = s ? C0 : NXH - C0;  // the peer's columns
    const float2* P = peer(S, 1 - s);
    cluster_sync();  // the peer's column pass is done
    for (int r0 = 0; r0 < ALL; r0 += KS * NT) {
        float2 v[KS];
#pragma unroll
        for (int k = 0; k < KS; ++k) {
            const int i = r0 + k * NT + threadIdx.x, j = i / LD, c = i - j * LD;
            if (i < ALL && c < n) v[k] = P[(2 * j + s) * LD + c];
        }
        cluster_sync();
#pragma unroll
        for (int k = 0; k < KS; ++k) {
            const int i = r0 + k * NT + threadIdx.x, j = i / LD, c = i - j * LD;
            if (i < ALL && c < n) S[(2 * j + 1 - s) * LD + c] = v[k];
        }
    }
}
#endif

// Where the values of tile t come from: a prepared float tile (tiles + t frame, rows row
// apart), or with FC_RAW the ROI of pattern t / n at offsets[t % n] (frame: the pattern's
// size, row: its width), each value centred and windowed as it is read by the expression of
// prepare_tiles (tiles.cu) with that kernel's float mean, so the FFT sees the values it would
// have written, and zeros where its status rejects the tile. That saves writing and reading
// back every tile: at 1024x1024 with 49 ROIs of 256x256, 12.8 MB per pattern each way.
struct TileIn {
    const FC_IN* p;
    int row;
#if FC_RAW
    const float* win;
    float mean;
    bool zero;
#endif
    // columns x of tile rows y and y + 1 (zero for row y + 1 where !next)
    __device__ __forceinline__ float2 pair(int y, int x, bool next) const {
        const FC_IN* ra = p + (long long)y * row;
#if FC_RAW
        if (zero) return make_float2(0.0f, 0.0f);
        const float* wa = win + y * W;
        return make_float2((exact_float(ra[x]) - mean) * wa[x],
                           next ? (exact_float(ra[row + x]) - mean) * wa[W + x] : 0.0f);
#else
        return make_float2(ra[x], next ? ra[row + x] : 0.0f);
#endif
    }
};

__device__ __forceinline__ TileIn tile_in(const FC_IN* __restrict__ tiles, long long frame, int row,
                                          const int* __restrict__ offsets, const float* __restrict__ mean,
                                          const unsigned char* __restrict__ status,
                                          const float* __restrict__ window, int n, long long t) {
#if FC_RAW
    return TileIn{tiles + (t / n) * frame + offsets[t % n], row, window, mean[t], status[t] != 0};
#else
    return TileIn{tiles + t * frame, row};
#endif
}

// The whole transform: leaves the correlation map of tile t (its rows y = SPLIT j + s) in
// shared memory, map row y at floats [j * 2 LD, j * 2 LD + NX) of S.
__device__ __forceinline__ void correlate(float2* S, const float2* twx, const float2* twy,
                                          const TileIn& tile, const float2* __restrict__ R, bool all_rows,
                                          int s, Peak& pk) {
    // 1. rows: tile rows 2p, 2p+1 as one complex row, zero-padded to NX; the pair's two rows
    //    of S (2 LD >= NX + 1 complex) hold the FFT, then the two half spectra. A column split:
    //    block s takes half the pairs, each in a line of NX of its team's own after the lag
    //    tables, and writes each column of the pair's half spectra to the block that owns it.
    pk.best = EBSDXC_NEG_INF;
    pk.at = -1;
    if (COLS > 1) cluster_sync();  // the peer runs: its shared memory may be written
    {
        Teams<FC_TX> tm;
        constexpr int ITEMS = (H + 1) / 2;
        constexpr int MINE = COLS > 1 ? (ITEMS + 1) / 2 : ITEMS;
        const int p0 = COLS > 1 ? s * MINE : 0;
        for (int base = tm.first; base < MINE; base += tm.step) {
            const int p = p0 + tm.item(base);
            const bool valid = p < ITEMS && p < p0 + MINE;
            float2* L = COLS > 1 ? S + ROWS * LD + 2 * (NX + NY) + tm.item(tm.first) * NX : S + 2 * p * LD;
            float2 v[N1X];
            if (valid && tm.lane < N2X) {
                const bool has_b = 2 * p + 1 < H;
#pragma unroll
                for (int n1 = 0; n1 < N1X; ++n1) {
                    const int m = tm.lane + N2X * n1;
                    float2 z = make_float2(0.0f, 0.0f);
                    if (N2X * n1 < W && m < W) z = tile.pair(2 * p, m, has_b);
                    v[n1] = z;
                }
                stage_a<N1X, -1>(v, tm.lane, twx);
#pragma unroll
                for (int k1 = 0; k1 < N1X; ++k1) L[skew<N2X>(tm.lane, k1)] = v[k1];
            }
            __syncwarp();
            float2 u[N2X], bq[N2X];
            const bool act = valid && tm.lane < N1X;
            if (act) {
#pragma unroll
                for (int n2 = 0; n2 < N2X; ++n2) u[n2] = L[skew<N2X>(n2, tm.lane)];
                Dft<N2X, -1>::run(u);
            }
            __syncwarp();
            if (act) {
#pragma unroll
                for (int k2 = 0; k2 < N2X; ++k2) L[tm.lane + N1X * k2] = u[k2];
            }
            __syncwarp();
            // unpack Z = A + i B: A[m] = (Z[m] + conj Z[-m]) / 2, B[m] = (Z[m] - conj Z[-m]) / 2i
            if (act) {
#pragma unroll
                for (int k2 = 0; k2 < N2X; ++k2) {
                    const int m = tm.lane + N1X * k2;
                    if (N1X * k2 <= NX / 2 && m <= NX / 2) {
                        const float2 zp = L[m == 0 ? 0 : NX - m];
                        const float2 z = u[k2];
                        u[k2] = make_float2(0.5f * (z.x + zp.x), 0.5f * (z.y - zp.y));
                        bq[k2] = make_float2(0.5f * (z.y + zp.y), -0.5f * (z.x - zp.x));
                    }
                }
            }
            __syncwarp();
            if (act) {
#pragma unroll
                for (int k2 = 0; k2 < N2X; ++k2) {
                    const int m = tm.lane + N1X * k2;
                    if (N1X * k2 <= NX / 2 && m <= NX / 2) {
                        if (COLS > 1) {
                            const int b = m < C0 ? 0 : 1;
                            float2* dst = S + 2 * p * LD + (m - b * C0);
                            if (b != s) dst = peer(dst, b);
                            dst[0] = u[k2];
                            dst[LD] = bq[k2];
                        } else {
                            L[m] = u[k2];
                            L[LD + m] = bq[k2];
                        }
                    }
                }
            }
        }
    }
    if (COLS > 1) cluster_sync();  // the peer's columns written
    else __syncthreads();
    // 2. columns: forward FFT (rows >= H are zero), product with the reference, inverse FFT
    //    with the roles of N1 and N2 swapped, starting from the registers of stage B.
#if FC_SPLIT > 1 && FC_COLS == 1
    columns_split(S, twy, R, s);
#else
    {
        // this block's columns of the half spectrum: all, or those of a column split
        const int ncol = COLS > 1 ? (s ? NXH - C0 : C0) : NXH;
        const float2* Rc = COLS > 1 && s ? R + (long long)C0 * NY : R;
        Teams<FC_TY> tm;
        for (int base = tm.first; base < ncol; base += tm.step) {
            const int c = tm.item(base);
            const bool valid = c < ncol;
            float2* col = S + c;
            float2 v[N1Y];
            const bool act_a = valid && tm.lane < N2Y;
            if (act_a) column_stage_a(col, tm.lane, twy, v);
            __syncwarp();
            if (act_a) {
#pragma unroll
                for (int k1 = 0; k1 < N1Y; ++k1) col[skew<N2Y>(tm.lane, k1) * LD] = v[k1];
            }
            __syncwarp();
            float2 u[N2Y];
            const bool act_b = valid && tm.lane < N1Y;
            if (act_b) {
#pragma unroll
                for (int n2 = 0; n2 < N2Y; ++n2) u[n2] = col[skew<N2Y>(n2, tm.lane) * LD];
                Dft<N2Y, -1>::run(u);
                const float2* rc = Rc + (long long)c * NY;
#pragma unroll
                for (int k2 = 0; k2 < N2Y; ++k2) u[k2] = cmul(u[k2], __ldg(rc + tm.lane + N1Y * k2));
                // inverse, N = N2 x N1: this thread is n2' = k1 and holds n1' = k2
                stage_a<N2Y, 1>(u, tm.lane, twy);
            }
            __syncwarp();
            if (act_b) {
#pragma unroll
                for (int k = 0; k < N2Y; ++k) col[skew<N1Y>(tm.lane, k) * LD] = u[k];
            }
            __syncwarp();
            column_inverse_b<N2Y>(col, tm.lane, act_a);
        }
    }
#endif
#if FC_COLS > 1
    swap_columns(S, s);
#endif
    __syncthreads();
    // 3. rows: half spectra of map rows 2q, 2q+1 as one complex row Z = A + i B (Hermitian
    //    extension, imaginary parts of the DC and Nyquist terms dropped as irfft does); the
    //    inverse FFT is a + i b, written as floats over the pair's rows.
    {
        Teams<FC_TX> tm;
        float* Mf = reinterpret_cast<float*>(S);
        const RowPairs rp(all_rows);
        for (int base = tm.first; base < rp.items; base += tm.step) {
            const int it = tm.item(base);
            const bool valid = it < rp.items;
            const int q = rp.q(it);
            float2* L = S + 2 * q * MLD;
            float2 v[N1X];
            if (valid && tm.lane < N2X) {
                const bool has_b = 2 * q + 1 < NYL;
#pragma unroll
                for (int n1 = 0; n1 < N1X; ++n1) {
                    const int m = tm.lane + N2X * n1;
                    const bool far = m > NX / 2;
                    const int mm = far ? NX - m : m;
                    float2 a = L[mm];
                    float2 b = has_b ? L[MLD + mm] : make_float2(0.0f, 0.0f);
                    if (mm == 0 || 2 * mm == NX) { a.y = 0.0f; b.y = 0.0f; }
                    if (far) { a.y = -a.y; b.y = -b.y; }
                    v[n1] = make_float2(a.x - b.y, a.y + b.x);
                }
                stage_a<N1X, 1>(v, tm.lane, twx);
            }
            __syncwarp();
            if (valid && tm.lane < N2X) {
#pragma unroll
                for (int k1 = 0; k1 < N1X; ++k1) L[skew<N2X>(tm.lane, k1)] = v[k1];
            }
            __syncwarp();
            float2 u[N2X];
            const bool act = valid && tm.lane < N1X;
            if (act) {
#pragma unroll
                for (int n2 = 0; n2 < N2X; ++n2) u[n2] = L[skew<N2X>(n2, tm.lane)];
                Dft<N2X, 1>::run(u);
            }
            __syncwarp();
            if (act) {
                float* ya = Mf + (long long)(2 * q) * 2 * MLD;
                const int iya = TRACK ? lag_row(2 * q * SPLIT + s) : -1;
                const int iyb = TRACK && 2 * q + 1 < NYL ? lag_row((2 * q + 1) * SPLIT + s) : -1;
                float top = EBSDXC_NEG_INF;
#pragma unroll
                for (int k2 = 0; k2 < N2X; ++k2) {
                    const int m = tm.lane + N1X * k2;
                    ya[m] = u[k2].x;
                    ya[2 * MLD + m] = u[k2].y;
                    if (TRACK) {
                        const bool col = lag_col(m) >= 0;
                        if (col && iya >= 0) top = fmaxf(top, u[k2].x);
                        if (col && iyb >= 0) top = fmaxf(top, u[k2].y);
                    }
                }
                if (TRACK) {
                    if (top > pk.best) {
                        pk.best = top;
                        pk.at = base;
                    } else if (top == pk.best) {
                        pk.at = -1;
                    }
                }
            }
        }
    }
    __syncthreads();
}

// Shared memory: spectrum / map (ROWS x LD complex), twiddles (NX, then NY complex), and
// for the peak kernel the window lag tables (NY, then NX doubles).
__device__ __forceinline__ float2* setup(const float2* __restrict__ tw, const double* __restrict__ wy = nullptr,
                                         const double* __restrict__ wx = nullptr) {
    extern __shared__ __align__(16) float2 fc_smem[];
    float2* twx = fc_smem + ROWS * LD;  // NX entries, then NY
    for (int i = threadIdx.x; i < NX + NY; i += blockDim.x) twx[i] = tw[i];
    if (wy != nullptr) {
        double* lag = reinterpret_cast<double*>(twx + NX + NY);
        for (int i = threadIdx.x; i < NY; i += blockDim.x) lag[i] = wy[i];
        for (int i = threadIdx.x; i < NX; i += blockDim.x) lag[NY + i] = wx[i];
    }
    __syncthreads();
    return fc_smem;
}

// Conjugate reference spectrum of block t: ref holds K sets of n_ref spectra (NXH x NY each);
// pattern t / n_ref uses set ref_of[t / n_ref] where indexed, else set 0.
__device__ __forceinline__ const float2* reference(const float2* __restrict__ ref, int n_ref,
                                                   const int* __restrict__ ref_of, int indexed, long long t) {
    const long long set = indexed ? (long long)ref_of[t / n_ref] * n_ref : 0LL;
    return ref + (set + t % n_ref) * NXH * NY;
}

// Map row y (mod NY), in this block (rank s) or its peer.
__device__ __forceinline__ const float* map_row(const float* Mf, int y, int s) {
    const int r = y % SPLIT;
    const float* m = Mf + (y / SPLIT) * 2 * MLD;
    return r == s ? m : peer(m, r);
}

// The least search index among the values this thread wrote in the inverse row pass (correlate,
// with the same all_rows) at lags of the search that equal m, or 0x7fffffff: the same teams,
// row pairs and columns as the pass, in round `at` only where at >= 0 (pk.at). A round's values
// are loaded before any is compared, so that the loads overlap (a load and branch per value took
// 7k cycles a ROI at 96x96).
__device__ __forceinline__ int tracked_index(const float* Mf, float m, int s, bool all_rows, int at) {
    const Teams<FC_TX> tm;
    const RowPairs rp(all_rows);
    int bi = 0x7fffffff;
    if (tm.lane >= N1X) return bi;
    for (int base = at >= 0 ? at : tm.first; base < rp.items; base += tm.step) {
        const int it = tm.item(base);
        if (it >= rp.items) break;
        const int q = rp.q(it);
        const float* ya = Mf + (long long)(2 * q) * 2 * MLD;
        const int iya = lag_row(2 * q * SPLIT + s);
        const int iyb = 2 * q + 1 < NYL ? lag_row((2 * q + 1) * SPLIT + s) : -1;
        float va[N2X], vb[N2X];
#pragma unroll
        for (int k2 = 0; k2 < N2X; ++k2) {
            va[k2] = ya[tm.lane + N1X * k2];
            vb[k2] = ya[2 * MLD + tm.lane + N1X * k2];
        }
#pragma unroll
        for (int k2 = 0; k2 < N2X; ++k2) {
            const int ix = lag_col(tm.lane + N1X * k2);
            if (ix >= 0 && iya >= 0 && va[k2] == m) bi = min(bi, iya * (2 * RX + 1) + ix);
            if (ix >= 0 && iyb >= 0 && vb[k2] == m) bi = min(bi, iyb * (2 * RX + 1) + ix);
        }
        if (at >= 0) break;
    }
    return bi;
}

// The block's integer peak from each thread's largest value (pk, TRACK): the block maximum m
// (NaN never wins), then the least search index of m among the threads that hold it (usually
// one, in one round; every thread and round where all values tie), so (m, index) is
// numpy.argmax's over the lags.
// Thread 0 returns true with it, warp 0 gets the index, every thread gets m in best.
__device__ __forceinline__ bool tracked_argmax(const float* Mf, int s, bool all_rows, float* sval, int* sidx,
                                               int at, float& best, int& bi) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float m = warp_max(best);
    if (lane == 0) sval[warp] = m;
    __syncthreads();
    m = warp_max(lane < NWARPS ? sval[lane] : EBSDXC_NEG_INF);  // every warp: no second barrier
    int i = best == m ? tracked_index(Mf, m, s, all_rows, at) : 0x7fffffff;
    i = warp_min(i);
    if (lane == 0) sidx[warp] = i;
    __syncthreads();
    best = m;
    if (warp != 0) return false;  // a split's lead writes sidx[0] next
    bi = warp_min(lane < NWARPS ? sidx[lane] : 0x7fffffff);
    return lane == 0;
}

// The integer peak over |dy| <= RY, |dx| <= RX of the whole map: thread 0 returns true with it
// (in both blocks of a split, after a cluster barrier every thread of both blocks reaches).
// pk: this thread's largest value written (correlate, with the same all_rows), taken where TRACK.
__device__ __forceinline__ bool map_argmax(const float* Mf, int s, bool all_rows, float* sval, int* sidx,
                                           const Peak& pk, float& best, int& bi) {
    best = pk.best;
    bi = 0x7fffffff;
    const bool lead = TRACK ? tracked_argmax(Mf, s, all_rows, sval, sidx, pk.at, best, bi)
                            : block_lag_argmax(Mf, NY, NX, 2 * MLD, RY, RX, sval, sidx, best, bi, SPLIT, s);
    if (SPLIT > 1) {
        if (lead) { sval[0] = best; sidx[0] = bi; }
        cluster_sync();
        if (lead) {
            for (int r = 0; r < SPLIT; ++r)
                if (r != s) argmax_take(best, bi, *peer(sval, r), *peer(sidx, r));
        }
        cluster_sync();  // the peer has read sval, sidx
    }
    return lead;
}

// The 3x3 neighbourhood v[y][x] of the integer peak (ly, lx) of the map in shared memory,
// divided by the window autocorrelation where comp, and whether it is barely concave
// (flat; peaks.cu): all 32 lanes of one warp call it, and each gets them. Lanes 0..8 read one
// value each, so that their nine divisions run at once; lanes 0 and 1 take the curvatures of
// the values and of the autocorrelation at once. The same operations as one thread's
// barely_concave, so the same bits.
__device__ __forceinline__ void start_3x3(const float* Mf, int ly, int lx, const double* lag_y, const double* lag_x,
                                          int comp, int s, double v[3][3], bool& flat) {
    const int lane = threadIdx.x & 31, a = lane / 3, q = lane - 3 * a;
    double val = 0.0, wl = 1.0;
    if (lane < 9) {
        const int yy = ((ly + a - 1) % NY + NY) % NY;
        const int xx = ((lx + q - 1) % NX + NX) % NX;
        val = map_row(Mf, yy, s)[xx];
        if (comp) {
            wl = lag_y[yy] * lag_x[xx];
            val /= wl;
        }
    }
    double w[3][3], x[3][3];
#pragma unroll
    for (int i = 0; i < 9; ++i) {
        v[i / 3][i % 3] = __shfl_sync(0xffffffffu, val, i);
        w[i / 3][i % 3] = __shfl_sync(0xffffffffu, wl, i);
        x[i / 3][i % 3] = lane == 1 ? w[i / 3][i % 3] : v[i / 3][i % 3];
    }
    flat = false;
    if (comp) {
        const double k = largest_curvature(x), kw = __shfl_sync(0xffffffffu, k, 1);
        const double cn = v[1][1], cw = w[1][1];
        flat = !(cn > 0.0 && cw > 0.0 && k * cw <= CONDITION_MIN * kw * cn);
    }
}

}  // namespace fc

// Correlation maps (T, NY, NX) in the circular lag layout of the FFT engine. ref_of, indexed:
// the reference set of each pattern (fc::reference).
__global__ void FC_CLUSTER __launch_bounds__(FC_NT, 1)
fused_maps(const FC_IN* __restrict__ tiles, long long frame, int row, const int* __restrict__ offsets,
           const float* __restrict__ mean, const unsigned char* __restrict__ status,
           const float* __restrict__ window, const float2* __restrict__ ref,
           int n_ref, const int* __restrict__ ref_of, int indexed, const float2* __restrict__ tw,
           float* __restrict__ out) {
    using namespace fc;
    float2* S = setup(tw);
    const long long t = blockIdx.x / SPLIT;
    const int s = cluster_rank();
    const TileIn in = tile_in(tiles, frame, row, offsets, mean, status, window, n_ref, t);
    Peak pk;  // not searched here
    correlate(S, S + ROWS * LD, S + ROWS * LD + NX, in, reference(ref, n_ref, ref_of, indexed, t),
              true, s, pk);
    const float* Mf = reinterpret_cast<const float*>(S);
    float* o = out + t * (long long)NY * NX;
    for (int i = threadIdx.x; i < NYL * NX; i += blockDim.x) {
        const int j = i / NX, x = i - j * NX;
        o[(j * SPLIT + s) * NX + x] = Mf[j * 2 * MLD + x];
    }
}

// Peaks: integer search over |dy| <= RY, |dx| <= RX and 3x3 fit, as find_peaks (peaks.cu)
// on the maps fused_maps writes. wy (NY,), wx (NX,): window autocorrelation by lag mod N,
// used where comp != 0 (the launch gives NX + NY more doubles of shared memory then). method: 0 none, 1 parabolic, 2 gaussian, 3 quadratic (M_* of peaks.cu).
__global__ void FC_CLUSTER __launch_bounds__(FC_NT, 1)
fused_peaks(const FC_IN* __restrict__ tiles, long long frame, int row, const int* __restrict__ offsets,
            const float* __restrict__ mean, const unsigned char* __restrict__ status,
            const float* __restrict__ window, const float2* __restrict__ ref,
            int n_ref, const int* __restrict__ ref_of, int indexed, const float2* __restrict__ tw,
            const double* __restrict__ wy,
            const double* __restrict__ wx, int comp, int method, double* __restrict__ out_y, double* __restrict__ out_x,
            float* __restrict__ out_value, unsigned char* __restrict__ out_border) {
    using namespace fc;
    __shared__ float sval[32];
    __shared__ int sidx[32];
    float2* S = setup(tw, comp ? wy : nullptr, wx);
    const double* lag_y = reinterpret_cast<const double*>(S + ROWS * LD + NX + NY);
    const double* lag_x = lag_y + NY;
    const long long t = blockIdx.x / SPLIT;
    const int s = cluster_rank();
    const TileIn in = tile_in(tiles, frame, row, offsets, mean, status, window, n_ref, t);
    Peak pk;
    correlate(S, S + ROWS * LD, S + ROWS * LD + NX, in, reference(ref, n_ref, ref_of, indexed, t),
              false, s, pk);
    const float* Mf = reinterpret_cast<const float*>(S);
    constexpr int rw = 2 * RX + 1;
    float best;
    int bi;
    // rank 0 reports (its warp 0 fits); in a split it reads the peer's rows, so neither block
    // leaves before the end
    const bool lead = map_argmax(Mf, s, false, sval, sidx, pk, best, bi);
    if (threadIdx.x < 32 && s == 0) {
        bi = __shfl_sync(0xffffffffu, bi, 0);
        const int ly = bi / rw - RY, lx = bi % rw - RX;
        double dy = 0.0, dx = 0.0;
        if (method != M_NONE) {
            double v[3][3];
            bool flat;
            start_3x3(Mf, ly, lx, lag_y, lag_x, comp, s, v, flat);
            if (method == M_PARABOLIC) fit_3x3<M_PARABOLIC>(v, dy, dx);
            else if (method == M_GAUSSIAN) fit_3x3<M_GAUSSIAN>(v, dy, dx);
            else fit_3x3<M_QUADRATIC>(v, dy, dx);
            drop_loose(flat, dy, dx);  // as find_peaks (peaks.cu)
        }
        if (lead) {
            out_value[t] = best;
            out_border[t] = ((RY > 0 && abs(ly) == RY) || (RX > 0 && abs(lx) == RX)) ? 1 : 0;
            out_y[t] = ly + dy;
            out_x[t] = lx + dx;
        }
    }
    if (SPLIT > 1) cluster_sync();
}

// ------------------------------------------------------------ dft refinement in the kernel
// The `dft` subpixel method (ebsdxc.peaks.dft_refine_peak) from the map in shared memory: the
// correlation at a lag (y, x) off the integer grid is the trigonometric interpolant of the map
// samples c[j][k], exactly what the matrix DFT of the cross-power spectrum evaluates (the
// spectrum is the map's real FFT):
//   g(y, x) = 1 / (NY NX) sum_j sum_k c[j][k] Re(Dy(y - j) Dx(x - k)),
//   Dy(t) = sum over the NY signed frequencies ky of exp(2 pi i ky t / NY),
//   Dx(t) = sum over kx = 0..NX/2 of w_kx exp(2 pi i kx t / NX) (w = 1 at 0 and NX/2, else 2),
// both summed in closed form. Per 3x3 stencil that is 6 weighted sums down every map column,
// then 9 across the column sums (stencil_values); per CW columns of a larger grid, 2 CW along
// every map row, then R down the row sums (grid_values). No spectrum reads.

namespace fc {

// sum_{k=0}^{x-1} k^p, p <= 4, as polynomials in x (so that S(b) - S(a) sums a..b-1 for any a <= b).
__device__ __forceinline__ double power_sum(double x, int p) {
    const double s1 = 0.5 * x * (x - 1.0);
    switch (p) {
        case 0: return x;
        case 1: return s1;
        case 2: return (x - 1.0) * x * (2.0 * x - 1.0) / 6.0;
        case 3: return s1 * s1;
        default: return (x - 1.0) * x * (2.0 * x - 1.0) * (3.0 * x * x - 3.0 * x - 1.0) / 30.0;
    }
}

// sum_{k=a}^{a+n-1} w_k exp(2 pi i k t / N) for t near 0, where the closed forms below lose
// their denominator (|sin(pi t / N)| < 1e-6, so |theta k| < 1e-3 for theta = 2 pi t / N): the
// Taylor series to theta^4 from the power sums of k, within 1e-13 of the sum (a loop of n
// double sincos in one thread, as before, held the whole block at the next barrier). w_k = 1,
// or with ends = (w_a, w_{a+n-1}) 2 between the ends.
__device__ double2 geometric_small(double t, int a, int n, int N, const double* ends) {
    const double th = 6.283185307179586476925 * t / N;
    double m[5];
    for (int p = 0; p < 5; ++p) m[p] = power_sum((double)a + n, p) - power_sum((double)a, p);
    if (ends != nullptr) {
        if (n == 1) return make_double2(ends[0], 0.0);
        double pa = 1.0, pb = 1.0;
        const double b = (double)a + n - 1;
        for (int p = 0; p < 5; ++p) {
            m[p] = 2.0 * m[p] - (2.0 - ends[0]) * pa - (2.0 - ends[1]) * pb;
            pa *= a;
            pb *= b;
        }
    }
    const double t2 = th * th;
    return make_double2(m[0] - 0.5 * t2 * m[2] + t2 * t2 / 24.0 * m[4], th * m[1] - th * t2 / 6.0 * m[3]);
}

// x - 2 rint(x / 2), in [-1, 1]: sin(pi x) and cos(pi x) keep their values. The reduction is
// done in double, so the float trigonometry sees a small argument, rounded relative to itself:
// a lag of 60 px rounded to float first would move by 4e-6 px, which flattens the broad peaks
// of EBSD correlation maps' finest stencils (5e-2 px apart) by as much as their curvature.
// The callers wrap t into [-N/2, N/2] first (the weights have period N): sin(pi t / N), the
// denominator, then stays away from the zeros at t = +-N where a float argument loses it.
__device__ __forceinline__ float red2(double x) { return (float)(x - 2.0 * rint(0.5 * x)); }

// t / N as t times a rounded reciprocal: a double division is a dependent chain of a dozen FP64
// instructions, and the weights of a stencil were its bound. The product is within an ulp of
// the quotient, far below the float rounding that red2 applies next.
constexpr double RNY = 1.0 / NY, RNX = 1.0 / NX;

// Dy(t): all NY signed frequencies (fftfreq order does not matter for the sum). The closed
// form and its denominator s = sin(pi t / NY), which must be at least 1e-6 (weight_full); a
// caller of several weights makes them all before it mends any, so that their trigonometry
// overlaps.
// |t| <= NY / 2 (the callers wrap it): t / NY needs no reduction before its float rounding.
__device__ __forceinline__ float2 weight_full_closed(double t, float& s) {
    float cs;
    sincospif((float)(t * RNY), &s, &cs);
    const float r = sinpif(red2(t)) / s;
    if (NY % 2) return make_float2(r, 0.0f);
    return make_float2(r * cs, -r * s);  // frequencies -NY/2 .. NY/2 - 1: centre -1/2
}
__device__ __noinline__ float2 weight_full_small(double t) {
    const double2 d = geometric_small(t, -(NY / 2), NY, NY, nullptr);
    return make_float2((float)d.x, (float)d.y);
}
__device__ __forceinline__ float2 weight_full(double t) {
    float s;
    const float2 w = weight_full_closed(t, s);
    return fabsf(s) < 1e-6f ? weight_full_small(t) : w;
}

// Dx(t): the half spectrum kx = 0..NX/2 with the Hermitian weights of dft_grid (closed form and
// denominator as weight_full_closed).
__device__ __noinline__ float2 weight_half_small(double t) {
    constexpr int M = NX / 2;
    const double ends[2] = {1.0, NX % 2 ? 2.0 : 1.0};
    const double2 d = geometric_small(t, 0, M + 1, NX, ends);
    return make_float2((float)d.x, (float)d.y);
}
__device__ __forceinline__ float2 weight_half_closed(double t, float& s) {
    constexpr int M = NX / 2;
    s = sinpif((float)(t * RNX));  // |t| <= NX / 2, as weight_full_closed
    float re, im, sn, cs;
    if (NX % 2 == 0) {  // 1 + 2 sum_{k=1}^{M-1} e^{ik theta} + e^{iM theta}, theta = 2 pi t / NX
        const float a = 2.0f * sinpif(red2(t * ((M - 1) * RNX))) / s;  // up to (M - 1) / 2: reduced
        sincospif(red2(0.5 * t), &sn, &cs);  // M / NX = 1 / 2
        re = 1.0f + a * cs;
        im = a * sn;
        sincospif(red2(t), &sn, &cs);  // e^{i M theta} = e^{i pi t}
        re += cs;
        im += sn;
    } else {  // 1 + 2 sum_{k=1}^{M} e^{ik theta}
        const float a = 2.0f * sinpif(red2(t * (M * RNX))) / s;
        sincospif(red2(t * ((M + 1) * RNX)), &sn, &cs);
        re = 1.0f + a * cs;
        im = a * sn;
    }
    return make_float2(re, im);
}
__device__ __forceinline__ float2 weight_half(double t) {
    float s;
    const float2 w = weight_half_closed(t, s);
    return fabsf(s) < 1e-6f ? weight_half_small(t) : w;
}

// Columns of the general grid summed in one pass over the map (fused.py chooses them by the
// shared memory left: each pass widens every map value to double again, and with three columns
// those conversions bound the row sums).
#ifndef FC_GRID_CW
#define FC_GRID_CW 3
#endif
constexpr int CW = FC_GRID_CW;
#ifndef FC_GRID_MMA
#define FC_GRID_MMA 0
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
constexpr bool GRID_MMA = FC_GRID_MMA;
#else
constexpr bool GRID_MMA = false;
#endif

// Row stride of d.rows in doubles: the column sums' 16 lanes read a double2 from each of 16
// consecutive rows, in the fewest wavefronts where the stride is 2 mod 4 doubles (at CW = 4, 8
// doubles put the rows on 2 of 8 groups of four banks: 8 wavefronts instead of 2).
constexpr int RLD = (2 * CW) % 4 == 2 ? 2 * CW : 2 * CW + 2;

// d.wx: Dx_v(k) (Re, Im) of the chunk's columns at [v][k] for piece_sums; for the tensor cores
// at [k][v], so that a B fragment (4 k x 8 weight columns) at 3 or 4 columns is one run of bytes
// (at [v][k] its rows fall in the same banks). With the map rows of fc::MMA_D, shared-load bank
// conflicts fell from 45.2M to 31.5M a launch at 128x128 +-24 (H100, ncu), with no measured
// change in speed.
__device__ __forceinline__ int wx_at(int v, int k) {
    return GRID_MMA ? k * CW + v : v * NX + k;
}

// Scratch of the dft and upsampled kernels after the window lag tables (fused._grid_scratch
// bytes for a grid of R x R lags evaluated at Q x Q nodes, Q <= R; fused.grid_nodes).
struct GridScratch {
    double* pos;  // y, x, ly, lx, flat, again
    double* g;    // [R][R] correlation at the grid's lags ([Q][Q] at its nodes before grid_finish)
    double* gsum;  // [Q][Q] the sum over the blocks of a split (SPLIT > 1 only; in `rows` where it fits)
    double* acy;  // [R] window autocorrelation at its rows' lags
    double* acx;  // [R]
    float2* wy;   // [Q][NYL] Dy at its row nodes, for this block's map rows
    float4* wy4;  // d.wy 16-byte aligned: the 3x3 stencil's row weights, for each of this block's
                  // map rows Re Dy at the three stencil rows and (-1)^j of the map row (the pass
                  // loads them with one instruction a row instead of three)
    double2* wx;  // [CW][NX] Dx at CW of its column nodes (16-byte aligned); the stencil uses three
    double* rows;  // [NYL][RLD] sum_k c[j][k] (Re, Im) Dx_v(k) for those columns; for the 3x3
                   // stencil the warps' nine sums, then the window autocorrelation's pieces
    double* lt;   // [R][Q] the interpolation's first product (Q < R only)
};

__device__ __forceinline__ GridScratch grid_scratch(float2* S, int R, int Q) {
    GridScratch d;
    d.pos = reinterpret_cast<double*>(S + ROWS * LD + NX + NY) + NY + NX;
    d.g = d.pos + 8;
    // The split's sum is made after the last row sums are read, and the peer block reads only
    // d.g: it can share the row sums' space when that is large enough (fused._grid_scratch).
    const bool gsum_in_rows = Q * Q <= RLD * NYL;
    d.gsum = d.g + R * R;
    d.acy = d.gsum + (SPLIT > 1 && !gsum_in_rows ? Q * Q : 0);
    d.acx = d.acy + R;
    d.wy = reinterpret_cast<float2*>(d.acx + R);
    // Pointer arithmetic, not integer rounding, so that the compiler keeps these shared-memory
    // loads (LDS, not generic LD), aligned by their offsets from S (16-byte aligned: setup), which
    // it folds: a test of a pointer's own bits lost the address space, and the stencil's loads and
    // stores of d.wx and d.rows were generic. wy4 (4 NYL floats, 2 more where it moves) fits in
    // wy where Q = 3, the stencil's.
    d.wy4 = reinterpret_cast<float4*>(
        d.wy + ((reinterpret_cast<const char*>(d.wy) - reinterpret_cast<const char*>(S)) & 15 ? 1 : 0));
    float2* after = d.wy + Q * NYL;
    if ((reinterpret_cast<const char*>(after) - reinterpret_cast<const char*>(S)) & 15) after += 1;
    d.wx = reinterpret_cast<double2*>(after);
    d.rows = reinterpret_cast<double*>(d.wx + CW * NX);
    d.lt = d.rows + RLD * NYL;
    if (gsum_in_rows) d.gsum = d.rows;
    return d;
}

__device__ __forceinline__ double warp_sum_all(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One step of warp_sum9: the lanes with `upper` keep the upper part (padded with zeros).
template <int N, int K, int O>
__device__ __forceinline__ void halve(const double (&v)[N], double (&k)[K], bool upper) {
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const double lo = v[i], hi = i + K < N ? v[i + K] : 0.0;
        k[i] = (upper ? hi : lo) + __shfl_xor_sync(0xffffffffu, upper ? lo : hi, O);
    }
}

// The sums of v[0..8] over the warp, by halving: lane sum9_lane(i) returns the sum of v[i]
// (12 shuffles of a double, where nine whole-warp sums took 45).
__host__ __device__ constexpr int sum9_lane(int i) {
    return (i < 5 ? 0 : 16) + 2 * (i < 5 ? i : i - 5) + ((i < 5 ? i : i - 5) >= 3 ? 2 : 0);
}
__device__ __forceinline__ double warp_sum9(const double (&v)[9]) {
    const int lane = threadIdx.x & 31;
    double k1[5], k2[3], k3[2], k4[1];
    halve<9, 5, 16>(v, k1, lane & 16);
    halve<5, 3, 8>(k1, k2, lane & 8);
    halve<3, 2, 4>(k2, k3, lane & 4);
    halve<2, 1, 2>(k3, k4, lane & 2);
    return k4[0] + __shfl_xor_sync(0xffffffffu, k4[0], 1);
}

// The row sums of the general grid in pieces p = b G + g: map rows RB b .. RB b + RB - 1, every
// G-th column from g. Each column's CW complex weights are read once for RB rows: with one
// row a piece and three columns, those reads (48 bytes for six multiply-adds) bound the sums. G
// is a power of two <= 32 that keeps the rounds over the block few and their idle threads few; a
// row's G pieces are summed by log2(G) shuffles of 2 CW doubles (at CW = 3 weighed as 5 columns
// each against 1 + RB per column: the weight reads, then a map read and six multiply-adds per
// row; piece_cost counts thirds of that, with CW / 3 weight reads a column). RB = 4 where NX
// is a multiple of 4, else 1: measured on an H100, 4 rows against 1 took 96x96 full mode (NX
// 192) from 5.39 to 3.55 ms and 256x256 +-24 (288) from 2.70 to 2.18, and 128x128 +-24 (162)
// from 2.06 to 2.11 (benchmarks/results/argmax-2026-11-27).
#ifndef FC_GRID_RB
#define FC_GRID_RB (FC_NX % 4 == 0 ? 4 : 1)
#endif
constexpr int RB = FC_GRID_RB, NB = (NYL + RB - 1) / RB;
__host__ __device__ constexpr int piece_cost(int g, int shuffles) {
    return ((NB * g + NT - 1) / NT) * ((CW + 3 * RB) * ((NX + g - 1) / g)
                                       + RB * shuffles * CW * ((g > 1) + (g > 2) + (g > 4) + (g > 8) + (g > 16)));
}
__host__ __device__ constexpr int best_pieces(int shuffles) {
    int best = 1;
    for (int g = 2; g <= 32; g *= 2)
        if (piece_cost(g, shuffles) < piece_cost(best, shuffles)) best = g;
    return best;
}
constexpr int GR = best_pieces(5);

// sum_k c[j][k] (Re, Im) Dx_v(k) over the columns of piece p, v < CW, for its RB rows (the last
// block's rows past the map repeat its last row), in double: a subpixel value is a sum of terms
// up to (log N)^2 times larger than it, and the finest stencils of a broad peak differ by 1e-4
// of it. The weights are doubles in shared memory: converting float weights at every
// multiply-add (F2F runs at a quarter of the FP64 rate) was the bound.
template <int G>
__device__ __forceinline__ void piece_sums(const float* Mf, const double2* wx, int p, double (&a)[RB][2 * CW]) {
    const int b = p / G, g = p - b * G;
    const float* mr[RB];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        mr[r] = Mf + min(RB * b + r, NYL - 1) * 2 * MLD;
#pragma unroll
        for (int c = 0; c < 2 * CW; ++c) a[r][c] = 0.0;
    }
#pragma unroll 2
    for (int k = g; k < NX; k += G) {
        double cv[RB];
#pragma unroll
        for (int r = 0; r < RB; ++r) cv[r] = mr[r][k];
#pragma unroll
        for (int v = 0; v < CW; ++v) {
            const double2 q = wx[v * NX + k];
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                a[r][2 * v] = fma(cv[r], q.x, a[r][2 * v]);
                a[r][2 * v + 1] = fma(cv[r], q.y, a[r][2 * v + 1]);
            }
        }
    }
}

// Dx at the three grid columns xc + (v0 + v - c) h, v < nv, into d.wx (zero beyond nv); every
// thread calls it.
__device__ __forceinline__ void column_table(const GridScratch& d, double xc, double h, int v0, int nv, int c) {
    __syncthreads();  // wy written; the rows and wx of the last chunk read
    for (int i = threadIdx.x; i < CW * NX; i += blockDim.x) {
        const int v = i / NX, k = i - v * NX;
        const double tt = xc - k + (v0 + v - c) * h;
        const float2 w = v < nv ? weight_half(tt - NX * rint(tt * RNX)) : make_float2(0.0f, 0.0f);
        d.wx[wx_at(v, k)] = make_double2(w.x, w.y);
    }
    __syncthreads();
}

constexpr int KM = (NX + 31) / 32;  // a lane's columns of a map row in the 3x3 stencil

// The window autocorrelation at a stencil's three row lags and three column lags in pieces of
// 64 frequencies: 0..NY/2 (the pairs ky, -ky added, cos being even) and 0..NX/2 (Hermitian
// weights), a warp per piece and its three lags.
constexpr int CY = (NY / 2 + 64) / 64, CX = (NXH + 63) / 64;
constexpr int STEP_CS = NY / 2 + 1 + NXH;  // a step's row of fused_dft's step_cs
// The 3x3 stencil keeps the warps' sums (9 each) and these pieces in d.rows.
constexpr bool STENCIL_ROWS = 9 * NWARPS + 3 * (CY + CX) <= 2 * CW * NYL;

// c cos(2 pi k (y + (u - 1) h) / N), u < 3, into a[u]: cos(A -+ B) from the sines and cosines of
// A = 2 pi k y / N (one double sincospi) and B = 2 pi k h / N, which depends on the step only and
// comes from the engine's table (fused.py: step_cs; it was a second sincospi, and these warps were
// as long as the weights).
__device__ __forceinline__ void cos3(double c, int k, double y, double rn, double2 b, double (&a)[3]) {
    double f = k * y * rn;
    f -= floor(f);
    double sa, ca;
    sincospi(2.0 * f, &sa, &ca);
    a[0] = fma(c, ca * b.x + sa * b.y, a[0]);
    a[1] = fma(c, ca, a[1]);
    a[2] = fma(c, ca * b.x - sa * b.y, a[2]);
}

// The row weight's real part and the column weight of an even length N, at t (wrapped to
// |t| <= N / 2) from cot(pi t / N) (one sincospif and a division): there
//   Re Dy(t) = sin(pi t) cot(pi t / N),  Dx(t) = cot(pi t / N) (sin(pi t), 1 - cos(pi t))
// (the closed forms of weight_full_closed and weight_half_closed, simplified), and sin(pi t),
// 1 - cos(pi t) = 2 sin^2(pi t / 2) depend on the map row or column only through its parity p:
// the stencil's constants (stencil_tables) hold them for each lag and parity, from arguments
// reduced so that they are near 0 where t is (float rounding of an argument near 1 would cost
// the weight at t = 0, the largest, most of its digits). Where |sin(pi t / N)| < 1e-6 the
// callers take weight_*_small instead, as before.
__device__ __forceinline__ float cot_even(double t, double rn, float& s) {
    float c;
    sincospif((float)(t * rn), &s, &c);
    return c / s;
}

// The tables of a 3x3 stencil about (yc, xc) of step h, in one round after the constants (it
// was five rounds of trigonometry, three barriers apart, and as long as the pass over the map):
// Re Dy at the three stencil rows for this block's map rows (d.wy4, with the row's sign: the pass
// takes Im Dy from its alternating sums) and Dx at the three stencil columns (a thread per map
// row or column: three independent weights), and where comp the window autocorrelation's
// pieces (warps from the last, which have no weights to make; step_cs: cos and sin of
// 2 pi k h / N for ky = 0..NY/2, then kx = 0..NXH-1). Even lengths take their weights from
// cot_even and the constants kc, made first by twelve threads: kc[2 u + p] = sin(pi (y_u - p)),
// kc[6 + 2 (2 v + p)], kc[7 + 2 (2 v + p)] = 2 sin(pi a) cos(pi a), 2 sin^2(pi a) for
// a = (x_v - p) / 2 reduced mod 1 (their sign cancels in both). Ends with a barrier.
__device__ __forceinline__ void stencil_tables(const GridScratch& d, double yc, double xc, double h, int comp,
                                               const double* __restrict__ Sy, const double* __restrict__ Sx,
                                               const double2* __restrict__ step_cs, int s, float* kc) {
    constexpr bool EY = NY % 2 == 0, EX = NX % 2 == 0;
    if (EY || EX) {
        const int i = threadIdx.x;
        if (i < 6) {
            const int u = i >> 1, p = i & 1;
            kc[i] = sinpif(red2(yc + (u - 1) * h - p));
        } else if (i < 12) {
            const int v = (i - 6) >> 1, p = i & 1;
            const double a = 0.5 * (xc + (v - 1) * h - p);
            float sn, cs;
            sincospif((float)(a - rint(a)), &sn, &cs);
            kc[6 + 2 * (i - 6)] = 2.0f * sn * cs;
            kc[7 + 2 * (i - 6)] = 2.0f * sn * sn;
        }
        __syncthreads();
    }
    for (int i = threadIdx.x; i < NYL + NX; i += blockDim.x) {
        const bool row = i < NYL;
        const int k = row ? i : i - NYL;
        const int jg = row ? i * SPLIT + s : k;  // the map row, or column
        const double t0 = row ? yc - jg : xc - k;
        double t[3];
        float sd[3];
        float2 w[3];
#pragma unroll
        for (int u = 0; u < 3; ++u) {
            const double tt = t0 + (u - 1) * h;  // D has period N: the least |t| (see red2)
            t[u] = row ? tt - NY * rint(tt * RNY) : tt - NX * rint(tt * RNX);
            if (row ? EY : EX) {
                const float ct = cot_even(t[u], row ? RNY : RNX, sd[u]);
                const float* q = row ? kc + 2 * u + (jg & 1) : kc + 6 + 2 * (2 * u + (jg & 1));
                w[u] = row ? make_float2(q[0] * ct, 0.0f) : make_float2(q[0] * ct, q[1] * ct);
            } else {
                w[u] = row ? weight_full_closed(t[u], sd[u]) : weight_half_closed(t[u], sd[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < 3; ++u) {
            if (fabsf(sd[u]) < 1e-6f) w[u] = row ? weight_full_small(t[u]) : weight_half_small(t[u]);
            if (!row) d.wx[u * NX + k] = make_double2(w[u].x, w[u].y);
        }
        if (row) d.wy4[i] = make_float4(w[0].x, w[1].x, w[2].x, (jg & 1) ? -1.0f : 1.0f);
    }
    if (comp) {  // the warps from the last, which have no weights to make where NYL + NX < NT
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        for (int i = NWARPS - 1 - warp; i < CY + CX; i += NWARPS) {
            double a[3] = {0.0, 0.0, 0.0};
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                if (i < CY) {
                    const int k = i * 64 + 32 * e + lane;
                    if (k <= NY / 2)
                        cos3((k == 0 || 2 * k == NY) ? Sy[k] : Sy[k] + Sy[NY - k], k, yc, RNY, step_cs[k], a);
                } else {
                    const int l = (i - CY) * 64 + 32 * e + lane;
                    if (l < NXH) {
                        const double wl = (l == 0 || (NX % 2 == 0 && l == NX / 2)) ? 1.0 : 2.0;
                        cos3(Sx[l] * wl, l, xc, RNX, step_cs[NY / 2 + 1 + l], a);
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < 3; ++u) {
                const double t = warp_sum_all(a[u]);
                if (lane == 0) d.rows[9 * NWARPS + 3 * i + u] = t;
            }
        }
    }
    __syncthreads();
}

// The 3x3 stencil's values into d.g from the warps' sums in d.rows (over both blocks of a
// split, added in rank order so that both hold the same values and take the same steps),
// scaled and divided by the window autocorrelation where comp, as grid_finish. Threads 0..8
// write them; warp 0 may read them when it returns.
__device__ __forceinline__ void stencil_finish(const GridScratch& d, int comp, double sy_sum, double sx_sum) {
    __syncthreads();  // the warps' sums
    const int i = threadIdx.x;
    double a = 0.0;
    if (i < 9) {
#pragma unroll
        for (int w = 0; w < NWARPS; ++w) a += d.rows[w * 9 + i];
    }
    if (SPLIT > 1) {
        if (i < 9) d.g[i] = a;
        cluster_sync();
        if (i < 9) {
            a = 0.0;
            for (int r = 0; r < SPLIT; ++r) a += *peer(d.g + i, r);
        }
        cluster_sync();  // the peer has read d.g
    }
    if (i < 9) {
        // one division (each is a dependent chain of a dozen FP64 instructions, on the path of
        // a block whose other threads wait at the next barrier)
        double val;
        if (comp) {
            const int u = i / 3, v = i - 3 * u;
            const double* part = d.rows + 9 * NWARPS;
            double ay = 0.0, ax = 0.0;
#pragma unroll
            for (int p = 0; p < CY; ++p) ay += part[3 * p + u];
#pragma unroll
            for (int p = 0; p < CX; ++p) ax += part[3 * (CY + p) + v];
            val = a * (sy_sum * sx_sum) / (((double)NY * NX) * (ay * ax));
        } else {
            val = a * (1.0 / ((double)NY * NX));
        }
        d.g[i] = val;
    }
    if (i < 32) __syncwarp();
}

// The 3x3 stencil (`dft`) in one pass over the map. Each lane sums, for each of its columns k,
// c[j][k] Re Dy_u(j) over its warp's rows j in float (FP32 multiply-adds only), then the real part
// of (that + i its Im Dy_u sum) Dx_v(k) over its columns in double, and lanes and warps are summed
// once at the end.
// The float sums run over a warp's rows (12 at NY = 192), as the former row partials ran over a
// lane's columns (6), each against one dominant term; the float map of the inverse FFT bounds
// the interpolant's precision either way (tests/engines/test_fused.py, against float64).
// Summing rows per column, rather than columns per row, widens each lane's sums to double once
// per pass instead of once per row (conversions to double run at a quarter of the FP64 rate and
// were the pass's bound). The imaginary part of Dy needs no sum per stencil row: for even NY,
// Im Dy(y - j) = -sin(pi (y - j)) = -(-1)^j sin(pi y) (weight_full_closed), so it is one
// alternating sum of the column, (-1)^j c[j][k], times -sin(pi y_u) for all three rows u: four
// float operations a map value instead of six, twelve double products a column instead of
// eighteen. sin(pi y_u) is stencil_tables' constant kc[2 u] (it was three sinpif a lane a pass),
// whose argument may be near 1: these weights are at most 1 in size, against the largest real
// weight's N, so its rounding does not reach the sum. d.g is complete in warp 0 when it returns.
__device__ __forceinline__ void stencil_values(const float* Mf, const GridScratch& d, double yc, double xc, double h,
                                               int comp, const double* __restrict__ Sy, const double* __restrict__ Sx,
                                               double sy_sum, double sx_sum, const double2* __restrict__ step_cs,
                                               int s) {
    constexpr bool IMY = NY % 2 == 0;  // odd NY: Dy is real
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __shared__ float kc[18];  // stencil_tables' constants; kc[2 u] = sin(pi y_u) for even NY
    stencil_tables(d, yc, xc, h, comp, Sy, Sx, step_cs, s, kc);
    float b[3][KM], alt[KM];
#pragma unroll
    for (int m = 0; m < KM; ++m) {
        alt[m] = 0.0f;
#pragma unroll
        for (int u = 0; u < 3; ++u) b[u][m] = 0.0f;
    }
    for (int j = warp; j < NYL; j += NWARPS) {
        const float* mr = Mf + j * 2 * MLD;
        const float4 w = d.wy4[j];  // w.w: (-1)^j of the map row
#pragma unroll
        for (int m = 0; m < KM; ++m) {
            const int k = lane + 32 * m;
            const float cv = k < NX ? mr[k] : 0.0f;
            b[0][m] = fmaf(cv, w.x, b[0][m]);
            b[1][m] = fmaf(cv, w.y, b[1][m]);
            b[2][m] = fmaf(cv, w.z, b[2][m]);
            if (IMY) alt[m] = fmaf(cv, w.w, alt[m]);
        }
    }
    double acc[9] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};  // [u][v]
    double ai[3] = {0.0, 0.0, 0.0};  // sum over k of the alternating sums times Im Dx_v(k)
#pragma unroll
    for (int m = 0; m < KM; ++m) {
        const int k = lane + 32 * m;
        if (k < NX) {
            const double a = alt[m];
#pragma unroll
            for (int v = 0; v < 3; ++v) {
                const double2 q = d.wx[v * NX + k];
#pragma unroll
                for (int u = 0; u < 3; ++u) acc[3 * u + v] = fma((double)b[u][m], q.x, acc[3 * u + v]);
                if (IMY) ai[v] = fma(a, q.y, ai[v]);
            }
        }
    }
    if (IMY) {
        // Re(b Dx) = Re b Re Dx - Im b Im Dx, Im b_u = -sin(pi y_u) (the alternating sum)
#pragma unroll
        for (int u = 0; u < 3; ++u) {
            const double sy = kc[2 * u];  // read before stencil_finish's barrier; the next pass writes after it
#pragma unroll
            for (int v = 0; v < 3; ++v) acc[3 * u + v] = fma(sy, ai[v], acc[3 * u + v]);
        }
    }
    const double t = warp_sum9(acc);
#pragma unroll
    for (int i = 0; i < 9; ++i)
        if (lane == sum9_lane(i)) d.rows[warp * 9 + i] = t;
    stencil_finish(d, comp, sy_sum, sx_sum);
}

// The sums over map rows in d.g, scaled (over both blocks of a split, added in rank order so
// that both hold the same values and take the same steps) and divided by the window
// autocorrelation where comp; every thread calls it. Where Q < R, d.g holds the Q x Q values at
// the nodes, and the R x R grid is their interpolant, lerp (R x Q) on both sides: the values
// are the trigonometric interpolant of the map, band-limited, so that the polynomial through
// them at Chebyshev nodes meets them within 4e-9 of the largest at Q = 12 over the 1.5 px of
// the grid (fused.grid_nodes; tests/engines/test_fused.py).
__device__ __forceinline__ void grid_finish(const GridScratch& d, int R, int Q, int comp,
                                            const double* __restrict__ lerp) {
    __syncthreads();
    double* g = d.g;
    if (SPLIT > 1) {
        cluster_sync();
        for (int i = threadIdx.x; i < Q * Q; i += blockDim.x) {
            double a = 0.0;
            for (int r = 0; r < SPLIT; ++r) a += *peer(d.g + i, r);
            d.gsum[i] = a;
        }
        cluster_sync();  // the peer has read d.g
        g = d.gsum;
    }
    if (Q < R) {
        for (int i = threadIdx.x; i < R * Q; i += blockDim.x) {  // lt = lerp g
            const int u = i / Q, p = i - u * Q;
            double a = 0.0;
            for (int m = 0; m < Q; ++m) a = fma(__ldg(lerp + u * Q + m), g[m * Q + p], a);
            d.lt[i] = a;
        }
        __syncthreads();  // g read (it may be d.g, written next)
        g = d.lt;
    }
    for (int i = threadIdx.x; i < R * R; i += blockDim.x) {
        const int u = i / R, v = i - u * R;
        double val;
        if (Q < R) {  // (lt lerp^T)[u][v]
            val = 0.0;
            for (int p = 0; p < Q; ++p) val = fma(g[u * Q + p], __ldg(lerp + v * Q + p), val);
        } else {
            val = g[i];
        }
        val /= (double)NY * NX;
        if (comp) val /= d.acy[u] * d.acx[v];
        d.g[i] = val;
    }
    __syncthreads();
}

// The row sums on the FP64 tensor cores (sm_80 and later, where fused.py asks for them with
// FC_GRID_MMA): d.rows = Mf W, the map's NYL x NX floats widened to double times W = the
// chunk's NX x 2 CW weights (Re, Im of Dx_v, from d.wx), as mma.m8n8k4.f64 tiles: A 8 map
// rows x 4 columns (lane l: row l / 4, column l % 4), B 4 x 8 weights (lane l: row l % 4,
// column l / 4), C 8 x 8 (lane l: row l / 4, columns 2 (l % 4) and + 1). A warp per 8 map rows
// (MMA_D apart; rows past the map repeat its last, and are not written), every column of the map,
// ceil(2 CW / 8) tiles of 8 weight columns (those past 2 CW zero, not written), two
// accumulators each (even and odd steps, so that consecutive products do not wait on each
// other), added once at the end. The same sums as piece_sums, each product in one exact FMA,
// in another order.
__device__ __forceinline__ void dmma884(double& c0, double& c1, double a, double b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
                 : "+d"(c0), "+d"(c1)
                 : "d"(a), "d"(b));
#endif
}

// A tile's 8 map rows are MMA_D apart: a map row is 2 MLD floats, which moves a fragment's
// 4-float pieces by MROW banks a row; rows that leave 4 banks between pieces load A in one
// wavefront (consecutive rows at an MLD odd overlap by 2 banks: two wavefronts).
constexpr int MROW = (2 * MLD) % 32, MMA_D = MROW % 4 == 2 ? 2 : 1;

__device__ __forceinline__ void row_sums_mma(const float* Mf, const GridScratch& d) {
    constexpr int TN = (2 * CW + 7) / 8, TR = MMA_D * ((NYL + 8 * MMA_D - 1) / (8 * MMA_D)), TK = (NX + 3) / 4;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const double* w = reinterpret_cast<const double*>(d.wx);  // [k][2 CW weight columns]
    for (int r = warp; r < TR; r += NWARPS) {  // the same rounds in every lane of a warp
        const int j = 8 * MMA_D * (r / MMA_D) + r % MMA_D + MMA_D * g;  // this lane's map row
        const float* mr = Mf + min(j, NYL - 1) * 2 * MLD;
        double c[TN][2][2];
#pragma unroll
        for (int t = 0; t < TN; ++t)
#pragma unroll
            for (int e = 0; e < 2; ++e) c[t][e][0] = c[t][e][1] = 0.0;
        // k step s into accumulator e
        const auto step = [&](int s, int e) {
            const int k = 4 * s + q;
            const double a = k < NX ? (double)mr[k] : 0.0;
#pragma unroll
            for (int t = 0; t < TN; ++t) {
                // weight column 8 t + g: Dx_{(8 t + g) / 2}, Re or Im
                const double b = k < NX && 8 * t + g < 2 * CW ? w[k * 2 * CW + 8 * t + g] : 0.0;
                dmma884(c[t][e][0], c[t][e][1], a, b);
            }
        };
        for (int s = 0; s + 1 < TK; s += 2) {
            step(s, 0);
            step(s + 1, 1);
        }
        if (TK % 2) step(TK - 1, 0);
        if (j < NYL) {
#pragma unroll
            for (int t = 0; t < TN; ++t) {
                if (8 * t + 2 * q < 2 * CW) {
                    d.rows[j * RLD + 8 * t + 2 * q] = c[t][0][0] + c[t][1][0];
                    d.rows[j * RLD + 8 * t + 2 * q + 1] = c[t][0][1] + c[t][1][1];
                }
            }
        }
    }
}

// The row sums on the FP64 pipes (before sm_80): the GR pieces of a row in neighbouring lanes,
// summed by shuffles.
__device__ __forceinline__ void row_sums_pipes(const float* Mf, const GridScratch& d) {
    for (int p0 = 0; p0 < NB * GR; p0 += NT) {  // the same rounds in every lane of a warp
        const int p = p0 + threadIdx.x;
        double a[RB][2 * CW];
        if (p < NB * GR) {
            piece_sums<GR>(Mf, d.wx, p, a);
        } else {
#pragma unroll
            for (int r = 0; r < RB; ++r)
#pragma unroll
                for (int c = 0; c < 2 * CW; ++c) a[r][c] = 0.0;
        }
#pragma unroll
        for (int o = GR / 2; o > 0; o >>= 1) {
#pragma unroll
            for (int r = 0; r < RB; ++r)
#pragma unroll
                for (int c = 0; c < 2 * CW; ++c) a[r][c] += __shfl_xor_sync(0xffffffffu, a[r][c], o);
        }
        if (p < NB * GR && p % GR == 0) {
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                const int j = RB * (p / GR) + r;
                if (j < NYL) {
#pragma unroll
                    for (int c = 0; c < 2 * CW; ++c) d.rows[j * RLD + c] = a[r][c];
                }
            }
        }
    }
}

// One chunk of a Q x Q grid (of lags, or of an R x R grid's nodes): its nv <= CW columns from v0
// (their Dx in d.wx) summed along every map row into d.rows, then down the rows into d.g (Q x nv
// values, row stride Q). Every thread calls it.
__device__ __forceinline__ void chunk_sums(const float* Mf, const GridScratch& d, int Q, int v0, int nv) {
    if (GRID_MMA) row_sums_mma(Mf, d);
    else row_sums_pipes(Mf, d);
    __syncthreads();
    // the grid's values in these columns: a thread per grid row u and piece of the map rows, P
    // pieces of neighbouring lanes (P as large as one round of the block allows), each with all
    // nv columns, so that a row weight is read and widened to double once for them (a thread
    // per value widened it nv times: the conversions, at a quarter of the FP64 rate, made the
    // column sums 45k of 214k cycles per ROI at 128x128 +-24)
    int P = 1;
    while (P < 32 && 2 * P * Q <= NT) P *= 2;
    for (int i0 = 0; i0 < Q * P; i0 += NT) {  // the same rounds in every lane of a warp
        const int i = i0 + threadIdx.x, u = i / P, piece = i - u * P;
        double a[CW];
#pragma unroll
        for (int v = 0; v < CW; ++v) a[v] = 0.0;
        if (u < Q) {
            for (int j = piece; j < NYL; j += P) {
                const float2 w = d.wy[u * NYL + j];
                const double wr = w.x, wi = w.y;
                const double2* r = reinterpret_cast<const double2*>(d.rows + j * RLD);
#pragma unroll
                for (int v = 0; v < CW; ++v) {
                    const double2 q = r[v];
                    a[v] = fma(wr, q.x, fma(-wi, q.y, a[v]));
                }
            }
        }
#pragma unroll
        for (int m = P / 2; m > 0; m >>= 1) {
#pragma unroll
            for (int v = 0; v < CW; ++v) a[v] += __shfl_xor_sync(0xffffffffu, a[v], m);
        }
        if (u < Q && piece == 0) {
#pragma unroll
            for (int v = 0; v < CW; ++v)  // unrolled: a[] stays in registers
                if (v < nv) d.g[u * Q + v0 + v] = a[v];
        }
    }
}

// A lane's share of the window autocorrelation at lag t (before the warp's sum; over its sum
// S by the caller): along y over the NY signed frequencies of Sy, along x over the half
// spectrum of Sx with Hermitian weights.
__device__ __forceinline__ double autocorr_part(const double* __restrict__ Sy, const double* __restrict__ Sx,
                                                bool row, double t, int lane) {
    double a = 0.0;
    if (row) {
        for (int k = lane; k < NY; k += 32) {
            const int kk = k < (NY + 1) / 2 ? k : k - NY;
            double f = kk * t * RNY;
            f -= floor(f);
            a += Sy[k] * cospi(2.0 * f);
        }
    } else {
        for (int l = lane; l < NXH; l += 32) {
            const double wl = (l == 0 || (NX % 2 == 0 && l == NX / 2)) ? 1.0 : 2.0;
            double f = l * t * RNX;
            f -= floor(f);
            a += Sx[l] * wl * cospi(2.0 * f);
        }
    }
    return a;
}

// The correlation (divided by the window autocorrelation where comp) at the 3x3 lags
// (yc + (u - 1) h, xc + (v - 1) h) of a `dft` stencil into d.g[3 u + v], from the map Mf in shared
// memory; every thread calls it. stencil_values where d.rows has room for its sums (d.g complete
// in warp 0 when it returns), else the general grid's sums (d.g complete in every thread).
__device__ void grid_values(const float* Mf, const GridScratch& d, double yc, double xc, double h, int comp,
                            const double* __restrict__ Sy, const double* __restrict__ Sx, double sy_sum,
                            double sx_sum, const double2* __restrict__ step_cs, int s = 0) {
    if (STENCIL_ROWS) {
        stencil_values(Mf, d, yc, xc, h, comp, Sy, Sx, sy_sum, sx_sum, step_cs, s);
        return;
    }
    constexpr int R = 3, c = 1;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < R * NYL; i += blockDim.x) {
        const int u = i / NYL, j = i - u * NYL;
        const double tt = yc - (j * SPLIT + s) + (u - c) * h;  // Dy has period NY: the least |t| (see red2)
        d.wy[i] = weight_full(tt - NY * rint(tt * RNY));
    }
    if (comp) {  // window autocorrelation at the grid's lags, as dft_refine (peaks.cu): a warp per lag
        for (int u = warp; u < 2 * R; u += NWARPS) {
            const double a = warp_sum_all(u < R ? autocorr_part(Sy, Sx, true, yc + (u - c) * h, lane)
                                                : autocorr_part(Sy, Sx, false, xc + (u - R - c) * h, lane));
            if (lane == 0) {
                if (u < R) d.acy[u] = a / sy_sum;
                else d.acx[u - R] = a / sx_sum;
            }
        }
    }
    for (int v0 = 0; v0 < R; v0 += CW) {  // CW columns of the grid at a time
        const int nv = min(CW, R - v0);
        column_table(d, xc, h, v0, nv, c);
        chunk_sums(Mf, d, R, v0, nv);
    }
    grid_finish(d, R, R, comp, nullptr);
}

// The tables of the upsampled grid about a whole-pixel centre, made once per engine
// (fused_upsampled_tables): Dy and Dx at the grid's nodes, and the window autocorrelation at its
// lags, depend on the centre only through its remainder mod N, so a grid reads them rotated
// instead of evaluating Q (NYL + NX) closed forms and 2R autocorrelation sums (28k of 214k cycles
// per ROI at 128x128 +-24). Larger grids (R > Q) are summed at Q x Q Chebyshev nodes and
// interpolated (grid_finish): at 128x128 +-24, 8 passes over the map and 576 column sums a
// grid became 3 (4 columns a pass) and 144.
struct GridTables {
    const float2* __restrict__ wy;   // [Q][NY] Dy(m + o_u) at the node offsets o_u (the grid's (u - c) h where Q = R)
    const double2* __restrict__ wx;  // [Q][NX] Dx(m + o_v)
    const double* __restrict__ acy;  // [NY][R] window autocorrelation at m + (u - c) h over its sum (comp)
    const double* __restrict__ acx;  // [NX][R]
    const double* __restrict__ lerp;  // [R][Q] the grid from its nodes (Q < R), else null
};

__device__ __forceinline__ int wrap(int m, int n) {
    m %= n;
    return m < 0 ? m + n : m;
}

// A thread's share of a chunk's column weights (CW NX of them, zero beyond nv), read ahead.
constexpr int WX_EACH = (CW * NX + NT - 1) / NT;
__device__ __forceinline__ void column_fetch(const GridTables& tb, int mx, int Q, int v0, double2 (&w)[WX_EACH]) {
    const int nv = min(CW, Q - v0);
#pragma unroll
    for (int e = 0; e < WX_EACH; ++e) {
        const int i = threadIdx.x + e * NT, v = i / NX, k = i - v * NX;
        w[e] = i < CW * NX && v < nv ? tb.wx[(v0 + v) * NX + wrap(mx - k, NX)] : make_double2(0.0, 0.0);
    }
}

// The correlation (divided by the window autocorrelation where comp) at the R x R lags
// (iy + (u - R/2) h, ix + (v - R/2) h) into d.g[u * R + v], from the tables: the sums at the
// Q x Q nodes, then grid_finish; every thread calls it, d.g is complete when it returns. The
// next chunk's column weights are read while this chunk's sums run.
__device__ void tabled_grid(const float* Mf, const GridScratch& d, int iy, int ix, int R, int Q, int comp,
                            const GridTables& tb, int s) {
    const int my = wrap(iy, NY), mx = wrap(ix, NX);
    for (int i = threadIdx.x; i < Q * NYL; i += blockDim.x) {
        const int u = i / NYL, j = i - u * NYL;
        d.wy[i] = tb.wy[u * NY + wrap(my - (j * SPLIT + s), NY)];
    }
    if (comp) {
        for (int i = threadIdx.x; i < 2 * R; i += blockDim.x) {
            if (i < R) d.acy[i] = tb.acy[my * R + i];
            else d.acx[i - R] = tb.acx[mx * R + i - R];
        }
    }
    double2 w[WX_EACH];
    column_fetch(tb, mx, Q, 0, w);
    for (int v0 = 0; v0 < Q; v0 += CW) {  // CW columns of nodes at a time
        __syncthreads();  // wy written; the rows and wx of the last chunk read
#pragma unroll
        for (int e = 0; e < WX_EACH; ++e)
            if (threadIdx.x + e * NT < CW * NX) {
                const int i = threadIdx.x + e * NT, v = i / NX;
                d.wx[wx_at(v, i - v * NX)] = w[e];
            }
        __syncthreads();
        // the next chunk's weights in registers through this chunk's sums where they are few
        // (with more, the row sums' registers spill; the few chunks then wait for their reads)
        if (v0 + CW < Q) {
            if (WX_EACH <= 2) column_fetch(tb, mx, Q, v0 + CW, w);
        }
        chunk_sums(Mf, d, Q, v0, min(CW, Q - v0));
        if (WX_EACH > 2 && v0 + CW < Q) column_fetch(tb, mx, Q, v0 + CW, w);
    }
    grid_finish(d, R, Q, comp, tb.lerp);
}

// The integer peak of the map and its 3x3 neighbourhood, as fused_peaks: writes out_value,
// out_border and, in thread 0, d.pos = (ly + dy, lx + dx) of the quadratic fit (fit = true) or
// (ly, lx), then ly, lx, flat; all threads return after a barrier.
__device__ void integer_start(const float* Mf, const GridScratch& d, const double* lag_y, const double* lag_x,
                              int comp, bool fit, float* sval, int* sidx, long long t, float* out_value,
                              unsigned char* out_border, int s, const Peak& pk) {
    constexpr int rw = 2 * RX + 1;
    float best;
    int bi;
    const bool lead = map_argmax(Mf, s, true, sval, sidx, pk, best, bi);  // correlate(..., all_rows = true)
    if (threadIdx.x < 32) {  // warp 0 (thread 0 leads)
        bi = __shfl_sync(0xffffffffu, bi, 0);
        const int ly = bi / rw - RY, lx = bi % rw - RX;
        double v[3][3], dy = 0.0, dx = 0.0;
        bool flat;
        start_3x3(Mf, ly, lx, lag_y, lag_x, comp, s, v, flat);
        if (lead) {
            if (s == 0) {
                out_value[t] = best;
                out_border[t] = ((RY > 0 && abs(ly) == RY) || (RX > 0 && abs(lx) == RX)) ? 1 : 0;
            }
            if (fit) {
                fit_3x3<M_QUADRATIC>(v, dy, dx);
                drop_loose(flat, dy, dx);
            }
            d.pos[0] = ly + dy;
            d.pos[1] = lx + dx;
            d.pos[2] = ly;
            d.pos[3] = lx;
            d.pos[4] = flat ? 1.0 : 0.0;
            d.pos[5] = 0.0;
        }
    }
    __syncthreads();
}

// The index of the first maximum of d.g (R x R), as numpy.argmax and the loop
// `if (g[i] > g[best]) best = i` from g[0] (NaN never wins; a NaN g[0] stays): every thread
// returns it. The block shares the scan (one thread over a 24 x 24 grid held the block up).
__device__ int grid_argmax(const GridScratch& d, int R, int* sidx) {
    double best = d.g[0];
    int bi = 0;
    for (int i = threadIdx.x; i < R * R; i += blockDim.x) {
        const double v = d.g[i];
        if (v > best || (v == best && i < bi)) { best = v; bi = i; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const double v = __shfl_down_sync(0xffffffffu, best, o);
        const int i = __shfl_down_sync(0xffffffffu, bi, o);
        if (v > best || (v == best && i < bi)) { best = v; bi = i; }
    }
    __syncthreads();  // sidx free (the integer search's slots)
    if ((threadIdx.x & 31) == 0) sidx[threadIdx.x >> 5] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        int b = sidx[0];
        for (int w = 1; w < NWARPS; ++w) {
            const int i = sidx[w];
            if (d.g[i] > d.g[b] || (d.g[i] == d.g[b] && i < b)) b = i;
        }
        sidx[0] = b;
    }
    __syncthreads();
    const int b = sidx[0];
    __syncthreads();  // read before the next round writes
    return b;
}

// The end of both refinements (thread 0): NaN where a barely concave compensated peak moved
// more than LOOSE_REACH px or any peak more than `reach` px from its integer peak
// (drop_loose_peaks, drop_far_peaks).
__device__ __forceinline__ void finish(const GridScratch& d, double y, double x, double reach, long long t,
                                       double* out_y, double* out_x) {
    const double ly = d.pos[2], lx = d.pos[3];
    if (d.pos[4] != 0.0 && !(fabs(y - ly) <= LOOSE_REACH && fabs(x - lx) <= LOOSE_REACH)) {
        y = PEAK_NAN;
        x = PEAK_NAN;
    }
    if (!(fabs(y - ly) <= reach && fabs(x - lx) <= reach)) { y = PEAK_NAN; x = PEAK_NAN; }
    out_y[t] = y;
    out_x[t] = x;
}

}  // namespace fc

// Peaks refined by the `dft` method: the integer peak and 3x3 quadratic start of fused_peaks,
// then 3x3 stencils of step steps[0] (repeated up to max_moves times while a step reaches the
// stencil's edge), steps[1], ... as dft_refine (peaks.cu); NaN where the last step still
// reaches its edge, and as fc::finish says. Sy (NY,), Sx (NX,): the window power spectra,
// sy_sum, sx_sum their sums (comp only); step_cs (n_steps, STEP_CS): cos and sin of
// 2 pi k steps[i] / N for ky = 0..NY/2, then kx = 0..NXH-1 (fused.step_table).
__global__ void FC_CLUSTER __launch_bounds__(FC_NT, 1)
fused_dft(const FC_IN* __restrict__ tiles, long long frame, int row, const int* __restrict__ offsets,
          const float* __restrict__ mean, const unsigned char* __restrict__ status,
          const float* __restrict__ window, const float2* __restrict__ ref,
          int n_ref, const int* __restrict__ ref_of, int indexed, const float2* __restrict__ tw,
          const double* __restrict__ wy, const double* __restrict__ wx, int comp,
          const double* __restrict__ Sy, const double* __restrict__ Sx, double sy_sum, double sx_sum,
          const double* __restrict__ steps, const double2* __restrict__ step_cs, int n_steps, int max_moves,
          double reach, double* __restrict__ out_y,
          double* __restrict__ out_x, float* __restrict__ out_value, unsigned char* __restrict__ out_border) {
    using namespace fc;
    __shared__ float sval[32];
    __shared__ int sidx[32];
    float2* S = setup(tw, comp ? wy : nullptr, wx);
    const double* lag_y = reinterpret_cast<const double*>(S + ROWS * LD + NX + NY);
    const GridScratch d = grid_scratch(S, 3, 3);
    const long long t = blockIdx.x / SPLIT;
    const int s = cluster_rank();
    const TileIn in = tile_in(tiles, frame, row, offsets, mean, status, window, n_ref, t);
    Peak pk;
    correlate(S, S + ROWS * LD, S + ROWS * LD + NX, in, reference(ref, n_ref, ref_of, indexed, t),
              true, s, pk);
    const float* Mf = reinterpret_cast<const float*>(S);
    integer_start(Mf, d, lag_y, lag_y + NY, comp, true, sval, sidx, t, out_value, out_border, s, pk);
    for (int st = 0, moves = 0; st < n_steps;) {
        const double h = steps[st], yc = d.pos[0], xc = d.pos[1];
        if (!(isfinite(yc) && isfinite(xc))) break;  // a failed start stays NaN (the same in every thread)
        grid_values(Mf, d, yc, xc, h, comp, Sy, Sx, sy_sum, sx_sum, step_cs + st * STEP_CS, s);
        if (threadIdx.x == 0) {
            double g[3][3];
            for (int u = 0; u < 3; ++u)
                for (int v = 0; v < 3; ++v) g[u][v] = d.g[u * 3 + v];
            double dy = 0.0, dx = 0.0;
            const bool beyond = stencil_step(g, dy, dx);
            d.pos[0] = yc + h * dy;
            d.pos[1] = xc + h * dx;
            d.pos[5] = beyond ? 1.0 : 0.0;
        }
        __syncthreads();
        ++moves;
        // pos is rewritten next round only after grid_values' barriers, which every thread
        // reaches after reading it
        if (!(st == 0 && d.pos[5] != 0.0 && moves < max_moves)) { ++st; moves = 0; }
    }
    if (threadIdx.x == 0 && s == 0) {
        const bool stuck = d.pos[5] != 0.0;  // the finest step still reached its edge
        finish(d, stuck ? PEAK_NAN : d.pos[0], stuck ? PEAK_NAN : d.pos[1], reach, t, out_y, out_x);
    }
    if (SPLIT > 1) cluster_sync();  // the peer may still read this block's map
}

// Peaks refined by the `upsampled` method (ebsdxc.peaks.upsampled_dft_peak): the correlation
// on an R x R grid of spacing 1 / up about the integer peak (R = ceil(1.5 up)), a quadratic
// fit to its maximum's 3x3 neighbourhood on the grid; where the maximum is on the grid's edge
// the grid is re-centred on the nearest whole pixel, at most max_recentre times (then NaN).
// The grid's values are sums at nodes x nodes lags (fused.grid_nodes), interpolated by grid_lerp
// (R x nodes) where nodes < R.
__global__ void FC_CLUSTER __launch_bounds__(FC_NT, 1)
fused_upsampled(const FC_IN* __restrict__ tiles, long long frame, int row, const int* __restrict__ offsets,
                const float* __restrict__ mean, const unsigned char* __restrict__ status,
                const float* __restrict__ window, const float2* __restrict__ ref,
                int n_ref, const int* __restrict__ ref_of, int indexed, const float2* __restrict__ tw,
                const double* __restrict__ wy, const double* __restrict__ wx, int comp,
                const float2* __restrict__ grid_wy, const double2* __restrict__ grid_wx,
                const double* __restrict__ grid_acy, const double* __restrict__ grid_acx,
                const double* __restrict__ grid_lerp, int nodes, int up, int max_recentre, double reach,
                double* __restrict__ out_y, double* __restrict__ out_x,
                float* __restrict__ out_value, unsigned char* __restrict__ out_border) {
    using namespace fc;
    __shared__ float sval[32];
    __shared__ int sidx[32];
    const int R = (3 * up + 1) / 2, c = R / 2;  // ceil(1.5 up)
    float2* S = setup(tw, comp ? wy : nullptr, wx);
    const double* lag_y = reinterpret_cast<const double*>(S + ROWS * LD + NX + NY);
    const GridScratch d = grid_scratch(S, R, nodes);
    const long long t = blockIdx.x / SPLIT;
    const int s = cluster_rank();
    const TileIn in = tile_in(tiles, frame, row, offsets, mean, status, window, n_ref, t);
    const GridTables tables{grid_wy, grid_wx, grid_acy, grid_acx, grid_lerp};
    Peak pk;
    correlate(S, S + ROWS * LD, S + ROWS * LD + NX, in, reference(ref, n_ref, ref_of, indexed, t),
              true, s, pk);
    const float* Mf = reinterpret_cast<const float*>(S);
    integer_start(Mf, d, lag_y, lag_y + NY, comp, false, sval, sidx, t, out_value, out_border, s, pk);
    if (threadIdx.x == 0) { d.pos[6] = d.pos[0]; d.pos[7] = d.pos[1]; }  // the grid's centre
    __syncthreads();
    for (int it = 0; it <= max_recentre; ++it) {
        const double cy = d.pos[6], cx = d.pos[7];
        tabled_grid(Mf, d, (int)cy, (int)cx, R, nodes, comp, tables, s);
        const int bi = grid_argmax(d, R, sidx);
        if (threadIdx.x == 0) {
            const int iu = bi / R, iv = bi % R;
            const int iu_c = min(max(iu, 1), R - 2), iv_c = min(max(iv, 1), R - 2);
            double v[3][3], du, dv;
            for (int a = 0; a < 3; ++a)
                for (int q = 0; q < 3; ++q) v[a][q] = d.g[(iu_c + a - 1) * R + iv_c + q - 1];
            fit_3x3<M_QUADRATIC>(v, du, dv);
            if (isnan(du)) du = 0.0;  // beside a maximum on the edge only: re-centred below
            if (isnan(dv)) dv = 0.0;
            d.pos[0] = cy + (iu_c + du - c) / up;
            d.pos[1] = cx + (iv_c + dv - c) / up;
            const bool edge = iu != iu_c || iv != iv_c;
            d.pos[5] = edge ? 1.0 : 0.0;
            d.pos[6] = rint(d.pos[0]);
            d.pos[7] = rint(d.pos[1]);
        }
        __syncthreads();
        const bool again = d.pos[5] != 0.0;
        __syncthreads();
        if (!again) break;
    }
    if (threadIdx.x == 0 && s == 0) {
        const bool stuck = d.pos[5] != 0.0;  // never inside a grid: no maximum to report
        finish(d, stuck ? PEAK_NAN : d.pos[0], stuck ? PEAK_NAN : d.pos[1], reach, t, out_y, out_x);
    }
    if (SPLIT > 1) cluster_sync();
}

// The tables of fused_upsampled (fc::GridTables) for upsample factor up and the Q node offsets
// of its grid (px from the centre): part 0 the weights at the nodes, a thread each; 1 the
// window autocorrelations at the grid's lags (comp), a warp each, summed as grid_values sums
// them. The same closed forms as the grids that evaluate them in place.
__global__ void fused_upsampled_tables(int part, int up, int nodes, const double* __restrict__ offset,
                                       const double* __restrict__ Sy, const double* __restrict__ Sx,
                                       double sy_sum, double sx_sum, float2* __restrict__ grid_wy,
                                       double2* __restrict__ grid_wx, double* __restrict__ grid_acy,
                                       double* __restrict__ grid_acx) {
    using namespace fc;
    const int R = (3 * up + 1) / 2, c = R / 2;
    const double h = 1.0 / up;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (part == 0) {
        if (i < (long long)nodes * NY) {
            const int u = (int)(i / NY), m = (int)(i - (long long)u * NY);
            const double tt = m + offset[u];
            grid_wy[i] = weight_full(tt - NY * rint(tt * RNY));
        } else if (i < (long long)nodes * (NY + NX)) {
            const long long q = i - (long long)nodes * NY;
            const int v = (int)(q / NX), m = (int)(q - (long long)v * NX);
            const double tt = m + offset[v];
            const float2 w = weight_half(tt - NX * rint(tt * RNX));
            grid_wx[q] = make_double2(w.x, w.y);
        }
        return;
    }
    const long long o = i / 32;  // (axis, m, u): m < NY, then m < NX
    const int lane = threadIdx.x & 31;
    if (o >= (long long)R * (NY + NX)) return;
    const bool row = o < (long long)R * NY;
    const long long q = row ? o : o - (long long)R * NY;
    const int m = (int)(q / R), u = (int)(q - (long long)m * R);
    const double a = warp_sum_all(autocorr_part(Sy, Sx, row, m + (u - c) * h, lane));
    if (lane == 0) {
        if (row) grid_acy[q] = a / sy_sum;
        else grid_acx[q] = a / sx_sum;
    }
}
