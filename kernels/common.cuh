// Block-wide reductions shared by the ebsdxc kernels. Blocks are 1-D with a
// multiple of 32 threads, at most 1024.
#pragma once

// NVRTC has no math.h: spell the constant out.
#define EBSDXC_NEG_INF (__int_as_float(0xff800000u))

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block; every thread gets the result.
__device__ double block_sum(double v, double* smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // smem may still be read by a previous call
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    v = lane < nwarps ? smem[lane] : 0.0;
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
    v = lane < nwarps ? smem[lane] : EBSDXC_NEG_INF;
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
