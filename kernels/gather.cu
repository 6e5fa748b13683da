// Row gather/scatter between slot buffers and contiguous scratch: the data movement that
// preemption and merging need (a sub-batch is a list of slots). Each segment copies `len`
// floats from src[src_off] to dst[dst_off]; src_off < 0 writes `fill` instead.
// seg layout: [src_off, dst_off, len] as long long, one block per segment.

extern "C" __global__ void copy_segments(const float* src, float* dst, const long long* seg, int nseg, float fill) {
    int s = blockIdx.x;
    if (s >= nseg) return;
    long long so = seg[3 * s], d = seg[3 * s + 1], n = seg[3 * s + 2];
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        dst[d + i] = so < 0 ? fill : src[so + i];
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
