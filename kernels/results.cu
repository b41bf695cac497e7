// The per-ROI results of a batch, one thread per (pattern, ROI): what the engines' array
// code (CorrelationEngine._assemble, Pipeline._flag) makes with about thirty CuPy operations,
// each a launch the run's main thread pays for in Python, in one kernel each. The float
// expressions are those of the array code, in the same order, so the results are the same
// bit for bit (tests/engines/test_gpu_results.py).

// Status codes, as ebsdxc/status.py.
#define ST_OK 0
#define ST_PEAK_ON_BORDER 1
#define ST_MISSING_PATTERN 5
#define ST_OUTSIDE_MASK 6
#define ST_SUBPIXEL_FAILED 8

// NumPy's NaN (0x7fc00000): the results files hold the same bits either way.
#define RESULTS_NAN (__int_as_float(0x7fc00000))

// Code, normalised peak height and (x, y) displacement of each ROI. The reference of ROI k of
// pattern b is ROI k of set index[b] (set 0 without an index).
template <typename C, typename V>
__global__ void assemble_results(const C* __restrict__ y, const C* __restrict__ x, const V* __restrict__ value,
                                 const unsigned char* __restrict__ border, const float* __restrict__ energy,
                                 const unsigned char* __restrict__ status,
                                 const float* __restrict__ ref_energy,        // (K, n)
                                 const unsigned char* __restrict__ ref_status,  // (K, n)
                                 const long long* __restrict__ index,           // (B,) or nullptr
                                 int n, long long total, float* __restrict__ disp, float* __restrict__ height,
                                 unsigned char* __restrict__ code) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= total) return;
    const long long r = (index != nullptr ? index[i / n] * n : 0) + i % n;
    const unsigned char s = status[i], rs = ref_status[r];
    const double yy = (double)y[i], xx = (double)x[i];
    const bool fitted = isfinite(xx) && isfinite(yy);  // a fit that could not place the peak: NaN
    const unsigned char c = s != ST_OK ? s
                            : rs != ST_OK ? rs
                            : border[i] ? ST_PEAK_ON_BORDER
                            : fitted ? ST_OK : ST_SUBPIXEL_FAILED;
    code[i] = c;
    double h = (double)value[i] / sqrt((double)energy[i] * (double)ref_energy[r]);
    h = h < -1.0 ? -1.0 : (h > 1.0 ? 1.0 : h);  // CuPy's clip: NaN stays NaN
    height[i] = (s == ST_OK && rs == ST_OK) ? (float)h : RESULTS_NAN;
    const bool ok = c == ST_OK;
    disp[2 * i] = ok ? (float)xx : RESULTS_NAN;
    disp[2 * i + 1] = ok ? (float)yy : RESULTS_NAN;
}

// An all-zero pattern (empty[b]) is no measurement: its ROIs become MISSING_PATTERN; ROIs
// reaching outside the detector mask (outside[k], or no mask: nullptr) OUTSIDE_MASK. Either
// has no height and no displacement.
extern "C" __global__ void flag_results(const bool* __restrict__ empty, const bool* __restrict__ outside, int n,
                                        long long total, const float* __restrict__ disp_in,
                                        const float* __restrict__ height_in,
                                        const unsigned char* __restrict__ status_in, float* __restrict__ disp,
                                        float* __restrict__ height, unsigned char* __restrict__ status) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= total) return;
    bool bad = empty[i / n];
    unsigned char s = bad ? (unsigned char)ST_MISSING_PATTERN : status_in[i];
    if (outside != nullptr && outside[i % n]) {
        if (!bad) s = ST_OUTSIDE_MASK;
        bad = true;
    }
    status[i] = s;
    height[i] = bad ? RESULTS_NAN : height_in[i];
    disp[2 * i] = bad ? RESULTS_NAN : disp_in[2 * i];
    disp[2 * i + 1] = bad ? RESULTS_NAN : disp_in[2 * i + 1];
}
