// Attention for one query row per (member, head): one block each. Keys and values are rows of
// slot buffers: member r's key j is at keys[kbase[r] + j * kstride + head * dh], its value at
// vals[vbase[r] + j * vstride + head * dh]; nkeys[r] keys. Scores live in shared memory.
// mode: 0 dot-product (scaled), 1 normalized additive (GNMT): e_j = sum_t vn[t] tanh(k[j,t] + q[t] + b[t]).
extern "C" __global__ void attend_rows(const float* q, int qstride, const float* keys, const float* vals,
                                       const long long* kbase, const long long* vbase, const int* nkeys,
                                       int kstride, int vstride, int heads, int dh, int dv,
                                       float scale, int mode, const float* vn, const float* bvec,
                                       float* out, int ostride) {
    extern __shared__ float sc[];
    int r = blockIdx.x / heads, hd = blockIdx.x % heads;
    int nk = nkeys[r];
    const float* qr = q + (long long)r * qstride + hd * dh;
    const float* kb = keys + kbase[r] + hd * dh;
    const float* vb = vals + vbase[r] + hd * dv;
    for (int j = threadIdx.x; j < nk; j += blockDim.x) {
        const float* kr = kb + (long long)j * kstride;
        float s = 0.0f;
        if (mode == 1) {
            for (int t = 0; t < dh; ++t) s += vn[t] * tanhf(kr[t] + qr[t] + bvec[t]);
        } else {
            for (int t = 0; t < dh; ++t) s += qr[t] * kr[t];
            s *= scale;
        }
        sc[j] = s;
    }
    __syncthreads();
    float m = -LB_INF;
    for (int j = threadIdx.x; j < nk; j += blockDim.x) m = fmaxf(m, sc[j]);
    m = lb_block_max(m);
    float z = 0.0f;
    for (int j = threadIdx.x; j < nk; j += blockDim.x) { float e = expf(sc[j] - m); sc[j] = e; z += e; }
    float inv = 1.0f / lb_block_sum(z);
    __syncthreads();
    float* o = out + (long long)r * ostride + hd * dv;
    for (int t = threadIdx.x; t < dv; t += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < nk; ++j) acc += sc[j] * vb[(long long)j * vstride + t];
        o[t] = acc * inv;
    }
}
