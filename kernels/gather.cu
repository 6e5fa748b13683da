// Row gather/scatter between slot buffers and contiguous scratch: the data movement that
// preemption and merging need (a sub-batch is a list of slots). Each segment copies `len`
// floats from src[src_off] to dst[dst_off]; src_off < 0 writes `fill` instead.
// seg layout: [src_off, dst_off, len] as long long.
// Launch: grid (segments, chunks), any block size. Block (s, c) copies chunks c, c + gridDim.y,
// ... of segment s, a chunk being 16 floats per thread, so a long segment (a ResNet conv1
// output, 800 K floats) spreads over many SMs. A segment whose source and destination are
// 16-byte aligned and whose length is a multiple of 4 moves as float4 (offsets that are
// multiples of 4 in 256-byte-aligned buffers), any other as single floats.

struct alignas(16) lb_f4 {
    float x, y, z, w;
};

extern "C" __global__ void copy_segments(const float* __restrict__ src, float* __restrict__ dst,
                                         const long long* __restrict__ seg, int nseg, float fill) {
    int s = blockIdx.x;
    if (s >= nseg) return;
    long long so = seg[3 * s], d = seg[3 * s + 1], n = seg[3 * s + 2];
    float* __restrict__ to = dst + d;
    const float* __restrict__ from = so < 0 ? src : src + so;  // unread for a fill
    long long chunk = 16LL * blockDim.x, first = (long long)blockIdx.y * chunk, step = chunk * gridDim.y;
    bool vec = (n & 3) == 0 && (((unsigned long long)to | (unsigned long long)from) & 15) == 0;
    if (vec) {
        lb_f4* __restrict__ t4 = (lb_f4*)to;
        const lb_f4* __restrict__ f4 = (const lb_f4*)from;
        lb_f4 v = {fill, fill, fill, fill};
        long long n4 = n >> 2, c4 = chunk >> 2;
        for (long long c = first >> 2; c < n4; c += step >> 2) {
            long long e = c + c4 < n4 ? c + c4 : n4;
            for (long long i = c + threadIdx.x; i < e; i += blockDim.x) t4[i] = so < 0 ? v : f4[i];
        }
    } else {
        for (long long c = first; c < n; c += step) {
            long long e = c + chunk < n ? c + chunk : n;
            for (long long i = c + threadIdx.x; i < e; i += blockDim.x) to[i] = so < 0 ? fill : from[i];
        }
    }
}

// Converts f32 to f16 storage (for the f16 GEMM path).
extern "C" __global__ void f32_to_f16(const float* x, unsigned short* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = f2h(x[i]);
}

// y[(i / block) * y_stride + i % block] = x[i]: converts `n` contiguous halves back into
// blocks of `block` floats `y_stride` apart (one block per GEMM of a strided batch).
extern "C" __global__ void f16_to_f32(const unsigned short* x, float* y, long long n, long long block,
                                      long long y_stride) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[(i / block) * y_stride + i % block] = h2f(x[i]);
}
