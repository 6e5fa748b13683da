// Convolution helpers for a batch of `nimg` images, each in [C, H, W] layout and stored one after
// another: im2col into a [nimg][K x P] array (row (c*kh + ky)*kw + kx of an image's matrix holds
// that tap for every output pixel), depthwise convolution, the per-channel scale/shift/activation
// epilogue (also from a cuDNN f16 output), and pooling.

// x_img: elements between consecutive images of x (C*H*W).
extern "C" __global__ void im2col_kp(const float* x, float* cols, int h, int w, int c0, int cg, int kh, int kw,
                                     int stride, int pad, int ho, int wo, int nimg, long long x_img) {
    long long p = (long long)ho * wo;
    long long per = (long long)cg * kh * kw * p;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= per * nimg) return;
    long long img = i / per, e = i % per;
    long long row = e / p;
    int pix = (int)(e % p);
    int kx = (int)(row % kw);
    int ky = (int)((row / kw) % kh);
    int c = (int)(row / ((long long)kw * kh));
    int oy = pix / wo, ox = pix % wo;
    int iy = oy * stride + ky - pad, ix = ox * stride + kx - pad;
    const float* xi = x + img * x_img;
    cols[i] = (iy >= 0 && ix >= 0 && iy < h && ix < w) ? xi[((long long)(c0 + c) * h + iy) * w + ix] : 0.0f;
}

extern "C" __global__ void depthwise(const float* x, const float* wt, float* y, int c, int h, int w, int kh, int kw,
                                     int stride, int pad, int ho, int wo, int nimg) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long per = (long long)c * ho * wo;
    if (i >= per * nimg) return;
    const float* xi = x + (i / per) * ((long long)c * h * w);
    long long e = i % per;
    int ch = (int)(e / ((long long)ho * wo));
    int pix = (int)(e % ((long long)ho * wo));
    int oy = pix / wo, ox = pix % wo;
    float acc = 0.0f;
    for (int ky = 0; ky < kh; ++ky) {
        int iy = oy * stride + ky - pad;
        if (iy < 0 || iy >= h) continue;
        for (int kx = 0; kx < kw; ++kx) {
            int ix = ox * stride + kx - pad;
            if (ix < 0 || ix >= w) continue;
            acc += xi[((long long)ch * h + iy) * w + ix] * wt[(ch * kh + ky) * kw + kx];
        }
    }
    y[i] = acc;
}

// y[img, ch, p] = act(y * scale[ch] + shift[ch]) for nimg images of c x p; scale/shift may be
// null (1 and 0).
extern "C" __global__ void channel_epilogue(float* y, const float* scale, const float* shift, int c, int p, int act,
                                            int nimg) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)nimg * c * p) return;
    int ch = (int)((i / p) % c);
    float v = y[i];
    if (scale) v *= scale[ch];
    if (shift) v += shift[ch];
    y[i] = lb_act(act, v);
}

// y[img, ch, p] = act(h2f(x[img, ch, p]) + shift[ch]) for nimg images of c x p: a cuDNN f16
// convolution's output back to f32 with its shift and activation; shift may be null (0).
extern "C" __global__ void channel_epilogue_h(const unsigned short* x, float* y, const float* shift, int c, int p,
                                              int act, int nimg) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)nimg * c * p) return;
    int ch = (int)((i / p) % c);
    float v = h2f(x[i]);
    if (shift) v += shift[ch];
    y[i] = lb_act(act, v);
}

// kind: 0 max, 1 average (in-image elements only).
extern "C" __global__ void pool2d(const float* x, float* y, int c, int h, int w, int k, int stride, int pad, int ho, int wo,
                                  int kind, int nimg) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long per = (long long)c * ho * wo;
    if (i >= per * nimg) return;
    const float* xi = x + (i / per) * ((long long)c * h * w);
    long long e = i % per;
    int ch = (int)(e / ((long long)ho * wo));
    int pix = (int)(e % ((long long)ho * wo));
    int oy = pix / wo, ox = pix % wo;
    float acc = kind == 0 ? -LB_INF : 0.0f;
    int n = 0;
    for (int ky = 0; ky < k; ++ky) {
        int iy = oy * stride + ky - pad;
        if (iy < 0 || iy >= h) continue;
        for (int kx = 0; kx < k; ++kx) {
            int ix = ox * stride + kx - pad;
            if (ix < 0 || ix >= w) continue;
            float v = xi[((long long)ch * h + iy) * w + ix];
            acc = kind == 0 ? fmaxf(acc, v) : acc + v;
            ++n;
        }
    }
    y[i] = kind == 0 ? acc : acc / (float)(n > 0 ? n : 1);
}
