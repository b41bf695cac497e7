// Definition-based cross-correlation, n-to-mn form (Maděra, Šmelko, Kruliš): the
// overlap-wise baseline, one thread per output lag of one (pattern, ROI) pair. Left
// matrices are the n reference tiles, right matrices the B*n scan tiles; tile t is
// matched with reference t % n. Output maps hold lag (dy, dx) at (dy mod My, dx mod Mx),
// the layout of an inverse FFT, so the same peak search serves both engines.
// Sum over the overlap only (zero outside the tiles), accumulated in float.

__global__ void xcorr_overlap(const float* __restrict__ ref,   // (n, h, w)
                              const float* __restrict__ scan,  // (T, h, w)
                              int n, int h, int w, int ry, int rx,
                              float* __restrict__ out,  // (T, My, Mx)
                              int My, int Mx) {
    const int rw = 2 * rx + 1, nlags = (2 * ry + 1) * rw;
    const int lag = blockIdx.x * blockDim.x + threadIdx.x;
    const long long t = blockIdx.y;
    if (lag >= nlags) return;
    const int dy = lag / rw - ry, dx = lag % rw - rx;
    const float* L = ref + (t % n) * (long long)h * w;
    const float* R = scan + t * (long long)h * w;
    const int y0 = max(0, -dy), y1 = min(h, h - dy), x0 = max(0, -dx), x1 = min(w, w - dx);
    float acc = 0.0f;
    for (int y = y0; y < y1; ++y) {
        const float* l = L + y * w;
        const float* r = R + (y + dy) * w + dx;
        for (int x = x0; x < x1; ++x) acc = fmaf(l[x], r[x], acc);
    }
    const int oy = dy < 0 ? dy + My : dy, ox = dx < 0 ? dx + Mx : dx;
    out[t * (long long)My * Mx + oy * Mx + ox] = acc;
}
