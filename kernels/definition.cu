// Definition-based cross-correlation kernels (Maděra, Šmelko, Kruliš): the paper's
// family, for every form and for full and window mode.
//
//   C[dy, dx] = sum_{y, x} L[y, x] * R[y + dy, x + dx]     (zero outside the matrices)
//
// for |dy| <= ry, |dx| <= rx (full mode: ry = h - 1, rx = w - 1). Output maps are
// (My, Mx) = (2 ry + 1, 2 rx + 1) and hold lag (dy, dx) at (dy mod My, dx mod Mx), the
// layout of an inverse FFT, so one peak search serves every engine.
//
// Forms are one pairing rule: pair (a, b), a < na, b < nb, correlates left matrix a
// with right matrix a * rs_a + b * rs_b and writes output map a * os_a + b * os_b.
//   n-to-mn (n lefts, rights (m, n)):  rs_a = 1, rs_b = n, os_a = 1, os_b = n
//   n-to-m  (every left with every right): rs_a = 0, rs_b = 1, os_a = m, os_b = 1
//   one-to-many / one-to-one: n-to-mn with n = 1.
// All matrices are float32, (h, w) row-major, contiguous; sums are accumulated in float.

struct Pairs {
    int na, nb, rs_a, rs_b, os_a, os_b;
};

__device__ __forceinline__ long long out_offset(const Pairs& p, int a, int b, int dy, int dx,
                                                int My, int Mx) {
    const int oy = dy < 0 ? dy + My : dy, ox = dx < 0 ? dx + Mx : dx;
    return ((long long)a * p.os_a + (long long)b * p.os_b) * My * Mx + (long long)oy * Mx + ox;
}

// Overlap-wise: one thread per (pair, lag), looping over the overlap. The reference point.
__global__ void xc_overlap_wise(const float* __restrict__ L, const float* __restrict__ R,
                                float* __restrict__ out, int h, int w, int ry, int rx,
        int na, int nb, int rs_a, int rs_b, int os_a, int os_b) {
    const Pairs p{na, nb, rs_a, rs_b, os_a, os_b};
    const int My = 2 * ry + 1, Mx = 2 * rx + 1, nlags = My * Mx;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)nlags * p.na * p.nb) return;
    const int lag = (int)(i % nlags);
    const long long pair = i / nlags;
    const int a = (int)(pair % p.na), b = (int)(pair / p.na);
    const int dy = lag / Mx - ry, dx = lag % Mx - rx;
    const float* Lm = L + (long long)a * h * w;
    const float* Rm = R + ((long long)a * p.rs_a + (long long)b * p.rs_b) * h * w;
    const int y0 = max(0, -dy), y1 = min(h, h - dy), x0 = max(0, -dx), x1 = min(w, w - dx);
    float acc = 0.0f;
    for (int y = y0; y < y1; ++y) {
        const float* l = Lm + y * w;
        const float* r = Rm + (y + dy) * w + dx;
        for (int x = x0; x < x1; ++x) acc = fmaf(l[x], r[x], acc);
    }
    out[out_offset(p, a, b, dy, dx, My, Mx)] = acc;
}

// Warp-per-overlap: one warp per (pair, lag); the lanes stride over the flattened overlap
// (coalesced reads) and reduce by shuffles. For very small matrices, where a thread per
// lag leaves most of the GPU idle and the loads of neighbouring lags do not coalesce.
__global__ void xc_warp_per_overlap(const float* __restrict__ L, const float* __restrict__ R,
                                    float* __restrict__ out, int h, int w, int ry, int rx,
        int na, int nb, int rs_a, int rs_b, int os_a, int os_b) {
    const Pairs p{na, nb, rs_a, rs_b, os_a, os_b};
    const int My = 2 * ry + 1, Mx = 2 * rx + 1, nlags = My * Mx;
    const long long wid = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (wid >= (long long)nlags * p.na * p.nb) return;  // uniform over the warp
    const int lag = (int)(wid % nlags);
    const long long pair = wid / nlags;
    const int a = (int)(pair % p.na), b = (int)(pair / p.na);
    const int dy = lag / Mx - ry, dx = lag % Mx - rx;
    const float* Lm = L + (long long)a * h * w;
    const float* Rm = R + ((long long)a * p.rs_a + (long long)b * p.rs_b) * h * w;
    const int y0 = max(0, -dy), x0 = max(0, -dx);
    const int oh = min(h, h - dy) - y0, ow = min(w, w - dx) - x0;
    float acc = 0.0f;
    for (int i = lane; i < oh * ow; i += 32) {
        const int y = y0 + i / ow, x = x0 + i % ow;
        acc = fmaf(Lm[y * w + x], Rm[(y + dy) * w + x + dx], acc);
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) out[out_offset(p, a, b, dy, dx, My, Mx)] = acc;
}

// Right row rho, columns u0 + lane (zero past the row's end), of KR matrices.
template <int W, int KR>
__device__ __forceinline__ void load_right(const float* const (&Rm)[KR], int rho, int u0, int l, int w,
                                           float (&v)[KR]) {
#pragma unroll
    for (int j = 0; j < KR; ++j) v[j] = u0 + l < w ? __ldg(Rm[j] + rho * w + u0 + l) : 0.0f;
}

// Column c of left rows top, top-1, ..., top-G+1 of KL matrices (zero outside the matrix).
template <int W, int KL, int G>
__device__ __forceinline__ void load_left(const float* const (&Lm)[KL], int top, int c, int h, int w,
                                          float (&v)[G][KL]) {
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
        for (int i = 0; i < KL; ++i) {
            const int y = top - g;
            v[g][i] = (y >= 0 && y < h && c >= 0 && c < w) ? __ldg(Lm[i] + y * w + c) : 0.0f;
        }
}

// Warp-shuffle family. A segment of W lanes (W = 32: a warp; 16 or 8 for narrow windows)
// computes W consecutive dx lags (dx0 + lane) of G consecutive dy lags (grouped-overlap)
// for KL left and KR right matrices (multi-matrix-both / multi-matrix-right), so one
// thread holds G*KL*KR sums. Right rows are read W values at a time, one per lane, and
// broadcast to the segment; each left row lives in a 2W-item register ring (lo, hi)
// from which every lane takes its own sliding value by one shuffle per step: the source
// lane picks which half to send, so the ring never moves (the paper shifts it, two
// shuffles per step). SPLITS > 1
// (split-row) divides the rows of the overlap among independent segments that
// accumulate with atomicAdd into a zeroed output: parallelism for few, large matrices.
// Rows where some of the G left rows fall outside the matrix (the paper's init and final
// phases of grouped-overlap) load zeros rather than branching in the inner loop.
template <int W, int KL, int KR, int G>
__global__ void __launch_bounds__(128)
xc_shuffle(const float* __restrict__ L, const float* __restrict__ R, float* __restrict__ out,
           int h, int w, int ry, int rx,
           int na, int nb, int rs_a, int rs_b, int os_a, int os_b, int splits) {
    const Pairs p{na, nb, rs_a, rs_b, os_a, os_b};
    static_assert(W == 8 || W == 16 || W == 32, "segment width");
    const int My = 2 * ry + 1, Mx = 2 * rx + 1;
    const int lane32 = threadIdx.x & 31, l = lane32 & (W - 1);
    const unsigned mask = W == 32 ? 0xffffffffu : (((1u << W) - 1u) << (lane32 & ~(W - 1)));
    long long seg = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / W;
    const int ndxc = (Mx + W - 1) / W, ndyb = (My + G - 1) / G;
    const int nab = (p.na + KL - 1) / KL, nbb = (p.nb + KR - 1) / KR;
    if (seg >= (long long)ndxc * ndyb * splits * nbb * nab) return;  // whole segment
    const int dxc = (int)(seg % ndxc);
    seg /= ndxc;
    const int dyb = (int)(seg % ndyb);
    seg /= ndyb;
    const int s = (int)(seg % splits);
    seg /= splits;
    const int bb = (int)(seg % nbb), ab = (int)(seg / nbb);
    const int dx0 = dxc * W - rx, dy0 = dyb * G - ry, a0 = ab * KL, b0 = bb * KR;

    const float* Lm[KL];
    const float* Rm[KR];  // arrays of pointers, indexed at compile time only
#pragma unroll
    for (int i = 0; i < KL; ++i) Lm[i] = L + (long long)min(a0 + i, p.na - 1) * h * w;
#pragma unroll
    for (int j = 0; j < KR; ++j)  // multi-matrix-both only runs with rs_a = 0 (n-to-m)
        Rm[j] = R + ((long long)a0 * p.rs_a + (long long)min(b0 + j, p.nb - 1) * p.rs_b) * h * w;

    float acc[G][KL][KR];
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
        for (int i = 0; i < KL; ++i)
#pragma unroll
            for (int j = 0; j < KR; ++j) acc[g][i][j] = 0.0f;

    // Right rows that meet at least one of the G left rows, then this split's share.
    const int rho_lo = max(0, dy0), rho_hi = min(h, h + dy0 + G - 1);
    const int per = (max(rho_hi - rho_lo, 0) + splits - 1) / splits;
    const int r0 = rho_lo + s * per, r1 = min(rho_hi, r0 + per);
    // Right columns that meet at least one left column for the W lags.
    const int u_lo = max(0, dx0), u_hi = min(w, w + dx0 + W - 1);

    // Walk the (row, chunk) steps with the next step's values loaded into registers
    // before the current step's shuffles and FMAs run: the loads' latency hides behind
    // W steps of arithmetic instead of stalling each chunk.
    // Right values reach the lanes from shared memory, four at a time by one broadcast
    // LDS.128 (uniform address), rather than one shuffle each: the broadcast is the
    // family's most frequent exchange, the sliding left values stay on shuffles.
    __shared__ __align__(16) float rbuf[128 * KR];
    float* rs = rbuf + (threadIdx.x / W) * (W * KR);  // this segment's [KR][W] chunk
    const int nch = (u_hi - u_lo + W - 1) / W;
    if (r1 > r0 && nch > 0) {
        float rv[KR], lo[G][KL], hi[G][KL];
        int rho = r0, ci = 0;
        load_right<W, KR>(Rm, rho, u_lo, l, w, rv);
#pragma unroll
        for (int j = 0; j < KR; ++j) rs[j * W + l] = rv[j];
        __syncwarp(mask);
        load_left<W, KL, G>(Lm, rho - dy0, u_lo - dx0 - (W - 1) + l, h, w, lo);
        load_left<W, KL, G>(Lm, rho - dy0, u_lo - dx0 + 1 + l, h, w, hi);
        while (true) {
            int nrho = rho, nci = ci + 1;
            if (nci == nch) {
                nci = 0;
                ++nrho;
            }
            const bool more = nrho < r1;
            float nrv[KR], nlo[G][KL], nhi[G][KL];
            if (more) {
                const int c = u_lo + nci * W - dx0 - (W - 1) + l;  // lane's ring slot, next chunk
                load_right<W, KR>(Rm, nrho, u_lo + nci * W, l, w, nrv);
                load_left<W, KL, G>(Lm, nrho - dy0, c + W, h, w, nhi);
                if (nci == 0) load_left<W, KL, G>(Lm, nrho - dy0, c, h, w, nlo);
            }
#pragma unroll 2  // full unrolling hoists every broadcast into registers and spills
            for (int k4 = 0; k4 < W; k4 += 4) {
                float4 r4[KR];
#pragma unroll
                for (int j = 0; j < KR; ++j) r4[j] = *reinterpret_cast<const float4*>(rs + j * W + k4);
#pragma unroll
                for (int kk = 0; kk < 4; ++kk) {
                    const int k = k4 + kk;
                    // Lane l needs left item W-1+k-l of the ring: lane (W-1+k-l) mod W
                    // holds it, in lo when that lane's index is >= k, else in hi.
                    const int src = (W - 1 + k - l) & (W - 1);
                    const bool from_lo = l >= k;
#pragma unroll
                    for (int g = 0; g < G; ++g)
#pragma unroll
                        for (int i = 0; i < KL; ++i) {
                            const float v = __shfl_sync(mask, from_lo ? lo[g][i] : hi[g][i], src, W);
#pragma unroll
                            for (int j = 0; j < KR; ++j) {
                                const float r = kk == 0 ? r4[j].x : kk == 1 ? r4[j].y : kk == 2 ? r4[j].z : r4[j].w;
                                acc[g][i][j] = fmaf(v, r, acc[g][i][j]);
                            }
                        }
                }
            }
            if (!more) break;
            __syncwarp(mask);  // every lane has read this chunk before it is replaced
#pragma unroll
            for (int j = 0; j < KR; ++j) rs[j * W + l] = nrv[j];
            __syncwarp(mask);
#pragma unroll
            for (int g = 0; g < G; ++g)
#pragma unroll
                for (int i = 0; i < KL; ++i) {
                    lo[g][i] = nci == 0 ? nlo[g][i] : hi[g][i];
                    hi[g][i] = nhi[g][i];
                }
            rho = nrho;
            ci = nci;
        }
    }

    const int dx = dx0 + l;
    if (dx > rx) return;
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const int dy = dy0 + g;
        if (dy > ry) break;
#pragma unroll
        for (int i = 0; i < KL; ++i) {
            if (a0 + i >= p.na) break;
#pragma unroll
            for (int j = 0; j < KR; ++j) {
                if (b0 + j >= p.nb) break;
                float* o = out + out_offset(p, a0 + i, b0 + j, dy, dx, My, Mx);
                if (splits > 1) atomicAdd(o, acc[g][i][j]);
                else *o = acc[g][i][j];
            }
        }
    }
}
