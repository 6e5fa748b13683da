// A software stand-in for libcublasLt.so: the handle, matrix layouts, matmul descriptors and
// preferences, the heuristic and cublasLtMatmul, as lazybatch's CUDA device calls them for
// linear layers, computed on the host (the driver stand-in's "device" pointers are host
// addresses). It checks each call as cuBLASLt would and says why it refuses: layouts whose
// leading dimension holds their rows; op(A) m x k, op(B) k x n, C and D m x n; a type
// combination cuBLASLt supports (f32 A/B/C/D with f32 or TF32 compute; f16 A/B with f16 or f32
// C/D and f32 compute); an epilogue among DEFAULT, RELU, BIAS, RELU_BIAS, GELU and GELU_BIAS,
// with a bias pointer exactly when it adds a bias; operands aligned as the algorithm assumed
// (the preference's minimum alignments, 256 bytes unless set lower; cuBLASLt refuses such a
// call with NOT_SUPPORTED); a workspace at least the algorithm's. It is stricter than cuBLASLt in
// one way: an operand, the bias or the workspace past the end of its device allocation is an
// error, where a GPU would read garbage or fault.
//
// D = epilogue(alpha * op(A) op(B) + beta * C (+ bias per row)), accumulating in f32, the k
// loop in order; GELU in its tanh form; TF32 compute reads A and B in TF32. Its heuristic
// returns one algorithm whose workspace is the stand-in's own rule (64 KiB from k = 64, capped
// by the preference). While the stream captures, a call is checked and recorded into the graph
// (driver stand-in), its scalars read at the call.
#include "link.h"
#include "shim.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

typedef int cublasStatus_t;
enum { SUCCESS = 0, NOT_INITIALIZED = 1, INVALID_VALUE = 7, NOT_SUPPORTED = 15 };
enum { R_32F = 0, R_16F = 2 };
enum { COMPUTE_32F = 68, COMPUTE_32F_FAST_TF32 = 77 };
// cublasLtMatmulDescAttributes_t, cublasLtMatrixLayoutAttribute_t, cublasLtMatmulPreferenceAttributes_t
enum { DESC_TRANSA = 3, DESC_TRANSB = 4, DESC_EPILOGUE = 7, DESC_BIAS_POINTER = 8 };
enum { LAYOUT_BATCH_COUNT = 5, LAYOUT_STRIDED_BATCH_OFFSET = 6 };
enum { PREF_MAX_WORKSPACE_BYTES = 1, PREF_MIN_ALIGNMENT_A = 5, PREF_MIN_ALIGNMENT_D = 8 };
enum { EP_DEFAULT = 1, EP_RELU = 2, EP_BIAS = 4, EP_RELU_BIAS = 6, EP_GELU = 32, EP_GELU_BIAS = 36 };

namespace {

const uint64_t HANDLE = 0x6c624c48, LAYOUT = 0x6c624c4c, DESC = 0x6c624c44, PREF = 0x6c624c50, ALGO = 0x6c624c41;

struct Handle {
    uint64_t tag = HANDLE;
};
struct Layout {
    uint64_t tag = LAYOUT;
    int type = 0;
    uint64_t rows = 0, cols = 0;
    int64_t ld = 0;
    int batch = 1;
};
struct Desc {
    uint64_t tag = DESC;
    int compute = 0, scale = 0, transa = 0, transb = 0, epilogue = EP_DEFAULT;
    const void* bias = nullptr;
};
struct Pref {
    uint64_t tag = PREF;
    uint64_t max_ws = 0;
    uint32_t align[4] = {256, 256, 256, 256};
};
// cublasLtMatmulAlgo_t: 64 bytes, the stand-in's own content.
struct Algo {
    uint64_t tag, workspace, align[4], unused[2];
};
// cublasLtMatmulHeuristicResult_t
struct Heuristic {
    Algo algo;
    size_t workspace;
    cublasStatus_t state;
    float waves;
    int reserved[4];
};

// For tests: cublasLtMatmul calls made so far, read by lb_stand_in_lt_calls.
unsigned long long g_calls = 0;

cublasStatus_t refuse(cublasStatus_t s, const char* f, const char* why) {
    std::fprintf(stderr, "cublaslt-stand-in: %s refuses: %s\n", f, why);
    return s;
}

size_t elem(int type) { return type == R_16F ? 2 : 4; }

// The checks of a matmul's shape, types and epilogue, shared by the heuristic and the call.
cublasStatus_t check(const char* f, const Desc* d, const Layout* a, const Layout* b, const Layout* c,
                     const Layout* dd) {
    if (!d || d->tag != DESC || !a || a->tag != LAYOUT || !b || b->tag != LAYOUT || !c || c->tag != LAYOUT || !dd ||
        dd->tag != LAYOUT)
        return refuse(INVALID_VALUE, f, "a descriptor or layout that is not one");
    if (a->batch != 1 || b->batch != 1 || c->batch != 1 || dd->batch != 1)
        return refuse(NOT_SUPPORTED, f, "batched layouts (not modeled)");
    uint64_t m = c->rows, n = c->cols;
    uint64_t am = d->transa ? a->cols : a->rows, ak = d->transa ? a->rows : a->cols;
    uint64_t bk = d->transb ? b->cols : b->rows, bn = d->transb ? b->rows : b->cols;
    if (am != m || bn != n || ak != bk || dd->rows != m || dd->cols != n || dd->ld != c->ld || dd->type != c->type)
        return refuse(INVALID_VALUE, f, "op(A), op(B), C and D do not make an m x k by k x n product");
    if (d->scale != R_32F) return refuse(NOT_SUPPORTED, f, "a scale type other than f32");
    bool f32 = a->type == R_32F && b->type == R_32F && c->type == R_32F;
    bool f16 = a->type == R_16F && b->type == R_16F && (c->type == R_16F || c->type == R_32F);
    bool ok = (f32 && (d->compute == COMPUTE_32F || d->compute == COMPUTE_32F_FAST_TF32)) ||
              (f16 && d->compute == COMPUTE_32F);
    if (!ok) return refuse(NOT_SUPPORTED, f, "a type and compute combination cuBLASLt does not support");
    bool bias = d->epilogue == EP_BIAS || d->epilogue == EP_RELU_BIAS || d->epilogue == EP_GELU_BIAS;
    bool known = bias || d->epilogue == EP_DEFAULT || d->epilogue == EP_RELU || d->epilogue == EP_GELU;
    if (!known) return refuse(NOT_SUPPORTED, f, "an epilogue not modeled");
    if (bias != (d->bias != nullptr)) return refuse(INVALID_VALUE, f, "a bias pointer without a bias epilogue, or none with one");
    return SUCCESS;
}

uint64_t align_of(const void* p) {
    uint64_t v = reinterpret_cast<uint64_t>(p), a = 1;
    while (a < 256 && v % (a * 2) == 0) a *= 2;
    return a;
}

// Elements a column-major r x c matrix with leading dimension ld spans.
size_t span(const Layout& l) { return l.rows == 0 || l.cols == 0 ? 0 : (l.cols - 1) * l.ld + l.rows; }

float load(const void* p, size_t i, int type) {
    return type == R_16F ? lb_host_h2f(static_cast<const unsigned short*>(p)[i]) : static_cast<const float*>(p)[i];
}

struct Job {
    Desc d;
    Layout a, b, c;
    const void *ap, *bp, *cp;
    void* dp;
    float alpha, beta;
    void operator()() const {
        bool tf32 = d.compute == COMPUTE_32F_FAST_TF32;
        uint64_t m = c.rows, n = c.cols, k = d.transa ? a.rows : a.cols;
        std::vector<float> acc(m);
        for (uint64_t j = 0; j < n; ++j) {
            for (uint64_t i = 0; i < m; ++i) acc[i] = 0.0f;
            for (uint64_t l = 0; l < k; ++l) {
                float bv = load(bp, d.transb ? j + l * b.ld : l + j * b.ld, b.type);
                if (tf32) bv = lb_link::tf32(bv);
                for (uint64_t i = 0; i < m; ++i) {
                    float av = load(ap, d.transa ? l + i * a.ld : i + l * a.ld, a.type);
                    if (tf32) av = lb_link::tf32(av);
                    acc[i] += av * bv;
                }
            }
            for (uint64_t i = 0; i < m; ++i) {
                size_t at = i + j * c.ld;
                float v = alpha * acc[i];
                if (beta != 0.0f) v += beta * load(cp, at, c.type);
                if (d.bias) v += load(d.bias, i, c.type);
                if (d.epilogue == EP_RELU || d.epilogue == EP_RELU_BIAS) v = v > 0.0f ? v : 0.0f;
                if (d.epilogue == EP_GELU || d.epilogue == EP_GELU_BIAS)
                    v = 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
                if (c.type == R_16F)
                    static_cast<unsigned short*>(dp)[at] = lb_host_f2h(v);
                else
                    static_cast<float*>(dp)[at] = v;
            }
        }
    }
};

}  // namespace

extern "C" {

// For tests: cublasLtMatmul calls made so far (a real cuBLASLt has no such symbol).
unsigned long long lb_stand_in_lt_calls() { return g_calls; }

cublasStatus_t cublasLtCreate(Handle** h) {
    *h = new Handle();
    return SUCCESS;
}
cublasStatus_t cublasLtDestroy(Handle* h) {
    if (!h || h->tag != HANDLE) return NOT_INITIALIZED;
    h->tag = 0;
    delete h;
    return SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(Layout** l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
    const char* f = "cublasLtMatrixLayoutCreate";
    if (type != R_32F && type != R_16F) return refuse(NOT_SUPPORTED, f, "a data type not modeled");
    if (ld < (int64_t)(rows > 1 ? rows : 1)) return refuse(INVALID_VALUE, f, "a leading dimension below the rows");
    *l = new Layout{LAYOUT, type, rows, cols, ld, 1};
    return SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(Layout* l) {
    if (!l || l->tag != LAYOUT) return INVALID_VALUE;
    l->tag = 0;
    delete l;
    return SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(Layout* l, int attr, const void* buf, size_t size) {
    const char* f = "cublasLtMatrixLayoutSetAttribute";
    if (!l || l->tag != LAYOUT) return refuse(INVALID_VALUE, f, "not a layout");
    if (attr == LAYOUT_BATCH_COUNT && size == 4) {
        std::memcpy(&l->batch, buf, 4);
        return SUCCESS;
    }
    if (attr == LAYOUT_STRIDED_BATCH_OFFSET && size == 8) return SUCCESS;
    return refuse(INVALID_VALUE, f, "an attribute or size not modeled");
}

cublasStatus_t cublasLtMatmulDescCreate(Desc** d, int compute, int scale) {
    *d = new Desc();
    (*d)->compute = compute;
    (*d)->scale = scale;
    return SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(Desc* d) {
    if (!d || d->tag != DESC) return INVALID_VALUE;
    d->tag = 0;
    delete d;
    return SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(Desc* d, int attr, const void* buf, size_t size) {
    const char* f = "cublasLtMatmulDescSetAttribute";
    if (!d || d->tag != DESC) return refuse(INVALID_VALUE, f, "not a matmul descriptor");
    int v = 0;
    switch (attr) {
        case DESC_TRANSA:
        case DESC_TRANSB:
            if (size != 4) return refuse(INVALID_VALUE, f, "a transpose of the wrong size");
            std::memcpy(&v, buf, 4);
            if (v != 0 && v != 1) return refuse(INVALID_VALUE, f, "a transpose other than N or T");
            (attr == DESC_TRANSA ? d->transa : d->transb) = v;
            return SUCCESS;
        case DESC_EPILOGUE:
            if (size != 4) return refuse(INVALID_VALUE, f, "an epilogue of the wrong size");
            std::memcpy(&d->epilogue, buf, 4);
            return SUCCESS;
        case DESC_BIAS_POINTER:
            if (size != 8) return refuse(INVALID_VALUE, f, "a bias pointer of the wrong size");
            std::memcpy(&d->bias, buf, 8);
            return SUCCESS;
        default:
            return refuse(INVALID_VALUE, f, "an attribute not modeled");
    }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(Pref** p) {
    *p = new Pref();
    return SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(Pref* p) {
    if (!p || p->tag != PREF) return INVALID_VALUE;
    p->tag = 0;
    delete p;
    return SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(Pref* p, int attr, const void* buf, size_t size) {
    const char* f = "cublasLtMatmulPreferenceSetAttribute";
    if (!p || p->tag != PREF) return refuse(INVALID_VALUE, f, "not a preference");
    if (attr == PREF_MAX_WORKSPACE_BYTES && size == 8) {
        std::memcpy(&p->max_ws, buf, 8);
        return SUCCESS;
    }
    if (attr >= PREF_MIN_ALIGNMENT_A && attr <= PREF_MIN_ALIGNMENT_D && size == 4) {
        std::memcpy(&p->align[attr - PREF_MIN_ALIGNMENT_A], buf, 4);
        return SUCCESS;
    }
    return refuse(INVALID_VALUE, f, "an attribute or size not modeled");
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(Handle* h, Desc* d, Layout* a, Layout* b, Layout* c, Layout* dd,
                                              Pref* p, int requested, Heuristic* out, int* returned) {
    const char* f = "cublasLtMatmulAlgoGetHeuristic";
    if (!h || h->tag != HANDLE) return refuse(NOT_INITIALIZED, f, "not a handle");
    if (!p || p->tag != PREF || requested < 1 || !out || !returned) return refuse(INVALID_VALUE, f, "no room");
    cublasStatus_t st = check(f, d, a, b, c, dd);
    if (st != SUCCESS) return st;
    uint64_t k = d->transa ? a->rows : a->cols;
    uint64_t ws = k >= 64 ? 65536 : 0;
    if (ws > p->max_ws) ws = p->max_ws;
    Heuristic r{};
    r.algo.tag = ALGO;
    r.algo.workspace = ws;
    for (int i = 0; i < 4; ++i) r.algo.align[i] = p->align[i];
    r.workspace = ws;
    r.state = SUCCESS;
    r.waves = 1.0f;
    out[0] = r;
    *returned = 1;
    return SUCCESS;
}

cublasStatus_t cublasLtMatmul(Handle* h, Desc* d, const float* alpha, const void* a, Layout* al, const void* b,
                              Layout* bl, const float* beta, const void* c, Layout* cl, void* dp, Layout* dl,
                              const Algo* algo, void* ws, size_t ws_bytes, void* /*stream*/) {
    const char* f = "cublasLtMatmul";
    g_calls += 1;
    if (!h || h->tag != HANDLE) return refuse(NOT_INITIALIZED, f, "not a handle");
    cublasStatus_t st = check(f, d, al, bl, cl, dl);
    if (st != SUCCESS) return st;
    if (!algo || algo->tag != ALGO) return refuse(INVALID_VALUE, f, "an algorithm the heuristic did not return");
    const void* ops[4] = {a, b, c, dp};
    for (int i = 0; i < 4; ++i)
        if (align_of(ops[i]) < algo->align[i]) {
            char m[120];
            std::snprintf(m, sizeof m, "operand %c aligned to %llu bytes, the algorithm assumed %llu", "ABCD"[i],
                          (unsigned long long)align_of(ops[i]), (unsigned long long)algo->align[i]);
            return refuse(NOT_SUPPORTED, f, m);
        }
    if (ws_bytes < algo->workspace) return refuse(INVALID_VALUE, f, "a workspace below the algorithm's");
    const char* bad = !lb_link::inside(a, span(*al) * elem(al->type))          ? "A"
                      : !lb_link::inside(b, span(*bl) * elem(bl->type))        ? "B"
                      : !lb_link::inside(dp, span(*dl) * elem(dl->type))       ? "D"
                      : (d->bias && !lb_link::inside(d->bias, cl->rows * elem(cl->type))) ? "the bias"
                      : (ws_bytes && !lb_link::inside(ws, ws_bytes))           ? "the workspace"
                                                                                : nullptr;
    if (bad) {
        std::fprintf(stderr, "cublaslt-stand-in: %s: %s extends past its device allocation\n", f, bad);
        return INVALID_VALUE;
    }
    Job job{*d, *al, *bl, *cl, a, b, c, dp, *alpha, *beta};
    lb_link::now_or_recorded(job);
    return SUCCESS;
}

}  // extern "C"
