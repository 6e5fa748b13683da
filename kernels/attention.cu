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

// A decoder-only model's decode step: one query row per (member, head) over its prompt's keys
// and values, then its cache's, as one sequence. Member r's prompt key j is at
// pre[pbase[r] + j * pstride + head * dh] (its value d further: packed Q|K|V rows), its cached
// key j at cache[cbase[r] + j * cstride + head * dh] (its value d further: K|V rows);
// counts[2r] prompt keys, counts[2r + 1] cached ones. Scaled dot product; scores in shared memory.
extern "C" __global__ void attend_rows_prefix(const float* q, int qstride, const float* pre,
                                              const long long* pbase, int pstride, const float* cache,
                                              const long long* cbase, int cstride, const int* counts,
                                              int heads, int dh, int d, float scale, float* out,
                                              int ostride) {
    extern __shared__ float sc[];
    int r = blockIdx.x / heads, hd = blockIdx.x % heads;
    int np = counts[2 * r], nc = counts[2 * r + 1], nk = np + nc;
    const float* qr = q + (long long)r * qstride + hd * dh;
    const float* pb = pre + pbase[r] + hd * dh;
    const float* cb = cache + cbase[r] + hd * dh;
    for (int j = threadIdx.x; j < nk; j += blockDim.x) {
        const float* kr = j < np ? pb + (long long)j * pstride : cb + (long long)(j - np) * cstride;
        float s = 0.0f;
        for (int t = 0; t < dh; ++t) s += qr[t] * kr[t];
        sc[j] = s * scale;
    }
    __syncthreads();
    float m = -LB_INF;
    for (int j = threadIdx.x; j < nk; j += blockDim.x) m = fmaxf(m, sc[j]);
    m = lb_block_max(m);
    float z = 0.0f;
    for (int j = threadIdx.x; j < nk; j += blockDim.x) { float e = expf(sc[j] - m); sc[j] = e; z += e; }
    float inv = 1.0f / lb_block_sum(z);
    __syncthreads();
    float* o = out + (long long)r * ostride + hd * dh;
    for (int t = threadIdx.x; t < dh; t += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < nk; ++j) {
            const float* vr = j < np ? pb + (long long)j * pstride + d : cb + (long long)(j - np) * cstride + d;
            acc += sc[j] * vr[t];
        }
        o[t] = acc * inv;
    }
}
