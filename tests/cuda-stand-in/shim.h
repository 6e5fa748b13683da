// Host definitions of the CUDA C that kernels/*.cu use, so that the same kernel sources compile
// as host C++ for the software CUDA stand-in (see driver.cpp). Kernel threads run one after
// another on the calling OS thread; kernels with barriers run each GPU thread as a fiber
// (driver.cpp), so __syncthreads and warp shuffles have their GPU meaning.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#define LB_HOST 1
#define __global__
#define __device__
#define __forceinline__ inline
// Block-shared memory: a block's threads run on one OS thread and blocks run one at a time.
#define __shared__ static

struct lb_dim3 {
    unsigned x, y, z;
};
extern lb_dim3 threadIdx, blockIdx, blockDim, gridDim;

void __syncthreads();
float __shfl_xor_sync(unsigned mask, float v, int lane_mask);
// Dynamic shared memory of the running launch (`extern __shared__ T x[];` is rewritten to this).
void* lb_dynamic_shared();

inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, sizeof f);
    return f;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

// Round-to-nearest-even conversions, as cvt.rn.f16.f32 / cvt.f32.f16 do.
inline float lb_host_h2f(unsigned short h) {
    _Float16 v;
    std::memcpy(&v, &h, sizeof h);
    return (float)v;
}
inline unsigned short lb_host_f2h(float f) {
    _Float16 v = (_Float16)f;
    unsigned short h;
    std::memcpy(&h, &v, sizeof h);
    return h;
}

#include <tuple>
#include <utility>

// One kernel of the registry the test build generates: its name, a launcher that unpacks the
// cuLaunchKernel parameter array into the kernel's own argument types, whether the kernel
// synchronizes (barriers or shuffles), which makes the stand-in run its threads as fibers, and
// for stream capture a copy of a launch's arguments (`save`, a parameter array that owns its
// values, freed by `drop`), as a captured launch keeps its arguments' values.
struct lb_kernel {
    const char* name;
    void (*run)(void** params);
    bool cooperative;
    void** (*save)(void** params);
    void (*drop)(void** saved);
};

template <typename F>
struct lb_invoke;
template <typename... A>
struct lb_invoke<void (*)(A...)> {
    template <void (*K)(A...), std::size_t... I>
    static void call(void** p, std::index_sequence<I...>) {
        K(*static_cast<A*>(p[I])...);
    }
    template <void (*K)(A...)>
    static void run(void** p) {
        call<K>(p, std::index_sequence_for<A...>{});
    }
    // The parameter array first, so that a pointer to it is a pointer to the whole.
    struct saved {
        void* p[sizeof...(A) + 1];
        std::tuple<A...> v;
    };
    template <std::size_t... I>
    static void** save_of(void** p, std::index_sequence<I...>) {
        saved* s = new saved{{}, std::tuple<A...>(*static_cast<A*>(p[I])...)};
        ((s->p[I] = &std::get<I>(s->v)), ...);
        return s->p;
    }
    static void** save(void** p) { return save_of(p, std::index_sequence_for<A...>{}); }
    static void drop(void** p) { delete reinterpret_cast<saved*>(p); }
};
#define LB_KERNEL(name, coop)                                                                   \
    {#name, &lb_invoke<decltype(&name)>::run<&name>, coop, &lb_invoke<decltype(&name)>::save, \
     &lb_invoke<decltype(&name)>::drop}
