// A software stand-in for libcudnn.so: the part of cuDNN 9's legacy convolution API that
// lazybatch's CUDA device calls (handles, tensor, filter, convolution and activation
// descriptors, the ranked algorithm heuristic, workspace sizes, cudnnConvolutionForward and
// cudnnConvolutionBiasActivationForward), computed on the host (the driver stand-in's "device"
// pointers are host addresses). It checks each call as cuDNN would and says why it refuses:
// descriptors of the right kind and set; NCHW tensors; x, w and y of one data type with f32
// compute; the filter's channels the input's over the groups; y the shape the convolution
// gives (cudnnGetConvolution2dForwardOutputDim); a workspace at least what the algorithm needs;
// the fused call's bias one value per output channel and its activation a ReLU (an identity
// only with IMPLICIT_PRECOMP_GEMM, as cuDNN documents); pointers aligned to their element. It is
// stricter than cuDNN in one way: an operand or workspace past the end of its device
// allocation is an error, where a GPU would read garbage or fault.
//
// Its heuristic ranks IMPLICIT_PRECOMP_GEMM, GEMM, IMPLICIT_GEMM (all supported) and FFT (not
// supported); their workspaces are the stand-in's own rule (below), sized so that the device
// must keep the largest over its plans. Every algorithm computes the same: a direct
// cross-correlation accumulating in f32, taps in order; f16 tensors are read and rounded as
// cuDNN's PSEUDO_HALF configuration does; f32 under a math type other than FMA reads x and w in
// TF32, as tensor cores do. While the stream captures, a call is checked and recorded into the
// graph (driver stand-in), its scalars read at the call.
#include "cudnn_conv.h"

using namespace lb_dnn;

namespace {

// The checks common to both convolution calls, then the job run or recorded.
cudnnStatus_t convolve(const char* f, Handle* h, const Tensor* xd, const void* x, const Filter* wd, const void* w,
                       const Conv* cd, int algo, void* ws, size_t ws_bytes, const Tensor* yd, void* y, Job job) {
    g_calls += 1;
    if (!h || h->tag != HANDLE) return refuse(BAD_PARAM, f, "not a cuDNN handle");
    cudnnStatus_t st = check_shapes(f, xd, wd, cd, yd);
    if (st != SUCCESS) return st;
    if (algo != ALGO_IMPLICIT_GEMM && algo != ALGO_IMPLICIT_PRECOMP_GEMM && algo != ALGO_GEMM)
        return refuse(NOT_SUPPORTED, f, "an algorithm this configuration does not support");
    size_t need = workspace(algo, *xd, *wd, *yd);
    if (ws_bytes < need) {
        char m[120];
        std::snprintf(m, sizeof m, "a workspace of %zu bytes where the algorithm needs %zu", ws_bytes, need);
        return refuse(BAD_PARAM, f, m);
    }
    if (!x || !w || !y || (need && !ws)) return refuse(BAD_PARAM_NULL_POINTER, f, "a null operand");
    size_t e = elem(xd->dtype);
    if (!aligned(x, e) || !aligned(w, e) || !aligned(y, e))
        return refuse(BAD_PARAM_MISALIGNED_POINTER, f, "an operand not aligned to its element");
    size_t xs = (size_t)xd->n * xd->c * xd->h * xd->w * e, wsz = (size_t)wd->k * wd->c * wd->r * wd->s * e,
           ys = (size_t)yd->n * yd->c * yd->h * yd->w * e;
    const char* bad = !lb_link::inside(x, xs)                 ? "x"
                      : !lb_link::inside(w, wsz)              ? "w"
                      : !lb_link::inside(y, ys)               ? "y"
                      : (ws_bytes && !lb_link::inside(ws, ws_bytes)) ? "the workspace"
                                                               : nullptr;
    if (bad) {
        std::fprintf(stderr, "cudnn-stand-in: %s: %s extends past its device allocation\n", f, bad);
        return BAD_PARAM;
    }
    job.x = *xd;
    job.w = *wd;
    job.c = *cd;
    job.y = *yd;
    lb_link::now_or_recorded(job);
    return SUCCESS;
}

template <typename T>
cudnnStatus_t create(T** d) {
    if (!d) return BAD_PARAM_NULL_POINTER;
    *d = new T();
    return SUCCESS;
}
template <typename T>
cudnnStatus_t destroy(T* d, unsigned tag) {
    if (!d) return SUCCESS;
    if (d->tag != tag) return BAD_PARAM;
    d->tag = 0;
    delete d;
    return SUCCESS;
}

}  // namespace

extern "C" {

// For tests: cuDNN convolution calls made so far (a real cuDNN has no such symbol).
unsigned long long lb_stand_in_dnn_calls() { return g_calls; }

size_t cudnnGetVersion() { return 91000; }
const char* cudnnGetErrorString(cudnnStatus_t s) { return s == SUCCESS ? "CUDNN_STATUS_SUCCESS" : "CUDNN_STATUS_ERROR"; }

cudnnStatus_t cudnnCreate(Handle** h) { return create(h); }
cudnnStatus_t cudnnDestroy(Handle* h) { return destroy(h, HANDLE); }
cudnnStatus_t cudnnSetStream(Handle* h, void* stream) {
    if (!h || h->tag != HANDLE) return BAD_PARAM;
    h->stream = stream;
    return SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(Tensor** d) { return create(d); }
cudnnStatus_t cudnnDestroyTensorDescriptor(Tensor* d) { return destroy(d, TENSOR); }
cudnnStatus_t cudnnSetTensor4dDescriptor(Tensor* d, int format, int dtype, int n, int c, int h, int w) {
    const char* f = "cudnnSetTensor4dDescriptor";
    if (!d || d->tag != TENSOR) return refuse(BAD_PARAM, f, "not a tensor descriptor");
    if (format != TENSOR_NCHW) return refuse(NOT_SUPPORTED, f, "a layout other than NCHW (not modeled)");
    if (dtype != DATA_FLOAT && dtype != DATA_HALF) return refuse(NOT_SUPPORTED, f, "a data type not modeled");
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0) return refuse(BAD_PARAM, f, "a dimension below 1");
    *d = Tensor{TENSOR, true, dtype, n, c, h, w};
    return SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(Filter** d) { return create(d); }
cudnnStatus_t cudnnDestroyFilterDescriptor(Filter* d) { return destroy(d, FILTER); }
cudnnStatus_t cudnnSetFilter4dDescriptor(Filter* d, int dtype, int format, int k, int c, int r, int s) {
    const char* f = "cudnnSetFilter4dDescriptor";
    if (!d || d->tag != FILTER) return refuse(BAD_PARAM, f, "not a filter descriptor");
    if (format != TENSOR_NCHW) return refuse(NOT_SUPPORTED, f, "a layout other than KCRS (not modeled)");
    if (dtype != DATA_FLOAT && dtype != DATA_HALF) return refuse(NOT_SUPPORTED, f, "a data type not modeled");
    if (k <= 0 || c <= 0 || r <= 0 || s <= 0) return refuse(BAD_PARAM, f, "a dimension below 1");
    *d = Filter{FILTER, true, dtype, k, c, r, s};
    return SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(Conv** d) { return create(d); }
cudnnStatus_t cudnnDestroyConvolutionDescriptor(Conv* d) { return destroy(d, CONV); }
cudnnStatus_t cudnnSetConvolution2dDescriptor(Conv* d, int pad_h, int pad_w, int u, int v, int dil_h, int dil_w,
                                              int mode, int compute) {
    const char* f = "cudnnSetConvolution2dDescriptor";
    if (!d || d->tag != CONV) return refuse(BAD_PARAM, f, "not a convolution descriptor");
    if (pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dil_h <= 0 || dil_w <= 0)
        return refuse(BAD_PARAM, f, "a negative padding or a stride or dilation below 1");
    if (mode != CROSS_CORRELATION) return refuse(NOT_SUPPORTED, f, "a true convolution (not modeled)");
    int groups = d->groups, math = d->math;
    *d = Conv{CONV, true, pad_h, pad_w, u, v, dil_h, dil_w, compute, groups, math};
    return SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(Conv* d, int groups) {
    if (!d || d->tag != CONV || groups < 1) return refuse(BAD_PARAM, "cudnnSetConvolutionGroupCount", "bad groups");
    d->groups = groups;
    return SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(Conv* d, int math) {
    if (!d || d->tag != CONV || math < MATH_DEFAULT || math > MATH_FMA)
        return refuse(BAD_PARAM, "cudnnSetConvolutionMathType", "bad math type");
    d->math = math;
    return SUCCESS;
}
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const Conv* c, const Tensor* x, const Filter* w, int* n, int* k,
                                                    int* h, int* wo) {
    const char* f = "cudnnGetConvolution2dForwardOutputDim";
    if (!is(c, CONV) || !is(x, TENSOR) || !is(w, FILTER)) return refuse(BAD_PARAM, f, "a descriptor not set");
    if (w->c * c->groups != x->c) return refuse(BAD_PARAM, f, "the filter's channels are not the input's");
    int d[4];
    out_dims(*x, *w, *c, d);
    *n = d[0], *k = d[1], *h = d[2], *wo = d[3];
    return SUCCESS;
}

cudnnStatus_t cudnnCreateActivationDescriptor(Act** d) { return create(d); }
cudnnStatus_t cudnnDestroyActivationDescriptor(Act* d) { return destroy(d, ACT); }
cudnnStatus_t cudnnSetActivationDescriptor(Act* d, int mode, int /*nan*/, double /*coef*/) {
    if (!d || d->tag != ACT) return refuse(BAD_PARAM, "cudnnSetActivationDescriptor", "not an activation");
    d->mode = mode;
    d->set = true;
    return SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(Handle* h, const Tensor* x, const Filter* w, const Conv* c,
                                                     const Tensor* y, int requested, int* returned, Perf* perf) {
    const char* f = "cudnnGetConvolutionForwardAlgorithm_v7";
    if (!h || h->tag != HANDLE) return refuse(BAD_PARAM, f, "not a cuDNN handle");
    if (requested < 1 || !returned || !perf) return refuse(BAD_PARAM, f, "no room for results");
    cudnnStatus_t st = check_shapes(f, x, w, c, y);
    if (st != SUCCESS) return st;
    const int ranked[] = {ALGO_IMPLICIT_PRECOMP_GEMM, ALGO_GEMM, ALGO_IMPLICIT_GEMM, ALGO_FFT};
    int n = 0;
    for (int a : ranked) {
        if (n == requested) break;
        Perf p{};
        p.algo = a;
        p.status = a == ALGO_FFT ? NOT_SUPPORTED : SUCCESS;
        p.time = -1.0f;
        p.memory = a == ALGO_FFT ? 0 : workspace(a, *x, *w, *y);
        p.math_type = c->math;
        perf[n++] = p;
    }
    *returned = n;
    return SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(Handle* h, const Tensor* x, const Filter* w, const Conv* c,
                                                      const Tensor* y, int algo, size_t* bytes) {
    const char* f = "cudnnGetConvolutionForwardWorkspaceSize";
    if (!h || h->tag != HANDLE || !bytes) return refuse(BAD_PARAM, f, "no handle or no result");
    cudnnStatus_t st = check_shapes(f, x, w, c, y);
    if (st != SUCCESS) return st;
    if (algo < 0 || algo >= ALGO_COUNT || algo == ALGO_FFT) return refuse(NOT_SUPPORTED, f, "an unsupported algorithm");
    *bytes = workspace(algo, *x, *w, *y);
    return SUCCESS;
}

cudnnStatus_t cudnnConvolutionForward(Handle* h, const float* alpha, const Tensor* xd, const void* x,
                                      const Filter* wd, const void* w, const Conv* cd, int algo, void* ws,
                                      size_t ws_bytes, const float* beta, const Tensor* yd, void* y) {
    // scalars are f32 for f32 and f16 data alike (cuDNN's scaling parameters)
    Job job{};
    job.xp = x, job.wp = w, job.zp = nullptr, job.bp = nullptr, job.yp = y;
    job.alpha1 = *alpha, job.alpha2 = *beta, job.act = -1;
    return convolve("cudnnConvolutionForward", h, xd, x, wd, w, cd, algo, ws, ws_bytes, yd, y, job);
}

cudnnStatus_t cudnnConvolutionBiasActivationForward(Handle* h, const float* alpha1, const Tensor* xd, const void* x,
                                                    const Filter* wd, const void* w, const Conv* cd, int algo,
                                                    void* ws, size_t ws_bytes, const float* alpha2,
                                                    const Tensor* zd, const void* z, const Tensor* bd,
                                                    const void* bias, const Act* ad, const Tensor* yd, void* y) {
    const char* f = "cudnnConvolutionBiasActivationForward";
    if (!is(zd, TENSOR) || !is(bd, TENSOR) || !is(ad, ACT)) {
        g_calls += 1;
        return refuse(BAD_PARAM, f, "z, bias or activation descriptor not set");
    }
    if (is(yd, TENSOR) && (zd->n != yd->n || zd->c != yd->c || zd->h != yd->h || zd->w != yd->w)) {
        g_calls += 1;
        return refuse(BAD_PARAM, f, "z is not the shape of y");
    }
    if (is(yd, TENSOR) && (bd->n != 1 || bd->c != yd->c || bd->h != 1 || bd->w != 1 || bd->dtype != yd->dtype)) {
        g_calls += 1;
        return refuse(BAD_PARAM, f, "the bias is not one value of y's type per output channel");
    }
    if (ad->mode != ACT_RELU && !(ad->mode == ACT_IDENTITY && algo == ALGO_IMPLICIT_PRECOMP_GEMM)) {
        g_calls += 1;
        return refuse(NOT_SUPPORTED, f, "an activation other than ReLU (identity only with IMPLICIT_PRECOMP_GEMM)");
    }
    if (is(yd, TENSOR) && (!bias || !lb_link::inside(bias, (size_t)yd->c * elem(yd->dtype)) ||
                           !lb_link::inside(z, (size_t)yd->n * yd->c * yd->h * yd->w * elem(yd->dtype)))) {
        g_calls += 1;
        return refuse(BAD_PARAM, f, "the bias or z extends past its device allocation");
    }
    Job job{};
    job.xp = x, job.wp = w, job.zp = z, job.bp = bias, job.yp = y;
    job.alpha1 = *alpha1, job.alpha2 = *alpha2, job.act = ad->mode == ACT_RELU ? ACT_RELU : -1;
    return convolve(f, h, xd, x, wd, w, cd, algo, ws, ws_bytes, yd, y, job);
}

}  // extern "C"
