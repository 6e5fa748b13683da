// A software stand-in for libcublas.so: the handle calls and the GEMMs lazybatch's CUDA device
// issues (cublasSgemm_v2 and cublasGemmEx with f16 storage and f32 compute, their
// strided-batched forms, and cublasGemmGroupedBatchedEx in f32 with f32 or TF32 compute, whose
// pointer arrays live in device memory and are read when the call runs), on host
// memory (the driver stand-in's "device" pointers are host addresses). It follows cuBLAS's
// column-major definition and rejects what cuBLAS rejects: a leading dimension smaller than the
// rows of the operand as stored, or negative sizes (CUBLAS_STATUS_INVALID_VALUE). It is
// stricter than cuBLAS in one way: an operand that extends past the end of its device
// allocation (asked of the driver stand-in) is an error, where a GPU would read garbage or fault.
// Products accumulate in f32, one accumulator per output, the k loop in order. While the
// stream captures (driver stand-in), a call is checked and recorded into the graph, its scalars
// read at the call, as cuBLAS's host pointer mode does.
#include "shim.h"
#include "link.h"

#include <cstdio>
#include <functional>
#include <vector>

typedef int cublasStatus_t;
typedef void* cublasHandle_t;
enum { SUCCESS = 0, INVALID_VALUE = 7, NOT_SUPPORTED = 15 };
enum { OP_N = 0, OP_T = 1 };
enum { R_32F = 0, R_16F = 2 };
enum { COMPUTE_32F = 68, COMPUTE_32F_FAST_TF32 = 77 };

namespace {

int g_handle_token;
// For tests: GEMM calls made so far (a strided-batched call counts once), read by
// lb_stand_in_gemms.
unsigned long long g_gemms = 0;

bool bad_dims(const char* f, int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc) {
    auto need = [](int rows) { return rows > 1 ? rows : 1; };
    bool bad = m < 0 || n < 0 || k < 0 || (ta != OP_N && ta != OP_T) || (tb != OP_N && tb != OP_T) ||
               lda < need(ta == OP_N ? m : k) || ldb < need(tb == OP_N ? k : n) || ldc < need(m);
    if (bad)
        std::fprintf(stderr, "cublas-stand-in: %s rejects transa=%d transb=%d m=%d n=%d k=%d lda=%d ldb=%d ldc=%d\n", f,
                     ta, tb, m, n, k, lda, ldb, ldc);
    return bad;
}

using lb_link::inside;
using lb_link::now_or_recorded;

// The operands' extents: an operand stored as r x c (column-major, leading dimension ld) spans
// (c - 1) * ld + r elements.
bool outside(const char* f, int ta, int tb, int m, int n, int k, const void* a, int lda, const void* b, int ldb,
             const void* c, int ldc, size_t elem) {
    auto span = [](int r, int cols, int ld) { return r == 0 || cols == 0 ? 0 : ((size_t)(cols - 1) * ld + r); };
    size_t sa = ta == OP_N ? span(m, k, lda) : span(k, m, lda);
    size_t sb = tb == OP_N ? span(k, n, ldb) : span(n, k, ldb);
    size_t sc = span(m, n, ldc);
    const char* bad = !inside(a, sa * elem) ? "A" : !inside(b, sb * elem) ? "B" : !inside(c, sc * elem) ? "C" : nullptr;
    if (bad)
        std::fprintf(stderr,
                     "cublas-stand-in: %s operand %s extends past its device allocation (transa=%d transb=%d m=%d "
                     "n=%d k=%d lda=%d ldb=%d ldc=%d)\n",
                     f, bad, ta, tb, m, n, k, lda, ldb, ldc);
    return bad != nullptr;
}

// C[m x n] = alpha * op(A) op(B) + beta * C, all column-major; `load` reads an element as f32.
template <typename T, typename L, typename S>
void gemm(int ta, int tb, int m, int n, int k, float alpha, const T* a, int lda, const T* b, int ldb, float beta,
          T* c, int ldc, L load, S store) {
    std::vector<float> acc((size_t)m);
    for (int j = 0; j < n; ++j) {
        for (int i = 0; i < m; ++i) acc[i] = 0.0f;
        for (int l = 0; l < k; ++l) {
            float bv = load(tb == OP_N ? b[l + (size_t)j * ldb] : b[j + (size_t)l * ldb]);
            for (int i = 0; i < m; ++i) {
                float av = load(ta == OP_N ? a[i + (size_t)l * lda] : a[l + (size_t)i * lda]);
                acc[i] += av * bv;
            }
        }
        for (int i = 0; i < m; ++i) {
            T& out = c[i + (size_t)j * ldc];
            float v = alpha * acc[i];
            if (beta != 0.0f) v += beta * load(out);
            out = store(v);
        }
    }
}

}  // namespace

extern "C" {

// For tests: cuBLAS GEMM calls made so far (a real cuBLAS has no such symbol).
unsigned long long lb_stand_in_gemms() { return g_gemms; }

cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
    *h = &g_handle_token;
    return SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t) { return SUCCESS; }
cublasStatus_t cublasSetStream_v2(cublasHandle_t, void*) { return SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, int) { return SUCCESS; }
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void*, size_t) { return SUCCESS; }
const char* cublasGetStatusString(cublasStatus_t s) {
    return s == SUCCESS ? "CUBLAS_STATUS_SUCCESS" : s == INVALID_VALUE ? "CUBLAS_STATUS_INVALID_VALUE"
                                                                       : "CUBLAS_STATUS_NOT_SUPPORTED";
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t, int ta, int tb, int m, int n, int k, const float* alpha, const float* a,
                               int lda, const float* b, int ldb, const float* beta, float* c, int ldc) {
    g_gemms += 1;
    if (bad_dims("cublasSgemm_v2", ta, tb, m, n, k, lda, ldb, ldc)) return INVALID_VALUE;
    if (outside("cublasSgemm_v2", ta, tb, m, n, k, a, lda, b, ldb, c, ldc, 4)) return INVALID_VALUE;
    now_or_recorded([=, alpha = *alpha, beta = *beta] {
        gemm(
            ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, [](float x) { return x; },
            [](float x) { return x; });
    });
    return SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t, int ta, int tb, int m, int n, int k, const void* alpha, const void* a,
                            int atype, int lda, const void* b, int btype, int ldb, const void* beta, void* c,
                            int ctype, int ldc, int compute, int /*algo*/) {
    g_gemms += 1;
    if (bad_dims("cublasGemmEx", ta, tb, m, n, k, lda, ldb, ldc)) return INVALID_VALUE;
    if (atype != R_16F || btype != R_16F || ctype != R_16F || compute != COMPUTE_32F) {
        std::fprintf(stderr, "cublas-stand-in: cublasGemmEx types %d/%d/%d compute %d not modeled\n", atype, btype,
                     ctype, compute);
        return NOT_SUPPORTED;
    }
    if (outside("cublasGemmEx", ta, tb, m, n, k, a, lda, b, ldb, c, ldc, 2)) return INVALID_VALUE;
    // CUBLAS_COMPUTE_32F: alpha and beta are f32, products accumulate in f32, C is rounded to f16.
    float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
    now_or_recorded([=] {
        gemm(
            ta, tb, m, n, k, al, static_cast<const unsigned short*>(a), lda, static_cast<const unsigned short*>(b), ldb,
            be, static_cast<unsigned short*>(c), ldc, [](unsigned short x) { return lb_host_h2f(x); },
            [](float x) { return lb_host_f2h(x); });
    });
    return SUCCESS;
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, int ta, int tb, int m, int n, int k, const float* alpha,
                                         const float* a, int lda, long long sa, const float* b, int ldb, long long sb,
                                         const float* beta, float* c, int ldc, long long sc, int count) {
    if (count < 0 || sa < 0 || sb < 0 || sc < 0) return INVALID_VALUE;
    unsigned long long gemms = g_gemms + 1;  // one call, however many GEMMs it runs
    for (int g = 0; g < count; ++g) {
        cublasStatus_t r = cublasSgemm_v2(h, ta, tb, m, n, k, alpha, a + g * sa, lda, b + g * sb, ldb, beta,
                                          c + g * sc, ldc);
        if (r != SUCCESS) return r;
    }
    g_gemms = gemms;
    return SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, int ta, int tb, int m, int n, int k, const void* alpha,
                                          const void* a, int atype, int lda, long long sa, const void* b, int btype,
                                          int ldb, long long sb, const void* beta, void* c, int ctype, int ldc,
                                          long long sc, int count, int compute, int algo) {
    if (count < 0 || sa < 0 || sb < 0 || sc < 0) return INVALID_VALUE;
    const unsigned short* ah = static_cast<const unsigned short*>(a);
    const unsigned short* bh = static_cast<const unsigned short*>(b);
    unsigned short* ch = static_cast<unsigned short*>(c);
    unsigned long long gemms = g_gemms + 1;  // one call, however many GEMMs it runs
    for (int g = 0; g < count; ++g) {
        cublasStatus_t r = cublasGemmEx(h, ta, tb, m, n, k, alpha, ah + g * sa, atype, lda, bh + g * sb, btype, ldb,
                                        beta, ch + g * sc, ctype, ldc, compute, algo);
        if (r != SUCCESS) return r;
    }
    g_gemms = gemms;
    return SUCCESS;
}

cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t, const int* ta, const int* tb, const int* m, const int* n,
                                          const int* k, const void* alpha, const void* const* a, int atype,
                                          const int* lda, const void* const* b, int btype, const int* ldb,
                                          const void* beta, void* const* c, int ctype, const int* ldc, int groups,
                                          const int* sizes, int compute) {
    const char* f = "cublasGemmGroupedBatchedEx";
    g_gemms += 1;
    if (groups < 0) return INVALID_VALUE;
    if (atype != R_32F || btype != R_32F || ctype != R_32F ||
        (compute != COMPUTE_32F && compute != COMPUTE_32F_FAST_TF32)) {
        std::fprintf(stderr, "cublas-stand-in: %s types %d/%d/%d compute %d not modeled\n", f, atype, btype, ctype,
                     compute);
        return NOT_SUPPORTED;
    }
    const float* al = static_cast<const float*>(alpha);
    const float* be = static_cast<const float*>(beta);
    int total = 0;
    for (int g = 0; g < groups; ++g) {
        if (sizes[g] < 0 || bad_dims(f, ta[g], tb[g], m[g], n[g], k[g], lda[g], ldb[g], ldc[g])) return INVALID_VALUE;
        total += sizes[g];
    }
    // the pointer arrays are device memory; their entries must point inside allocations too
    size_t bytes = (size_t)total * sizeof(void*);
    if (total && (!inside(a, bytes) || !inside(b, bytes) || !inside(c, bytes))) {
        std::fprintf(stderr, "cublas-stand-in: %s pointer arrays extend past their device allocation\n", f);
        return INVALID_VALUE;
    }
    for (int g = 0, at = 0; g < groups; at += sizes[g], ++g)
        for (int i = at; i < at + sizes[g]; ++i)
            if (outside(f, ta[g], tb[g], m[g], n[g], k[g], a[i], lda[g], b[i], ldb[g], c[i], ldc[g], 4))
                return INVALID_VALUE;
    std::vector<int> dims;  // per group: ta tb m n k lda ldb ldc size
    std::vector<float> scal;
    for (int g = 0; g < groups; ++g) {
        dims.insert(dims.end(), {ta[g], tb[g], m[g], n[g], k[g], lda[g], ldb[g], ldc[g], sizes[g]});
        scal.insert(scal.end(), {al[g], be[g]});
    }
    bool tf32 = compute == COMPUTE_32F_FAST_TF32;
    now_or_recorded([=] {
        auto load = [tf32](float x) { return tf32 ? lb_link::tf32(x) : x; };
        for (int g = 0, at = 0; g < groups; at += dims[9 * g + 8], ++g) {
            const int* d = &dims[9 * g];
            for (int i = at; i < at + d[8]; ++i)
                gemm(
                    d[0], d[1], d[2], d[3], d[4], scal[2 * g], static_cast<const float*>(a[i]), d[5],
                    static_cast<const float*>(b[i]), d[6], scal[2 * g + 1], static_cast<float*>(c[i]), d[7], load,
                    [](float x) { return x; });
        }
    });
    return SUCCESS;
}

}  // extern "C"
