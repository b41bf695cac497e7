// Window-mode correlation of one left matrix against many right matrices as one GEMM on the
// Hopper warpgroup tensor cores (wgmma, sm_90a), the tensor engine's path where a left matrix
// meets enough right matrices (tensorcorr.cu serves the rest, and every other GPU):
//
//   C_b[dy, dx] = sum_{y, x} L[y, x] R_b[y + dy, x + dx] = sum_{y', x'} L[y' - dy, x' - dx] R_b[y', x']
//
//   rows    m = (iy, ix): the lags, dy = iy - ry, dx = ix - rx, all of them in one dimension
//   columns n = b:        the right matrices of the pairing
//   depth   k = (y', x'): the pixels of R_b
//   A[m, (y', x')] = L[y' - dy, x' - dx]    (Toeplitz in both directions: gathered from L)
//   B[(y', x'), n] = R_b[y', x']            (the right matrices as they are)
//
// tensorcorr.cu's GEMM puts (right matrix, dy) on the rows and only the 2 rx + 1 lags dx on
// the columns, so each fragment feeds a few products; here every A value feeds NN right
// matrices and every B value 64 lags of a warpgroup instruction.
//
// A block has two warpgroups of MT 64-row tiles each (2 MT 64 lags) and NN right matrices. It
// walks the rows y' of R that its lags meet: row y' of its NN right matrices goes to shared
// memory by cp.async in the layout of a wgmma operand (K-major, 64-byte swizzle), and
// the rows of L those lags reach (y' - dy) to a ring of packed rows, word j of a row holding
// L[., j - rx] and L[., j - rx + 1] (tc_pack_left's layout): a fragment's pair of k values is
// one aligned 32-bit load wherever dx puts it (rows of L outside the matrix are zeros, so lags
// that leave it add nothing). KB 16-pixel steps at a time gather their MT A fragments each,
// then issue their wgmma with fp32 accumulators.
//
// PREC: bf16 (2) or fp16 (3, per-matrix scales sl, sr as tc_scale makes them).
#include "common.cuh"

#define STAGES 4
#define AHEAD 2  // rows copied ahead: a stage is rewritten two rows after its products were issued
// RPS rows a barrier (AHEAD a multiple of it, AHEAD + RPS <= STAGES): the copies of rows
// r + AHEAD .. r + AHEAD + RPS - 1 go out together after the barrier of row r, into the stages
// of rows whose products every warpgroup waited for before it.

// D (64 x N, fp32) += A (64 x 16, four registers a thread) B (16 x N, by descriptor): one
// specialisation per (precision, N), each naming its N / 2 accumulators.
template <int PREC, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long desc);

template <> __device__ __forceinline__ void wgmma_rs<2, 64>(float (&d)[32], const unsigned (&a)[4], unsigned long long desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(1));
}
template <> __device__ __forceinline__ void wgmma_rs<3, 64>(float (&d)[32], const unsigned (&a)[4], unsigned long long desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(1));
}
template <> __device__ __forceinline__ void wgmma_rs<2, 96>(float (&d)[48], const unsigned (&a)[4], unsigned long long desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, {%48, %49, %50, %51}, %52, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(1));
}
template <> __device__ __forceinline__ void wgmma_rs<3, 96>(float (&d)[48], const unsigned (&a)[4], unsigned long long desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, {%48, %49, %50, %51}, %52, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(1));
}
template <> __device__ __forceinline__ void wgmma_rs<2, 128>(float (&d)[64], const unsigned (&a)[4], unsigned long long desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(1));
}
template <> __device__ __forceinline__ void wgmma_rs<3, 128>(float (&d)[64], const unsigned (&a)[4], unsigned long long desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(1));
}
template <> __device__ __forceinline__ void wgmma_rs<2, 192>(float (&d)[96], const unsigned (&a)[4], unsigned long long desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, {%96, %97, %98, %99}, %100, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(1));
}
template <> __device__ __forceinline__ void wgmma_rs<3, 192>(float (&d)[96], const unsigned (&a)[4], unsigned long long desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, {%96, %97, %98, %99}, %100, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(1));
}
template <> __device__ __forceinline__ void wgmma_rs<2, 256>(float (&d)[128], const unsigned (&a)[4], unsigned long long desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(1));
}
template <> __device__ __forceinline__ void wgmma_rs<3, 256>(float (&d)[128], const unsigned (&a)[4], unsigned long long desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(1));
}


// Shared-memory matrix descriptor: start, leading (K) and stride (N) byte offsets; the caller ors
// in the swizzle mode (bits 62-63).
__device__ __forceinline__ unsigned long long tg_desc(const void* smem, unsigned lbo, unsigned sbo) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    return (unsigned long long)((s & 0x3FFFF) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16) |
           ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32);
}

// Maps of window mode for pairs (a, b): na x mblocks x nblocks blocks of 256 threads.
// Lp: (na, h, lw) packed left rows; Rp: (n_rights, h, wk) 16-bit right rows (zero past w);
// ring: rows of L kept (a power of two). One flat grid, lag blocks fastest, then right blocks,
// then left matrices: the blocks that copy the same right rows run together (L2 hits).
// Blocks of at most 64 accumulators a thread fit two to an SM (three spill, and ptxas then
// serialises the wgmma). wk: a multiple of 32 and of 16 KB (B is zero past w).
template <int PREC, int MT, int NN, int KB, int RPS>
__global__ void __launch_bounds__(256, MT * NN <= 128 ? 2 : 1)
    tg_maps(const unsigned* __restrict__ Lp, const unsigned short* __restrict__ Rp, float* __restrict__ out,
            const float* __restrict__ sl, const float* __restrict__ sr, int h, int w, int ry, int rx, int na,
            int nb, int rs_a, int rs_b, int os_a, int os_b, int wk, int lw, int ring, int mblocks, int nblocks) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char tg_smem_raw[];
    const int My = 2 * ry + 1, Mx = 2 * rx + 1, Mtot = My * Mx;
    const int wg = threadIdx.x >> 7;
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int a = blockIdx.x / (mblocks * nblocks);
    const int mbase = (blockIdx.x % mblocks) * (2 * MT * 64);
    const int n0 = (blockIdx.x / mblocks % nblocks) * NN;
    const int stage_bytes = NN * wk * 2;
    // The swizzle is a function of the shared-memory address: stages start on 512 bytes.
    unsigned char* Bs = tg_smem_raw + ((512u - ((unsigned)__cvta_generic_to_shared(tg_smem_raw) & 511u)) & 511u);
    unsigned* Ls = reinterpret_cast<unsigned*>(Bs + STAGES * stage_bytes);
    const int mlast = min(mbase + 2 * MT * 64, Mtot) - 1;
    const int dymin = mbase / Mx - ry, dymax = mlast / Mx - ry;
    const int y_lo = max(0, dymin), y_hi = min(h, h + dymax);
    const int nrows = max(0, y_hi - y_lo);

    // This thread's fragment rows g and g + 8 of each tile: dy, and the word offset rx - dx.
    int dyv[MT][2], col[MT][2];
#pragma unroll
    for (int i = 0; i < MT; ++i) {
        const int mt0 = mbase + (wg * MT + i) * 64;
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int m = min(mt0 + warp * 16 + g + 8 * hf, Mtot - 1);
            dyv[i][hf] = m / Mx - ry;
            col[i][hf] = rx - (m % Mx - rx) + 2 * t;
        }
    }

    // Copies of row r of the walk: row y_lo + r of the NN right matrices, and row y_lo + r - dymin
    // of L (the newest the lags need); rows of L outside the matrix are zeros.
    const int lchunks = lw / 4;
    // This thread's right matrices (n = 64 q + tid / 4) and 16-byte chunk (tid % 4) of each atom.
    constexpr int NQ = (NN + 63) / 64;
    const unsigned short* rsrc[NQ];
    int sdst[NQ];
#pragma unroll
    for (int q = 0; q < NQ; ++q) {
        const int n = min(q * 64 + (int)(threadIdx.x >> 2), NN - 1), c = threadIdx.x & 3;
        const int b = min(n0 + n, nb - 1);
        rsrc[q] = Rp + ((long long)a * rs_a + (long long)b * rs_b) * h * wk + c * 8;
        sdst[q] = n * 64 + ((c ^ ((n >> 1) & 3)) << 4);
    }
    auto copy_left = [&](int yl) {
        unsigned* dst = Ls + (yl & (ring - 1)) * lw;
        const bool in = yl >= 0 && yl < h;
        const unsigned* src = Lp + ((long long)a * h + (in ? yl : 0)) * lw;
        for (int i = threadIdx.x; i < lchunks; i += blockDim.x) cp_async16(dst + 4 * i, src + 4 * i, in ? 16 : 0);
    };
    auto copy_row = [&](int r) {
        if (r < nrows) {
            const int yp = y_lo + r;
            unsigned char* st = Bs + (r % STAGES) * stage_bytes;
            // 64-byte swizzled K-major stage: atom s (32 pixels) of matrix n at s NN 64 + n 64 bytes,
            // its 16-byte chunk c at chunk c ^ ((n >> 1) & 3). Four threads copy a 64-byte piece
            // of one right row, a warp eight rows: 512 contiguous bytes of the stage.
#pragma unroll
            for (int q = 0; q < NQ; ++q) {
                if (q * 64 + (int)(threadIdx.x >> 2) >= NN) break;
                const unsigned short* src = rsrc[q] + (long long)yp * wk;
                for (int at = 0; at < wk / 32; ++at) cp_async16(st + at * (NN * 64) + sdst[q], src + at * 32);
            }
            copy_left(yp - dymin);
        }
    };

    float acc[MT][NN / 2];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NN / 2; ++j) acc[i][j] = 0.0f;

    for (int yl = y_lo - dymax; yl < y_lo - dymin; ++yl) copy_left(yl);
    for (int r = 0; r < AHEAD; ++r) {
        copy_row(r);
        if ((r + 1) % RPS == 0) asm volatile("cp.async.commit_group;");
    }

    // Descriptor of a stage: 64-byte swizzle, eight rows (right matrices) of an atom 512 bytes
    // on (stride offset); the leading offset is unused (a step's 16 pixels lie in one atom).
    // Step ks starts ks / 2 atoms on, and 32 bytes into the atom for odd ks.
    const unsigned long long dstage = tg_desc(Bs, 16, 512) | (2ull << 62);
    for (int r0 = 0; r0 < nrows; r0 += RPS) {
        asm volatile("cp.async.wait_group %0;" ::"n"(AHEAD / RPS - 1) : "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // cp.async wrote it; wgmma reads it
        __syncthreads();
        for (int j = 0; j < RPS; ++j) copy_row(r0 + AHEAD + j);
        asm volatile("cp.async.commit_group;");
#pragma unroll 1
        for (int r = r0; r < min(r0 + RPS, nrows); ++r) {
            const int yp = y_lo + r;
            const unsigned long long d0 = dstage + (unsigned)((r % STAGES) * stage_bytes >> 4);
            int base[MT][2];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) base[i][hf] = ((yp - dyv[i][hf]) & (ring - 1)) * lw + col[i][hf];
            }
            // KB steps at a time: their A fragments gathered first, then their products as one group.
            // A wgmma reads its A registers until it completes, and ptxas serialises every wgmma if
            // any instruction writes an A register while one is in flight: the warpgroup waits for its
            // group before gathering the next (the other warpgroups of the SM keep the tensor cores busy).
            for (int k0 = 0; k0 < wk / 16; k0 += KB) {
                unsigned af[KB][MT][4];
#pragma unroll
                for (int q = 0; q < KB; ++q)
#pragma unroll
                    for (int i = 0; i < MT; ++i) {
                        const unsigned* p0 = Ls + base[i][0] + 16 * (k0 + q);
                        const unsigned* p1 = Ls + base[i][1] + 16 * (k0 + q);
                        af[q][i][0] = p0[0];
                        af[q][i][1] = p1[0];
                        af[q][i][2] = p0[8];
                        af[q][i][3] = p1[8];
                    }
                asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
                for (int q = 0; q < KB; ++q)
#pragma unroll
                    for (int i = 0; i < MT; ++i)
                        wgmma_rs<PREC, NN>(acc[i], af[q][i],
                                           d0 + (unsigned)((((k0 + q) >> 1) * (NN * 64) + ((k0 + q) & 1) * 32) >> 4));
                asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            }
        }
    }

    const float s_l = sl ? sl[a] : 1.0f;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int m = mbase + (wg * MT + i) * 64 + warp * 16 + g + 8 * hf;
            if (m >= Mtot) continue;
            const int iy = m / Mx, ix = m % Mx;
            const int oy = iy - ry < 0 ? iy - ry + My : iy - ry;
            const int ox = ix - rx < 0 ? ix - rx + Mx : ix - rx;
#pragma unroll
            for (int j = 0; j < NN / 8; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int b = n0 + 8 * j + 2 * t + e;
                    if (b >= nb) continue;
                    const long long ri = (long long)a * rs_a + (long long)b * rs_b;
                    const float unscale = (sl && sr) ? 1.0f / (s_l * sr[ri]) : 1.0f;
                    out[((long long)a * os_a + (long long)b * os_b) * Mtot + (long long)oy * Mx + ox] =
                        acc[i][4 * j + 2 * hf + e] * unscale;
                }
        }
#endif
}
