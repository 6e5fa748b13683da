// Row-wise kernels on contiguous [rows x width] scratch: bias + activation, elementwise sums,
// activations, batch norm, layer norm, softmax, argmax, embedding lookup.

extern "C" __global__ void bias_act(float* y, const float* bias, int rows, int n, int act) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * n) return;
    float v = y[i];
    if (bias) v += bias[i % n];
    y[i] = lb_act(act, v);
}

// out[r, j] = act(sum over t of x[r, t*n + j]) for `parts` inputs concatenated per row.
extern "C" __global__ void sum_parts(const float* x, float* y, int rows, int n, int parts, int act) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * n) return;
    long long r = i / n;
    int j = (int)(i % n);
    float v = 0.0f;
    for (int t = 0; t < parts; ++t) v += x[(r * parts + t) * n + j];
    y[i] = lb_act(act, v);
}

// y[r, j] = x[r, j] * scale[j / per] + shift[j / per]
extern "C" __global__ void batchnorm_rows(const float* x, float* y, const float* scale, const float* shift, int rows, int n, int per) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * n) return;
    int j = (int)(i % n);
    y[i] = x[i] * scale[j / per] + shift[j / per];
}

// One block per row.
extern "C" __global__ void layernorm_rows(const float* x, float* y, const float* gamma, const float* beta, int n, float eps) {
    const float* xr = x + (long long)blockIdx.x * n;
    float* yr = y + (long long)blockIdx.x * n;
    float s = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) s += xr[j];
    float mean = lb_block_sum(s) / n;
    float v = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) { float d = xr[j] - mean; v += d * d; }
    float inv = rsqrtf(lb_block_sum(v) / n + eps);
    for (int j = threadIdx.x; j < n; j += blockDim.x) yr[j] = (xr[j] - mean) * inv * gamma[j] + beta[j];
}

// One block per row; `scale` multiplies the inputs first.
extern "C" __global__ void softmax_rows(const float* x, float* y, int n, float scale) {
    const float* xr = x + (long long)blockIdx.x * n;
    float* yr = y + (long long)blockIdx.x * n;
    float m = -LB_INF;
    for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, xr[j] * scale);
    m = lb_block_max(m);
    float s = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) { float e = expf(xr[j] * scale - m); yr[j] = e; s += e; }
    float inv = 1.0f / lb_block_sum(s);
    for (int j = threadIdx.x; j < n; j += blockDim.x) yr[j] *= inv;
}

// One block per row; the first maximum wins (as on the CPU).
extern "C" __global__ void argmax_rows(const float* x, float* y, int n) {
    const float* xr = x + (long long)blockIdx.x * n;
    __shared__ float bv[1024];
    __shared__ int bi[1024];
    float best = -LB_INF;
    int idx = 0x7fffffff;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        if (xr[j] > best) { best = xr[j]; idx = j; }
    }
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = idx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float ov = bv[threadIdx.x + s];
            int oi = bi[threadIdx.x + s];
            if (ov > bv[threadIdx.x] || (ov == bv[threadIdx.x] && oi < bi[threadIdx.x])) { bv[threadIdx.x] = ov; bi[threadIdx.x] = oi; }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) y[blockIdx.x] = (float)bi[0];
}

// Embedding rows: y[r] = table[id % vocab] * (scale ? sqrt(dim) : 1) + positional + type row.
// ids[r] holds the token id (as a float), pos[r] its position; positional: 0 none, 1 sinusoidal,
// 2 learned (ptable), type_row may be null.
extern "C" __global__ void embedding_rows(const float* ids, const int* pos, const float* table, const float* ptable,
                                          const float* type_row, float* y, int rows, int dim, int vocab, int scale,
                                          int positional, int npos) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * dim) return;
    int r = (int)(i / dim), j = (int)(i % dim);
    long long id = (long long)fmaxf(ids[r], 0.0f) % vocab;
    float v = table[id * dim + j];
    if (scale) v *= sqrtf((float)dim);
    int p = pos[r];
    if (positional == 1) {
        float rate = 1.0f / powf(10000.0f, (float)(2 * (j / 2)) / (float)dim);
        float a = (float)p * rate;
        v += (j % 2 == 0) ? sinf(a) : cosf(a);
    } else if (positional == 2) {
        int q = p < npos ? p : npos - 1;
        v += ptable[(long long)q * dim + j];
    }
    if (type_row) v += type_row[j];
    y[i] = v;
}

// y = act(a + b) over n elements: an add reading both inputs in place (as sum_parts of two
// parts, summed in the same order)
extern "C" __global__ void add_pair(const float* a, const float* b, float* y, long long n, int act) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = 0.0f;
    v += a[i];
    v += b[i];
    y[i] = lb_act(act, v);
}

// The generated inputs of lazybatch's CPU device (`device::weights::fill_input`), made where
// they are used: value i of the sequence keyed (k1, k2) into out[i], a token id in [2, 2^24) or
// a value in [-1, 1) (24 random bits times 2^-23, less one: exact in f32, so bit for bit the
// CPU's; a fused multiply-add gives the same, the product being exact).
__device__ __forceinline__ unsigned lb_fmix32(unsigned h) {
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    return h ^ (h >> 16);
}

extern "C" __global__ void fill_hashed(float* out, long long n, unsigned k1, unsigned k2, int tokens) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned z = lb_fmix32(lb_fmix32((unsigned)i * 0x9E3779B9u ^ k1) ^ k2);
    out[i] = tokens ? (float)(2u + (z >> 8) % ((1u << 24) - 2u))
                    : (float)(z >> 8) * (1.0f / 8388608.0f) - 1.0f;
}
