// What both halves of the cuDNN stand-in share (cudnn.cpp, the legacy API; cudnn_graph.cpp,
// the graph API): status and enum values as cuDNN 9 defines them, the legacy descriptors' host
// form, the shape checks, and the convolution itself (Job: a direct cross-correlation
// accumulating in f32, taps in order, f16 read and rounded as cuDNN's PSEUDO_HALF does, f32
// read in TF32 when the math allows tensor cores). Everything inline: one library, two files.
#pragma once
#include "link.h"
#include "shim.h"

#include <cstdio>
#include <cstring>
#include <vector>

typedef int cudnnStatus_t;
enum {
    SUCCESS = 0,
    NOT_INITIALIZED = 1001,
    BAD_PARAM = 2000,
    BAD_PARAM_NULL_POINTER = 2002,
    BAD_PARAM_MISALIGNED_POINTER = 2003,
    BAD_PARAM_SIZE_INSUFFICIENT = 2006,
    BAD_PARAM_SHAPE_MISMATCH = 2008,
    NOT_SUPPORTED = 3000,
};
enum { DATA_FLOAT = 0, DATA_HALF = 2 };
enum { TENSOR_NCHW = 0 };
enum { CROSS_CORRELATION = 1 };
enum { ACT_RELU = 1, ACT_IDENTITY = 5 };
enum { ALGO_IMPLICIT_GEMM = 0, ALGO_IMPLICIT_PRECOMP_GEMM = 1, ALGO_GEMM = 2, ALGO_FFT = 4, ALGO_COUNT = 8 };
enum { MATH_DEFAULT = 0, MATH_TENSOR_OP = 1, MATH_TENSOR_OP_ALLOW_CONVERSION = 2, MATH_FMA = 3 };

// cudnnConvolutionFwdAlgoPerf_t
struct Perf {
    int algo;
    int status;
    float time;
    size_t memory;
    int determinism;
    int math_type;
    int reserved[3];
};

namespace lb_dnn {


// Each descriptor kind carries its own tag, so that a descriptor of another kind is refused.
inline const unsigned HANDLE = 0x6c624831, TENSOR = 0x6c625431, FILTER = 0x6c624631, CONV = 0x6c624331,
               ACT = 0x6c624131;

struct Handle {
    unsigned tag = HANDLE;
    void* stream = nullptr;
};
struct Tensor {
    unsigned tag = TENSOR;
    bool set = false;
    int dtype = 0, n = 0, c = 0, h = 0, w = 0;
};
struct Filter {
    unsigned tag = FILTER;
    bool set = false;
    int dtype = 0, k = 0, c = 0, r = 0, s = 0;
};
struct Conv {
    unsigned tag = CONV;
    bool set = false;
    int pad_h = 0, pad_w = 0, u = 1, v = 1, dil_h = 1, dil_w = 1, compute = 0, groups = 1, math = MATH_DEFAULT;
};
struct Act {
    unsigned tag = ACT;
    bool set = false;
    int mode = 0;
};

// For tests: convolution calls made so far, read by lb_stand_in_dnn_calls.
inline unsigned long long g_calls = 0;

inline cudnnStatus_t refuse(cudnnStatus_t s, const char* f, const char* why) {
    std::fprintf(stderr, "cudnn-stand-in: %s refuses: %s\n", f, why);
    return s;
}

template <typename T>
inline bool is(const T* p, unsigned tag) {
    return p && p->tag == tag && p->set;
}

inline size_t elem(int dtype) { return dtype == DATA_HALF ? 2 : 4; }

// The output dimensions of x convolved with w under c, as cuDNN computes them.
inline void out_dims(const Tensor& x, const Filter& w, const Conv& c, int* d) {
    d[0] = x.n;
    d[1] = w.k;
    d[2] = (x.h + 2 * c.pad_h - (c.dil_h * (w.r - 1) + 1)) / c.u + 1;
    d[3] = (x.w + 2 * c.pad_w - (c.dil_w * (w.s - 1) + 1)) / c.v + 1;
}

// What a convolution call must satisfy whatever the algorithm; SUCCESS or the refusal.
inline cudnnStatus_t check_shapes(const char* f, const Tensor* x, const Filter* w, const Conv* c, const Tensor* y) {
    if (!is(x, TENSOR) || !is(w, FILTER) || !is(c, CONV) || !is(y, TENSOR))
        return refuse(BAD_PARAM, f, "a descriptor that is not of its kind or not set");
    if (x->dtype != w->dtype || x->dtype != y->dtype)
        return refuse(BAD_PARAM, f, "x, w and y of different data types");
    if (c->compute != DATA_FLOAT) return refuse(NOT_SUPPORTED, f, "a compute type other than f32");
    if (x->c % c->groups || w->k % c->groups || w->c * c->groups != x->c)
        return refuse(BAD_PARAM, f, "the filter's channels are not the input's over the groups");
    int d[4];
    out_dims(*x, *w, *c, d);
    if (d[0] != y->n || d[1] != y->c || d[2] != y->h || d[3] != y->w) {
        char m[160];
        std::snprintf(m, sizeof m, "y is %dx%dx%dx%d, the convolution gives %dx%dx%dx%d", y->n, y->c, y->h, y->w, d[0],
                      d[1], d[2], d[3]);
        return refuse(BAD_PARAM_SHAPE_MISMATCH, f, m);
    }
    return SUCCESS;
}

// The stand-in's workspace rule per algorithm (bytes): none for the implicit GEMM, its
// precomputed indices for the precomputed one (growing with the images), one image's im2col
// matrix for GEMM.
inline size_t workspace(int algo, const Tensor& x, const Filter& w, const Tensor& y) {
    size_t taps = (size_t)w.c * w.r * w.s;
    switch (algo) {
        case ALGO_IMPLICIT_PRECOMP_GEMM:
            return taps * 8 + (size_t)x.n * 256;
        case ALGO_GEMM:
            return taps * y.h * y.w * elem(x.dtype);
        default:
            return 0;
    }
}

inline float load(const void* p, size_t i, int dtype) {
    return dtype == DATA_HALF ? lb_host_h2f(static_cast<const unsigned short*>(p)[i])
                              : static_cast<const float*>(p)[i];
}
inline void store(void* p, size_t i, int dtype, float v) {
    if (dtype == DATA_HALF)
        static_cast<unsigned short*>(p)[i] = lb_host_f2h(v);
    else
        static_cast<float*>(p)[i] = v;
}

// y = act(alpha1 * conv(x, w) + alpha2 * z + bias) (act, z and bias optional: beta * y when
// there is no z, as cudnnConvolutionForward).
struct Job {
    Tensor x, y;
    Filter w;
    Conv c;
    const void *xp, *wp, *zp, *bp;
    void* yp;
    float alpha1, alpha2;
    int act;  // -1: none
    void operator()() const {
        bool tf32 = x.dtype == DATA_FLOAT && c.math != MATH_FMA;
        int cg = w.c, kg = w.k / c.groups;
        std::vector<float> out((size_t)y.n * y.c * y.h * y.w);
        for (int n = 0; n < y.n; ++n)
            for (int k = 0; k < y.c; ++k) {
                int g = k / kg;
                for (int oy = 0; oy < y.h; ++oy)
                    for (int ox = 0; ox < y.w; ++ox) {
                        float acc = 0.0f;
                        for (int ci = 0; ci < cg; ++ci)
                            for (int r = 0; r < w.r; ++r) {
                                int iy = oy * c.u - c.pad_h + r * c.dil_h;
                                if (iy < 0 || iy >= x.h) continue;
                                for (int s = 0; s < w.s; ++s) {
                                    int ix = ox * c.v - c.pad_w + s * c.dil_w;
                                    if (ix < 0 || ix >= x.w) continue;
                                    size_t xi = (((size_t)n * x.c + g * cg + ci) * x.h + iy) * x.w + ix;
                                    size_t wi = (((size_t)k * w.c + ci) * w.r + r) * w.s + s;
                                    float a = load(xp, xi, x.dtype), b = load(wp, wi, w.dtype);
                                    if (tf32) a = lb_link::tf32(a), b = lb_link::tf32(b);
                                    acc += a * b;
                                }
                            }
                        size_t yi = (((size_t)n * y.c + k) * y.h + oy) * y.w + ox;
                        float v = alpha1 * acc;
                        if (zp) {
                            if (alpha2 != 0.0f) v += alpha2 * load(zp, yi, y.dtype);
                        } else if (alpha2 != 0.0f) {
                            v += alpha2 * load(yp, yi, y.dtype);
                        }
                        if (bp) v += load(bp, k, y.dtype);
                        if (act == ACT_RELU) v = v > 0.0f ? v : 0.0f;
                        out[yi] = v;
                    }
            }
        for (size_t i = 0; i < out.size(); ++i) store(yp, i, y.dtype, out[i]);
    }
};

inline bool aligned(const void* p, size_t to) { return reinterpret_cast<unsigned long long>(p) % to == 0; }

}  // namespace lb_dnn
