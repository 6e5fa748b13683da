/* One core's peak of AVX-512 fused multiply-adds: 16 independent chains of zmm FMAs (enough to
 * cover the FMA latency), the best of 5 runs. The denominator for "the GEMM runs at N% of
 * peak" in docs/devices.md.
 *   gcc -O2 -mavx512f -mfma -o /tmp/fma-peak scripts/fma-peak.c && /tmp/fma-peak
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(void) {
    __m512 acc[16];
    const __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 16; i++) acc[i] = _mm512_set1_ps((float)i);
    const long fmas = 200000000;
    double best = 1e9;
    for (int run = 0; run < 5; run++) {
        double t = now();
        for (long k = 0; k < fmas / 16; k++) {
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) acc[i] = _mm512_fmadd_ps(acc[i], b, c);
        }
        t = now() - t;
        if (t < best) best = t;
    }
    float sum = 0;
    for (int i = 0; i < 16; i++) sum += _mm512_reduce_add_ps(acc[i]);
    /* 16 lanes x 2 flops per zmm FMA */
    printf("%.1f GFLOP/s on one core (%.2f G zmm FMAs/s; checksum %g)\n", fmas * 32.0 / best / 1e9,
           fmas / best / 1e9, sum);
    return 0;
}
