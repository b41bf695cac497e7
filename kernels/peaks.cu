// Peak search and 3x3 subpixel fit fused in one kernel: one block per correlation
// map, so the maps never leave the device. Mirrors ebsdxc/peaks.py (integer_peak,
// neighbourhood, window compensation, fit_3x3); tests compare the two.
#include "common.cuh"

#define M_NONE 0
#define M_PARABOLIC 1
#define M_GAUSSIAN 2
#define M_QUADRATIC 3

// Quiet NaN: a peak that cannot be fitted (no math_constants.h needed under NVRTC).
#define PEAK_NAN __longlong_as_double(0x7ff8000000000000LL)

// Not concave: no maximum along the axis (NaN), except an exactly flat axis (a tile one
// pixel wide), which has nothing to fit (ebsdxc.peaks._parabolic_1d).
__device__ __forceinline__ double parabolic(double cm, double c0, double cp) {
    const double den = cm - 2.0 * c0 + cp;
    if (den < 0.0) return 0.5 * (cm - cp) / den;
    return (cm == c0 && cp == c0) ? 0.0 : PEAK_NAN;
}

// Largest 3x3 subpixel offset from the integer peak (ebsdxc.peaks.FIT_3X3_REACH).
#define FIT_3X3_REACH 1.0

// The moments of a 3x3 grid v[y][x] about its centre: sums of v, x v, y v, x y v, x^2 v, y^2 v.
__device__ __forceinline__ void grid_moments(const double v[3][3], double& s, double& sx, double& sy, double& sxy,
                                             double& sxx, double& syy) {
    s = 0; sx = 0; sy = 0; sxy = 0; sxx = 0; syy = 0;
    for (int a = 0; a < 3; ++a)
        for (int q = 0; q < 3; ++q) {
            const double val = v[a][q];
            const int x = q - 1, y = a - 1;
            s += val; sx += x * val; sy += y * val; sxy += x * y * val;
            sxx += x * x * val; syy += y * y * val;
        }
}

// Least-squares quadratic a + b x + c y + d x^2 + e xy + f y^2 on a 3x3 grid v[y][x]
// (normal equations; ebsdxc.peaks._quadratic_coefficients).
__device__ void quadratic_coefficients(const double v[3][3], double& b, double& cc, double& d,
                                       double& e, double& f, double& det) {
    double s, sx, sy, sxy, sxx, syy;
    grid_moments(v, s, sx, sy, sxy, sxx, syy);
    b = sx / 6.0; cc = sy / 6.0; e = sxy / 4.0;
    d = sxx / 2.0 - s / 3.0; f = syy / 2.0 - s / 3.0;
    det = 4.0 * d * f - e * e;
}

// The maximum of that quadratic, where it has one (det > 1e-12 (d^2 + f^2), d < 0, f < 0): its
// offsets (qx, qy) = ((e cc - 2 f b) / det, (e b - 2 d cc) / det). The coefficients are taken
// times 6 (b, cc, d, f) and 4 (e) and det times 144, so that it divides once: each FP64 division
// is a dependent chain of a dozen instructions, on thread 0's path in the fused kernels while
// their blocks wait at a barrier (it was five, with quadratic_coefficients').
__device__ __forceinline__ bool quadratic_peak(const double v[3][3], double& qx, double& qy) {
    double s, sx, sy, sxy, sxx, syy;
    grid_moments(v, s, sx, sy, sxy, sxx, syy);
    const double d6 = 3.0 * sxx - 2.0 * s, f6 = 3.0 * syy - 2.0 * s;  // 6 d, 6 f
    const double det144 = 16.0 * d6 * f6 - 9.0 * sxy * sxy;  // 144 (4 d f - e^2)
    if (!(det144 > 4e-12 * (d6 * d6 + f6 * f6) && d6 < 0.0 && f6 < 0.0)) return false;
    const double r = 1.0 / det144;  // (e cc - 2 f b) / det = (6 e4 cc6 - 8 f6 b6) / det144
    qx = (6.0 * sxy * sy - 8.0 * f6 * sx) * r;
    qy = (6.0 * sxy * sx - 8.0 * d6 * sy) * r;
    return true;
}

// Subpixel offsets from a 3x3 neighbourhood v[y][x] (ebsdxc.peaks.fit_3x3).
template <int METHOD>
__device__ void fit_3x3(const double v[3][3], double& dy, double& dx) {
    dx = parabolic(v[1][0], v[1][1], v[1][2]);
    dy = parabolic(v[0][1], v[1][1], v[2][1]);
    if (METHOD == M_GAUSSIAN) {
        const bool pos = v[1][0] > 0 && v[1][1] > 0 && v[1][2] > 0 && v[0][1] > 0 && v[2][1] > 0;
        if (pos) {
            dx = parabolic(log(v[1][0]), log(v[1][1]), log(v[1][2]));
            dy = parabolic(log(v[0][1]), log(v[1][1]), log(v[2][1]));
        }
    } else if (METHOD == M_QUADRATIC) {
        double qx, qy;
        if (quadratic_peak(v, qx, qy) && fabs(qx) <= 1.0 && fabs(qy) <= 1.0) { dx = qx; dy = qy; }
    }
    // Beyond reach, or no maximum: the peak cannot be fitted (NaN, engines flag it).
    if (!(fabs(dx) <= FIT_3X3_REACH && fabs(dy) <= FIT_3X3_REACH)) { dx = PEAK_NAN; dy = PEAK_NAN; }
}

// Barely concave compensated peaks (ebsdxc.peaks.barely_concave, CONDITION_MIN, LOOSE_REACH):
// where the flattest curvature of the compensated 3x3 neighbourhood v, relative to its height,
// is under CONDITION_MIN times that of the window autocorrelation w at the same lags, a fit
// more than LOOSE_REACH px from the integer peak is not a measurement.
#define CONDITION_MIN 2.0
#define LOOSE_REACH 0.5

// Largest eigenvalue of the least-squares quadratic's Hessian (ebsdxc.peaks._largest_curvature).
__device__ __forceinline__ double largest_curvature(const double v[3][3]) {
    double b, cc, d, e, f, det;
    quadratic_coefficients(v, b, cc, d, e, f, det);
    return d + f + sqrt((d - f) * (d - f) + e * e);
}

__device__ __forceinline__ bool barely_concave(const double v[3][3], const double w[3][3]) {
    const double kn = largest_curvature(v), kw = largest_curvature(w), cn = v[1][1], cw = w[1][1];
    return !(cn > 0.0 && cw > 0.0 && kn * cw <= CONDITION_MIN * kw * cn);
}

// ebsdxc.peaks.drop_loose_peaks on offsets (dy, dx) from the integer peak.
__device__ __forceinline__ void drop_loose(bool flat, double& dy, double& dx) {
    if (flat && !(fabs(dy) <= LOOSE_REACH && fabs(dx) <= LOOSE_REACH)) { dy = PEAK_NAN; dx = PEAK_NAN; }
}

// The block's argmax of every thread's (best, bi): thread 0 returns true with it. The warps'
// results are taken by warp 0 in shuffles (the rule does not depend on the order), where one
// thread's loop over them held the block up for 16 dependent shared-memory reads.
__device__ __forceinline__ bool block_argmax(float& best, int& bi, float* sval, int* sidx) {
    warp_argmax(best, bi);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (lane == 0) { sval[warp] = best; sidx[warp] = bi; }
    __syncthreads();
    if (warp != 0) return false;
    best = lane < nwarps ? sval[lane] : EBSDXC_NEG_INF;
    bi = lane < nwarps ? sidx[lane] : 0x7fffffff;
    warp_argmax(best, bi);
    return lane == 0;
}

// First maximum in row-major order over the lags |dy| <= ry, |dx| <= rx of a circular
// (Ny, Nx) map whose rows are `stride` floats apart, as numpy.argmax: (value, index
// iy * (2 rx + 1) + ix) in thread 0, which alone returns true. Warps walk rows, lanes walk
// along a row: coalesced reads, no index division.
// split > 1: c holds the rows yy = split j + phase only, row j at c + j * stride.
__device__ bool block_lag_argmax(const float* c, int Ny, int Nx, int stride, int ry, int rx, float* sval,
                                 int* sidx, float& best, int& bi, int split = 1, int phase = 0) {
    best = EBSDXC_NEG_INF;
    bi = 0x7fffffff;
    const int rw = 2 * rx + 1, rh = 2 * ry + 1, nwarps = blockDim.x >> 5;
    for (int iy = threadIdx.x >> 5; iy < rh; iy += nwarps) {
        int yy = iy - ry;
        yy += yy < 0 ? Ny : 0;
        if (yy % split != phase) continue;
        const float* row = c + (long long)(yy / split) * stride;
        for (int ix = threadIdx.x & 31; ix < rw; ix += 32) {
            int xx = ix - rx;
            xx += xx < 0 ? Nx : 0;
            argmax_take(best, bi, row[xx], iy * rw + ix);
        }
    }
    return block_argmax(best, bi, sval, sidx);
}

template <int METHOD>
__global__ void find_peaks(const float* __restrict__ corr, int Ny, int Nx, int ry, int rx,
                           const double* __restrict__ wy,  // (Ny,) window autocorrelation by lag mod Ny
                           const double* __restrict__ wx,  // (Nx,)
                           int comp,  // 1: divide by wy * wx (window compensation)
                           double* __restrict__ out_y, double* __restrict__ out_x,
                           float* __restrict__ out_value, unsigned char* __restrict__ out_border,
                           long long* __restrict__ out_ly, long long* __restrict__ out_lx,
                           unsigned char* __restrict__ out_flat) {  // (T,) barely concave (comp only)
    __shared__ float sval[32];
    __shared__ int sidx[32];
    const long long t = blockIdx.x;
    const float* c = corr + t * (long long)Ny * Nx;
    const int rw = 2 * rx + 1;

    float best;
    int bi;
    if (!block_lag_argmax(c, Ny, Nx, Nx, ry, rx, sval, sidx, best, bi)) return;
    const int ly = bi / rw - ry, lx = bi % rw - rx;
    out_value[t] = best;
    out_border[t] = ((ry > 0 && abs(ly) == ry) || (rx > 0 && abs(lx) == rx)) ? 1 : 0;
    out_ly[t] = ly;
    out_lx[t] = lx;
    double dy = 0.0, dx = 0.0;
    {
        double v[3][3], w[3][3];
        for (int a = 0; a < 3; ++a) {
            const int yy = ((ly + a - 1) % Ny + Ny) % Ny;
            for (int q = 0; q < 3; ++q) {
                const int xx = ((lx + q - 1) % Nx + Nx) % Nx;
                double val = c[yy * Nx + xx];
                w[a][q] = wy[yy] * wx[xx];
                if (comp) val /= w[a][q];
                v[a][q] = val;
            }
        }
        const bool flat = comp && barely_concave(v, w);
        out_flat[t] = flat ? 1 : 0;
        if (METHOD != M_NONE) {
            fit_3x3<METHOD>(v, dy, dx);
            drop_loose(flat, dy, dx);
        }
    }
    out_y[t] = ly + dy;
    out_x[t] = lx + dx;
}

#define DFT_SLOTS 4  // spectrum loads a lane issues at once along a row (rows up to 128 in one go)

// One trust-region ascent step from a 3x3 stencil (ebsdxc.peaks.stencil_step).
__device__ bool stencil_step(const double v[3][3], double& dy, double& dx) {
    double qx, qy;
    if (quadratic_peak(v, qx, qy)) {
        const double m = fmax(fabs(qx), fabs(qy));
        if (isfinite(m)) {
            if (m > 1.0) { qx /= m; qy /= m; }
            dx = qx;
            dy = qy;
            return m >= 1.0;
        }
    }
    const double denx = v[1][0] - 2.0 * v[1][1] + v[1][2], deny = v[0][1] - 2.0 * v[1][1] + v[2][1];
    dx = denx < 0.0 ? 0.5 * (v[1][0] - v[1][2]) / denx : (double)((v[1][2] > v[1][0]) - (v[1][2] < v[1][0]));
    dy = deny < 0.0 ? 0.5 * (v[0][1] - v[2][1]) / deny : (double)((v[2][1] > v[0][1]) - (v[2][1] < v[0][1]));
    dx = fmin(1.0, fmax(-1.0, dx));
    dy = fmin(1.0, fmax(-1.0, dy));
    return fabs(dx) >= 1.0 || fabs(dy) >= 1.0;
}

// Refinement of peak estimates by quadratic fits to exact 3x3 DFT stencils of
// shrinking step (ebsdxc.peaks.dft_refine_peak): one block per map, the spectrum
// read once per stencil, stencil values and window autocorrelations summed in double.
// The first step repeats (up to max_moves times) while a step reaches the stencil edge;
// where the last (finest) step still reaches it, the refinement did not converge: NaN.
// Shared memory: 3 * (Ny + Nxh) float2 phases.
__global__ void __launch_bounds__(256, 4) dft_refine(const float2* __restrict__ cps,  // (T, Ny, Nxh) half spectra
                           const float2* __restrict__ ref,  // (n_ref, Ny, Nxh) conj. reference spectra, or unused
                           int n_ref,  // 0: cps are cross-power spectra; else cps[t] * ref[t % n_ref]
                           const int* __restrict__ ref_of,  // indexed: (T / n_ref,) set of each pattern
                           int indexed,  // 1: ref is (K, n_ref, Ny, Nxh), map t uses set ref_of[t / n_ref]
                           int Ny, int Nx,
                           const double* __restrict__ Sy,  // (Ny,) window power spectrum, or all zero
                           const double* __restrict__ Sx,  // (Nx,)
                           int compensate, const double* __restrict__ steps, int n_steps,
                           int max_moves, double* __restrict__ y, double* __restrict__ x) {
    extern __shared__ float2 ph[];
    __shared__ double red[32][15];
    __shared__ double pos[2];
    __shared__ int again;
    const int Nxh = Nx / 2 + 1;
    float2* py = ph;               // [3][Ny]
    float2* px = ph + 3 * Ny;      // [3][Nxh], Hermitian weights folded in
    const long long t = blockIdx.x;
    const float2* S = cps + t * (long long)Ny * Nxh;
    const long long set = (n_ref && indexed) ? (long long)ref_of[t / n_ref] * n_ref : 0LL;
    const float2* R = n_ref ? ref + (set + t % n_ref) * (long long)Ny * Nxh : nullptr;
    if (threadIdx.x == 0) { pos[0] = y[t]; pos[1] = x[t]; }
    __syncthreads();
    double sy_sum = 0.0, sx_sum = 0.0;
    if (compensate) {
        for (int k = 0; k < Ny; ++k) sy_sum += Sy[k];
        for (int k = 0; k < Nx; ++k) sx_sum += Sx[k];
    }
    for (int it = 0, st = 0, moves = 0; st < n_steps; ++it) {
        const double h = steps[st], yc = pos[0], xc = pos[1];
        for (int i = threadIdx.x; i < 3 * Ny; i += blockDim.x) {
            const int u = i / Ny, k = i - u * Ny;
            const int kk = k < (Ny + 1) / 2 ? k : k - Ny;  // signed frequency, as fftfreq
            double a = kk * (yc + (u - 1) * h) / Ny;
            a -= floor(a);
            double sn, cs;
            sincospi(2.0 * a, &sn, &cs);
            py[i] = make_float2((float)cs, (float)sn);
        }
        for (int i = threadIdx.x; i < 3 * Nxh; i += blockDim.x) {
            const int v = i / Nxh, l = i - v * Nxh;
            const float wl = (l == 0 || (Nx % 2 == 0 && l == Nx / 2)) ? 1.0f : 2.0f;
            double a = l * (xc + (v - 1) * h) / Nx;
            a -= floor(a);
            double sn, cs;
            sincospi(2.0 * a, &sn, &cs);
            px[i] = make_float2(wl * (float)cs, wl * (float)sn);
        }
        __syncthreads();
        // Per-thread partial sums in float (a few dozen terms each), combined in double.
        float accf[9];
        for (int q = 0; q < 9; ++q) accf[q] = 0.0f;
        double acc[15];
        // Warps walk spectrum rows k, lanes walk along a row l: no index division, the
        // row's three y-phases stay in registers, and each lane issues all its loads of a
        // row (up to DFT_SLOTS) before using them, so enough bytes are in flight.
        const int nwarps_all = blockDim.x >> 5, lane = threadIdx.x & 31;  // lane: also used below
        for (int k = threadIdx.x >> 5; k < Ny; k += nwarps_all) {
            const float2 pu[3] = {py[k], py[Ny + k], py[2 * Ny + k]};
            const float2* Srow = S + (long long)k * Nxh;
            const float2* Rrow = R != nullptr ? R + (long long)k * Nxh : nullptr;
            for (int l0 = 0; l0 < Nxh; l0 += 32 * DFT_SLOTS) {
                float2 sv[DFT_SLOTS];
                #pragma unroll
                for (int j = 0; j < DFT_SLOTS; ++j) {
                    const int l = l0 + lane + 32 * j;
                    sv[j] = l < Nxh ? Srow[l] : make_float2(0.0f, 0.0f);
                }
                if (Rrow != nullptr) {
                    float2 rv[DFT_SLOTS];
                    #pragma unroll
                    for (int j = 0; j < DFT_SLOTS; ++j) {
                        const int l = l0 + lane + 32 * j;
                        rv[j] = l < Nxh ? Rrow[l] : make_float2(0.0f, 0.0f);
                    }
                    #pragma unroll
                    for (int j = 0; j < DFT_SLOTS; ++j)
                        sv[j] = make_float2(sv[j].x * rv[j].x - sv[j].y * rv[j].y,
                                            sv[j].x * rv[j].y + sv[j].y * rv[j].x);
                }
                #pragma unroll
                for (int j = 0; j < DFT_SLOTS; ++j) {
                    const int l = l0 + lane + 32 * j;
                    if (l >= Nxh) break;
                    const float2 qv[3] = {px[l], px[Nxh + l], px[2 * Nxh + l]};
                    #pragma unroll
                    for (int u = 0; u < 3; ++u) {
                        const float ar = sv[j].x * pu[u].x - sv[j].y * pu[u].y;
                        const float ai = sv[j].x * pu[u].y + sv[j].y * pu[u].x;
                        #pragma unroll
                        for (int v = 0; v < 3; ++v) accf[u * 3 + v] += ar * qv[v].x - ai * qv[v].y;
                    }
                }
            }
        }
        for (int q = 0; q < 9; ++q) acc[q] = accf[q];
        for (int q = 9; q < 15; ++q) acc[q] = 0.0;
        if (compensate) {  // window autocorrelation at the stencil lags (ebsdxc.peaks.window_autocorrelation)
            for (int k = threadIdx.x; k < Ny; k += blockDim.x)
                for (int u = 0; u < 3; ++u) acc[9 + u] += Sy[k] * py[u * Ny + k].x;
            for (int l = threadIdx.x; l < Nxh; l += blockDim.x)
                for (int v = 0; v < 3; ++v) acc[12 + v] += Sx[l] * px[v * Nxh + l].x;
        }
        const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
        for (int q = 0; q < 15; ++q) {
            double a = warp_sum(acc[q]);
            if (lane == 0) red[warp][q] = a;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            double g[3][3];
            for (int q = 0; q < 15; ++q) {
                double a = 0.0;
                for (int w = 0; w < nwarps; ++w) a += red[w][q];
                acc[q] = a;
            }
            for (int u = 0; u < 3; ++u)
                for (int v = 0; v < 3; ++v) {
                    double val = acc[u * 3 + v] / ((double)Ny * Nx);
                    if (compensate) val /= (acc[9 + u] / sy_sum) * (acc[12 + v] / sx_sum);
                    g[u][v] = val;
                }
            double dy = 0.0, dx = 0.0;
            const bool beyond = stencil_step(g, dy, dx);
            pos[0] = yc + h * dy;
            pos[1] = xc + h * dx;
            again = beyond;
        }
        __syncthreads();
        ++moves;
        if (!(st == 0 && again && moves < max_moves)) { ++st; moves = 0; }
        __syncthreads();  // `again` and the phases are rewritten next round
    }
    if (threadIdx.x == 0) {
        const bool stuck = again;  // the last step's `beyond`
        y[t] = stuck ? PEAK_NAN : pos[0];
        x[t] = stuck ? PEAK_NAN : pos[1];
    }
}
