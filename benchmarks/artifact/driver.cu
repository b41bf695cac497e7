// Timing driver for the kernels of the paper's own code (asmelko/jpdc23-artifact,
// "Efficient GPU-accelerated Parallel Cross-correlation", JPDC 2023).
//
// This file is ours. It contains none of the artifact's code: it only includes the
// artifact's headers (kernels.cuh, types.cuh, cuda_helpers.cuh, row_distribution.cuh,
// fft_helpers.hpp; directory given at build time with -I) and links against the artifact's
// kernel objects, which build.sh compiles from a separate checkout of the artifact.
//
// For one case (form, matrix size, left/right counts) it makes random float32 inputs on the
// GPU and calls the artifact's host wrappers (run_ccn_*, run_cross_corr_naive_original,
// run_hadamard_*) with the same arguments, pointer offsets, memsets and CUDA streams as the
// artifact's classes in one_to_one.hpp / one_to_many.hpp / n_to_mn.hpp / n_to_m.hpp do in
// their run_impl(). Its cuFFT path follows the fft_* classes there: inputs zero-padded to
// twice their size, one batched R2C plan over all inputs, the artifact's Hadamard kernel,
// one batched C2R plan; plan creation and allocation are not timed.
//
// Timing: CUDA events on the legacy default stream around the timed region (the artifact's
// multi-stream classes use blocking streams, which the legacy stream waits for), one
// warm-up run, then the median of several runs. Output: CSV lines
//   form,left_count,right_count,rows,cols,algorithm,params,time_ms
// and comment lines starting with '#' (skips, errors). params is "key=value;key=value".

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#ifndef ARTIFACT_NO_CUFFT
#include <cufft.h>
#endif

#include "types.cuh"
#include "cuda_helpers.cuh"
#include "kernels.cuh"
#include "row_distribution.cuh"

#ifndef ARTIFACT_NO_CUFFT
// fft_helpers.hpp names cross::data_array (from matrix.hpp, which needs Boost) in templates we
// never instantiate; a declaration is enough to parse it.
namespace cross {
template <typename T, typename ALLOC = std::allocator<T>>
class data_array;
}
#include "fft_helpers.hpp"
#endif

// Template limits the artifact's kernel objects were built with (build.sh passes the same -D
// values to every object and to this file). Configurations above them are not built.
#ifndef SHUFFLE_MULTIMAT_RIGHT_RIGHT_MATRICES_PER_THREAD_LIMIT
#define SHUFFLE_MULTIMAT_RIGHT_RIGHT_MATRICES_PER_THREAD_LIMIT 4
#endif
#ifndef SHUFFLE_MULTIROW_BOTH_SHIFTS_PER_THREAD_LIMIT
#define SHUFFLE_MULTIROW_BOTH_SHIFTS_PER_THREAD_LIMIT 4
#endif
#ifndef SHUFFLE_MULTIROW_BOTH_LEFT_ROWS_LIMIT
#define SHUFFLE_MULTIROW_BOTH_LEFT_ROWS_LIMIT 4
#endif
#ifndef SHUFFLE_N_TO_M_MULTIMAT_BOTH_LEFT_MATRICES_PER_THREAD_LIMIT
#define SHUFFLE_N_TO_M_MULTIMAT_BOTH_LEFT_MATRICES_PER_THREAD_LIMIT 4
#endif
#ifndef SHUFFLE_N_TO_M_MULTIMAT_BOTH_RIGHT_MATRICES_PER_THREAD_LIMIT
#define SHUFFLE_N_TO_M_MULTIMAT_BOTH_RIGHT_MATRICES_PER_THREAD_LIMIT 4
#endif
#ifndef SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_SHIFTS_PER_THREAD_PER_RIGHT_MATRIX_LIMIT
#define SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_SHIFTS_PER_THREAD_PER_RIGHT_MATRIX_LIMIT 2
#endif
#ifndef SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_RIGHT_MATRICES_PER_THREAD_LIMIT
#define SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_RIGHT_MATRICES_PER_THREAD_LIMIT 2
#endif
#ifndef SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_LEFT_MATRICES_PER_THREAD_LIMIT
#define SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_LEFT_MATRICES_PER_THREAD_LIMIT 2
#endif
#ifndef SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_LEFT_ROWS_PER_ITERATION_LIMIT
#define SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_LEFT_ROWS_PER_ITERATION_LIMIT 2
#endif
#ifndef SHUFFLE_ONE_TO_MANY_MULTIROW_BOTH_MULTIMAT_RIGHT_SHIFTS_PER_RIGHT_MATRIX_LIMIT
#define SHUFFLE_ONE_TO_MANY_MULTIROW_BOTH_MULTIMAT_RIGHT_SHIFTS_PER_RIGHT_MATRIX_LIMIT 4
#endif
#ifndef SHUFFLE_ONE_TO_MANY_MULTIROW_BOTH_MULTIMAT_RIGHT_RIGHT_MATRICES_PER_THREAD_LIMIT
#define SHUFFLE_ONE_TO_MANY_MULTIROW_BOTH_MULTIMAT_RIGHT_RIGHT_MATRICES_PER_THREAD_LIMIT 4
#endif
#ifndef SHUFFLE_ONE_TO_MANY_MULTIROW_BOTH_MULTIMAT_RIGHT_LEFT_ROWS_PER_ITERATION_LIMIT
#define SHUFFLE_ONE_TO_MANY_MULTIROW_BOTH_MULTIMAT_RIGHT_LEFT_ROWS_PER_ITERATION_LIMIT 4
#endif
#ifndef WARP_PER_SHIFT_SHARED_MEM_RIGHT_MATRICES_PER_BLOCK_LIMIT
#define WARP_PER_SHIFT_SHARED_MEM_RIGHT_MATRICES_PER_BLOCK_LIMIT 4
#endif

using cross::dsize2_t;
using cross::dsize_t;

namespace {

// ---------------------------------------------------------------- options and output

struct Options {
    std::string form;  // of the case being run
    unsigned rows = 0, cols = 0, left = 0, right = 0;
    std::set<std::string> algos;  // empty: all applicable
    std::string resume_after;     // "case_prefix|algorithm": skip everything up to and including it
    bool quick = false;           // only the first (best-known) configuration of each sweep
    bool dry_run = false;         // print the plan with predicted times, touch no GPU
    double max_run_ms = 2000.0;   // skip configurations predicted/measured slower than this
    double alg_budget_s = 2.0;    // stop an algorithm's sweep once it has used this much time
    double heavy_ms = 100.0;      // if an algorithm's first configuration is slower, run at most 2 of its sweep
    double deadline = 0.0;        // wall-clock (epoch seconds) after which nothing new starts
    int max_reps = 10;
    int min_reps = 3;
    double rep_target_ms = 100.0;  // repetitions ~ rep_target_ms / (time of one run)
    unsigned long long seed = 12345;
};

Options g_opt;
int g_resume_state = 0;  // 1: looking for --resume-after, 2: inside it, 0: running

double now_s() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string case_prefix() {
    std::ostringstream s;
    s << g_opt.form << "," << g_opt.left << "," << g_opt.right << "," << g_opt.rows << "," << g_opt.cols;
    return s.str();
}

void emit_row(const std::string& alg, const std::string& params, double ms) {
    std::printf("%s,%s,%s,%.6f\n", case_prefix().c_str(), alg.c_str(), params.c_str(), ms);
    std::fflush(stdout);
}

void emit_comment(const std::string& kind, const std::string& alg, const std::string& params, const std::string& msg) {
    std::string m = msg;
    for (auto& ch : m) {
        if (ch == '\n' || ch == '\r' || ch == ',') ch = ' ';
    }
    std::printf("# %s,%s,%s,%s,%s\n", kind.c_str(), case_prefix().c_str(), alg.c_str(), params.c_str(), m.c_str());
    std::fflush(stdout);
}

void cuda_ok(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
    }
}

// ---------------------------------------------------------------- device data

__global__ void fill_uniform(float* p, size_t n, unsigned long long seed) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        unsigned long long z = seed + 0x9E3779B97F4A7C15ULL * (i + 1);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        p[i] = (float)((z >> 40) * (1.0 / 16777216.0));  // [0, 1)
    }
}

struct DevBuf {
    float* p = nullptr;
    size_t n = 0;
    DevBuf() = default;
    explicit DevBuf(size_t count) : n(count) { cuda_ok(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(float)), "cudaMalloc"); }
    DevBuf(const DevBuf&) = delete;
    DevBuf& operator=(const DevBuf&) = delete;
    ~DevBuf() {
        if (p) cudaFree(p);
    }
};

template <typename T>
struct DevArr {
    T* p = nullptr;
    explicit DevArr(size_t count) { cuda_ok(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)), "cudaMalloc"); }
    DevArr(const DevArr&) = delete;
    DevArr& operator=(const DevArr&) = delete;
    ~DevArr() {
        if (p) cudaFree(p);
    }
};

void fill_random(DevBuf& b, unsigned long long seed) {
    fill_uniform<<<1024, 256>>>(b.p, b.n, seed);
    cuda_ok(cudaGetLastError(), "fill_uniform launch");
}

struct Streams {
    std::vector<cudaStream_t> s;
    explicit Streams(int n) : s(n) {
        for (auto& x : s) cuda_ok(cudaStreamCreate(&x), "cudaStreamCreate");
    }
    ~Streams() {
        for (auto& x : s) cudaStreamDestroy(x);
    }
    cudaStream_t operator[](size_t i) const { return s[i % s.size()]; }
};

// ---------------------------------------------------------------- timing

struct Events {
    cudaEvent_t e[4];
    Events() {
        for (auto& x : e) cuda_ok(cudaEventCreate(&x), "cudaEventCreate");
    }
    ~Events() {
        for (auto& x : e) cudaEventDestroy(x);
    }
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int reps_for(double one_ms) {
    int r = one_ms > 0 ? (int)(g_opt.rep_target_ms / one_ms) : g_opt.max_reps;
    return std::max(g_opt.min_reps, std::min(g_opt.max_reps, r));
}

// Runs `pre` (untimed), then times `body` between events on the legacy default stream.
double time_once(Events& ev, const std::function<void()>& pre, const std::function<void()>& body) {
    if (pre) pre();
    cuda_ok(cudaEventRecord(ev.e[0], 0), "cudaEventRecord");
    body();
    cuda_ok(cudaGetLastError(), "kernel launch");
    cuda_ok(cudaEventRecord(ev.e[1], 0), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(ev.e[1]), "kernel execution");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, ev.e[0], ev.e[1]), "cudaEventElapsedTime");
    return ms;
}

// ---------------------------------------------------------------- plan of configurations

struct Config {
    std::string alg;     // paper name
    std::string params;  // artifact source name and arguments
    double predicted_ms = 0;
    std::function<void()> setup;     // untimed, once (e.g. stream creation)
    std::function<void()> pre;       // untimed, before every run (e.g. memset outside the class's timing)
    std::function<void()> body;      // timed
    std::function<void()> teardown;  // untimed, once
    bool is_fft = false;
    std::function<void(std::vector<double>&, std::vector<double>&, std::vector<double>&, std::vector<double>&, int)> fft_run;
};

struct Case {
    std::string form;
    unsigned rows, cols, left, right;  // right: total number of right matrices (as the artifact counts them)
    dsize2_t msize() const { return dsize2_t{cols, rows}; }
    dsize2_t ssize() const { return dsize2_t{2 * cols - 1, 2 * rows - 1}; }
    size_t area() const { return (size_t)rows * cols; }
    size_t sarea() const { return (size_t)(2 * rows - 1) * (2 * cols - 1); }
    size_t pairs() const {
        if (form == "n_to_m") return (size_t)left * right;
        return right;  // one_to_one, one_to_many, n_to_mn: one result per right matrix
    }
    double macs() const { return (double)pairs() * (double)area() * (double)area(); }
};

std::string kv(const std::vector<std::pair<std::string, std::string>>& p) {
    std::string s;
    for (auto& [k, v] : p) {
        if (!s.empty()) s += ";";
        s += k + "=" + v;
    }
    return s;
}
std::string S(long v) { return std::to_string(v); }

// Throughput guesses (multiply-adds per second) for the first, best-known configuration of each
// algorithm on an H100/H200, only used to skip runs predicted to take > max_run_ms. They are the
// authors' best A100 results on large inputs (presented-results/data/ampere) times ~1.3, the
// ratio of the H200 and A100 grouped-overlap timings quoted for 64x64, 1x4000. The overlap-wise
// kernel is limited by its thread count (~9 MMAC/s per thread on the A100) when the output is small.
double predict_ms(const Case& c, double rate, double threads_for_naive = 0) {
    if (threads_for_naive > 0) rate = std::min(rate, threads_for_naive * 1.1e7);
    return c.macs() / rate * 1e3;
}

template <typename DIST>
struct dist_tag {
    using type_is = DIST;
};

// Calls f(dist_tag<DIST>{}) for the distribution named by d.
template <typename F>
void with_distribution(cross::distribution d, F&& f) {
    switch (d) {
        case cross::distribution::none: f(dist_tag<cross::no_distribution>{}); break;
        case cross::distribution::rectangle: f(dist_tag<cross::rectangle_distribution>{}); break;
        case cross::distribution::triangle: f(dist_tag<cross::triangle_distribution>{}); break;
    }
}

const char* dist_name(cross::distribution d) {
    switch (d) {
        case cross::distribution::none: return "none";
        case cross::distribution::rectangle: return "rectangle";
        case cross::distribution::triangle: return "triangle";
    }
    return "?";
}

// Inputs and output shared by the non-FFT configurations of a case.
struct Buffers {
    std::unique_ptr<DevBuf> left, right, out;
};

// ---------------------------------------------------------------- cuFFT path (fft_* classes)

// Zero-pads `count` row-major rows x cols matrices to (2 rows) x (2 cols), top-left aligned
// (the artifact's relative_zero_padding<2> when loading).
void pad_into(float* dst, const float* src, size_t count, unsigned rows, unsigned cols) {
    size_t pa = (size_t)4 * rows * cols;
    cuda_ok(cudaMemset(dst, 0, count * pa * sizeof(float)), "cudaMemset");
    for (size_t i = 0; i < count; ++i) {
        cuda_ok(cudaMemcpy2D(dst + i * pa, 2 * cols * sizeof(float), src + i * (size_t)rows * cols,
                             cols * sizeof(float), cols * sizeof(float), rows, cudaMemcpyDeviceToDevice),
                "cudaMemcpy2D");
    }
}

// One FFT configuration: fwd R2C over all inputs, hadamard, inverse C2R, as
// fft_original_alg_{one_to_one,one_to_many,n_to_mn} and fft_better_hadamard_alg_n_to_m.
Config make_fft_config(const Case& c, Buffers& B) {
    Config cfg;
    cfg.alg = "cufft";
    cfg.is_fft = true;
    std::string src;
    if (c.form == "one_to_one") src = "fft_original_alg_one_to_one";
    else if (c.form == "one_to_many") src = "fft_original_alg_one_to_many";
    else if (c.form == "n_to_mn") src = "fft_original_alg_n_to_mn";
    else src = "fft_better_hadamard_alg_n_to_m";
    cfg.params = kv({{"src", src}, {"hadamard_threads_per_block", "256"}}) +
                 (c.form == "n_to_m" ? ";hadamard_items_per_thread=10" : "") + ";plan_excluded=1";
    cfg.predicted_ms = 0;
#ifndef ARTIFACT_NO_CUFFT
    cfg.fft_run = [&c, &B](std::vector<double>& tot, std::vector<double>& fwd, std::vector<double>& had,
                           std::vector<double>& inv, int reps_hint) {
        using fft_complex_t = cufftComplex;
        const unsigned pr = 2 * c.rows, pc = 2 * c.cols;  // padded matrix: rows, cols
        const dsize2_t psize{pc, pr};
        const size_t parea = (size_t)pr * pc;
        const size_t fft_buffer_size = (size_t)psize.y * (psize.x / 2 + 1);
        const size_t nl = (c.form == "one_to_one" || c.form == "one_to_many") ? 1 : c.left;
        const size_t nr = c.right;
        const size_t num_inputs = nl + nr;
        const size_t num_results = c.form == "n_to_m" ? nl * nr : nr;

        DevBuf inputs(num_inputs * parea);
        pad_into(inputs.p, B.left->p, nl, c.rows, c.cols);
        pad_into(inputs.p + nl * parea, B.right->p, nr, c.rows, c.cols);
        DevBuf results(num_results * parea);
        DevArr<fft_complex_t> inputs_fft(num_inputs * fft_buffer_size);
        std::unique_ptr<DevArr<fft_complex_t>> had_out;
        if (c.form == "n_to_m") had_out = std::make_unique<DevArr<fft_complex_t>>(num_results * fft_buffer_size);

        cufftHandle plan = 0, inv_plan = 0;
        int input_sizes[2] = {(int)psize.y, (int)psize.x};
        int result_sizes[2] = {(int)psize.y, (int)psize.x};
        FFTCH(cufftPlanMany(&plan, 2, input_sizes, nullptr, 1, 0, nullptr, 1, 0, cross::fft_type_R2C<float>(), (int)num_inputs));
        struct PlanGuard {
            cufftHandle a, b;
            ~PlanGuard() {
                if (a) cufftDestroy(a);
                if (b) cufftDestroy(b);
            }
        } guard{plan, 0};
        if (c.form == "one_to_one") {
            FFTCH(cufftPlan2d(&inv_plan, (int)psize.y, (int)psize.x, cross::fft_type_C2R<float>()));
        } else {
            FFTCH(cufftPlanMany(&inv_plan, 2, result_sizes, nullptr, 1, 0, nullptr, 1, 0, cross::fft_type_C2R<float>(), (int)num_results));
        }
        guard.b = inv_plan;
        cuda_ok(cudaDeviceSynchronize(), "fft setup");

        Events ev;
        auto one = [&](bool record) {
            cuda_ok(cudaEventRecord(ev.e[0], 0), "cudaEventRecord");
            cross::fft_real_to_complex(plan, inputs.p, inputs_fft.p);
            cuda_ok(cudaEventRecord(ev.e[1], 0), "cudaEventRecord");
            const dsize2_t fsize{psize.y, (psize.x / 2) + 1};  // as the classes pass it
            if (c.form == "n_to_m") {
                cross::run_hadamard_n_to_m_over_output(inputs_fft.p, inputs_fft.p + fft_buffer_size * nl, had_out->p, fsize,
                                                       (dsize_t)nl, (dsize_t)nr, 256, 10);
            } else {
                cross::run_hadamard_original(inputs_fft.p, inputs_fft.p + fft_buffer_size * nl, fsize, (dsize_t)nl,
                                             (dsize_t)(nr / nl), 256);
            }
            cuda_ok(cudaGetLastError(), "hadamard launch");
            cuda_ok(cudaEventRecord(ev.e[2], 0), "cudaEventRecord");
            if (c.form == "n_to_m") {
                cross::fft_complex_to_real(inv_plan, had_out->p, results.p);
            } else {
                cross::fft_complex_to_real(inv_plan, inputs_fft.p + fft_buffer_size * nl, results.p);
            }
            cuda_ok(cudaEventRecord(ev.e[3], 0), "cudaEventRecord");
            cuda_ok(cudaEventSynchronize(ev.e[3]), "fft execution");
            float a = 0, b = 0, d = 0, t = 0;
            cuda_ok(cudaEventElapsedTime(&a, ev.e[0], ev.e[1]), "elapsed");
            cuda_ok(cudaEventElapsedTime(&b, ev.e[1], ev.e[2]), "elapsed");
            cuda_ok(cudaEventElapsedTime(&d, ev.e[2], ev.e[3]), "elapsed");
            cuda_ok(cudaEventElapsedTime(&t, ev.e[0], ev.e[3]), "elapsed");
            if (record) {
                fwd.push_back(a);
                had.push_back(b);
                inv.push_back(d);
                tot.push_back(t);
            }
            return (double)t;
        };
        double first = one(false);
        int reps = reps_hint > 0 ? reps_hint : reps_for(first);
        for (int i = 0; i < reps; ++i) one(true);
    };
#else
    cfg.fft_run = [](std::vector<double>&, std::vector<double>&, std::vector<double>&, std::vector<double>&, int) {
        throw std::runtime_error("driver built without cuFFT (build.sh found no cufft.h / libcufft)");
    };
#endif
    return cfg;
}

// ---------------------------------------------------------------- per-form configuration lists

void add(std::vector<Config>& v, Config c) { v.push_back(std::move(c)); }

std::vector<Config> build_plan(const Case& c, Buffers& B) {
    std::vector<Config> v;
    const dsize2_t ms = c.msize(), ss = c.ssize();
    const size_t area = c.area(), sarea = c.sarea();
    const bool quick = g_opt.quick;
    auto L = [&B]() { return B.left->p; };
    auto R = [&B]() { return B.right->p; };
    auto O = [&B]() { return B.out->p; };
    auto zero_out = [&B]() { cross::cuda_memset(B.out->p, 0, B.out->n); };
    // Per-algorithm throughput guesses (see predict_ms).
    const bool o2o = c.form == "one_to_one";
    const double p_base = predict_ms(c, o2o ? 1.6e12 : 3.0e12);
    const double p_split = predict_ms(c, o2o ? 2.0e12 : 4.5e12);
    const double p_mmr = predict_ms(c, 4.5e12);
    const double p_mmb = predict_ms(c, 6.0e12);
    const double p_go = predict_ms(c, o2o ? 2.5e12 : (c.form == "n_to_m" ? 8.0e12 : 9.0e12));
    const double p_wpo = predict_ms(c, o2o ? 1.2e12 : 4.0e12);

    if (c.form == "one_to_one") {
        {  // naive_original_alg_one_to_one
            Config k;
            k.alg = "overlap-wise";
            k.params = kv({{"src", "cross_corr_naive_original"}});
            k.predicted_ms = predict_ms(c, 1.5e12, (double)sarea);
            k.body = [=]() { cross::run_cross_corr_naive_original(L(), R(), O(), ms, ss, 1, 1); };
            add(v, k);
        }
        for (int w : {4, 8}) {  // naive_shuffle_one_to_one; benchmark.yml: warps [4, 8]
            Config k;
            k.alg = "warp-shuffle-base";
            k.params = kv({{"src", "ccn_shuffle"}, {"warps_per_thread_block", S(w)}});
            k.predicted_ms = p_base;
            k.body = [=]() { cross::run_ccn_shuffle(L(), R(), O(), ms, ss, (dsize_t)w); };
            add(v, k);
        }
        for (int rows : {1, 2, 4, 8, 16}) {  // naive_shuffle_work_distribution_one_to_one (one_to_one_fast)
            Config k;
            k.alg = "split-row";
            k.params = kv({{"src", "ccn_shuffle_work_distribution"}, {"warps_per_thread_block", "4"},
                           {"rows_per_thread", S(rows)}, {"distribution_type", "triangle"}, {"memset_timed", "1"}});
            k.predicted_ms = p_split;
            k.body = [=]() {
                cross::cuda_memset(O(), 0, sarea);  // inside the class's timed region
                cross::run_ccn_shuffle_work_distribution<cross::triangle_distribution>(L(), R(), O(), ms, ss, 4, (dsize_t)rows);
            };
            add(v, k);
        }
        // naive_shuffle_multirow_both_one_to_one; benchmark.yml: warps [4,8], shifts/left rows [1,2,4,8]
        const std::vector<std::pair<int, int>> mrb = {{4, 4}, {2, 4}, {1, 4}, {4, 2}, {2, 2}, {1, 2}, {4, 1}, {2, 1}, {1, 1}, {8, 8}, {4, 8}, {8, 4}};
        for (auto shlr : mrb) {
            const int sh = shlr.first, lr = shlr.second;
            if (sh > SHUFFLE_MULTIROW_BOTH_SHIFTS_PER_THREAD_LIMIT || lr > SHUFFLE_MULTIROW_BOTH_LEFT_ROWS_LIMIT) continue;
            Config k;
            k.alg = "grouped-overlap";
            k.params = kv({{"src", "ccn_shuffle_multirow_both"}, {"warps_per_thread_block", "4"},
                           {"shifts_per_thread", S(sh)}, {"left_rows_per_iteration", S(lr)}});
            k.predicted_ms = p_go;
            k.body = [=]() { cross::run_ccn_shuffle_multirow_both(L(), R(), O(), ms, ss, 4, (dsize_t)sh, (dsize_t)lr); };
            add(v, k);
        }
        for (int sp : {16, 32, 4}) {  // naive_warp_per_shift_one_to_one; benchmark.yml: [4, 16, 32]
            Config k;
            k.alg = "warp-per-overlap";
            k.params = kv({{"src", "ccn_warp_per_shift"}, {"shifts_per_thread_block", S(sp)}});
            k.predicted_ms = p_wpo;
            k.body = [=]() { cross::run_ccn_warp_per_shift(L(), R(), O(), ms, ss, (dsize_t)sp); };
            add(v, k);
        }
    } else if (c.form == "one_to_many") {
        const dsize_t M = c.right;
        {  // naive_original_alg_one_to_many
            Config k;
            k.alg = "overlap-wise";
            k.params = kv({{"src", "cross_corr_naive_original"}});
            k.predicted_ms = predict_ms(c, 1.5e12, (double)sarea);
            k.body = [=]() { cross::run_cross_corr_naive_original(L(), R(), O(), ms, ss, 1, M); };
            add(v, k);
        }
        // naive_shuffle_multimat_right_one_to_many; benchmark.yml: warps [4,8], right mats/thread [1,2,4,8].
        // With 1 right matrix per thread it is the warp-shuffle base kernel applied to every right matrix.
        for (int rm : {4, 2, 1}) {
            for (int w : {4, 8}) {
                if (rm > SHUFFLE_MULTIMAT_RIGHT_RIGHT_MATRICES_PER_THREAD_LIMIT) continue;
                Config k;
                k.alg = rm == 1 ? "warp-shuffle-base" : "multi-matrix-right";
                k.params = kv({{"src", "ccn_shuffle_multimat_right"}, {"warps_per_thread_block", S(w)}, {"right_matrices_per_thread", S(rm)}});
                k.predicted_ms = rm == 1 ? p_base : p_mmr;
                k.body = [=]() { cross::run_ccn_shuffle_multimat_right(L(), R(), O(), ms, ss, M, (dsize_t)w, (dsize_t)rm); };
                add(v, k);
            }
        }
        // naive_shuffle_multimat_right_work_distribution_one_to_many (split-row + multi-matrix-right)
        for (int rows : {4, 1, 8, 16}) {
            const int rm = std::min(4, SHUFFLE_MULTIMAT_RIGHT_RIGHT_MATRICES_PER_THREAD_LIMIT);
            Config k;
            k.alg = "multi-matrix-right-split-row";
            k.params = kv({{"src", "ccn_shuffle_multimat_right_work_distribution"}, {"warps_per_thread_block", "4"},
                           {"right_matrices_per_thread", S(rm)}, {"rows_per_thread", S(rows)},
                           {"distribution_type", "triangle"}, {"memset_timed", "1"}});
            k.predicted_ms = p_mmr;
            k.body = [=]() {
                cross::cuda_memset(O(), 0, (size_t)M * sarea);
                cross::run_ccn_shuffle_multimat_right_work_distribution<cross::triangle_distribution>(L(), R(), O(), ms, ss, M, 4, (dsize_t)rm, (dsize_t)rows);
            };
            add(v, k);
        }
        // naive_shuffle_multirow_both_multimat_right_one_to_many; benchmark.yml: warps [4,8],
        // right mats/thread, shifts per right matrix, left rows per iteration: each [1,2,4]
        struct G { int w, sh, rm, lr; };
        const std::vector<G> grid = {{4, 4, 4, 4}, {8, 4, 4, 4}, {4, 4, 4, 2}, {4, 4, 2, 4}, {4, 2, 4, 4}, {4, 2, 2, 2}, {4, 1, 1, 1}};
        for (auto g : grid) {
            if (g.sh > SHUFFLE_ONE_TO_MANY_MULTIROW_BOTH_MULTIMAT_RIGHT_SHIFTS_PER_RIGHT_MATRIX_LIMIT ||
                g.rm > SHUFFLE_ONE_TO_MANY_MULTIROW_BOTH_MULTIMAT_RIGHT_RIGHT_MATRICES_PER_THREAD_LIMIT ||
                g.lr > SHUFFLE_ONE_TO_MANY_MULTIROW_BOTH_MULTIMAT_RIGHT_LEFT_ROWS_PER_ITERATION_LIMIT)
                continue;
            Config k;
            k.alg = "grouped-overlap";
            k.params = kv({{"src", "ccn_shuffle_one_to_many_multirow_both_multimat_right"}, {"warps_per_thread_block", S(g.w)},
                           {"shifts_per_thread_right_matrix", S(g.sh)}, {"right_matrices_per_thread", S(g.rm)},
                           {"left_rows_per_iteration", S(g.lr)}});
            k.predicted_ms = p_go;
            k.body = [=]() {
                cross::run_ccn_shuffle_one_to_many_multirow_both_multimat_right(L(), R(), O(), ms, ss, M, (dsize_t)g.w, (dsize_t)g.sh,
                                                                                 (dsize_t)g.rm, (dsize_t)g.lr);
            };
            add(v, k);
        }
        // naive_warp_per_shift_shared_mem_one_to_many; benchmark.yml: shifts/block [8,16,32],
        // shared mem row size [32,128,256], strided load, column group per block, right mats/block [1,2,4,8]
        struct W { int sp, rs, rmb; };
        const std::vector<W> wg = {{32, 32, 8}, {32, 32, 4}, {32, 32, 2}, {16, 128, 2}, {16, 32, 1}};
        for (auto g : wg) {
            if (g.rmb > WARP_PER_SHIFT_SHARED_MEM_RIGHT_MATRICES_PER_BLOCK_LIMIT) continue;
            Config k;
            k.alg = "warp-per-overlap-shared-mem";
            k.params = kv({{"src", "ccn_warp_per_shift_shared_mem"}, {"shifts_per_thread_block", S(g.sp)},
                           {"shared_mem_row_size", S(g.rs)}, {"shared_mem_rows", S(g.sp)}, {"strided_load", "1"},
                           {"column_group_per_block", "0"}, {"right_matrices_per_block", S(g.rmb)}});
            k.predicted_ms = p_wpo;
            k.body = [=]() {
                cross::run_ccn_warp_per_shift_shared_mem(L(), R(), O(), ms, ss, M, (dsize_t)g.sp, (dsize_t)g.rs, (dsize_t)g.sp,
                                                         (dsize_t)g.rmb, true, false);
            };
            add(v, k);
        }
    } else if (c.form == "n_to_mn") {
        const dsize_t N = c.left, T = c.right, m = c.right / c.left;  // T = N * m right matrices in total
        {  // naive_original_alg_n_to_mn
            Config k;
            k.alg = "overlap-wise";
            k.params = kv({{"src", "cross_corr_naive_original"}});
            k.predicted_ms = predict_ms(c, 1.5e12, (double)sarea * N);
            k.body = [=]() { cross::run_cross_corr_naive_original(L(), R(), O(), ms, ss, N, T / N); };
            add(v, k);
        }
        // naive_shuffle_multimat_right_work_distribution_n_to_mn: one one-to-many kernel per left matrix,
        // round-robin over num_cuda_streams streams, results zeroed inside the timed region.
        // benchmark.yml "multimat-right": rows_per_thread 1, distribution none, warps [4,8],
        // right mats/thread [1,2,4,8], streams [1,20]; "multimat-right-work-distribution": rectangle/triangle.
        struct MR { const char* alg; int w, rm, rows; cross::distribution d; int streams; };
        const std::vector<MR> mr = {
            {"multi-matrix-right", 4, 4, 1, cross::distribution::none, 1},
            {"multi-matrix-right", 8, 4, 1, cross::distribution::none, 1},
            {"multi-matrix-right", 4, 4, 1, cross::distribution::none, 20},
            {"multi-matrix-right", 4, 2, 1, cross::distribution::none, 1},
            {"warp-shuffle-base", 4, 1, 1, cross::distribution::none, 1},
            {"warp-shuffle-base", 4, 1, 1, cross::distribution::none, 20},
            {"multi-matrix-right-split-row", 4, 4, 4, cross::distribution::triangle, 1},
            {"multi-matrix-right-split-row", 4, 4, 8, cross::distribution::triangle, 1},
        };
        for (auto g : mr) {
            if (g.rm > SHUFFLE_MULTIMAT_RIGHT_RIGHT_MATRICES_PER_THREAD_LIMIT) continue;
            auto streams = std::make_shared<std::unique_ptr<Streams>>();
            Config k;
            k.alg = g.alg;
            k.params = kv({{"src", "ccn_shuffle_multimat_right_work_distribution"}, {"warps_per_thread_block", S(g.w)},
                           {"right_matrices_per_thread", S(g.rm)}, {"rows_per_thread", S(g.rows)},
                           {"distribution_type", dist_name(g.d)}, {"num_cuda_streams", S(g.streams)}, {"memset_timed", "1"}});
            k.predicted_ms = std::string(g.alg) == "warp-shuffle-base" ? p_base : p_mmr;
            k.setup = [=]() { *streams = std::make_unique<Streams>(g.streams); };
            k.teardown = [=]() { streams->reset(); };
            k.body = [=]() {
                cross::cuda_memset(O(), 0, (size_t)T * sarea);
                const Streams& st = **streams;
                for (dsize_t ref = 0; ref < N; ++ref) {
                    auto launch = [&](auto tag) {
                        cross::run_ccn_shuffle_multimat_right_work_distribution<typename decltype(tag)::type_is>(
                            L() + ref * area, R() + (size_t)(ref * m) * area, O() + (size_t)(ref * m) * sarea, ms, ss, m,
                            (dsize_t)g.w, (dsize_t)g.rm, (dsize_t)g.rows, st[ref]);
                    };
                    with_distribution(g.d, launch);
                }
            };
            add(v, k);
        }
        // naive_shuffle_multirow_both_multimat_right_n_to_mn: one one-to-many grouped-overlap kernel per
        // left matrix, round-robin over streams (benchmark.yml: streams [1, 20]).
        struct G { int w, sh, rm, lr, streams; };
        const std::vector<G> grid = {{4, 4, 4, 4, 1}, {4, 4, 4, 4, 20}, {8, 4, 4, 4, 1}, {4, 4, 4, 2, 1},
                                     {4, 4, 2, 4, 1}, {4, 2, 4, 4, 1}, {4, 2, 2, 2, 1}, {4, 1, 1, 1, 1}};
        for (auto g : grid) {
            if (g.sh > SHUFFLE_ONE_TO_MANY_MULTIROW_BOTH_MULTIMAT_RIGHT_SHIFTS_PER_RIGHT_MATRIX_LIMIT ||
                g.rm > SHUFFLE_ONE_TO_MANY_MULTIROW_BOTH_MULTIMAT_RIGHT_RIGHT_MATRICES_PER_THREAD_LIMIT ||
                g.lr > SHUFFLE_ONE_TO_MANY_MULTIROW_BOTH_MULTIMAT_RIGHT_LEFT_ROWS_PER_ITERATION_LIMIT)
                continue;
            auto streams = std::make_shared<std::unique_ptr<Streams>>();
            Config k;
            k.alg = "grouped-overlap";
            k.params = kv({{"src", "ccn_shuffle_one_to_many_multirow_both_multimat_right"}, {"warps_per_thread_block", S(g.w)},
                           {"shifts_per_thread_right_matrix", S(g.sh)}, {"right_matrices_per_thread", S(g.rm)},
                           {"left_rows_per_iteration", S(g.lr)}, {"num_cuda_streams", S(g.streams)}});
            k.predicted_ms = p_go;
            k.setup = [=]() { *streams = std::make_unique<Streams>(g.streams); };
            k.teardown = [=]() { streams->reset(); };
            k.body = [=]() {
                const Streams& st = **streams;
                for (dsize_t ref = 0; ref < N; ++ref) {
                    cross::run_ccn_shuffle_one_to_many_multirow_both_multimat_right(
                        L() + ref * area, R() + (size_t)(ref * m) * area, O() + (size_t)(ref * m) * sarea, ms, ss, m, (dsize_t)g.w,
                        (dsize_t)g.sh, (dsize_t)g.rm, (dsize_t)g.lr, st[ref]);
                }
            };
            add(v, k);
        }
    } else if (c.form == "n_to_m") {
        const dsize_t N = c.left, M = c.right;
        {  // naive_original_alg_n_to_m: one kernel per left matrix over 8 streams (class default)
            auto streams = std::make_shared<std::unique_ptr<Streams>>();
            Config k;
            k.alg = "overlap-wise";
            k.params = kv({{"src", "cross_corr_naive_original"}, {"num_cuda_streams", "8"}});
            k.predicted_ms = predict_ms(c, 1.5e12, (double)sarea * std::min<dsize_t>(N, 8));
            k.setup = [=]() { *streams = std::make_unique<Streams>(8); };
            k.teardown = [=]() { streams->reset(); };
            k.body = [=]() {
                const Streams& st = **streams;
                for (dsize_t ref = 0; ref < N; ++ref) {
                    cross::run_cross_corr_naive_original(L() + ref * area, R(), O() + (size_t)(ref * M) * sarea, ms, ss, 1, M, st[ref]);
                }
            };
            add(v, k);
        }
        // naive_shuffle_multimat_both_work_distribution_n_to_m; results zeroed before (outside) the timed
        // kernel, as the class does. benchmark.yml "multimat-both": rows 1, distribution none, warps [4,8],
        // left/right mats per thread [1,2,4]; "multimat-both-work-distribution": rows [1,4,8,16], rectangle/triangle.
        struct MB { const char* alg; int w, lm, rm, rows; cross::distribution d; };
        const std::vector<MB> mb = {
            {"multi-matrix-both", 4, 4, 4, 1, cross::distribution::none},
            {"multi-matrix-both", 8, 4, 4, 1, cross::distribution::none},
            {"multi-matrix-both", 4, 2, 4, 1, cross::distribution::none},
            {"multi-matrix-both", 4, 2, 2, 1, cross::distribution::none},
            {"multi-matrix-both", 4, 1, 2, 1, cross::distribution::none},
            {"multi-matrix-both", 4, 1, 1, 1, cross::distribution::none},
            {"multi-matrix-both-split-row", 8, 4, 4, 16, cross::distribution::triangle},
            {"multi-matrix-both-split-row", 8, 4, 4, 8, cross::distribution::triangle},
            {"multi-matrix-both-split-row", 8, 4, 4, 4, cross::distribution::triangle},
            {"multi-matrix-both-split-row", 4, 2, 4, 1, cross::distribution::triangle},
        };
        for (auto g : mb) {
            if (g.lm > SHUFFLE_N_TO_M_MULTIMAT_BOTH_LEFT_MATRICES_PER_THREAD_LIMIT ||
                g.rm > SHUFFLE_N_TO_M_MULTIMAT_BOTH_RIGHT_MATRICES_PER_THREAD_LIMIT)
                continue;
            Config k;
            k.alg = g.alg;
            k.params = kv({{"src", "ccn_shuffle_n_to_m_multimat_both_work_distribution"}, {"warps_per_thread_block", S(g.w)},
                           {"left_matrices_per_thread", S(g.lm)}, {"right_matrices_per_thread", S(g.rm)},
                           {"rows_per_thread", S(g.rows)}, {"distribution_type", dist_name(g.d)}, {"memset_timed", "0"}});
            k.predicted_ms = p_mmb;
            k.pre = zero_out;
            k.body = [=]() {
                with_distribution(g.d, [&](auto tag) {
                    cross::run_ccn_shuffle_n_to_m_multimat_both_work_distribution<typename decltype(tag)::type_is>(
                        L(), R(), O(), ms, ss, N, M, (dsize_t)g.w, (dsize_t)g.lm, (dsize_t)g.rm, (dsize_t)g.rows);
                });
            };
            add(v, k);
        }
        // naive_shuffle_multirow_both_multimat_both_n_to_m; benchmark.yml: warps [4,8], left/right mats per
        // thread, shifts per right matrix, left rows per iteration: each [1,2,4]
        struct G { int w, lm, rm, sh, lr; };
        const std::vector<G> grid = {{4, 4, 4, 4, 4}, {4, 2, 4, 4, 4}, {4, 1, 2, 4, 4}, {4, 2, 2, 4, 4}, {4, 2, 2, 2, 4},
                                     {4, 2, 2, 2, 2}, {4, 1, 1, 2, 2}, {4, 1, 1, 1, 4}, {4, 1, 1, 1, 1}};
        for (auto g : grid) {
            if (g.sh > SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_SHIFTS_PER_THREAD_PER_RIGHT_MATRIX_LIMIT ||
                g.rm > SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_RIGHT_MATRICES_PER_THREAD_LIMIT ||
                g.lm > SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_LEFT_MATRICES_PER_THREAD_LIMIT ||
                g.lr > SHUFFLE_N_TO_M_MULTIROW_BOTH_MULTIMAT_BOTH_LEFT_ROWS_PER_ITERATION_LIMIT)
                continue;
            Config k;
            k.alg = "grouped-overlap";
            k.params = kv({{"src", "ccn_n_to_m_shuffle_multirow_both_multimat_both"}, {"warps_per_thread_block", S(g.w)},
                           {"shifts_per_thread_right_matrix", S(g.sh)}, {"left_matrices_per_thread", S(g.lm)},
                           {"right_matrices_per_thread", S(g.rm)}, {"left_rows_per_iteration", S(g.lr)}});
            k.predicted_ms = p_go;
            k.body = [=]() {
                cross::run_ccn_n_to_m_shuffle_multirow_both_multimat_both(L(), R(), O(), ms, ss, N, M, (dsize_t)g.w, (dsize_t)g.sh,
                                                                          (dsize_t)g.lm, (dsize_t)g.rm, (dsize_t)g.lr);
            };
            add(v, k);
        }
    }
    add(v, make_fft_config(c, B));
    if (quick) {  // only the first (best-known) configuration of each algorithm
        std::vector<Config> q;
        std::set<std::string> seen;
        for (auto& k : v) {
            if (seen.insert(k.alg).second) q.push_back(std::move(k));
        }
        v = std::move(q);
    }
    return v;
}

// ---------------------------------------------------------------- running

bool device_usable() {
    cudaDeviceSynchronize();
    cudaGetLastError();
    void* p = nullptr;
    if (cudaMalloc(&p, 256) != cudaSuccess) return false;
    bool ok = cudaMemset(p, 0, 256) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
    cudaFree(p);
    cudaGetLastError();
    return ok;
}

// Returns 0, or 3 when the CUDA context is unusable (the caller must stop the process).
int run_case(const Case& c) {
    g_opt.form = c.form;
    g_opt.rows = c.rows;
    g_opt.cols = c.cols;
    g_opt.left = c.left;
    g_opt.right = c.right;
    // The artifact's input-size validators (one_to_one.hpp, one_to_many.hpp, n_to_mn.hpp, n_to_m.hpp).
    bool valid = c.rows > 0 && c.cols > 0 && c.left > 0 && c.right > 0;
    if (c.form == "one_to_one") valid = valid && c.left == 1 && c.right == 1;
    if (c.form == "one_to_many") valid = valid && c.left == 1;
    if (c.form == "n_to_mn") valid = valid && c.right % c.left == 0;
    if (!valid) {
        emit_comment("error", "-", "-", "invalid input counts for this form");
        return 0;
    }

    if (g_resume_state == 1 && g_opt.resume_after.rfind(case_prefix() + "|", 0) != 0) {
        return 0;  // --resume-after names a later case
    }
    if (g_opt.deadline > 0 && now_s() > g_opt.deadline) {
        emit_comment("skipped", "-", "-", "time budget of the whole run used up before this case");
        return 0;
    }

    Buffers B;
    const size_t nl = (c.form == "one_to_one" || c.form == "one_to_many") ? 1 : c.left;
    std::vector<Config> plan;
    try {
        if (!g_opt.dry_run) {
            B.left = std::make_unique<DevBuf>(nl * c.area());
            B.right = std::make_unique<DevBuf>((size_t)c.right * c.area());
            B.out = std::make_unique<DevBuf>(c.pairs() * c.sarea());
            fill_random(*B.left, g_opt.seed);
            fill_random(*B.right, g_opt.seed + 7919);
            cuda_ok(cudaMemset(B.out->p, 0, B.out->n * sizeof(float)), "cudaMemset");
            cuda_ok(cudaDeviceSynchronize(), "input generation");
        }
        plan = build_plan(c, B);
    } catch (std::exception& e) {
        emit_comment("error", "-", "-", std::string("case setup failed: ") + e.what());
        return device_usable() ? 0 : 3;
    }

    std::string cur_alg;
    double alg_start = 0;
    bool alg_truncated = false;
    int alg_index = 0;        // index of the configuration within its algorithm's sweep
    bool alg_heavy = false;   // first configuration was slower than heavy_ms
    for (auto& cfg : plan) {
        if (!g_opt.algos.empty() && !g_opt.algos.count(cfg.alg)) continue;
        const std::string marker = case_prefix() + "|" + cfg.alg;
        // --resume-after: skip everything up to and including the given case and algorithm.
        if (g_resume_state == 1) {
            if (marker == g_opt.resume_after) g_resume_state = 2;
            continue;
        }
        if (g_resume_state == 2) {
            if (marker == g_opt.resume_after) continue;
            g_resume_state = 0;
        }
        if (cfg.alg != cur_alg) {
            cur_alg = cfg.alg;
            alg_start = now_s();
            alg_truncated = false;
            alg_index = 0;
            alg_heavy = false;
            std::printf("# begin,%s,%s\n", case_prefix().c_str(), cfg.alg.c_str());
            std::fflush(stdout);
        } else {
            ++alg_index;
        }
        if (g_opt.deadline > 0 && now_s() > g_opt.deadline) {
            emit_comment("skipped", cfg.alg, cfg.params, "time budget of the whole run used up");
            continue;
        }
        if (alg_truncated || now_s() - alg_start > g_opt.alg_budget_s) {
            alg_truncated = true;
            emit_comment("skipped", cfg.alg, cfg.params, "sweep truncated: this algorithm used its time budget for the case");
            continue;
        }
        if (alg_heavy && alg_index >= 2) {
            emit_comment("skipped", cfg.alg, cfg.params, "sweep truncated: slow case, only the first 2 configurations are run");
            continue;
        }
        if (cfg.predicted_ms > g_opt.max_run_ms) {
            std::ostringstream m;
            m << "predicted " << std::lround(cfg.predicted_ms) << " ms per run > " << g_opt.max_run_ms << " ms";
            emit_comment("skipped", cfg.alg, cfg.params, m.str());
            continue;
        }
        if (g_opt.dry_run) {
            std::ostringstream m;
            m << "predicted_ms=" << cfg.predicted_ms;
            emit_comment("plan", cfg.alg, cfg.params, m.str());
            if (alg_index == 0 && cfg.predicted_ms > g_opt.heavy_ms) alg_heavy = true;
            continue;
        }
        try {
            if (cfg.is_fft) {
                std::vector<double> tot, fwd, had, inv;
                cfg.fft_run(tot, fwd, had, inv, 0);
                std::ostringstream p;
                p.setf(std::ios::fixed);
                p.precision(6);
                p << cfg.params << ";fwd_ms=" << median(fwd) << ";hadamard_ms=" << median(had) << ";inv_ms=" << median(inv)
                  << ";reps=" << tot.size();
                emit_row(cfg.alg, p.str(), median(tot));
            } else {
                if (cfg.setup) cfg.setup();
                struct Td {
                    std::function<void()>& f;
                    ~Td() {
                        if (f) f();
                    }
                } td{cfg.teardown};
                Events ev;
                double first = time_once(ev, cfg.pre, cfg.body);  // warm-up
                if (alg_index == 0 && first > g_opt.heavy_ms) alg_heavy = true;
                if (first > g_opt.max_run_ms) {
                    std::ostringstream m;
                    m << "one run took " << first << " ms > " << g_opt.max_run_ms << " ms; not repeated";
                    emit_comment("skipped", cfg.alg, cfg.params, m.str());
                    alg_truncated = true;  // the rest of the sweep is expected to be slower still (reported as truncated)
                    continue;
                }
                int reps = reps_for(first);
                std::vector<double> t;
                for (int i = 0; i < reps; ++i) t.push_back(time_once(ev, cfg.pre, cfg.body));
                emit_row(cfg.alg, cfg.params + ";reps=" + std::to_string(reps), median(t));
            }
        } catch (std::exception& e) {
            emit_comment("error", cfg.alg, cfg.params, e.what());
            if (!device_usable()) {
                emit_comment("fatal", cfg.alg, cfg.params, "CUDA context unusable after this error; stopping this process");
                return 3;
            }
        }
    }
    return 0;
}

void usage(const char* argv0) {
    std::fprintf(stderr,
                 "usage: %s --case FORM,ROWS,COLS,LEFT,RIGHT [--case ...]\n"
                 "          [--algos a,b] [--quick] [--dry-run] [--max-run-ms 2000] [--alg-budget-s 2]\n"
                 "          [--heavy-ms 100] [--deadline EPOCH_S] [--max-reps 10] [--resume-after PREFIX|ALG] [--header]\n"
                 "  FORM: one_to_one, one_to_many, n_to_mn or n_to_m. For n_to_mn, RIGHT is the total number\n"
                 "  of right matrices (LEFT * per-left count), as the artifact counts them.\n",
                 argv0);
}

}  // namespace

int main(int argc, char** argv) {
    bool header = false;
    std::vector<Case> cases;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                usage(argv[0]);
                std::exit(1);
            }
            return argv[++i];
        };
        try {
            if (a == "--case") {
                std::stringstream ss(next());
                std::vector<std::string> f;
                std::string t;
                while (std::getline(ss, t, ',')) f.push_back(t);
                const std::set<std::string> forms = {"one_to_one", "one_to_many", "n_to_mn", "n_to_m"};
                if (f.size() != 5 || !forms.count(f[0])) {
                    usage(argv[0]);
                    return 1;
                }
                cases.push_back(Case{f[0], (unsigned)std::stoul(f[1]), (unsigned)std::stoul(f[2]), (unsigned)std::stoul(f[3]),
                                     (unsigned)std::stoul(f[4])});
            } else if (a == "--algos") {
                std::stringstream ss(next());
                std::string t;
                while (std::getline(ss, t, ',')) if (!t.empty()) g_opt.algos.insert(t);
            } else if (a == "--quick") g_opt.quick = true;
            else if (a == "--dry-run") g_opt.dry_run = true;
            else if (a == "--max-run-ms") g_opt.max_run_ms = std::stod(next());
            else if (a == "--alg-budget-s") g_opt.alg_budget_s = std::stod(next());
            else if (a == "--heavy-ms") g_opt.heavy_ms = std::stod(next());
            else if (a == "--deadline") g_opt.deadline = std::stod(next());
            else if (a == "--max-reps") g_opt.max_reps = std::stoi(next());
            else if (a == "--resume-after") {
                g_opt.resume_after = next();
                g_resume_state = 1;
            }
            else if (a == "--header") header = true;
            else {
                usage(argv[0]);
                return 1;
            }
        } catch (std::exception&) {
            usage(argv[0]);
            return 1;
        }
    }
    if (cases.empty()) {
        usage(argv[0]);
        return 1;
    }
    if (header) std::printf("form,left_count,right_count,rows,cols,algorithm,params,time_ms\n");
    if (!g_opt.dry_run) {
        cudaDeviceProp prop{};
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
            std::printf("# fatal,no usable CUDA device\n");
            return 3;
        }
        std::printf("# device,%s,sm_%d%d\n", prop.name, prop.major, prop.minor);
    }
    for (const auto& c : cases) {
        int rc = run_case(c);
        if (rc != 0) return rc;
    }
    return 0;
}
