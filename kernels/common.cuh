// Block-wide reductions shared by the ebsdxc kernels. Blocks are 1-D with a
// multiple of 32 threads, at most 1024.
#pragma once

// NVRTC has no math.h: spell the constant out.
#define EBSDXC_NEG_INF (__int_as_float(0xff800000u))

// (float)v, the same bits, on the FP32 pipe where v is an integer of at most 16 bits: 2^23 + v
// is a float's exact bit pattern, and 2^23 taken off it leaves v exactly. The conversion
// instruction runs at 16 values a clock an SM on sm_80/sm_90, an eighth of the FP32 rate; the
// tile pass converted every value twice and was bound by it.
template <typename T>
__device__ __forceinline__ float exact_float(T v) { return (float)v; }
template <>
__device__ __forceinline__ float exact_float<unsigned char>(unsigned char v) {
    return __uint_as_float(0x4b000000u | v) - 8388608.0f;
}
template <>
__device__ __forceinline__ float exact_float<unsigned short>(unsigned short v) {
    return __uint_as_float(0x4b000000u | v) - 8388608.0f;
}
template <>
__device__ __forceinline__ float exact_float<short>(short v) {
    return __uint_as_float(0x4b000000u | (unsigned)(v + 32768)) - 8421376.0f;  // 2^23 + 2^15
}

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// The warp's maximum (NaN never wins) and minimum, in every lane.
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ int warp_min(int v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return __reduce_min_sync(0xffffffffu, v);
#else
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
#endif
}

// 16 bytes from global to shared memory by cp.async (sm_80 on), of which the first `bytes`
// are read and the rest are zeros.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int bytes = 16) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(bytes));
}

// Sum over the block; every thread gets the result.
__device__ double block_sum(double v, double* smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // smem may still be read by a previous call
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    // Only warp 0 reads the partial sums: a read by another warp would race with thread 0's
    // write of the total below (its value unused, but racecheck reports it).
    v = warp == 0 && lane < nwarps ? smem[lane] : 0.0;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) smem[0] = v;
    __syncthreads();
    return smem[0];
}

__device__ float block_max(float v, float* smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    v = warp == 0 && lane < nwarps ? smem[lane] : EBSDXC_NEG_INF;  // warp 0 only, as block_sum
    if (warp == 0) v = warp_max(v);
    if (threadIdx.x == 0) smem[0] = v;
    __syncthreads();
    return smem[0];
}

// Argmax of (value, index) pairs, ties to the lower index: the rule of every peak search.
__device__ __forceinline__ void argmax_take(float& best, int& bi, float v, int i) {
    if (v > best || (v == best && i < bi)) { best = v; bi = i; }
}

__device__ __forceinline__ void warp_argmax(float& best, int& bi) {
    for (int o = 16; o > 0; o >>= 1) {
        const float v2 = __shfl_down_sync(0xffffffffu, best, o);
        const int i2 = __shfl_down_sync(0xffffffffu, bi, o);
        argmax_take(best, bi, v2, i2);
    }
}
