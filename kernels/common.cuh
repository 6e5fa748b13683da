// Shared helpers, prepended to every kernel file before NVRTC compiles it (kernel files have no
// #include: NVRTC ships no CUDA headers, so this file defines what they need).
// Halves are stored as unsigned short (bit-identical to half::f16) and converted by inline PTX.

#define LB_INF __int_as_float(0x7f800000)

#ifdef LB_HOST
// The software CUDA stand-in (tests/cuda-stand-in) compiles these kernels as host C++: it has no PTX.
__device__ __forceinline__ float h2f(unsigned short h) { return lb_host_h2f(h); }
__device__ __forceinline__ unsigned short f2h(float f) { return lb_host_f2h(f); }
#else
__device__ __forceinline__ float h2f(unsigned short h) {
    float f;
    asm("{ .reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ unsigned short f2h(float f) {
    unsigned short h;
    asm("{ .reg .b16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
    return h;
}
#endif

__device__ __forceinline__ float lb_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Activation codes: 0 none, 1 relu, 2 relu6, 3 gelu (tanh form), 4 tanh, 5 sigmoid,
// 6 gelu (exact, through erf).
__device__ __forceinline__ float lb_act(int a, float x) {
    switch (a) {
        case 1: return fmaxf(x, 0.0f);
        case 2: return fminf(fmaxf(x, 0.0f), 6.0f);
        case 3: return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
        case 4: return tanhf(x);
        case 5: return lb_sigmoid(x);
        case 6: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
        default: return x;
    }
}

// Block-wide sum and max over blockDim.x threads (blockDim.x a multiple of 32, at most 1024).
__device__ float lb_block_sum(float v) {
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    v = (threadIdx.x < nw) ? part[threadIdx.x] : 0.0f;
    if (warp == 0) for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) part[0] = v;
    __syncthreads();
    return part[0];
}

__device__ float lb_block_max(float v) {
    __shared__ float partm[32];
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) partm[warp] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    v = (threadIdx.x < nw) ? partm[threadIdx.x] : -LB_INF;
    if (warp == 0) for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x == 0) partm[0] = v;
    __syncthreads();
    return partm[0];
}
